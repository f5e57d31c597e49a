package cluster

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/server/internal/testredis"
)

// idleNodeEnv, set to a Redis URL and a prefix, makes the test binary run
// one cluster node without clients until it is sent SIGTERM (see TestMain):
// the other nodes of BenchmarkNodesWithoutSubscribers, in processes of
// their own so that their CPU is measured apart.
const idleNodeEnv = "HERALD_BENCH_IDLE_NODE"

func TestMain(m *testing.M) {
	if v := os.Getenv(idleNodeEnv); v != "" {
		runIdleNode(v)
		return
	}
	os.Exit(m.Run())
}

// runIdleNode runs a node of the cluster given as "url prefix id", prints
// "ready" once it is in the cluster and leaves on SIGTERM.
func runIdleNode(v string) {
	var url, prefix, id string
	if _, err := fmt.Sscan(v, &url, &prefix, &id); err != nil {
		fmt.Fprintln(os.Stderr, "idle node:", err)
		os.Exit(2)
	}
	h := hub.New(zap.NewNop())
	c, err := New(zap.NewNop(), h, Options{URL: url, NodeID: id, Prefix: prefix})
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle node:", err)
		os.Exit(2)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	c.Start()
	for !c.Stats().Up {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	<-stop
	c.Close()
	h.Close()
}

// The first measure: three nodes on one Redis, every subscriber and
// every publisher on node 0 (1,000 subscribers over 100 channels, 8
// publishers as fast as they go). Nodes 1 and 2 hold no subscriber, so what
// they spend is what the cluster costs a node per message it does not
// deliver: reported as each one's CPU over node 0's (this process: the
// node, its publishers and subscribers' queues) and per message.
//
//	go test -run '^$' -bench NodesWithoutSubscribers -benchtime 20000x ./server/cluster/
func BenchmarkNodesWithoutSubscribers(b *testing.B) {
	const publishers, subs, channels = 8, 1000, 100
	rs := testredis.Start(b)
	prefix := fmt.Sprintf("i%d:", time.Now().UnixNano())
	var idle []*exec.Cmd
	for i := 1; i <= 2; i++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s n%d", idleNodeEnv, rs.URL(), prefix, i))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
			b.Fatalf("idle node %d: %q %v", i, line, err)
		}
		idle = append(idle, cmd)
	}
	h, conns := subscribedNode(b, rs.URL(), "n0", prefix, subs, channels)
	self0 := testkit.CPU()
	idle0 := make([]time.Duration, len(idle))
	for i, cmd := range idle {
		idle0[i] = testkit.ProcessCPU(cmd.Process.Pid)
	}
	b.ResetTimer()
	publishSpread(b, h, conns, publishers, channels)
	// The idle nodes read on for a moment after the last publish: give
	// them the time to finish what they were sent (a heartbeat's worth).
	time.Sleep(time.Second)
	b.StopTimer()
	self := float64(testkit.CPU() - self0)
	for i, cmd := range idle {
		spent := float64(testkit.ProcessCPU(cmd.Process.Pid) - idle0[i])
		b.ReportMetric(spent/self, fmt.Sprintf("node%d/node0-cpu", i+1))
		b.ReportMetric(spent/float64(b.N), fmt.Sprintf("node%d-cpu-ns/msg", i+1))
	}
	b.ReportMetric(self/float64(b.N), "node0-cpu-ns/msg")
}
