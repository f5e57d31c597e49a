// Command herald-stall is the stress check of the stalled-body hole (issue
// 29): it opens -conns connections to a running Herald, each sending a
// request head to a long-lived route (the WebSocket route, a WebSocket
// upgrade, the HTTP fallback's receiving requests) that announces a body and
// never sends it, and meanwhile asks GET /healthz every -health-every. It
// reports, as one line of JSON, how many of those connections the server
// answered (by status) or closed, how many it still held after
// -read-timeout plus -slack, how many health checks failed, and the
// server's open descriptors (-server-pid) at the peak and at the end.
//
//	herald-stall -addr 127.0.0.1:8080 -key KEY -conns 1000 -read-timeout 10s -server-pid PID
//
// scripts/stall-check.sh runs it against a Herald limited to 1,200
// descriptors.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "Herald's host:port")
	key := flag.String("key", "app-key", "an app key (the heads use it where a valid one matters)")
	conns := flag.Int("conns", 1000, "stalled connections to open")
	readTimeout := flag.Duration("read-timeout", 30*time.Second, "the server's HERALD_HTTP_READ_TIMEOUT")
	slack := flag.Duration("slack", 5*time.Second, "how long past -read-timeout a connection may still be held")
	healthEvery := flag.Duration("health-every", 250*time.Millisecond, "how often GET /healthz is asked")
	pid := flag.Int("server-pid", 0, "the server's pid, to count its open descriptors (0: not counted)")
	flag.Parse()

	heads := []string{
		"GET /app/anything HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n",
		"GET /app/anything HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET /app/" + *key + "?protocol=7 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nContent-Length: 1\r\n\r\n",
		"POST /pusher/app/" + *key + "/123/%s/xhr_streaming?protocol=7 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n",
		"POST /pusher/app/" + *key + "/123/%s/xhr?protocol=7 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n",
	}

	var peakFDs atomic.Int64
	countFDs := func() int {
		if *pid == 0 {
			return 0
		}
		entries, err := os.ReadDir("/proc/" + strconv.Itoa(*pid) + "/fd")
		if err != nil {
			return -1
		}
		n := len(entries)
		for {
			p := peakFDs.Load()
			if int64(n) <= p || peakFDs.CompareAndSwap(p, int64(n)) {
				return n
			}
		}
	}

	// Health checks until the connections are settled.
	stop := make(chan struct{})
	var healthOK, healthFailed atomic.Int64
	var healthDone sync.WaitGroup
	healthDone.Go(func() {
		client := &http.Client{Timeout: 2 * time.Second}
		tick := time.NewTicker(*healthEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			countFDs()
			res, err := client.Get("http://" + *addr + "/healthz")
			if err == nil {
				res.Body.Close()
			}
			if err == nil && res.StatusCode == http.StatusOK {
				healthOK.Add(1)
			} else {
				healthFailed.Add(1)
			}
		}
	})

	start := time.Now()
	deadline := *readTimeout + *slack
	var mu sync.Mutex
	outcomes := map[string]int{}
	var held atomic.Int64
	var wg sync.WaitGroup
	for i := range *conns {
		wg.Go(func() {
			outcome := stall(*addr, fmt.Sprintf(heads[i%len(heads)], "s"+strconv.Itoa(i)), start.Add(deadline), &held)
			mu.Lock()
			outcomes[outcome]++
			mu.Unlock()
		})
	}
	wg.Wait()
	settled := time.Since(start)
	close(stop)
	healthDone.Wait()

	out, _ := json.Marshal(map[string]any{
		"conns":            *conns,
		"outcomes":         outcomes,
		"settled_s":        settled.Seconds(),
		"held_past_limit":  outcomes["held"],
		"healthz_ok":       healthOK.Load(),
		"healthz_failed":   healthFailed.Load(),
		"server_fds_peak":  peakFDs.Load(),
		"server_fds_after": countFDs(),
	})
	fmt.Println(string(out))
	if outcomes["held"] > 0 || healthFailed.Load() > 0 {
		os.Exit(1)
	}
}

// stall sends head on a new connection to addr and waits, until the
// deadline, for the server to answer or close it. The outcome is "answered
// <status>", "closed", "held" (still open at the deadline) or "dial failed".
func stall(addr, head string, deadline time.Time, held *atomic.Int64) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "dial failed"
	}
	defer c.Close()
	if _, err := c.Write([]byte(head)); err != nil {
		return "closed"
	}
	_ = c.SetReadDeadline(deadline)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			held.Add(1)
			return "held"
		}
		return "closed"
	}
	res.Body.Close()
	return "answered " + strconv.Itoa(res.StatusCode)
}
