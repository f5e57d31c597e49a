package push

import (
	"crypto/x509"
	"net/http"
	"testing"
	"time"
)

// A provider token is renewed once it is APNsTokenLifetime old, not after.
func TestAPNsProviderTokenRenewedAtLifetime(t *testing.T) {
	a := newAPNsSender(t, newGateway(t, true, func(int, *http.Request, http.ResponseWriter) {}))
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return now }
	t1, _ := a.providerToken("")
	now = now.Add(APNsTokenLifetime)
	if t2, _ := a.providerToken(""); t2 == t1 {
		t.Fatal("token not renewed at the end of its lifetime")
	}
}

// A CA configured for APNs is trusted besides the system's roots, not
// instead of them.
func TestAPNsCAAddedToSystemRoots(t *testing.T) {
	g := newGateway(t, true, func(int, *http.Request, http.ResponseWriter) {})
	a := newAPNsSender(t, g)
	want, err := x509.SystemCertPool()
	if err != nil {
		t.Skip("no system roots:", err)
	}
	want.AppendCertsFromPEM([]byte(g.ca))
	got := a.client.Transport.(schemeTransport).tls.(*http.Transport).TLSClientConfig.RootCAs
	if !got.Equal(want) {
		t.Fatal("the APNs roots are not the system's plus the configured CA")
	}
}
