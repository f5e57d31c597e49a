// Command fakegateways runs the pushtest fake push gateways (APNs over TLS
// and HTTP/2, FCM HTTP v1 with its OAuth2 token endpoint, Web Push with
// aes128gcm decryption) on loopback for tests of the herald binary that
// cannot link them in, such as the Node SDK suite in scripts/compat.
//
// It writes the APNs key and CA and the FCM service account to files, prints
// one JSON line with everything to configure herald with, and serves a small
// control API until it is signalled or its stdin closes:
//
//	GET  /messages       every accepted notification: [{platform, token, headers, body}]
//	                     (web bodies decrypted; token is the subscription id for web)
//	GET  /problems       what the fakes found wrong in requests: ["…"]
//	GET  /counts         notifications accepted per gateway: {apns, fcm, web}
//	POST /web/subscribe  a new browser subscription: {id, endpoint, token} (token:
//	                     base64 of the PushSubscription JSON, what a web device registers);
//	                     with ?count=N, a list of N of them
//	POST /web/vapid      {"publicKey": "…"}: the VAPID key the web fake requires from now on
//	POST /dead           {"platform": "apns"|"fcm"|"web", "token": "…"}: answer the token as dead
//
// The three gateways share one certificate (the CA file): a herald process
// trusts it for FCM and Web Push through SSL_CERT_FILE, and must allow the
// fakes' loopback address for Web Push endpoints
// (HERALD_WEBPUSH_ALLOWED_HOSTS=127.0.0.1). With -light the
// fakes only count what they accept, without checks or storage
// (benchmarks).
//
//	go run ./server/push/pushtest/cmd/fakegateways [-dir DIR] [-light]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"

	"github.com/heraldrt/herald/server/push/pushtest"
)

// Config is the JSON line printed at start.
type Config struct {
	Control               string `json:"control"`
	APNsURL               string `json:"apnsUrl"`
	APNsCAFile            string `json:"apnsCaFile"`
	APNsKeyFile           string `json:"apnsKeyFile"`
	APNsKeyID             string `json:"apnsKeyId"`
	APNsTeamID            string `json:"apnsTeamId"`
	FCMURL                string `json:"fcmUrl"`
	FCMProject            string `json:"fcmProject"`
	FCMServiceAccountFile string `json:"fcmServiceAccountFile"`
	WebURL                string `json:"webUrl"`
	Dir                   string `json:"dir"`
}

type fakes struct {
	apns *pushtest.APNs
	fcm  *pushtest.FCM
	web  *pushtest.WebPush

	mu   sync.Mutex
	subs map[string]*pushtest.WebSubscriber
}

func main() {
	dir := flag.String("dir", "", "directory for the key, CA and service account files (default: a new temporary one, removed at exit)")
	light := flag.Bool("light", false, "benchmark mode: count messages without checking or keeping them")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("fakegateways: ")
	if err := run(*dir, *light); err != nil {
		log.Fatal(err)
	}
}

func run(dir string, light bool) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "fakegateways-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	a, err := pushtest.NewAPNs()
	if err != nil {
		return err
	}
	defer a.Close()
	f, err := pushtest.NewFCM()
	if err != nil {
		return err
	}
	defer f.Close()
	w := pushtest.NewWebPush()
	defer w.Close()
	fk := &fakes{apns: a, fcm: f, web: w, subs: map[string]*pushtest.WebSubscriber{}}
	if light {
		a.Light, f.Light, w.Light = true, true, true
		a.Keep, f.Keep, w.Keep = false, false, false
	}

	cfg := Config{
		APNsURL: a.URL, APNsKeyID: a.KeyID, APNsTeamID: a.TeamID, FCMURL: f.URL, FCMProject: f.Project, WebURL: w.URL, Dir: dir,
		APNsKeyFile: filepath.Join(dir, "apns-key.p8"), APNsCAFile: filepath.Join(dir, "apns-ca.pem"),
		FCMServiceAccountFile: filepath.Join(dir, "fcm-service-account.json"),
	}
	for path, content := range map[string]string{cfg.APNsKeyFile: a.KeyPEM, cfg.APNsCAFile: a.CAPEM, cfg.FCMServiceAccountFile: f.ServiceAccount} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cfg.Control = "http://" + ln.Addr().String()
	srv := &http.Server{Handler: fk.routes()}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	line, _ := json.Marshal(cfg)
	fmt.Println(string(line))

	// Run until signalled or until the parent closes our stdin.
	done := make(chan struct{}, 2)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; done <- struct{}{} }()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); done <- struct{}{} }()
	<-done
	return nil
}

