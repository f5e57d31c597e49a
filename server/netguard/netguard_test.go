package netguard

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		reason string // "" when allowed
	}{
		// Public unicast.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"2606:4700:4700::1111", ""},
		{"2a00:1450:4001:81b::200a", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},  // 6to4 of 8.8.8.8
		// IPv4.
		{"0.0.0.0", "unspecified address"},
		{"0.1.2.3", `"this network" address`},
		{"127.0.0.1", "loopback address"},
		{"127.255.255.254", "loopback address"},
		{"10.0.0.1", "private address"},
		{"172.16.0.1", "private address"},
		{"172.31.255.255", "private address"},
		{"192.168.1.1", "private address"},
		{"169.254.169.254", "link-local address"},
		{"100.64.0.1", "shared address space (carrier-grade NAT)"},
		{"100.127.255.255", "shared address space (carrier-grade NAT)"},
		{"224.0.0.1", "multicast address"},
		{"239.255.255.250", "multicast address"},
		{"255.255.255.255", "broadcast address"},
		{"240.0.0.1", "reserved address"},
		{"192.0.0.8", "IETF protocol assignment"},
		{"192.0.2.1", "documentation address"},
		{"198.18.0.1", "benchmarking address"},
		// IPv6.
		{"::", "unspecified address"},
		{"::1", "loopback address"},
		{"fe80::1", "link-local address"},
		{"fe80::1%eth0", "link-local address"},
		{"fc00::1", "unique local address"},
		{"fd12:3456:789a::1", "unique local address"},
		{"ff02::1", "multicast address"},
		{"ff05::2", "multicast address"},
		{"fec0::1", "site-local address"},
		{"2001:db8::1", "documentation address"},
		{"2001:0:4136:e378::1", "Teredo address"},
		{"100::1", "discard-only address"},
		{"::127.0.0.1", "IPv4-compatible IPv6 address"},
		{"::ffff:0:127.0.0.1", "IPv4-translated IPv6 address"},
		{"::ffff:0:8.8.8.8", "IPv4-translated IPv6 address"},
		// IPv4 inside IPv6.
		{"::ffff:127.0.0.1", "loopback address"},
		{"::ffff:10.1.2.3", "private address"},
		{"::ffff:169.254.169.254", "link-local address"},
		{"::ffff:100.64.0.1", "shared address space (carrier-grade NAT)"},
		{"::ffff:0.0.0.0", "unspecified address"},
		{"64:ff9b::7f00:1", "NAT64 address of a loopback address"},
		{"64:ff9b::a9fe:a9fe", "NAT64 address of a link-local address"},
		{"64:ff9b:1::1", "local-use NAT64 address"},
		{"2002:7f00:1::1", "6to4 address of a loopback address"},
		{"2002:c0a8:101::1", "6to4 address of a private address"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			err := CheckAddr(netip.MustParseAddr(tc.addr))
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var re *RefusedError
			if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
				t.Fatalf("err = %v, want a RefusedError", err)
			}
			if re.Reason != tc.reason {
				t.Fatalf("reason %q, want %q", re.Reason, tc.reason)
			}
		})
	}
	if err := CheckAddr(netip.Addr{}); !errors.Is(err, ErrRefused) {
		t.Fatalf("the zero Addr: %v", err)
	}
}

func TestControl(t *testing.T) {
	for _, tc := range []struct {
		network, address string
		ok               bool
	}{
		{"tcp4", "8.8.8.8:443", true},
		{"tcp6", "[2606:4700:4700::1111]:443", true},
		{"tcp", "93.184.215.14:8443", true},
		{"tcp4", "127.0.0.1:443", false},
		{"tcp6", "[::1]:443", false},
		{"tcp6", "[::ffff:127.0.0.1]:80", false},
		{"tcp4", "169.254.169.254:80", false},
		{"tcp6", "[fe80::1%eth0]:80", false},
		{"udp4", "8.8.8.8:53", false},
		{"unix", "/run/x.sock", false},
		{"tcp4", "example.com:443", false},
	} {
		err := Control(tc.network, tc.address, nil)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, ErrRefused) {
			t.Errorf("Control(%s, %s) = %v, want ok %v", tc.network, tc.address, err, tc.ok)
		}
	}
}

