package cluster

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// The cost of cluster mode on one node against a single node, same run:
// deliveries/s and CPU per delivery (Herald's process, and Redis's) for
// 1,000 subscribers on one channel and 10,000 over 1,000 channels, with 16
// publishers at once.
//
//	go test -run '^$' -bench . ./server/cluster/
func BenchmarkFanout(b *testing.B) {
	const publishers = 16
	rs := testredis.Start(b)
	for _, shape := range []struct {
		name           string
		subs, channels int
	}{{"1000subs_1channel", 1000, 1}, {"10000subs_1000channels", 10000, 1000}} {
		for _, mode := range []string{"single", "cluster"} {
			b.Run(shape.name+"/"+mode, func(b *testing.B) {
				h := hub.New(zap.NewNop())
				defer h.Close()
				if mode == "cluster" {
					c, err := New(zap.NewNop(), h, Options{URL: rs.URL(), NodeID: "bench", Prefix: fmt.Sprintf("b%d:", time.Now().UnixNano()), Settings: testSettings})
					if err != nil {
						b.Fatal(err)
					}
					c.Start()
					defer c.Close()
				}
				conns := make([]*hub.Conn, shape.subs)
				for i := range conns {
					c, err := h.Connect("app", hub.ConnectOptions{MaxQueueBytes: 1 << 30})
					if err != nil {
						b.Fatal(err)
					}
					if err := h.Subscribe(c, "ch"+strconv.Itoa(i%shape.channels), hub.SubscribeOptions{}); err != nil {
						b.Fatal(err)
					}
					conns[i] = c
				}
				waitFrames(b, h, conns, 1) // subscription_succeeded everywhere
				perChannel := shape.subs / shape.channels
				herald0, redis0 := testkit.CPU(), testkit.ProcessCPU(rs.PID())
				b.ResetTimer()
				start := time.Now()
				// Publishers at once, as HTTP triggers in flight would be.
				var wg sync.WaitGroup
				for p := range publishers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := p; i < b.N; i += publishers {
							if err := h.Publish(hub.Message{AppID: "app", Channel: "ch" + strconv.Itoa(i%shape.channels), Event: "e", Data: `{"n":1}`}); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				// Every subscriber of channel k gets the messages i with i%channels == k.
				want := func(i int) int { return b.N/shape.channels + btoi(i%shape.channels < b.N%shape.channels) }
				waitFramesEach(b, h, conns, want)
				elapsed := time.Since(start)
				b.StopTimer()
				deliveries := float64(b.N * perChannel)
				b.ReportMetric(deliveries/elapsed.Seconds(), "deliveries/s")
				b.ReportMetric(float64(testkit.CPU()-herald0)/deliveries, "herald-cpu-ns/delivery")
				if mode == "cluster" {
					b.ReportMetric(float64(testkit.ProcessCPU(rs.PID())-redis0)/deliveries, "redis-cpu-ns/delivery")
				}
			})
		}
	}
}

// The latency Redis adds between a publish and the subscriber's writer
// being woken, one message at a time.
func BenchmarkPublishLatency(b *testing.B) {
	rs := testredis.Start(b)
	for _, mode := range []string{"single", "cluster"} {
		b.Run(mode, func(b *testing.B) {
			h := hub.New(zap.NewNop())
			defer h.Close()
			if mode == "cluster" {
				c, err := New(zap.NewNop(), h, Options{URL: rs.URL(), NodeID: "lat", Prefix: fmt.Sprintf("l%d:", time.Now().UnixNano()), Settings: testSettings})
				if err != nil {
					b.Fatal(err)
				}
				c.Start()
				defer c.Close()
			}
			w := &wakeWriter{woke: make(chan struct{}, 1)}
			conn, err := h.Connect("app", hub.ConnectOptions{Writer: w})
			if err != nil {
				b.Fatal(err)
			}
			w.c = conn
			if err := h.Subscribe(conn, "ch", hub.SubscribeOptions{}); err != nil {
				b.Fatal(err)
			}
			<-w.woke
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := h.Publish(hub.Message{AppID: "app", Channel: "ch", Event: "e", Data: "{}"}); err != nil {
					b.Fatal(err)
				}
				<-w.woke
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// wakeWriter drains its connection whenever woken and signals each wake.
type wakeWriter struct {
	c    *hub.Conn
	woke chan struct{}
}

func (w *wakeWriter) Wake() {
	go func() {
		defer w.c.WriterDone()
		for {
			_, _, idle := w.c.Drain(nil)
			if idle {
				break
			}
		}
		w.woke <- struct{}{}
	}()
}

func (w *wakeWriter) Overflow() {}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitFrames waits until every connection has n frames queued.
func waitFrames(b *testing.B, h *hub.Hub, conns []*hub.Conn, n int) {
	waitFramesEach(b, h, conns, func(int) int { return n })
}

// waitFramesEach waits until connection i has want(i) frames, counting what
// it takes off each queue.
func waitFramesEach(b *testing.B, h *hub.Hub, conns []*hub.Conn, want func(int) int) {
	got := make([]int, len(conns))
	deadline := time.Now().Add(2 * time.Minute)
	for i, c := range conns {
		for got[i] < want(i) {
			frames, _ := c.Take(nil)
			got[i] += len(frames)
			if got[i] >= want(i) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("connection %d has %d frames of %d", i, got[i], want(i))
			}
			h.Flush()
			time.Sleep(time.Millisecond)
		}
	}
}

// subscribedNode starts a node of the cluster at url (its hub and
// membership, closed when b ends) with subs subscribers over the channels
// ch0, ch1, … of app (channels of them), and waits until each has its
// subscription_succeeded.
func subscribedNode(b *testing.B, url, id, prefix string, subs, channels int) (*hub.Hub, []*hub.Conn) {
	h := hub.New(zap.NewNop())
	b.Cleanup(h.Close)
	c, err := New(zap.NewNop(), h, Options{URL: url, NodeID: id, Prefix: prefix, Settings: testSettings})
	if err != nil {
		b.Fatal(err)
	}
	c.Start()
	b.Cleanup(func() { c.Close() }) // before the hub's
	conns := make([]*hub.Conn, subs)
	for i := range conns {
		conn, err := h.Connect("app", hub.ConnectOptions{MaxQueueBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Subscribe(conn, "ch"+strconv.Itoa(i%channels), hub.SubscribeOptions{}); err != nil {
			b.Fatal(err)
		}
		conns[i] = conn
	}
	waitFrames(b, h, conns, 1)
	return h, conns
}

// publishSpread publishes b.N messages over the channels of subscribedNode
// from publishers goroutines at once, as HTTP triggers in flight would be,
// and waits until every subscriber has its share.
func publishSpread(b *testing.B, h *hub.Hub, conns []*hub.Conn, publishers, channels int) {
	publishPaced(b, h, conns, publishers, channels, 0)
}

// publishPaced is publishSpread at an offered rate of rate messages a
// second (as fast as the publishers go when 0): message i is published
// when its time comes, i/rate after the start, by whichever publisher is
// free, or at once when it is late. The pause paces the load; nothing
// waits on it for a result.
func publishPaced(b *testing.B, h *hub.Hub, conns []*hub.Conn, publishers, channels, rate int) {
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
				}
				if err := h.Publish(hub.Message{AppID: "app", Channel: "ch" + strconv.Itoa(i%channels), Event: "e", Data: `{"n":1}`}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitFramesEach(b, h, conns, func(i int) int { return b.N/channels + btoi(i%channels < b.N%channels) })
}

// Redis's CPU per message on one Redis, three shards and a Redis Cluster of
// three primaries (the topologies of the tests), same run: one node, 1,000
// subscribers over 100 channels, 8 or 64 publishers as fast as they go,
// then 64 publishers held to an offered rate (pacedRate messages a second,
// the same for every topology). Over shards each Redis takes a share of the
// channels; the busiest one's CPU per message over the single Redis's is
// what sharding adds to the capacity.
//
// The rows as fast as the publishers go measure a node at its limit, where
// each Redis gets a call as soon as its previous one is answered: a shard's
// calls then carry fewer messages than one Redis's, and Redis's CPU goes by
// calls. The paced rows offer every topology the same load, below the
// node's limit, so that their calls compare like with like; the last row
// is one Redis at the busiest shard's share of that load.
//
//	go test -run '^$' -bench Shards -benchtime 20000x ./server/cluster/
func BenchmarkShards(b *testing.B) {
	const subs, channels = 1000, 100
	for _, load := range []struct {
		name             string
		publishers, rate int
	}{
		{"8publishers", 8, 0},
		{"64publishers", 64, 0},
		{fmt.Sprintf("paced%d", pacedRate), 64, pacedRate},
	} {
		for _, tp := range topologies {
			b.Run(load.name+"/"+strings.ReplaceAll(tp.name, " ", "_"), func(b *testing.B) {
				benchShards(b, tp, load.publishers, load.rate, subs, channels)
			})
		}
	}
	// One Redis alone at the busiest of three shards' share of the paced
	// load: what that shard would cost if a Redis's CPU per message did not
	// depend on how busy it is. On a virtual machine it does (a Redis woken
	// less often spends more on each call), and this row shows by how much.
	busiest := make([]int, 3)
	for i := range channels {
		busiest[shardOf("app", "ch"+strconv.Itoa(i), len(busiest))]++
	}
	rate := pacedRate * slices.Max(busiest) / channels
	b.Run(fmt.Sprintf("paced%d/one_Redis_at_the_busiest_shard's_share", rate), func(b *testing.B) {
		benchShards(b, topologies[0], 64, rate, subs, channels)
	})
}

// pacedRate is the offered rate of BenchmarkShards's paced rows, in
// messages a second: well below what one node publishes through any of the
// topologies on a 2-core machine (5,000-15,000 a second), so that no
// topology's node is at its limit and a call carries about one message on
// each.
const pacedRate = 1000

// benchShards is one run of BenchmarkShards, on a fresh Redis of tp.
func benchShards(b *testing.B, tp topology, publishers, rate, subs, channels int) {
	servers, url := tp.start(b)
	n := len(servers)
	h, conns := subscribedNode(b, url, "bench", fmt.Sprintf("s%d:", time.Now().UnixNano()), subs, channels)
	redis0, cmds0, wakes0 := make([]time.Duration, n), make([]int64, n), make([]int64, n)
	for i, rs := range servers {
		redis0[i], cmds0[i], wakes0[i] = testkit.ProcessCPU(rs.PID()), infoField(b, rs, "stats", "total_commands_processed"), wakeUps(rs.PID())
	}
	b.ResetTimer()
	publishPaced(b, h, conns, publishers, channels, rate)
	b.StopTimer()
	var total, busiest time.Duration
	var busiestCmds, busiestWakes int64
	for i, rs := range servers {
		spent := testkit.ProcessCPU(rs.PID()) - redis0[i]
		total += spent
		if spent > busiest {
			busiest, busiestCmds, busiestWakes = spent, infoField(b, rs, "stats", "total_commands_processed")-cmds0[i], wakeUps(rs.PID())-wakes0[i]
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(busiest)/float64(b.N), "busiest-redis-cpu-ns/msg")
	b.ReportMetric(float64(total)/float64(b.N), "all-redis-cpu-ns/msg")
	// Commands, not messages, make most of Redis's CPU: a publish
	// call carries what queued while the previous one was on its way.
	b.ReportMetric(float64(busiestCmds)/float64(b.N), "busiest-redis-cmds/msg")
	// And each time Redis wakes up to serve them costs it a switch back in:
	// the calls that reach it at once share one.
	b.ReportMetric(float64(busiestWakes)/float64(b.N), "busiest-redis-wakeups/msg")
}

// wakeUps is the number of times a process gave up the CPU to wait
// (voluntary_ctxt_switches in /proc/<pid>/status): for a Redis, about once
// each time it found nothing to do, so about the number of times it was
// woken to serve calls.
func wakeUps(pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// What one publish call costs Redis by its shape — entries (one per slot
// the call touches) × messages per entry — with connections listening on
// the slots' channels as the nodes reading them would (none, or three):
// Redis CPU per call and per message. Most of a call's cost is fixed (its
// command, its answer, a push to each listening node), so a message costs
// Redis less the more messages a call carries.
//
//	go test -run '^$' -bench PublishCall ./server/cluster/
func BenchmarkPublishCall(b *testing.B) {
	rs := testredis.Start(b)
	for _, shape := range []struct{ entries, perEntry, listeners int }{{1, 1, 0}, {1, 1, 3}, {1, 6, 3}, {3, 2, 3}} {
		b.Run(fmt.Sprintf("%dx%d/listeners%d", shape.entries, shape.perEntry, shape.listeners), func(b *testing.B) {
			h := hub.New(zap.NewNop())
			defer h.Close()
			cl, err := New(zap.NewNop(), h, Options{URL: rs.URL(), NodeID: "call", Prefix: fmt.Sprintf("p%d:", time.Now().UnixNano()), Settings: testSettings})
			if err != nil {
				b.Fatal(err)
			}
			cl.Start()
			defer cl.Close()
			c := cl.(*member)
			var listened []string
			for s := range Slots {
				listened = append(listened, c.channel(slotStreams[s]))
			}
			var pushes atomic.Int64
			for range shape.listeners {
				ps, err := c.listen(listened...)
				if err != nil {
					b.Fatal(err)
				}
				defer ps.Close()
				go func() {
					for {
						if _, err := ps.Receive(c.ctx); err != nil {
							return
						}
						pushes.Add(1)
					}
				}()
			}
			// A channel of each of the first shape.entries slots.
			channels := make([]string, 0, shape.entries)
			for i := 0; len(channels) < shape.entries; i++ {
				ch := "ch" + strconv.Itoa(i)
				if slotOf("app", ch) == len(channels) {
					channels = append(channels, ch)
				}
			}
			var ms []hub.Message
			for _, ch := range channels {
				for range shape.perEntry {
					ms = append(ms, hub.Message{AppID: "app", Channel: ch, Event: "e", Data: strings.Repeat("x", 200)})
				}
			}
			wait.Until(b, "the member publishes", func() bool { return c.Publish(ms...) == nil })
			redis0 := testkit.ProcessCPU(rs.PID())
			b.ResetTimer()
			for range b.N {
				if err := c.Publish(ms...); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// Every listener got every entry: the pushes were part of the cost.
			wait.Until(b, "every push", func() bool { return pushes.Load() >= int64(shape.listeners*(b.N+1)*shape.entries) })
			used := float64(testkit.ProcessCPU(rs.PID()) - redis0)
			b.ReportMetric(used/1e3/float64(b.N), "redis-µs/call")
			b.ReportMetric(used/1e3/float64(b.N*len(ms)), "redis-µs/msg")
		})
	}
}
