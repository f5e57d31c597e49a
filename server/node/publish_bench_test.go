package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
)

// seedDevices imports n devices subscribed to interest, spread evenly over
// the three platforms (web ones subscribed on the fake push service).
func seedDevices(tb testing.TB, n *Node, gw *gateways, count int, interest string) {
	tb.Helper()
	ctx := context.Background()
	batch := make([]storage.DeviceImport, 0, 5000)
	flush := func() {
		if err := n.db.ImportDevices(ctx, batch); err != nil {
			tb.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range count {
		d := storage.Device{InstanceID: beamsInstance, BundleIdentifier: "com.example.app"}
		switch i % 3 {
		case 0:
			d.Platform, d.Token = storage.PlatformAPNs, fmt.Sprintf("%064x", i)
		case 1:
			d.Platform, d.Token = storage.PlatformFCM, "fcm-"+strconv.Itoa(i)
		case 2:
			sub, err := gw.web.Subscribe()
			if err != nil {
				tb.Fatal(err)
			}
			d.Platform, d.Token = storage.PlatformWeb, sub.Token()
		}
		d.ID = storage.NewDeviceID(d.Platform)
		batch = append(batch, storage.DeviceImport{Device: d, Interests: []string{interest}})
		if len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
}

// rssKiB reads the process's resident set size (Linux).
func rssKiB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok { // peak RSS
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// BenchmarkPublish100k publishes to one interest with 100,000 devices spread
// over the three fake gateways (in this process, checks off, messages only
// counted) and reports the time from the 200 answer to the last delivery,
// deliveries per second, the peak RSS of the process (server and fakes) and
// the CPU time it spent per delivery.
func BenchmarkPublish100k(b *testing.B) {
	const devices = 100_000
	gw := startGateways(b)
	for _, in := range []*pushtest.Inbox{gw.apns.Inbox, gw.fcm.Inbox, gw.web.Inbox} {
		in.Keep = false
	}
	gw.apns.Light, gw.fcm.Light, gw.web.Light = true, true, true
	cfg := pushConfig(b, gw, filepath.Join(b.TempDir(), "herald.db"))
	cfg.Push = &push.Options{RootCAs: gw.roots()} // otherwise production defaults
	n, base := serveNode(b, cfg)
	seedDevices(b, n, gw, devices, "everyone")
	body := map[string]any{
		"interests": []string{"everyone"},
		"apns":      map[string]any{"aps": map[string]any{"alert": map[string]any{"title": "Hi", "body": "Benchmark"}}},
		"fcm":       map[string]any{"notification": map[string]any{"title": "Hi", "body": "Benchmark"}},
		"web":       map[string]any{"notification": map[string]any{"title": "Hi", "body": "Benchmark"}},
	}
	b.ResetTimer()
	var total, cpu time.Duration
	for range b.N {
		cpuBefore := cpuTime()
		before := gw.apns.Count() + gw.fcm.Count() + gw.web.Count()
		status, out := call(b, "POST", base+"/publish_api/v1/instances/"+beamsInstance+"/publishes/interests", body,
			"Authorization", "Bearer "+beamsSecret)
		answered := time.Now()
		if os.Getenv("BENCH_PROGRESS") != "" {
			go func() {
				for range 100 {
					time.Sleep(time.Second)
					pending, _ := n.db.PendingDeliveries(context.Background())
					fmt.Fprintln(os.Stderr, time.Since(answered).Round(time.Second), "apns", gw.apns.Count(), "fcm", gw.fcm.Count(), "web", gw.web.Count(), "pending", pending, "inflight", n.push.InFlight())
				}
			}()
		}
		if status != 200 {
			b.Fatalf("publish: %d %s", status, out)
		}
		for gw.apns.Count()+gw.fcm.Count()+gw.web.Count()-before < devices {
			time.Sleep(time.Millisecond)
		}
		total += time.Since(answered)
		cpu += cpuTime() - cpuBefore
	}
	b.StopTimer()
	per := total / time.Duration(b.N)
	b.ReportMetric(per.Seconds(), "s-to-last-delivery")
	b.ReportMetric(float64(devices)/per.Seconds(), "deliveries/s")
	b.ReportMetric(float64(rssKiB())/1024, "peak-RSS-MiB")
	// CPU time of the process (server and fakes) per delivery: what the
	// rate would be bounded by on idle cores, whatever else ran meanwhile.
	b.ReportMetric(float64(cpu.Microseconds())/float64(devices*b.N), "cpu-µs/delivery")
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
