package upgrade

import "net/http"

// CloseRefused wraps the http.Server's handler so that a request asking to
// switch protocols (one with an Upgrade header, over HTTP/1) that is
// answered with anything but 101 closes its connection, as every refusal
// here does (responseWriter.finish). The fast path takes only plain
// WebSocket upgrades with short heads; the rest reach net/http, where the
// router's own answers (404, 405, a redirect to a path with a trailing
// slash) and the WebSocket library's kept the connection for another
// request, HTTP/1.0 keep-alive included: a request pipelined behind a
// refused upgrade was answered, which a proxy that takes an Upgrade request
// for a tunnel never looks at (request smuggling).
//
// Connection: close is set before the handler runs, so that answers written
// past any middleware (gin's redirects) carry it too; a handler that
// switches protocols sets Connection: Upgrade in its place, as the WebSocket
// library does.
func CloseRefused(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && len(r.Header["Upgrade"]) > 0 {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