func TestPolicyAllows(t *testing.T) {
	p := NewPolicy([]string{"push.internal", "Fake.Example.", "127.0.0.1:8443", "[::1]", "fd00::1", "[fd00::2]:9000", "10.0.0.5", " ", "host:notaport", "host:0",
		"low.internal:1", "high.internal:65535", "over.internal:65536"})
	for _, tc := range []struct {
		host, port string
		want       bool
	}{
		{"push.internal", "443", true},
		{"PUSH.internal.", "80", true},
		{"push.internal", "", true},
		{"fake.example", "1234", true},
		{"other.internal", "443", false},
		{"sub.push.internal", "443", false},
		{"127.0.0.1", "8443", true},
		{"127.0.0.1", "08443", true},
		{"127.0.0.1", "443", false},
		{"127.0.0.1", "", false},
		{"::1", "443", true},
		{"::ffff:127.0.0.1", "8443", true},
		{"fd00::1", "1", true},
		{"fd00::2", "9000", true},
		{"fd00::2", "9001", false},
		{"10.0.0.5", "443", true},
		{"10.0.0.6", "443", false},
		{"host", "443", false},
		{"push.internal", "x", false},
		// The ports at either end are ports; past them the entry is dropped.
		{"low.internal", "1", true},
		{"high.internal", "65535", true},
		{"over.internal", "65536", false},
		{"over.internal", "443", false},
	} {
		if got := p.Allows(tc.host, tc.port); got != tc.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
	var none *Policy
	if none.Allows("127.0.0.1", "443") || NewPolicy(nil).Allows("localhost", "443") {
		t.Fatal("an empty policy allows a host")
	}
}

func TestCheckURL(t *testing.T) {
	p := NewPolicy([]string{"127.0.0.1", "push.internal:8080", "[fd00::1]", "web.internal:80", "10.9.9.9:443"})
	for _, tc := range []struct {
		url     string
		refused bool // a RefusedError
		invalid bool // another error
	}{
		{url: "https://fcm.googleapis.com/fcm/send/abc"},
		{url: "https://updates.push.services.mozilla.com/wpush/v2/x"},
		{url: "https://8.8.8.8/x"},
		{url: "https://[2606:4700:4700::1111]:8443/x"},
		{url: "https://push.example/x"}, // names are judged when dialled
		{url: "http://127.0.0.1:1234/push/1"},
		{url: "https://127.0.0.1/x"},
		{url: "http://push.internal:8080/x"},
		{url: "https://[fd00::1]/x"},
		{url: "http://fcm.googleapis.com/fcm/send/abc", refused: true},
		{url: "http://push.internal/x", refused: true}, // allowed on 8080 only
		// A URL without a port is on its scheme's.
		{url: "http://web.internal/x"},
		{url: "https://10.9.9.9/x"},
		{url: "https://web.internal:8443/x"}, // a name over https is judged when dialled
		{url: "http://10.9.9.9/x", refused: true},
		{url: "https://10.1.2.3/x", refused: true},
		{url: "https://169.254.169.254/latest/meta-data", refused: true},
		{url: "https://[::1]/x", refused: true},
		{url: "https://[::ffff:127.0.0.2]/x", refused: true},
		{url: "https://[fe80::1%25eth0]/x", refused: true},
		{url: "https://0.0.0.0/x", refused: true},
		{url: "https://localhost/x", refused: true},
		{url: "https://LOCALHOST./x", refused: true},
		{url: "https://a.localhost/x", refused: true},
		{url: "https://2130706433/x", refused: true},
		{url: "https://0x7f.1/x", refused: true},
		{url: "https://127.1/x", refused: true},
		{url: "ftp://push.example/x", invalid: true},
		{url: "https:///x", invalid: true},
		{url: "https://:443/x", invalid: true},
		{url: "://x", invalid: true},
		{url: "", invalid: true},
	} {
		err := p.CheckURL(tc.url)
		switch {
		case tc.refused:
			if !errors.Is(err, ErrRefused) {
				t.Errorf("%s: %v, want refused", tc.url, err)
			}
		case tc.invalid:
			if err == nil || errors.Is(err, ErrRefused) {
				t.Errorf("%s: %v, want an error that is no refusal", tc.url, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.url, err)
		}
	}
	if err := (*Policy)(nil).CheckURL("http://127.0.0.1/x"); !errors.Is(err, ErrRefused) {
		t.Fatalf("nil policy, plain http to loopback: %v", err)
	}
}

// internal is a listener standing for an internal service: the test fails
// if anything ever connects to it (a TCP connection, not only a request).
func internal(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secret")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if n := conns.Load(); n > 0 {
			t.Errorf("the internal listener got %d connections", n)
		}
	})
	return srv, &conns
}

// port is the port of a test server's URL.
func port(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func post(c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader("x"))
	if err != nil {
		return err
	}
	res, err := c.Do(req)
	if err == nil {
		res.Body.Close()
	}
	return err
}

