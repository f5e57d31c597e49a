package testredis

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/internal/testcert"
)

// ping connects to url as a cluster node would, trusting caFile's
// certificates when it is set.
func ping(t *testing.T, url, caFile string) error {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	if caFile != "" {
		pemData, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pemData)
		opts.TLSConfig.RootCAs = roots
	}
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	return rdb.Ping(context.Background()).Err()
}

func TestStartServesPlainRedis(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") || s.CAFile() != "" {
		t.Fatalf("URL %q, CAFile %q: want redis:// and no CA", s.URL(), s.CAFile())
	}
	if err := ping(t, s.URL(), ""); err != nil {
		t.Fatal(err)
	}
}

// A TLS server answers rediss:// clients that trust its CA, before and
// after a restart, and no others.
func TestStartTLSServesRedissOnly(t *testing.T) {
	files := TLS(testcert.ServerFiles(t))
	s := StartTLS(t, files)
	if want := "rediss://" + s.Addr() + "/0"; s.URL() != want {
		t.Fatalf("URL %q, want %q", s.URL(), want)
	}
	if s.CAFile() != files.CAFile {
		t.Fatalf("CAFile %q, want %q", s.CAFile(), files.CAFile)
	}
	if err := ping(t, s.URL(), s.CAFile()); err != nil {
		t.Fatal(err)
	}
	if err := ping(t, s.URL(), ""); !errors.As(err, &x509.UnknownAuthorityError{}) {
		t.Fatalf("a client that does not trust the CA: %v, want an unknown authority", err)
	}
	if err := ping(t, "redis://"+s.Addr()+"/0", ""); err == nil {
		t.Fatal("the TLS server answered a plain connection")
	}
	s.Restart()
	if err := ping(t, s.URL(), s.CAFile()); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}
