package httpapi

import (
	"context"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldrt/herald/gen/device"
	"github.com/heraldrt/herald/server/directory"
)

// newWebPushServer serves the Device API with the Web Push allow-list
// allowed, every response checked against the spec.
func newWebPushServer(t *testing.T, allowed []string) *pushServer {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	s := &pushServer{db: openPushDB(t), spec: newSpecChecker(t, device.GetSpec)}
	dir, err := directory.NewInstances(context.Background(), s.db, log)
	if err != nil {
		t.Fatal(err)
	}
	s.engine = NewEngine(log)
	s.engine.Use(s.spec.middleware)
	Mount(s.engine, Routes{Device: NewDeviceAPI(s.db, dir, log, DeviceOptions{WebPushAllowedHosts: allowed})})
	srv := httptest.NewServer(s.engine)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// A web device whose endpoint is plain http, a literal internal address or
// a localhost name is refused at registration with 400
// endpoint_not_allowed, unless the operator allowed its host; host names
// are accepted without being resolved (delivery judges their addresses).
func TestRegisterWebDeviceEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		allowed  []string
		endpoint string
		status   int
		kind     string
	}{
		{"OKPublicPushService", nil, "https://fcm.googleapis.com/fcm/send/x", 200, ""},
		{"OKMozilla", nil, "https://updates.push.services.mozilla.com/wpush/v2/x", 200, ""},
		{"OKPublicAddress", nil, "https://8.8.8.8:8443/x", 200, ""},
		{"OKNameNotResolved", nil, "https://push.internal.example/x", 200, ""},
		{"ErrPlainHTTP", nil, "http://fcm.googleapis.com/fcm/send/x", 400, KindEndpointNotAllowed},
		{"ErrLoopback", nil, "https://127.0.0.1/push/x", 400, KindEndpointNotAllowed},
		{"ErrLoopbackPlainHTTP", nil, "http://127.0.0.1:8080/push/x", 400, KindEndpointNotAllowed},
		{"ErrLoopbackIPv6", nil, "https://[::1]:8443/x", 400, KindEndpointNotAllowed},
		{"ErrMappedLoopback", nil, "https://[::ffff:127.0.0.1]/x", 400, KindEndpointNotAllowed},
		{"ErrPrivate", nil, "https://10.0.0.1/x", 400, KindEndpointNotAllowed},
		{"ErrPrivate192", nil, "https://192.168.1.20/x", 400, KindEndpointNotAllowed},
		{"ErrCloudMetadata", nil, "https://169.254.169.254/latest/meta-data/", 400, KindEndpointNotAllowed},
		{"ErrUniqueLocal", nil, "https://[fd00::1]/x", 400, KindEndpointNotAllowed},
		{"ErrUnspecified", nil, "https://0.0.0.0/x", 400, KindEndpointNotAllowed},
		{"ErrLocalhost", nil, "https://localhost/x", 400, KindEndpointNotAllowed},
		{"ErrDecimalAddress", nil, "https://2130706433/x", 400, KindEndpointNotAllowed},
		// The other numeric IPv4 forms resolvers accept (inet_aton's).
		{"ErrHexAddress", nil, "https://0x7f000001/x", 400, KindEndpointNotAllowed},
		{"ErrHexAddressUpperCase", nil, "https://0X7F000001:8443/x", 400, KindEndpointNotAllowed},
		{"ErrOctalAddress", nil, "https://0177.0.0.1/x", 400, KindEndpointNotAllowed},
		{"ErrShortAddress", nil, "https://127.1/x", 400, KindEndpointNotAllowed},
		{"ErrHexParts", nil, "https://0x7f.0x0.0x0.0x1/x", 400, KindEndpointNotAllowed},
		{"OKNumbersInsideAName", nil, "https://10.0x7f.push.example/x", 200, ""},
		{"ErrNotHTTP", nil, "ftp://push.example/x", 400, KindInvalidToken},
		{"OKAllowedAddressPlainHTTP", []string{"127.0.0.1"}, "http://127.0.0.1:9999/push/x", 200, ""},
		{"OKAllowedNameOnItsPort", []string{"push.internal:8080"}, "http://push.internal:8080/x", 200, ""},
		{"ErrAllowedNameOtherPort", []string{"push.internal:8080"}, "http://push.internal/x", 400, KindEndpointNotAllowed},
		{"ErrOtherPrivateAddress", []string{"127.0.0.1"}, "https://10.0.0.1/x", 400, KindEndpointNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newWebPushServer(t, tc.allowed)
			status, body, _ := s.do(t, pushRequest{method: "POST", path: "/device_api/v1/instances/" + pushInstanceID + "/devices/web",
				contentType: "application/json", body: `{"token":"` + webToken(tc.endpoint) + `"}`})
			checkStatus(t, status, body, tc.status, tc.kind)
		})
	}
}