// The guarded client never reaches an internal listener: not directly, not
// by a name that resolves to it, and not through a redirect from an allowed
// host; an allowed host itself is reached.
func TestClientNeverReachesInternal(t *testing.T) {
	inner, _ := internal(t)
	innerPort := port(t, inner.URL)
	var allowedHits atomic.Int64
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowedHits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, inner.URL+"/", http.StatusTemporaryRedirect)
			return
		}
		if r.URL.Path == "/redirect-self" {
			http.Redirect(w, r, "/ok", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(allowed.Close)
	// Only the allowed server's port of 127.0.0.1 is allowed; the internal
	// listener is on another port of the same address.
	p := NewPolicy([]string{"127.0.0.1:" + port(t, allowed.URL)})
	c := p.Client(5 * time.Second)

	if err := post(c, allowed.URL+"/ok"); err != nil {
		t.Fatalf("the allowed host: %v", err)
	}
	for _, tc := range []struct{ name, url string }{
		{"Direct", inner.URL + "/"},
		{"DirectHTTPS", "https://127.0.0.1:" + innerPort + "/"},
		{"MappedIPv6", "https://[::ffff:127.0.0.1]:" + innerPort + "/"},
		{"NameResolvingToLoopback", "https://localhost:" + innerPort + "/"},
		{"RedirectFromAllowedHost", allowed.URL + "/redirect"},
		{"RedirectWithinAllowedHost", allowed.URL + "/redirect-self"},
		{"NotHTTP", "ftp://127.0.0.1:" + innerPort + "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := post(c, tc.url)
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("err = %v, want a refusal", err)
			}
		})
	}
	if n := allowedHits.Load(); n != 3 {
		t.Fatalf("the allowed host got %d requests, want 3 (one, and each redirect not followed)", n)
	}
}

// A name is allowed as written in the URL, whatever it resolves to, and
// still only on its port when the entry names one.
func TestClientAllowedName(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	t.Cleanup(srv.Close)
	p := NewPolicy([]string{"localhost"})
	if err := post(p.Client(5*time.Second), "http://localhost:"+port(t, srv.URL)+"/"); err != nil {
		t.Fatalf("allowed name: %v", err)
	}
	p = NewPolicy([]string{"localhost:1"})
	if err := post(p.Client(5*time.Second), "https://localhost:"+port(t, srv.URL)+"/"); !errors.Is(err, ErrRefused) {
		t.Fatalf("allowed name on another port: %v", err)
	}
}

// The guarded transport takes over a caller's transport: its own dial hook
// and a proxy from the environment are not used.
func TestTransportReplacesDialAndProxy(t *testing.T) {
	inner, _ := internal(t)
	var proxied atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxied.Add(1) }))
	t.Cleanup(proxy.Close)
	proxyURL, _ := url.Parse(proxy.URL)
	tr := &http.Transport{
		Proxy: http.ProxyURL(proxyURL),
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, inner.Listener.Addr().String())
		},
	}
	c := &http.Client{Transport: NewPolicy(nil).Transport(tr), CheckRedirect: NoRedirects}
	if err := post(c, "https://127.0.0.1:"+port(t, inner.URL)+"/"); !errors.Is(err, ErrRefused) {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if proxied.Load() != 0 {
		t.Fatal("the request went through the proxy")
	}
}

// closeRecorder is a request body that records whether it was closed.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// A request refused by its URL is never sent, and its body is closed as a
// RoundTripper must; one without a body is refused the same.
func TestGuardedRefusalClosesTheBody(t *testing.T) {
	g := NewPolicy(nil).Transport(nil)
	for _, u := range []string{"ftp://push.example/x", "http://push.example/x"} {
		body := &closeRecorder{Reader: strings.NewReader("{}")}
		req, err := http.NewRequest(http.MethodPost, u, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.RoundTrip(req); !errors.Is(err, ErrRefused) {
			t.Fatalf("%s: err = %v, want a refusal", u, err)
		}
		if !body.closed {
			t.Errorf("%s: the body of a refused request was not closed", u)
		}
		req, _ = http.NewRequest(http.MethodGet, u, nil)
		if _, err := g.RoundTrip(req); !errors.Is(err, ErrRefused) {
			t.Fatalf("%s without a body: err = %v, want a refusal", u, err)
		}
	}
}

// The guarded transport bounds a TLS handshake unless its caller already
// did, and then keeps the caller's bound.
func TestTransportTLSHandshakeTimeout(t *testing.T) {
	if got := NewPolicy(nil).Transport(nil).Base().TLSHandshakeTimeout; got != tlsHandshakeTimeout || got <= 0 {
		t.Errorf("a new transport's TLS handshake timeout is %v, want %v", got, tlsHandshakeTimeout)
	}
	if got := NewPolicy(nil).Transport(&http.Transport{TLSHandshakeTimeout: 3 * time.Second}).Base().TLSHandshakeTimeout; got != 3*time.Second {
		t.Errorf("the caller's TLS handshake timeout became %v, want 3s", got)
	}
}

// At send time too, a URL without a port is on its scheme's: plain http to
// a host allowed on port 80 is let through to the dial.
func TestGuardedPlainHTTPOnDefaultPort(t *testing.T) {
	g := NewPolicy([]string{"127.0.0.1:80"}).Transport(nil)
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/x", nil)
	resp, err := g.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	if errors.Is(err, ErrRefused) {
		t.Fatalf("plain http to an allowed host on its default port: %v", err)
	}
}
