package upgrade

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/wait"
)

// An upgrade request refused with an HTTP answer closes its connection,
// whichever side answers it: a request pipelined behind it is never read.
// Plain requests keep their connection.
func TestRefusedUpgradeClosesWhicheverSideAnswers(t *testing.T) {
	handler := CloseRefused(http.NotFoundHandler())
	ts := startServer(t, handler, Options{})
	const next = "GET /metrics HTTP/1.1\r\nHost: example.test\r\n\r\n"
	for _, tt := range []struct {
		name, req string
		answers   int
	}{
		{"Here", upgradeHead("/app/key"), 1},
		{"OtherPath", upgradeHead("/elsewhere"), 1},
		{"LongHead", upgradeHead("/app/key", "X-Padding: "+strings.Repeat("p", 5000)+"\r\n"), 1},
		{"HTTP10KeepAlive", "GET /app/key HTTP/1.0\r\nHost: example.test\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n", 1},
		{"Post", "POST /app/key HTTP/1.1\r\nHost: example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n", 1},
		{"NotAnUpgrade", "GET /app/key HTTP/1.1\r\nHost: example.test\r\n\r\n", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ts.dial(t)
			if _, err := io.WriteString(c, tt.req+next); err != nil {
				t.Fatal(err)
			}
			if tt.answers == 2 {
				// Keep-alive: the server waits for a third request; end
				// the connection from here once both answers are in.
				c.(*net.TCPConn).CloseWrite()
			}
			_ = c.SetReadDeadline(time.Now().Add(wait.Limit))
			got, err := io.ReadAll(c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection stayed open after %q", got)
			}
			if n := strings.Count("\n"+string(got), "\nHTTP/1."); n != tt.answers {
				t.Fatalf("%d answers, want %d: %q", n, tt.answers, got)
			}
		})
	}
}
