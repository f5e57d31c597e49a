package node

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testpg"
)

// crashChildEnv marks the re-executed test binary that serves a node.
const crashChildEnv = "HERALD_CRASH_TEST_CHILD"

// runCrashChild serves a node configured from HERALD_* variables and prints
// its address; the parent kills it with SIGKILL.
func runCrashChild() {
	cfg, err := config.Load(nil, os.Getenv, os.Stderr)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	log, _ := config.Logger("json", "error", os.Stderr)
	n, err := New(context.Background(), cfg, log, Options{})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	fmt.Println("ADDR", ln.Addr().String())
	_ = n.Serve(ln)
}

// startChild runs this test binary as a node process and returns it with its
// base URL.
func startChild(t testing.TB, env []string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPublishSurvivesSIGKILL$")
	cmd.Env = append(append(os.Environ(), crashChildEnv+"=1"), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		t.Fatalf("child node did not start: %q %v", line, err)
	}
	return cmd, "http://" + addr
}

// A node killed with SIGKILL in the middle of a 10,000-device publish leaves
// no device without its notification once a new node runs on the same file:
// delivery is at least once, and the duplicates (sends in flight at the
// kill) are counted and reported.
func TestPublishSurvivesSIGKILL(t *testing.T) {
	if os.Getenv(crashChildEnv) == "1" {
		runCrashChild()
		return
	}
	if testing.Short() {
		t.Skip("starts node processes")
	}
	const devices = 10_000
	gw := startGateways(t)
	db := filepath.Join(t.TempDir(), "herald.db")
	env := crashEnv(t, gw, db)
	child, base := startChild(t, env)

	// Seed through a second connection to the same file, as `herald` CLI would.
	seeded := seedCrash(t, gw, db, devices)
	publishID := publishCrash(t, base)
	atKill := killMidway(t, gw, child, devices)

	_, base = startChild(t, env)
	st := waitDone(t, base, publishID)
	dups := everyDeviceNotified(t, gw, seeded, st, devices)
	t.Logf("killed after %d of %d deliveries; after restart: status %+v, %d duplicate notifications", atKill, devices, st, dups)
}

// everyDeviceNotified checks that, after a crash and the publish's
// completion (st), every seeded device got its notification, the status
// counts every device and the gateways saw nothing wrong; it returns the
// duplicate notifications.
func everyDeviceNotified(t *testing.T, gw *gateways, seeded []storage.Delivery, st publishStatus, devices int) int {
	t.Helper()
	missing, dups := notifiedOnce(gw, seeded)
	if missing > 0 {
		t.Fatalf("%d devices never got their notification", missing)
	}
	if st.Targeted != devices || st.Sent+st.Failed != devices {
		t.Errorf("status %+v", st)
	}
	for _, p := range [][]string{gw.apns.Problems(), gw.fcm.Problems(), gw.web.Problems()} {
		if len(p) > 0 {
			t.Errorf("gateway problems: %v", p)
		}
	}
	return dups
}

// killMidway kills child with SIGKILL once a quarter of the devices got
// their notification, and returns how many had by then.
func killMidway(t *testing.T, gw *gateways, child *exec.Cmd, devices int) int {
	t.Helper()
	received := func() int { return gw.apns.Count() + gw.fcm.Count() + gw.web.Count() }
	wait.Until(t, "a quarter of the deliveries", func() bool { return received() >= devices/4 })
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	child.Wait()
	atKill := received()
	if atKill >= devices {
		t.Fatalf("all %d deliveries were done before the kill; the test proves nothing", atKill)
	}
	return atKill
}

// crashEnv is the environment of a crash test's node processes on db (a
// SQLite file or a PostgreSQL URL) with the fake gateways.
func crashEnv(t testing.TB, gw *gateways, db string) []string {
	cfg := pushConfig(t, gw, db)
	return []string{
		"HERALD_ADDR=127.0.0.1:0", "HERALD_DB=" + db, "HERALD_LOG_LEVEL=error",
		"HERALD_INSTANCE_ID=" + cfg.InstanceID, "HERALD_INSTANCE_SECRET_KEY=" + cfg.InstanceSecretKey,
		"HERALD_APNS_KEY_FILE=" + cfg.APNsKeyFile, "HERALD_APNS_KEY_ID=" + cfg.APNsKeyID, "HERALD_APNS_TEAM_ID=" + cfg.APNsTeamID,
		"HERALD_APNS_URL=" + cfg.APNsURL, "HERALD_APNS_CA_FILE=" + cfg.APNsCAFile,
		"HERALD_FCM_SERVICE_ACCOUNT_FILE=" + cfg.FCMServiceAccountFile, "HERALD_FCM_URL=" + cfg.FCMURL,
		"HERALD_VAPID_SUBJECT=mailto:ops@example.com", "HERALD_WEBPUSH_ALLOWED_HOSTS=127.0.0.1,localhost",
		"SSL_CERT_FILE=" + cfg.APNsCAFile, // the fakes share one certificate
	}
}

