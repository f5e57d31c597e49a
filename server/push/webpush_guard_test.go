package push

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
)

// internalListener stands for a service inside the network, over TLS like a
// push service: the test fails if anything ever connects to it.
func internalListener(t *testing.T) *httptest.Server {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if n := conns.Load(); n > 0 {
			t.Errorf("the internal listener got %d connections", n)
		}
	})
	return srv
}

// subscriber is a fresh subscription of the fake push service.
func subscriber(t *testing.T, fake *pushtest.WebPush) *pushtest.WebSubscriber {
	t.Helper()
	sub, err := fake.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func portOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// A Web Push endpoint that leads inside the network is a failed delivery
// (not retried, the device not deleted) and the internal service never sees
// a connection: an endpoint at its address, a name resolving to it, a
// redirect from an allowed push service, plain http. The allowed service
// itself is delivered to.
func TestWebPushGuard(t *testing.T) {
	inner := internalListener(t)
	innerPort := portOf(t, inner.URL)
	fake := pushtest.NewWebPush() // keys, and the allowed push service
	t.Cleanup(fake.Close)
	cfg := newVAPID(t)
	fake.VAPIDPublicKey = cfg.PublicKey
	var redirects atomic.Int64
	redirecting := newGateway(t, true, func(_ int, r *http.Request, w http.ResponseWriter) {
		redirects.Add(1)
		target := inner.URL + "/"
		if r.URL.Path == "/to-self" {
			target = "/push/elsewhere" // within the allowed host: not followed either
		}
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	})
	// Both servers share httptest's certificate. Only their ports of
	// 127.0.0.1 are allowed; the internal listener has another port.
	roots := fake.Server.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	guard := netguard.NewPolicy([]string{"127.0.0.1:" + portOf(t, fake.URL), "127.0.0.1:" + portOf(t, redirecting.srv.URL)})
	w, err := NewWebPush(cfg, roots, guard)
	if err != nil {
		t.Fatal(err)
	}
	p := mustPrepare(t, "", "", `{"notification":{"title":"T"}}`)

	sub, err := fake.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	if res := w.Send(context.Background(), storage.Delivery{Token: sub.Token()}, p); res.Outcome != storage.DeliverySent {
		t.Fatalf("the allowed push service: %+v", res)
	}
	for _, tc := range []struct{ name, endpoint string }{
		{"LoopbackAddress", "https://127.0.0.1:" + innerPort + "/push/x"},
		{"MappedLoopbackAddress", "https://[::ffff:127.0.0.1]:" + innerPort + "/push/x"},
		{"NameResolvingToLoopback", "https://localhost:" + innerPort + "/push/x"},
		{"RedirectFromAllowedService", redirecting.srv.URL + "/push/x"},
		{"RedirectWithinAllowedService", redirecting.srv.URL + "/to-self"},
		{"PlainHTTP", "http://127.0.0.1:" + innerPort + "/push/x"},
		{"LinkLocal", "https://169.254.169.254/latest/meta-data/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := w.Send(context.Background(), storage.Delivery{Token: subscriber(t, fake).TokenAt(tc.endpoint)}, p)
			if res.Outcome != storage.DeliveryFailed || !strings.Contains(res.Reason, "refused") {
				t.Fatalf("%+v, want a failed delivery saying it was refused", res)
			}
		})
	}
	if n := redirects.Load(); n != 2 {
		t.Fatalf("the redirecting service got %d requests, want 2", n)
	}
	if pr := fake.Problems(); len(pr) > 0 {
		t.Fatalf("the fake found problems: %v", pr)
	}
}

// A nil guard allows no host: even the fake on loopback is refused.
func TestWebPushNilGuardAllowsNothing(t *testing.T) {
	fake := pushtest.NewWebPush()
	t.Cleanup(fake.Close)
	w, err := NewWebPush(newVAPID(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := fake.Subscribe()
	if res := w.Send(context.Background(), storage.Delivery{Token: sub.Token()}, mustPrepare(t, "", "", `{}`)); res.Outcome != storage.DeliveryFailed {
		t.Fatalf("%+v, want failed", res)
	}
	if fake.Count() != 0 {
		t.Fatal("the fake got a message")
	}
}
