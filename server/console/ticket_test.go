package console

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/wait"
)

// clock is a console clock the test moves.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(1700000000000)
	return c
}

// post sends POST url with the headers and returns the response, read.
func post(t *testing.T, url string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body strings.Builder
	if _, err := bufio.NewReader(res.Body).WriteTo(&body); err != nil {
		t.Fatal(err)
	}
	return res, []byte(body.String())
}

// ticket asks base for a ticket with the admin token.
func ticket(t *testing.T, base string) string {
	t.Helper()
	res, body := post(t, base+"/console/tickets", "Authorization", "Bearer "+token)
	var tk Ticket
	if res.StatusCode != 200 || json.Unmarshal(body, &tk) != nil || tk.Ticket == "" {
		t.Fatalf("POST /console/tickets: %d %s", res.StatusCode, body)
	}
	if tk.ExpiresIn != int(ticketTTL/time.Second) || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("ticket %+v, Cache-Control %q", tk, res.Header.Get("Cache-Control"))
	}
	if strings.Contains(tk.Ticket, token) {
		t.Fatalf("the ticket %q carries the token", tk.Ticket)
	}
	return tk.Ticket
}

// openStream opens the stream of app 1 with the ticket and returns its status;
// a stream that opened is closed again.
func openStream(t *testing.T, base, tk string) int {
	t.Helper()
	res := get(t, base+"/console/events?app=1&ticket="+tk)
	defer res.Body.Close()
	if res.StatusCode == 200 {
		if got := readEvent(t, bufio.NewReader(res.Body)); len(got) != 1 || got[0] != ": watching app 1" {
			t.Fatalf("first message %q, want the watching comment", got)
		}
	}
	return res.StatusCode
}

func TestTicketNeedsTheToken(t *testing.T) {
	_, base := serve(t)
	for name, headers := range map[string][]string{
		"ErrNoToken":    nil,
		"ErrWrongToken": {"Authorization", "Bearer " + token + "x"},
	} {
		t.Run(name, func(t *testing.T) {
			res, body := post(t, base+"/console/tickets", headers...)
			if res.StatusCode != 401 || errKind(body) != "unauthorized" {
				t.Fatalf("got %d %s, want 401 unauthorized", res.StatusCode, body)
			}
		})
	}
	// Asking for a ticket with GET (a link, an <img>) does nothing.
	if res := get(t, base+"/console/tickets", "Authorization", "Bearer "+token); res.StatusCode == 200 {
		t.Fatalf("GET /console/tickets: %d", res.StatusCode)
	}
}

// A ticket opens one stream, once, and only within its lifetime.
func TestTicketOpensOneStreamOnce(t *testing.T) {
	clk := newClock()
	c, base := serveAt(t, clk.now)

	tk := ticket(t, base)
	if status := openStream(t, base, tk); status != 200 {
		t.Fatalf("first use: %d, want 200", status)
	}
	if status := openStream(t, base, tk); status != 401 {
		t.Fatalf("second use: %d, want 401", status)
	}

	tk = ticket(t, base)
	clk.advance(ticketTTL - time.Millisecond)
	if status := openStream(t, base, tk); status != 200 {
		t.Fatalf("a millisecond before it expires: %d, want 200", status)
	}

	tk = ticket(t, base)
	clk.advance(ticketTTL)
	if status := openStream(t, base, tk); status != 401 {
		t.Fatalf("once expired: %d, want 401", status)
	}

	// Used and expired tickets are forgotten.
	c.ticketMu.Lock()
	left := len(c.tickets)
	c.ticketMu.Unlock()
	if left != 0 {
		t.Fatalf("%d tickets kept", left)
	}
}

// Unused tickets are bounded: past maxTickets new ones are refused with 429
// until some expire.
func TestTicketsBounded(t *testing.T) {
	clk := newClock()
	c, base := serveAt(t, clk.now)
	for range maxTickets {
		ticket(t, base)
	}
	res, body := post(t, base+"/console/tickets", "Authorization", "Bearer "+token)
	if res.StatusCode != 429 || errKind(body) != "too_many_requests" {
		t.Fatalf("ticket %d: %d %s, want 429", maxTickets+1, res.StatusCode, body)
	}
	clk.advance(ticketTTL)
	tk := ticket(t, base) // the expired ones make room
	c.ticketMu.Lock()
	left := len(c.tickets)
	c.ticketMu.Unlock()
	if left != 1 {
		t.Fatalf("%d tickets kept after the others expired, want 1", left)
	}
	if status := openStream(t, base, tk); status != 200 {
		t.Fatalf("the new ticket: %d", status)
	}
}

func errKind(body []byte) string {
	var e struct{ Error, Description string }
	if json.Unmarshal(body, &e) != nil || e.Description == "" {
		return "<not the error body: " + string(body) + ">"
	}
	return e.Error
}

// A page that stops reading its stream is dropped once a write has waited
// writeTimeout, rather than holding the stream forever.
func TestStalledReaderDropped(t *testing.T) {
	c, base := serveWith(t, func(c *Console) { c.writeTimeout = 50 * time.Millisecond })
	addr := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive window fills quickly; the client never reads.
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(conn, "GET /console/events?app=1 HTTP/1.1\r\nHost: console\r\nAuthorization: Bearer "+token+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the stream to open", func() bool { return c.watching.Load() == 1 })
	data := strings.Repeat("x", maxDataBytes)
	wait.Until(t, "the stalled stream to be dropped", func() bool {
		for range 64 {
			c.Triggered("1", "news", "flood", data)
		}
		return c.watching.Load() == 0
	})
}
