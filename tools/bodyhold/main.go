// Command herald-bodyhold measures what request bodies that never arrive
// cost a running Herald (issue 45): it reads the server's resident memory,
// opens -conns connections that each send a request head announcing a body
// of -announce bytes (and -sent bytes of it), holds them, and reads the
// resident memory again once it has settled; then closes them, and does it
// again (-rounds). It prints one line of JSON for the last round: the memory
// before and while the connections are held, the difference per
// connection, and the Go heap in use meanwhile (from /metrics).
//
//	herald-bodyhold -addr 127.0.0.1:8080 -server-pid PID -path '/apps/1/events?auth_key=KEY' -conns 1000
//
// scripts/body-rss.sh runs it against a fresh Herald for each API.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "Herald's host:port")
	pid := flag.Int("server-pid", 0, "the server's pid, whose resident memory is read")
	path := flag.String("path", "/apps/1/events?auth_key=key", "the path (and query) the requests are sent to")
	header := flag.String("header", "", `one more request header line ("Authorization: Bearer …")`)
	conns := flag.Int("conns", 1000, "connections to hold")
	announce := flag.Int("announce", 256*1024, "the Content-Length each request announces")
	sent := flag.Int("sent", 0, "how many bytes of the body each request sends before it stops")
	settle := flag.Duration("settle", 10*time.Second, "the longest wait for the server's memory to settle")
	roundsFlag := flag.Int("rounds", 2, "rounds of connections; the last is reported")
	flag.Parse()
	if *pid == 0 {
		fail("-server-pid is required")
	}

	head := "POST " + *path + " HTTP/1.1\r\nHost: herald\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(*announce) + "\r\n"
	if *header != "" {
		head += *header + "\r\n"
	}
	head += "\r\n" + string(bytes.Repeat([]byte{' '}, *sent))

	// Fresh memory from the system is counted only once written, and
	// a buffer nobody writes to costs nothing resident at first; but the
	// runtime zeroes the memory it hands out again. A first round leaves
	// the server with such memory, as a server that has run a while has:
	// the second round is the one reported.
	var rounds []map[string]any
	for range *roundsFlag {
		rounds = append(rounds, round(*addr, *pid, head, *conns, *settle))
	}
	last := rounds[len(rounds)-1]
	last["path"], last["announced"], last["sent"], last["rounds"] = *path, *announce, *sent, len(rounds)
	out, _ := json.Marshal(last)
	fmt.Println(string(out))
}

// round holds conns connections that sent head and reports the server's
// memory before and while they are held; it closes them and waits for the
// server to settle again before it returns.
func round(addr string, pid int, head string, conns int, settle time.Duration) map[string]any {
	before := settled(pid, settle)
	held := make([]net.Conn, 0, conns)
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			fail("dial: " + err.Error())
		}
		if _, err := c.Write([]byte(head)); err != nil {
			fail("write: " + err.Error())
		}
		held = append(held, c)
	}
	// The server reads each head and starts on its body on its own time.
	during := settled(pid, settle)
	heap := heapInUse(addr)
	for _, c := range held {
		c.Close()
	}
	return map[string]any{
		"conns":             conns,
		"rss_before_mib":    mib(before),
		"rss_held_mib":      mib(during),
		"per_conn_kib":      float64(during-before) / float64(conns),
		"go_heap_inuse_mib": heap,
	}
}

// settled reads pid's resident memory until it stops changing for a
// second, or for at most limit.
func settled(pid int, limit time.Duration) int64 {
	last, err := residentKiB(pid)
	if err != nil {
		fail(err.Error())
	}
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		now, err := residentKiB(pid)
		if err != nil {
			fail(err.Error())
		}
		if now == last {
			break
		}
		last = now
	}
	return last
}

// heapInUse is go_memstats_heap_inuse_bytes from the server's /metrics in
// MiB, or -1 when it cannot be read (metrics on another address).
func heapInUse(addr string) float64 {
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return float64(int64(f/(1<<20)*10)) / 10
			}
		}
	}
	return -1
}

// residentKiB is the resident set of pid in KiB: the second field of
// /proc/<pid>/statm, in pages.
func residentKiB(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, err
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return 0, fmt.Errorf("/proc/%d/statm: %w", pid, err)
	}
	return resident * int64(os.Getpagesize()) / 1024, nil
}

func mib(kib int64) float64 { return float64(kib*10/1024) / 10 }

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "herald-bodyhold:", msg)
	os.Exit(1)
}
