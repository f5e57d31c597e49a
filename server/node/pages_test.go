package node

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testpg"
)

// pageNodes are the node processes of a page test, on one PostgreSQL
// database, with the fake gateways.
type pageNodes struct {
	gw    *gateways
	dsn   string
	procs []*exec.Cmd
	bases []string

	publishID string // see seedAndPublish
}

// startPageNodes starts n node processes (node-0, node-1, …) on a new
// PostgreSQL database, with the page lease given (HERALD_PUSH_LEASE).
// A test not about takeover gives a generous one: on a loaded machine a
// live node may stall past a short lease, and its pages would be taken
// over and sent twice.
func startPageNodes(t testing.TB, n int, lease string) *pageNodes {
	t.Helper()
	if testing.Short() {
		t.Skip("starts node processes")
	}
	pn := &pageNodes{gw: startGateways(t), dsn: testpg.Start(t)}
	env := append(crashEnv(t, pn.gw, pn.dsn), "HERALD_PUSH_LEASE="+lease)
	for i := range n {
		cmd, base := startChild(t, append(env, fmt.Sprintf("HERALD_NODE_ID=node-%d", i)))
		pn.procs, pn.bases = append(pn.procs, cmd), append(pn.bases, base)
	}
	return pn
}

// delivered is how many deliveries the node at base counts delivered, from
// its metrics.
func delivered(t testing.TB, base string) float64 {
	fams := scrape(t, base+"/metrics")
	n := 0.0
	for _, g := range []string{"apns", "fcm", "web"} {
		n += max(0, value(fams, "herald_push_deliveries_total", "gateway", g, "outcome", "delivered"))
	}
	return n
}

