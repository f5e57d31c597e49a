package pushtest

import "testing"

// Gateways are the three fakes a test of push delivery runs.
type Gateways struct {
	APNs *APNs
	FCM  *FCM
	Web  *WebPush
}

// Start starts the three fakes, each closed when t ends.
func Start(t testing.TB) Gateways {
	t.Helper()
	a, err := NewAPNs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	f, err := NewFCM()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	w := NewWebPush()
	t.Cleanup(w.Close)
	return Gateways{APNs: a, FCM: f, Web: w}
}
