package node

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testpg"
)

// seedDevices imports count devices subscribed to interest, spread evenly
// over the three platforms; webToken makes each web device's subscription.
func seedDevices(tb testing.TB, db *storage.DB, count int, interest string, webToken func() string) {
	tb.Helper()
	ctx := context.Background()
	batch := make([]storage.DeviceImport, 0, 5000)
	flush := func() {
		if err := db.ImportDevices(ctx, batch); err != nil {
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
			d.Platform, d.Token = storage.PlatformWeb, webToken()
		}
		d.ID = storage.NewDeviceID(d.Platform)
		batch = append(batch, storage.DeviceImport{Device: d, Interests: []string{interest}})
		if len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
}

// webTokens returns a function handing out the tokens of the fake push
// service's subscribers, made in process.
func webTokens(tb testing.TB, gw *gateways) func() string {
	return func() string {
		sub, err := gw.web.Subscribe()
		if err != nil {
			tb.Fatal(err)
		}
		return sub.Token()
	}
}

// fakeProcess is the fakegateways command running in light mode: the
// gateways of the benchmark, in a process of their own so that the
// benchmark's CPU and memory figures are the server's alone.
type fakeProcess struct {
	pid int
	cfg struct {
		Control               string `json:"control"`
		APNsURL               string `json:"apnsUrl"`
		APNsCAFile            string `json:"apnsCaFile"`
		APNsKeyFile           string `json:"apnsKeyFile"`
		APNsKeyID             string `json:"apnsKeyId"`
		APNsTeamID            string `json:"apnsTeamId"`
		FCMURL                string `json:"fcmUrl"`
		FCMServiceAccountFile string `json:"fcmServiceAccountFile"`
	}
}

func startFakeProcess(b *testing.B) *fakeProcess {
	bin := os.Getenv("FAKEGW_BIN")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "fakegateways")
		build := exec.Command("go", "build", "-o", bin, "github.com/heraldrt/herald/server/push/pushtest/cmd/fakegateways")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("building fakegateways: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, "-light", "-dir", b.TempDir())
	stdin, _ := cmd.StdinPipe() // closing it stops the fakes
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	f := &fakeProcess{pid: cmd.Process.Pid}
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &f.cfg) != nil {
		b.Fatalf("fakegateways printed %q: %v", line, err)
	}
	return f
}

// control calls the fakes' control API and decodes the answer into out.
func (f *fakeProcess) control(b *testing.B, method, path string, out any) {
	req, _ := http.NewRequest(method, f.cfg.Control+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		b.Fatal(err)
	}
}

func (f *fakeProcess) delivered(b *testing.B) int {
	var c map[string]int
	f.control(b, "GET", "/counts", &c)
	return c["apns"] + c["fcm"] + c["web"]
}

// BenchmarkPublish100k publishes to one interest with 100,000 devices spread
// over the three fake gateways (a separate process in light mode: messages
// only counted) and reports the time from the 200 answer to the last
// delivery, deliveries per second, the server's peak RSS, and the CPU time
// per delivery of the server and of the fakes. Both share this machine's
// cores; the server's CPU figure is what bounds its rate on idle cores.
func BenchmarkPublish100k(b *testing.B) {
	b.Run("SQLite", func(b *testing.B) { benchmarkPublish100k(b, filepath.Join(b.TempDir(), "herald.db"), nil) })
	b.Run("PostgreSQL", func(b *testing.B) {
		dsn := testpg.Start(b)
		benchmarkPublish100k(b, dsn, func() time.Duration { return treeCPU(testpg.PID()) })
	})
}

