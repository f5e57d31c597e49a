package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// certPollInterval is how often the certificate files are checked for a
// change. Two stat calls: cheap enough to notice a renewal (certbot, a
// Kubernetes secret swapping its symlink) within a few seconds.
const certPollInterval = 2 * time.Second

// certReloader holds the served TLS certificate and replaces it when its
// files change or Reload is called (SIGHUP). A pair that fails to load
// leaves the previous one in service: a half-written renewal must not take
// the server down.
type certReloader struct {
	certFile, keyFile string
	log               *zap.Logger
	cert              atomic.Pointer[tls.Certificate]

	mu    sync.Mutex // serialises loads, guards stamp
	stamp [2]os.FileInfo
}

// newCertReloader loads the pair once; an error here stops the start.
func newCertReloader(certFile, keyFile string, log *zap.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	r.stamp = r.stat()
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// getCertificate is the tls.Config's GetCertificate: the current pair.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// Reload loads the pair again. On failure the previous certificate stays in
// service and the error is logged and returned.
func (r *certReloader) Reload(reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stamp = r.stat()
	if err := r.load(); err != nil {
		r.log.Error("TLS certificate not reloaded; keeping the previous one", zap.String("reason", reason), zap.Error(err))
		return err
	}
	return nil
}

// load reads and parses the pair and puts it in service.
func (r *certReloader) load() error {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert.Store(&cert)
	leaf := cert.Leaf // parsed by LoadX509KeyPair
	names := leaf.DNSNames
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	r.log.Info("TLS certificate loaded", zap.String("subject", leaf.Subject.String()),
		zap.String("names", strings.Join(names, ",")), zap.Time("not_after", leaf.NotAfter))
	if time.Now().After(leaf.NotAfter) {
		r.log.Warn("TLS certificate has expired", zap.Time("not_after", leaf.NotAfter))
	}
	return nil
}

// stat describes both files as they are now (nil for one that cannot be
// read); os.Stat follows symlinks, so a swapped link counts as a change.
func (r *certReloader) stat() [2]os.FileInfo {
	var s [2]os.FileInfo
	for i, name := range []string{r.certFile, r.keyFile} {
		s[i], _ = os.Stat(name)
	}
	return s
}

// changed reports whether either file differs from when it was last loaded:
// another file (inode), size or modification time.
func changed(old, now [2]os.FileInfo) bool {
	for i := range old {
		a, b := old[i], now[i]
		switch {
		case a == nil || b == nil:
			if a != b {
				return true
			}
		case !os.SameFile(a, b) || a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime()):
			return true
		}
	}
	return false
}

// watch reloads the pair whenever its files change, until ctx ends. A file
// that is missing for a moment (replaced by rename) is a change too, whose
// failed load is logged; the next change loads the new pair.
func (r *certReloader) watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.mu.Lock()
			now := r.stat()
			due := changed(r.stamp, now)
			r.mu.Unlock()
			if due {
				_ = r.Reload("files changed") // logged; the old pair stays
			}
		}
	}
}

// ErrNoTLS is ReloadTLS's answer when the node serves plain HTTP.
var ErrNoTLS = errors.New("no TLS certificate to reload: HERALD_TLS_CERT_FILE is not set")
