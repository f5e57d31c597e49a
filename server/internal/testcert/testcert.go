// Package testcert makes certificates for tests: a certificate authority of
// the test's own, and server certificates for 127.0.0.1 and localhost that it
// signs, written to files as an operator's renewal tool would.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority valid for an hour around now.
type CA struct {
	Cert *x509.Certificate
	Pool *x509.CertPool // trusts Cert only
	key  *ecdsa.PrivateKey
}

// NewCA makes a new authority.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Herald test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Pool: pool, key: key}
}

// Issue writes a server certificate for 127.0.0.1 and localhost with the
// given serial number, signed by ca, to certFile and its key to keyFile, each
// replaced by a rename.
func (ca *CA) Issue(t testing.TB, serial int64, certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "herald.test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ReplaceFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	ReplaceFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// WriteCert writes the authority's certificate, PEM, to path (replaced by a
// rename): the file a client given this authority to trust reads.
func (ca *CA) WriteCert(t testing.TB, path string) {
	t.Helper()
	ReplaceFile(t, path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}))
}

// Files are a server's certificate and key, and its authority's
// certificate, as files.
type Files struct {
	CertFile, KeyFile, CAFile string
}

// ServerFiles makes a new authority and a certificate for 127.0.0.1 and
// localhost it signs, and writes the three to a temporary folder of t's.
func ServerFiles(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	f := Files{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem"), CAFile: filepath.Join(dir, "ca.pem")}
	ca := NewCA(t)
	ca.Issue(t, 1, f.CertFile, f.KeyFile)
	ca.WriteCert(t, f.CAFile)
	return f
}

// ReplaceFile writes data to a new file beside path and renames it over path.
func ReplaceFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