// seedCrash stores devices subscribed to "crash" in db, where a node has
// created the instance, and returns them.
func seedCrash(t *testing.T, gw *gateways, db string, devices int) []storage.Delivery {
	sdb, err := storage.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	in, err := sdb.GetInstance(context.Background(), beamsInstance)
	if err != nil {
		t.Fatal(err)
	}
	gw.web.VAPIDPublicKey = in.VAPID.PublicKey
	seedDevices(t, sdb, devices, "crash", webTokens(t, gw))
	var seeded []storage.Delivery
	all := storage.Publish{ID: "list", InstanceID: beamsInstance, TargetKind: storage.TargetInterests, Targets: []string{"crash"}}
	every := map[storage.Platform]bool{storage.PlatformAPNs: true, storage.PlatformFCM: true, storage.PlatformWeb: true}
	for p := range every {
		page, _, _, err := sdb.PublishTargets(context.Background(), all, p, every, "", devices)
		if err != nil {
			t.Fatal(err)
		}
		seeded = append(seeded, page...)
	}
	if len(seeded) != devices {
		t.Fatalf("seeded %d devices", len(seeded))
	}
	return seeded
}

// publishCrash publishes to the "crash" interest through base and returns
// the publish id.
func publishCrash(t testing.TB, base string) string {
	status, out := call(t, "POST", base+"/publish_api/v1/instances/"+beamsInstance+"/publishes/interests", map[string]any{
		"interests": []string{"crash"},
		"apns":      map[string]any{"aps": map[string]any{"alert": "crash test"}},
		"fcm":       map[string]any{"notification": map[string]any{"title": "crash test"}},
		"web":       map[string]any{"notification": map[string]any{"title": "crash test"}},
	}, "Authorization", "Bearer "+beamsSecret)
	if status != 200 {
		t.Fatalf("publish: %d %s", status, out)
	}
	return strings.Split(strings.Split(string(out), `"publishId":"`)[1], `"`)[0]
}

// notifiedOnce counts the seeded devices the gateways never notified, and
// the notifications beyond one per device.
func notifiedOnce(gw *gateways, seeded []storage.Delivery) (missing, dups int) {
	for _, n := range timesNotified(gw, seeded) {
		if n == 0 {
			missing++
		}
		if n > 1 {
			dups += n - 1
		}
	}
	return missing, dups
}

// timesNotified returns how many notifications the gateways took for each
// seeded device, by device id.
func timesNotified(gw *gateways, seeded []storage.Delivery) map[string]int {
	perToken := map[string]int{}
	for tok, n := range gw.apns.Tokens() {
		perToken[tok] += n
	}
	for tok, n := range gw.fcm.Tokens() {
		perToken[tok] += n
	}
	webByID := gw.web.Tokens()
	out := make(map[string]int, len(seeded))
	for _, d := range seeded {
		n := perToken[d.Token]
		if d.Platform == storage.PlatformWeb {
			n = webByID[webSubID(d.Token)]
		}
		out[d.DeviceID] = n
	}
	return out
}

// webSubID is the fake push service's id of a web token's endpoint.
func webSubID(token string) string {
	sub, err := push.DecodeWebToken(token)
	if err != nil {
		return ""
	}
	return sub.Endpoint[strings.LastIndex(sub.Endpoint, "/")+1:]
}

// Two nodes on one PostgreSQL database both send a 10,000-device publish,
// page by page; the one that accepted it is killed with SIGKILL, and the
// other, once the dead node's leases ran out, takes its pages over and
// finishes the publish; no device is left without its notification, and
// the duplicates are the pages that were in flight. The lease is short for
// the takeover to come soon, yet long enough that a live node on a loaded
// machine keeps its pages.
func TestPublishSurvivesSIGKILLOnPostgreSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	const devices = 10_000
	gw := startGateways(t)
	db := testpg.Start(t)
	// A lease a live node renews in time on a loaded machine (renewals come
	// every quarter of it): a shorter one, run out while node-a was only
	// slow, let node-b take over pages node-a went on sending, and the
	// duplicates passed what the kill left in flight. node-b takes over
	// this long after the kill.
	env := append(crashEnv(t, gw, db), "HERALD_PUSH_LEASE=10s")
	dispatching, base := startChild(t, append(env, "HERALD_NODE_ID=node-a"))
	_, other := startChild(t, append(env, "HERALD_NODE_ID=node-b"))

	seeded := seedCrash(t, gw, db, devices)
	publishID := publishCrash(t, base) // node-a claims pages at once; node-b when its resolver looks
	atKill := killMidway(t, gw, dispatching, devices)

	st := waitDone(t, other, publishID)
	dups := everyDeviceNotified(t, gw, seeded, st, devices)
	t.Logf("node-a killed after %d of %d deliveries; node-b finished: status %+v, %d duplicate notifications", atKill, devices, st, dups)
	// At least once, and no more than the pages in flight at the kill
	// again (3,072 at most are handed to senders at a time).
	if dups > 3072 {
		t.Errorf("%d duplicate notifications: more than were in flight", dups)
	}
}
