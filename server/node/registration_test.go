package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testpg"
)

// registrationNodes starts n node processes on a new PostgreSQL database
// and returns their base URLs, the database and the processes' ids.
func registrationNodes(tb testing.TB, n int) ([]string, string, []int) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts node processes")
	}
	gw, dsn := startGateways(tb), testpg.Start(tb)
	// The clients share one address: no per-address limit.
	env := append(crashEnv(tb, gw, dsn), "HERALD_ANON_RATE_LIMIT=0")
	cores, _ := strconv.ParseFloat(os.Getenv("BENCH_NODE_CPU"), 64)
	var bases []string
	var pids []int
	for i := range n {
		cmd, base := startChild(tb, append(env, fmt.Sprintf("HERALD_NODE_ID=node-%d", i)))
		bases = append(bases, base)
		pids = append(pids, cmd.Process.Pid)
		if cores > 0 {
			limitCPU(tb, cmd.Process.Pid, cores)
		}
	}
	return bases, dsn, pids
}

// limitCPU holds process pid to cores of CPU time for the rest of the test,
// with a CPU cgroup of its own (cgroup v2, or v1's cpu controller): it needs
// root and a writable cgroup file system, and fails the test without them.
func limitCPU(tb testing.TB, pid int, cores float64) {
	tb.Helper()
	const period = 100000 // µs
	quota := strconv.Itoa(int(cores * period))
	root, limits := "/sys/fs/cgroup", []string{"cpu.max", quota + " " + strconv.Itoa(period)}
	if _, err := os.Stat(root + "/cgroup.controllers"); err != nil { // v1
		root, limits = "/sys/fs/cgroup/cpu", []string{"cpu.cfs_period_us", strconv.Itoa(period), "cpu.cfs_quota_us", quota}
	} else if err := os.WriteFile(root+"/cgroup.subtree_control", []byte("+cpu"), 0o644); err != nil {
		tb.Fatalf("BENCH_NODE_CPU: enabling the cpu controller: %v", err)
	}
	dir := fmt.Sprintf("%s/herald-bench-%d", root, pid)
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatalf("BENCH_NODE_CPU needs root and a writable cgroup file system: %v", err)
	}
	tb.Cleanup(func() {
		os.WriteFile(root+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0o644)
		os.Remove(dir)
	})
	for i := 0; i < len(limits); i += 2 {
		if err := os.WriteFile(dir+"/"+limits[i], []byte(limits[i+1]), 0o644); err != nil {
			tb.Fatalf("BENCH_NODE_CPU: %s: %v", limits[i], err)
		}
	}
	if err := os.WriteFile(dir+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0o644); err != nil {
		tb.Fatalf("BENCH_NODE_CPU: moving node %d into %s: %v", pid, dir, err)
	}
}

// registerConcurrently has clients clients register perClient fcm devices
// each through the Device API, client i through node i modulo the nodes,
// each token new (prefix and numbers), and returns the device ids the
// nodes answered and the errors.
func registerConcurrently(bases []string, clients, perClient int, prefix string) ([]string, []error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: time.Minute}
	var mu sync.Mutex
	var ids []string
	var errs []error
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			url := bases[c%len(bases)] + "/device_api/v1/instances/" + beamsInstance + "/devices/fcm"
			for i := range perClient {
				body, _ := json.Marshal(map[string]string{"token": fmt.Sprintf("%s-%d-%d", prefix, c, i)})
				id, err := registerOnce(hc, url, body)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ids = append(ids, id)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids, errs
}

func registerOnce(hc *http.Client, url string, body []byte) (string, error) {
	res, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return "", fmt.Errorf("register: %d %s", res.StatusCode, out)
	}
	var d struct{ ID string }
	if err := json.Unmarshal(out, &d); err != nil || d.ID == "" {
		return "", fmt.Errorf("register answered %s", out)
	}
	return d.ID, nil
}

// Four clients registering 5,000 devices each through two node processes
// on one PostgreSQL database at once: every registration is answered with
// its own device, and every one is stored.
func TestConcurrentRegistrationsOnPostgreSQL(t *testing.T) {
	const clients, perClient = 4, 5000
	bases, dsn, _ := registrationNodes(t, 2)
	ids, errs := registerConcurrently(bases, clients, perClient, "reg")
	for i, err := range errs {
		if i < 5 {
			t.Errorf("registration failed: %v", err)
		}
	}
	distinct := map[string]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	db, err := storage.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stored := 0
	for id := range distinct {
		if _, err := db.GetDevice(context.Background(), beamsInstance, storage.PlatformFCM, id); err == nil {
			stored++
		}
	}
	if len(errs) != 0 || len(distinct) != clients*perClient || stored != clients*perClient {
		t.Fatalf("%d errors, %d distinct ids answered, %d stored; want none, %d and %d", len(errs), len(distinct), stored,
			clients*perClient, clients*perClient)
	}
}

// BenchmarkRegisterDevices registers devices through the Device API from
// four concurrent clients, through one node process or spread over two, on
// one PostgreSQL database, and reports registrations per second, the CPU
// time per registration of the nodes, of PostgreSQL and of this process
// (the clients), and how many cores they kept busy between them: on a
// machine whose cores they fill, a second node adds no registrations.
// BENCH_NODE_CPU=0.25 holds each node to a quarter of a core (limitCPU),
// so that the nodes, not PostgreSQL or the clients, bound the rate, as
// nodes on machines of their own would:
//
//	BENCH_NODE_CPU=0.25 go test -run '^$' -bench RegisterDevices -benchtime 8000x ./server/node/
func BenchmarkRegisterDevices(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("Nodes%d", n), func(b *testing.B) {
			bases, _, pids := registrationNodes(b, n)
			nodesCPU := func() time.Duration {
				var sum time.Duration
				for _, pid := range pids {
					sum += testkit.ProcessCPU(pid)
				}
				return sum
			}
			const clients = 4
			nodes0, pg0, self0 := nodesCPU(), treeCPU(testpg.PID()), testkit.CPU()
			b.ResetTimer()
			_, errs := registerConcurrently(bases, clients, max(1, b.N/clients), fmt.Sprintf("bench-%d", b.N))
			b.StopTimer()
			if len(errs) > 0 {
				b.Fatalf("%d registrations failed: %v", len(errs), errs[0])
			}
			regs := float64(clients * max(1, b.N/clients))
			nodes, pg, self := nodesCPU()-nodes0, treeCPU(testpg.PID())-pg0, testkit.CPU()-self0
			b.ReportMetric(regs/b.Elapsed().Seconds(), "registrations/s")
			b.ReportMetric(float64(nodes.Microseconds())/regs, "nodes-cpu-µs/reg")
			b.ReportMetric(float64(pg.Microseconds())/regs, "postgres-cpu-µs/reg")
			b.ReportMetric(float64(self.Microseconds())/regs, "clients-cpu-µs/reg")
			b.ReportMetric((nodes+pg+self).Seconds()/b.Elapsed().Seconds(), "cores-busy")
		})
	}
}