// message is a received notification as the control API shows it.
type message struct {
	Platform string            `json:"platform"`
	Token    string            `json:"token"`
	Headers  map[string]string `json:"headers"`
	Body     json.RawMessage   `json:"body"`
}

func (fk *fakes) messages() []message {
	out := []message{}
	for _, in := range []*pushtest.Inbox{fk.apns.Inbox, fk.fcm.Inbox, fk.web.Inbox} {
		tokens := in.Tokens()
		keys := make([]string, 0, len(tokens))
		for k := range tokens {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			for _, m := range in.For(k) {
				body := m.Body
				if !json.Valid(body) {
					body, _ = json.Marshal(string(body))
				}
				out = append(out, message{Platform: m.Platform, Token: m.Token, Headers: m.Headers, Body: body})
			}
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (fk *fakes) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /messages", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, fk.messages()) })
	mux.HandleFunc("GET /problems", func(w http.ResponseWriter, _ *http.Request) {
		p := append(append(fk.apns.Problems(), fk.fcm.Problems()...), fk.web.Problems()...)
		if p == nil {
			p = []string{}
		}
		writeJSON(w, p)
	})
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]int{"apns": fk.apns.Count(), "fcm": fk.fcm.Count(), "web": fk.web.Count()})
	})
	// One subscription, or ?count=N of them as a list (benchmarks).
	mux.HandleFunc("POST /web/subscribe", func(w http.ResponseWriter, r *http.Request) {
		n, many := 1, r.URL.Query().Has("count")
		if many {
			var err error
			if n, err = strconv.Atoi(r.URL.Query().Get("count")); err != nil || n < 1 || n > 1_000_000 {
				http.Error(w, "count must be 1 to 1000000", http.StatusBadRequest)
				return
			}
		}
		out := make([]map[string]string, 0, n)
		for range n {
			s, err := fk.web.Subscribe()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			fk.mu.Lock()
			fk.subs[s.ID] = s
			fk.mu.Unlock()
			out = append(out, map[string]string{"id": s.ID, "endpoint": s.Endpoint, "token": s.Token()})
		}
		if many {
			writeJSON(w, out)
			return
		}
		writeJSON(w, out[0])
	})
	mux.HandleFunc("POST /web/vapid", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			PublicKey string `json:"publicKey"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.PublicKey == "" {
			http.Error(w, `want {"publicKey": "…"}`, http.StatusBadRequest)
			return
		}
		fk.web.VAPIDPublicKey = req.PublicKey // set before herald sends anything
		writeJSON(w, map[string]any{})
	})
	mux.HandleFunc("POST /dead", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Platform string `json:"platform"`
			Token    string `json:"token"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Token == "" {
			http.Error(w, `want {"platform": …, "token": …}`, http.StatusBadRequest)
			return
		}
		switch req.Platform {
		case "apns":
			fk.apns.Dead(req.Token)
		case "fcm":
			fk.fcm.Dead(req.Token)
		case "web":
			fk.mu.Lock()
			s := fk.subs[req.Token]
			fk.mu.Unlock()
			if s == nil {
				http.Error(w, "no such web subscription id", http.StatusNotFound)
				return
			}
			fk.web.Dead(s)
		default:
			http.Error(w, "platform must be apns, fcm or web", http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]any{})
	})
	return mux
}
