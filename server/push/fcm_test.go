package push

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
)

// A token of any length goes into the FCM message as it is.
func TestFCMRequestLongToken(t *testing.T) {
	p := mustPrepare(t, "", `{}`, "")
	token := strings.Repeat("t", 4096)
	var req struct {
		Message struct {
			Token string `json:"token"`
		} `json:"message"`
	}
	if err := json.Unmarshal(p.FCMRequest(token), &req); err != nil || req.Message.Token != token {
		t.Fatalf("token of %d bytes: %d bytes back (%v)", len(token), len(req.Message.Token), err)
	}
}

// FCM's error code in the details wins over the status: UNREGISTERED there
// means the token is dead whatever the status says.
func TestFCMDetailErrorCodeWins(t *testing.T) {
	f, _, _ := fcmGateway(t, func(_ int, _ string, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"code":400,"message":"m","status":"INVALID_ARGUMENT","details":[{"errorCode":"UNREGISTERED"}]}}`)
	})
	res := f.Send(context.Background(), storage.Delivery{Token: "t"}, mustPrepare(t, "", `{}`, ""))
	if res.Outcome != storage.DeliveryDeadToken || !strings.Contains(res.Reason, "UNREGISTERED") {
		t.Fatalf("%+v, want a dead token", res)
	}
}

// An access token that expires within tokenRefreshEarly is not reused: a
// token valid for 4 minutes is fetched again for the next send.
func TestFCMTokenRenewedEarly(t *testing.T) {
	var tokens atomic.Int64
	g := newGateway(t, false, func(_ int, r *http.Request, w http.ResponseWriter) {
		if r.URL.Path == "/token" {
			n := tokens.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"access_token":"tok-`+itoa(int(n))+`","expires_in":240,"token_type":"Bearer"}`)
			return
		}
		_, _ = io.WriteString(w, `{"name":"projects/proj/messages/1"}`)
	})
	sa, _, err := pushtest.NewServiceAccount("proj", g.srv.URL+"/token")
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFCM(storage.FCMConfig{ServiceAccountJSON: sa, URL: g.srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := mustPrepare(t, "", `{}`, "")
	for range 2 {
		if res := f.Send(context.Background(), storage.Delivery{Token: "t"}, p); res.Outcome != storage.DeliverySent {
			t.Fatalf("send: %+v", res)
		}
	}
	if tokens.Load() != 2 {
		t.Fatalf("%d token requests for two sends with a 4-minute token, want 2", tokens.Load())
	}
}