// benchmarkPublish100k is BenchmarkPublish100k on the database db; dbCPU,
// when the database is a server of its own, is the CPU time it used so far.
func benchmarkPublish100k(b *testing.B, db string, dbCPU func() time.Duration) {
	const devices = 100_000
	fk := startFakeProcess(b)
	roots := x509.NewCertPool()
	if ca, err := os.ReadFile(fk.cfg.APNsCAFile); err != nil || !roots.AppendCertsFromPEM(ca) {
		b.Fatalf("the fakes' CA: %v", err)
	}
	cfg := config.Config{
		DB: db, InstanceID: beamsInstance, InstanceSecretKey: beamsSecret,
		APNsKeyFile: fk.cfg.APNsKeyFile, APNsKeyID: fk.cfg.APNsKeyID, APNsTeamID: fk.cfg.APNsTeamID,
		APNsURL: fk.cfg.APNsURL, APNsCAFile: fk.cfg.APNsCAFile,
		FCMServiceAccountFile: fk.cfg.FCMServiceAccountFile, FCMURL: fk.cfg.FCMURL,
		WebPushAllowedHosts: []string{"127.0.0.1", "localhost"}, // the fakes listen on loopback
	}
	n, base := serveNodeWith(b, cfg, Options{Push: push.Options{RootCAs: roots}}) // otherwise production defaults
	var subs []struct {
		Token string `json:"token"`
	}
	fk.control(b, "POST", "/web/subscribe?count="+strconv.Itoa(devices/3), &subs)
	seedDevices(b, n.db, devices, "everyone", func() string {
		t := subs[0].Token
		subs = subs[1:]
		return t
	})
	body := map[string]any{
		"interests": []string{"everyone"},
		"apns":      map[string]any{"aps": map[string]any{"alert": map[string]any{"title": "Hi", "body": "Benchmark"}}},
		"fcm":       map[string]any{"notification": map[string]any{"title": "Hi", "body": "Benchmark"}},
		"web":       map[string]any{"notification": map[string]any{"title": "Hi", "body": "Benchmark"}},
	}
	b.ResetTimer()
	if dbCPU == nil {
		dbCPU = func() time.Duration { return 0 } // in process: counted as the server's
	}
	var total, cpu, fakeCPU, databaseCPU time.Duration
	for range b.N {
		before, cpuBefore, fakeBefore, dbBefore := fk.delivered(b), testkit.CPU(), testkit.ProcessCPU(fk.pid), dbCPU()
		status, out := call(b, "POST", base+"/publish_api/v1/instances/"+beamsInstance+"/publishes/interests", body,
			"Authorization", "Bearer "+beamsSecret)
		answered := time.Now()
		if status != 200 {
			b.Fatalf("publish: %d %s", status, out)
		}
		for last := time.Now(); fk.delivered(b)-before < devices; time.Sleep(5 * time.Millisecond) {
			if os.Getenv("BENCH_PROGRESS") != "" && time.Since(last) >= time.Second {
				last = time.Now()
				fmt.Fprintln(os.Stderr, time.Since(answered).Round(100*time.Millisecond), "delivered", fk.delivered(b)-before, "in flight", n.push.InFlight())
			}
		}
		total += time.Since(answered)
		cpu += testkit.CPU() - cpuBefore
		fakeCPU += testkit.ProcessCPU(fk.pid) - fakeBefore
		databaseCPU += dbCPU() - dbBefore
	}
	b.StopTimer()
	per := total / time.Duration(b.N)
	b.ReportMetric(per.Seconds(), "s-to-last-delivery")
	b.ReportMetric(float64(devices)/per.Seconds(), "deliveries/s")
	b.ReportMetric(float64(rssKiB())/1024, "peak-RSS-MiB")
	b.ReportMetric(float64(cpu.Microseconds())/float64(devices*b.N), "server-cpu-µs/delivery")
	b.ReportMetric(float64(fakeCPU.Microseconds())/float64(devices*b.N), "fakes-cpu-µs/delivery")
	b.ReportMetric(float64(databaseCPU.Microseconds())/float64(devices*b.N), "postgres-cpu-µs/delivery")
}

// treeCPU is the CPU time (user and system) process pid and its children
// used so far: a PostgreSQL server's sessions are child processes.
func treeCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	total := testkit.ProcessCPU(pid)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			total += testkit.ProcessCPU(child)
		}
	}
	return total
}

// rssKiB reads the process's peak resident set size (Linux).
func rssKiB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
