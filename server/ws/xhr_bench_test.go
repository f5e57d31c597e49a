package ws

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testkit"
)

// benchClientsEnv, when set ("<transport> <subscribers> <base URL>"), makes
// TestBenchClients the subscribers of BenchmarkTransportFanout, in a process
// of their own so that the benchmark's CPU time is the server's alone.
const benchClientsEnv = "HERALD_BENCH_CLIENTS"

// BenchmarkTransportFanout compares the transports' delivery to 1,000
// subscribers of one channel, over real sockets: each iteration publishes
// one event and waits until every subscriber has it. It reports the time
// until the last one has it (ns/fanout) and the server's CPU time per
// delivery (server-cpu-ns/delivery); the subscribers run in a child process
// (TestBenchClients) and only count frames.
func BenchmarkTransportFanout(b *testing.B) {
	for _, transport := range []string{"ws", transportStreaming} {
		b.Run(transport, func(b *testing.B) { benchTransportFanout(b, transport, 1000) })
	}
}

func benchTransportFanout(b *testing.B, transport string, subs int) {
	log := zap.NewNop()
	h := hub.New(log)
	defer h.Close()
	handler := NewHandler(h, wsApps, log, Options{})
	srv := httptest.NewServer(handler)
	defer srv.Close()
	defer handler.Shutdown(context.Background())

	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchClients$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", benchClientsEnv, transport, subs, srv.URL))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	waitLine := func(want string) {
		for lines.Scan() {
			if lines.Text() == want {
				return
			}
		}
		b.Fatalf("the clients ended before %q: %v", want, lines.Err())
	}
	waitLine("ready")

	data := strings.Repeat("x", 100)
	b.ResetTimer()
	cpu0 := testkit.CPU()
	for i := range b.N {
		if err := h.Publish(hub.Message{AppID: "1", Channel: "bench", Event: "tick", Data: data}); err != nil {
			b.Fatal(err)
		}
		waitLine("done " + strconv.Itoa(i+1))
	}
	cpu := testkit.CPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/fanout")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*subs), "server-cpu-ns/delivery")
}

// TestBenchClients is BenchmarkTransportFanout's subscribers when run by it
// (benchClientsEnv); otherwise it skips. It opens them, subscribes each to
// "bench", says "ready", and then "done <n>" each time every subscriber has
// n tick events.
func TestBenchClients(t *testing.T) {
	spec := os.Getenv(benchClientsEnv)
	if spec == "" {
		t.Skip("run by BenchmarkTransportFanout")
	}
	var transport, base string
	var subs int
	if _, err := fmt.Sscan(spec, &transport, &subs, &base); err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	count := func(n int) {
		if total := received.Add(int64(n)); total%int64(subs) == 0 && n > 0 {
			fmt.Printf("done %d\n", total/int64(subs))
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: subs}}
	for i := range subs {
		if transport == "ws" {
			conn, br := rawDial(t, strings.TrimPrefix(base, "http://"))
			readRawFrame(t, br)
			writeRawText(t, conn, `{"event":"pusher:subscribe","data":{"channel":"bench"}}`)
			readRawFrame(t, br)
			go func() {
				for {
					if _, err := readRawFrameErr(br); err != nil {
						return
					}
					count(1)
				}
			}()
			continue
		}
		session := fmt.Sprintf("%s/pusher/app/key1/%d/bench%d", base, i%1000, i)
		resp, err := client.Post(session+"/xhr_streaming?protocol=7", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		readLineUntil(t, br, "pusher:connection_established")
		sent, err := client.Post(session+"/xhr_send", "application/json",
			strings.NewReader(`["{\"event\":\"pusher:subscribe\",\"data\":{\"channel\":\"bench\"}}"]`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, sent.Body)
		sent.Body.Close()
		readLineUntil(t, br, "subscription_succeeded")
		go func() {
			tick := []byte(`tick`)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				count(bytes.Count(line, tick))
			}
		}()
	}
	fmt.Println("ready")
	select {} // until the benchmark kills the process
}

// readLineUntil reads lines until one holds want.
func readLineUntil(t testing.TB, br *bufio.Reader, want string) {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading until %s: %v", want, err)
		}
		if strings.Contains(line, want) {
			return
		}
	}
}