// shares returns the publish's split between the nodes, from the database.
func (pn *pageNodes) shares(t *testing.T, publishID string) map[string]storage.NodeShare {
	t.Helper()
	db, err := storage.Open(context.Background(), pn.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	list, err := db.PublishShares(context.Background(), publishID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]storage.NodeShare{}
	for _, s := range list {
		out[s.Node] = s
	}
	return out
}

// Three node processes on one PostgreSQL database, one publish to 30,000
// devices accepted by node 0: every device is notified exactly once, and
// each node sends a part of it (at least one page), as its own metrics and
// the publish's split in the database both say. How evenly the pages split
// depends on how busy each process is on the machine, so the test asks
// only that none is left out (a node that never claims a page fails it).
func TestThreeNodesSendOnePublishOnPostgreSQL(t *testing.T) {
	const devices = 30_000
	pn := startPageNodes(t, 3, "10m")
	seeded := pn.seedAndPublish(t, devices)
	st := waitDone(t, pn.bases[0], pn.publishID)
	if dups := everyDeviceNotified(t, pn.gw, seeded, st, devices); dups != 0 {
		t.Errorf("%d duplicate notifications without a crash", dups)
	}
	shares := pn.shares(t, pn.publishID)
	var split []string
	total := 0.0
	for i, base := range pn.bases {
		n := delivered(t, base)
		total += n
		node := fmt.Sprintf("node-%d", i)
		split = append(split, fmt.Sprintf("%s %.0f (%.1f %%, %d pages)", node, n, 100*n/devices, shares[node].Pages))
		if float64(shares[node].Sent) != n {
			t.Errorf("%s's metrics count %.0f deliveries, its pages in the database %d", node, n, shares[node].Sent)
		}
		if shares[node].Pages < 1 || n < 1 {
			t.Errorf("%s sent %.0f of %d deliveries in %d pages: every node should send a part", node, n, devices, shares[node].Pages)
		}
	}
	t.Logf("deliveries per node: %s", strings.Join(split, ", "))
	if total != devices {
		t.Errorf("the nodes' metrics count %.0f deliveries, want %d", total, devices)
	}
}

// The same with node 1 killed with SIGKILL halfway: every device is
// notified, the only devices notified twice are in pages node 1 held at
// its death (taken over by node 0 or 2 once their lease ran out, epoch 2),
// and no more than the takers counted; the rest is split over nodes 0
// and 2.
func TestThreeNodesFinishOnePublishWhenOneDies(t *testing.T) {
	const devices = 30_000
	// Short, for node 1's pages to be taken over soon after its death; a
	// live node's page taken over under load only adds duplicates the
	// test allows (in pages taken over, counted by their takers).
	pn := startPageNodes(t, 3, "5s")
	seeded := pn.seedAndPublish(t, devices)
	received := func() int { return pn.gw.apns.Count() + pn.gw.fcm.Count() + pn.gw.web.Count() }
	wait.Until(t, "half the deliveries, some by node 1", func() bool {
		return received() >= devices/2 && delivered(t, pn.bases[1]) > 0
	})
	if err := pn.procs[1].Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	pn.procs[1].Wait()
	atKill := received()
	if atKill >= devices {
		t.Fatalf("all %d deliveries were done before the kill; the test proves nothing", atKill)
	}
	st := waitDone(t, pn.bases[0], pn.publishID)
	everyDeviceNotified(t, pn.gw, seeded, st, devices)

	// Each device notified twice is in a page taken over.
	taken := pn.takenOver(t)
	if len(taken) == 0 {
		t.Fatal("no page was taken over: node 1 held none at its death, and the test proves nothing")
	}
	dups := 0
	for id, n := range timesNotified(pn.gw, seeded) {
		if n < 2 {
			continue
		}
		dups += n - 1
		in := false
		for _, r := range taken {
			in = in || strings.HasPrefix(id, r.stream+"-") && id > r.after && id <= r.end
		}
		if !in {
			t.Errorf("%s was notified %d times but is in no page taken over", id, n)
		}
	}
	takenOver := 0.0
	for _, i := range []int{0, 2} {
		takenOver += max(0, value(scrape(t, pn.bases[i]+"/metrics"), "herald_push_taken_over_deliveries_total"))
	}
	if float64(dups) > takenOver {
		t.Errorf("%d duplicate notifications, more than the %.0f deliveries of the pages taken over", dups, takenOver)
	}
	shares := pn.shares(t, pn.publishID)
	var split []string
	for i := range pn.bases {
		s := shares[fmt.Sprintf("node-%d", i)]
		split = append(split, fmt.Sprintf("node-%d %d (%.1f %%, %d pages)", i, s.Targeted, 100*float64(s.Targeted)/devices, s.Pages))
	}
	t.Logf("node 1 killed after %d of %d deliveries; %d pages (%.0f deliveries) taken over, %d duplicate notifications; recorded per node: %s",
		atKill, devices, len(taken), takenOver, dups, strings.Join(split, ", "))
}

// seedAndPublish seeds devices and publishes to them through node 0.
func (pn *pageNodes) seedAndPublish(t *testing.T, devices int) []storage.Delivery {
	seeded := seedCrash(t, pn.gw, pn.dsn, devices)
	pn.publishID = publishCrash(t, pn.bases[0])
	return seeded
}

// pageRange is the range of a page of a publish to interests.
type pageRange struct{ stream, after, end string }

// takenOver returns the pages of the publish that were taken over.
func (pn *pageNodes) takenOver(t *testing.T) []pageRange {
	t.Helper()
	db, err := sql.Open("pgx", pn.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT stream, after_cursor, end_cursor FROM publish_pages WHERE publish_id = $1 AND epoch > 1`, pn.publishID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []pageRange
	for rows.Next() {
		var r pageRange
		if err := rows.Scan(&r.stream, &r.after, &r.end); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkPublish100kNodes publishes to one interest of 100,000 devices
// through node 0 of one or three node processes on one PostgreSQL database
// (the fake gateways in this process) and reports the time from the
// answer to the publish being done, the share each node sent, and the CPU
// the node processes used per delivery.
func BenchmarkPublish100kNodes(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("Nodes%d", n), func(b *testing.B) {
			const devices = 100_000
			pn := startPageNodes(b, n, "10m")
			db, err := storage.Open(context.Background(), pn.dsn)
			if err != nil {
				b.Fatal(err)
			}
			in, err := db.GetInstance(context.Background(), beamsInstance)
			if err != nil {
				b.Fatal(err)
			}
			pn.gw.web.VAPIDPublicKey = in.VAPID.PublicKey
			for _, g := range []*pushtest.Inbox{pn.gw.apns.Inbox, pn.gw.fcm.Inbox, pn.gw.web.Inbox} {
				g.Keep = false
			}
			seedDevices(b, db, devices, "crash", webTokens(b, pn.gw))
			db.Close()
			cpu := func() time.Duration {
				var total time.Duration
				for _, p := range pn.procs {
					total += testkit.ProcessCPU(p.Process.Pid)
				}
				return total
			}
			b.ResetTimer()
			var took, used time.Duration
			for range b.N {
				before := cpu()
				id := publishCrash(b, pn.bases[0])
				start := time.Now()
				// Not waitDone: on a busy machine 100,000 deliveries may take
				// longer than its deadline.
				for deadline := start.Add(15 * time.Minute); getStatus(b, pn.bases[0], id).State != "done"; time.Sleep(50 * time.Millisecond) {
					if time.Now().After(deadline) {
						b.Fatalf("publish %s not done after 15 minutes", id)
					}
				}
				took += time.Since(start)
				used += cpu() - before
			}
			b.StopTimer()
			b.ReportMetric(took.Seconds()/float64(b.N), "s-to-done")
			b.ReportMetric(float64(devices*b.N)/took.Seconds(), "deliveries/s")
			b.ReportMetric(float64(used.Microseconds())/float64(devices*b.N), "herald-cpu-µs/delivery")
			for i, base := range pn.bases {
				b.ReportMetric(100*delivered(b, base)/float64(devices*b.N), fmt.Sprintf("%%-node%d", i))
			}
		})
	}
}
