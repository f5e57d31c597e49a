package main

// Tests of the container image that make image builds, run with podman as
// an operator runs it (make test-image sets HERALD_IMAGE and runs them):
// a node alone on its volume, a cluster of three containers on one Redis
// and one PostgreSQL, and the Helm chart's rendered objects played with
// podman kube play. Without podman they skip, with one line at the start
// of the package's tests; under CI=true a missing podman fails them.
//
// Two facts of the sandbox these tests run in shape the podman commands:
// crun refuses its cgroups (runc is used), and podman's default rlimits are
// above its hard limits (containers.conf sets them within). Containers that
// reach the test's own servers (Redis, PostgreSQL, the fake push gateways,
// all on 127.0.0.1) share the host's network and listen on 127.0.0.1 alone;
// the others publish their port on 127.0.0.1.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testpg"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if _, err := exec.LookPath("podman"); err != nil && os.Getenv("CI") != "true" && !testing.Short() {
		fmt.Fprintln(os.Stderr, "server: podman is not installed (Debian packages podman and runc): the container image tests skip")
	}
	testpg.Main(m)
}

// podman runs podman commands with a containers.conf of the test's.
type podman struct {
	t     *testing.T
	env   []string
	image string // the image under test, HERALD_IMAGE
}

// startPodman returns the podman of a container test, or skips it (fails
// it under CI=true) when podman is missing or no image was built.
func startPodman(t *testing.T) *podman {
	t.Helper()
	if testing.Short() {
		t.Skip("runs containers")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("podman is not installed; CI must install it (Debian packages podman and runc, see .ci/run)")
		}
		t.Skip("podman is not installed")
	}
	image := os.Getenv("HERALD_IMAGE")
	if image == "" {
		t.Skip("HERALD_IMAGE is not set: make test-image builds the image and runs this test")
	}
	// The container's limits: the open files Herald needs for its sockets,
	// within this process's hard limits (runc fails to set more), and a few
	// thousand threads (conmon runs with at most 32768 processes here).
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "containers.conf")
	text := fmt.Sprintf("[containers]\ndefault_ulimits = [\"nofile=%d:%d\", \"nproc=4096:4096\"]\n[engine]\nruntime = \"runc\"\n",
		min(nofile.Max, 1<<20), min(nofile.Max, 1<<20))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return &podman{t: t, env: append(os.Environ(), "CONTAINERS_CONF="+conf), image: image}
}

// output runs podman with args and returns its standard output, trimmed;
// the error carries its standard error.
func (p *podman) output(args ...string) (string, error) {
	cmd := exec.Command("podman", args...)
	cmd.Env = p.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// must is output, failing the test on an error.
func (p *podman) must(args ...string) string {
	p.t.Helper()
	out, err := p.output(args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// name is a name for a container or volume of this test process.
func (p *podman) name(what string) string {
	return fmt.Sprintf("herald-test-%d-%s", os.Getpid(), what)
}

// container is one container of a test.
type container struct {
	p    *podman
	name string
}

// run starts a container of the image (podman run -d) with args before
// the image name and cmd after it; it is removed when the test ends, after
// its logs were shown if the test failed.
func (p *podman) run(name string, args []string, cmd ...string) *container {
	p.t.Helper()
	c := &container{p: p, name: p.name(name)}
	p.t.Cleanup(func() {
		if p.t.Failed() {
			p.t.Logf("logs of %s:\n%s", c.name, c.logs())
		}
		p.output("rm", "--force", "--volumes", "--time", "0", c.name)
	})
	p.must(append(append(append([]string{"run", "--detach", "--name", c.name}, args...), p.image), cmd...)...)
	return c
}

// logs is what the container printed (Herald logs to stderr).
func (c *container) logs() string {
	cmd := exec.Command("podman", "logs", c.name)
	cmd.Env = c.p.env
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// inspect is podman inspect's value of the Go template format.
func (c *container) inspect(format string) string {
	c.p.t.Helper()
	return c.p.must("inspect", "--format", format, c.name)
}

// stop stops the container with podman stop and a grace period, and returns
// its exit code and how long the stop took.
func (c *container) stop(grace time.Duration) (int, time.Duration) {
	c.p.t.Helper()
	start := time.Now()
	c.p.must("stop", "--time", strconv.Itoa(int(grace.Seconds())), c.name)
	took := time.Since(start)
	code, err := strconv.Atoi(c.inspect("{{.State.ExitCode}}"))
	if err != nil {
		c.p.t.Fatal(err)
	}
	return code, took
}

// ready waits until Herald answers 200 on base's /readyz.
func ready(t *testing.T, c *container, base string) {
	t.Helper()
	wait.NoError(t, func() error {
		if state := c.inspect("{{.State.Status}}"); state != "running" {
			t.Fatalf("container %s is %s before it was ready:\n%s", c.name, state, c.logs())
		}
		res, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("%s/readyz: %d %s", base, res.StatusCode, body)
		}
		return nil
	})
}

// logEntries are the JSON lines of a container's logs with msg starting
// with prefix.
func logEntries(logs, prefix string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil {
			if msg, _ := e["msg"].(string); strings.HasPrefix(msg, prefix) {
				out = append(out, e)
			}
		}
	}
	return out
}

// credentials are what the first start of an empty volume logs once.
type credentials struct {
	AppID, Key, Secret, InstanceID, SecretKey string
}

// loggedCredentials reads the credentials from a first start's logs, and
// fails unless each was logged exactly once.
func loggedCredentials(t *testing.T, logs string) credentials {
	t.Helper()
	app := logEntries(logs, "created the default Channels app")
	in := logEntries(logs, "created the Push instance; its secret key")
	if len(app) != 1 || len(in) != 1 {
		t.Fatalf("the first start logged the app's credentials %d times and the instance's %d times, want once each:\n%s", len(app), len(in), logs)
	}
	s := func(e map[string]any, k string) string { v, _ := e[k].(string); return v }
	c := credentials{s(app[0], "app_id"), s(app[0], "key"), s(app[0], "secret"), s(in[0], "instance_id"), s(in[0], "secret_key")}
	if c.AppID == "" || c.Key == "" || c.Secret == "" || c.InstanceID == "" || c.SecretKey == "" {
		t.Fatalf("credentials %+v: one is missing from the logs:\n%s", c, logs)
	}
	return c
}

// smoke runs scripts/compat/sdk-smoke.mjs (the real Pusher and Beams SDKs)
// in mode with its arguments, and decodes what it prints into out.
func smoke(t *testing.T, mode string, args, out any) {
	t.Helper()
	in, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "sdk-smoke.mjs", mode, string(in))
	cmd.Dir = filepath.Join("..", "scripts", "compat")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("sdk-smoke.mjs %s: %v\n%s%s", mode, err, stdout, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("sdk-smoke.mjs %s printed %q: %v", mode, stdout, err)
	}
}

// channelsSmoke checks that a pusher-js client on the node at receive gets
// an event the pusher server SDK triggers through the node at trigger.
func channelsSmoke(t *testing.T, c credentials, receive, trigger string) {
	t.Helper()
	var got struct {
		Received struct{ Sent int64 }
	}
	smoke(t, "channels", map[string]string{"appId": c.AppID, "key": c.Key, "secret": c.Secret, "receive": receive, "trigger": trigger}, &got)
	if got.Received.Sent == 0 {
		t.Fatalf("pusher-js on %s received %+v from a trigger through %s", receive, got, trigger)
	}
}

// beamsPublish publishes to interest with the Beams server SDK through the
// node at addr and returns the publish's id.
func beamsPublish(t *testing.T, c credentials, addr, interest string) string {
	t.Helper()
	var got struct{ PublishID string }
	smoke(t, "beams", map[string]string{"instanceId": c.InstanceID, "secretKey": c.SecretKey, "addr": addr, "interest": interest}, &got)
	if got.PublishID == "" {
		t.Fatal("the Beams SDK's publish has no publishId")
	}
	return got.PublishID
}

// gateways are the fake push gateways of a test, on 127.0.0.1, with their
// key and certificate files in a folder a container mounts read-only at the
// same path.
type gateways struct {
	apns *pushtest.APNs
	fcm  *pushtest.FCM
	web  *pushtest.WebPush
	dir  string
}

func startGateways(t *testing.T) *gateways {
	t.Helper()
	fakes := pushtest.Start(t)
	a, f, w := fakes.APNs, fakes.FCM, fakes.Web
	// Readable by the container's user (65532): a folder of its own, not
	// t.TempDir's, whose parent only root may enter.
	dir, err := os.MkdirTemp("", "herald-gateways-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	g := &gateways{apns: a, fcm: f, web: w, dir: dir}
	for name, content := range map[string]string{"apns-key.p8": a.KeyPEM, "ca.pem": a.CAPEM, "fcm.json": f.ServiceAccount} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// args are podman run's arguments that mount the files and point the
// default Push instance at the fakes.
func (g *gateways) args() []string {
	args := []string{"--volume", g.dir + ":" + g.dir + ":ro"}
	for _, kv := range []string{
		"HERALD_APNS_KEY_FILE=" + filepath.Join(g.dir, "apns-key.p8"), "HERALD_APNS_KEY_ID=" + g.apns.KeyID,
		"HERALD_APNS_TEAM_ID=" + g.apns.TeamID, "HERALD_APNS_URL=" + g.apns.URL, "HERALD_APNS_CA_FILE=" + filepath.Join(g.dir, "ca.pem"),
		"HERALD_FCM_SERVICE_ACCOUNT_FILE=" + filepath.Join(g.dir, "fcm.json"), "HERALD_FCM_URL=" + g.fcm.URL,
		"HERALD_VAPID_SUBJECT=mailto:containers@example.com",
		// FCM and Web Push trust the system's authorities: the fakes share the CA file's certificate.
		"SSL_CERT_FILE=" + filepath.Join(g.dir, "ca.pem"),
		"HERALD_WEBPUSH_ALLOWED_HOSTS=127.0.0.1",
		// Every device of the test registers from 127.0.0.1.
		"HERALD_ANON_RATE_LIMIT=0",
	} {
		args = append(args, "--env", kv)
	}
	return args
}

// device is a device registered through the Device API, with the token
// the fakes file its notifications under.
type device struct {
	platform, id, token string
}

// call sends a JSON request to Herald and decodes a 200's answer into out.
func call(t *testing.T, method, url, bearer string, body, out any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, data)
		}
	}
}

// registerDevices registers one device per gateway on the instance through
// the node at base, each with the interest.
func registerDevices(t *testing.T, g *gateways, base, instance, interest string) []device {
	t.Helper()
	api := base + "/device_api/v1/instances/" + instance
	var vapid struct{ VAPIDPublicKey string }
	call(t, "GET", api+"/web-vapid-public-key", "", nil, &vapid)
	g.web.VAPIDPublicKey = vapid.VAPIDPublicKey
	sub, err := g.web.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	apnsToken := fmt.Sprintf("%x", "container-"+strconv.FormatInt(time.Now().UnixNano(), 10))
	devices := []device{{"apns", "", apnsToken}, {"fcm", "", "fcm-container:" + apnsToken}, {"web", "", sub.ID}}
	bodies := []any{
		map[string]any{"token": apnsToken, "bundleIdentifier": "com.example.containers", "metadata": map[string]string{"sdkVersion": "4.0.0"}},
		map[string]any{"token": devices[1].token, "knownPreviousClientIds": []string{}},
		map[string]any{"token": sub.Token(), "metadata": map[string]string{"sdkVersion": "2.1.0"}},
	}
	for i := range devices {
		var got struct{ ID string }
		call(t, "POST", api+"/devices/"+devices[i].platform, "", bodies[i], &got)
		devices[i].id = got.ID
		call(t, "PUT", api+"/devices/"+devices[i].platform+"/"+got.ID+"/interests", "", map[string][]string{"interests": {interest}}, nil)
	}
	return devices
}

// notified waits until each device's fake gateway holds n notifications
// for it.
func notified(t *testing.T, g *gateways, devices []device, n int) {
	t.Helper()
	inbox := map[string]*pushtest.Inbox{"apns": g.apns.Inbox, "fcm": g.fcm.Inbox, "web": g.web.Inbox}
	for _, d := range devices {
		wait.Until(t, fmt.Sprintf("%d notifications of the %s device", n, d.platform), func() bool {
			return len(inbox[d.platform].For(d.token)) >= n
		})
		if got := len(inbox[d.platform].For(d.token)); got != n {
			t.Fatalf("the %s device got %d notifications, want %d", d.platform, got, n)
		}
	}
	for _, in := range inbox {
		if p := in.Problems(); len(p) > 0 {
			t.Fatalf("the fake gateways found problems: %q", p)
		}
	}
}

// metric is the sum of the samples of a counter on base's /metrics whose
// labels include every one of labels (`name="value"` each).
func metric(t *testing.T, base, name string, labels ...string) float64 {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	sum := 0.0
	sample := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `\{([^}]*)\} (\S+)$`)
next:
	for _, line := range strings.Split(string(body), "\n") {
		m := sample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(m[1], l) {
				continue next
			}
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}

// The image as an operator runs it, on one volume across three starts:
//
//  1. With an empty environment and a published port: it creates its
//     database on the /data volume, logs the credentials once, answers
//     /readyz and its HEALTHCHECK, runs as user 65532 on a read-only root;
//     pusher-js receives a trigger; podman stop closes a WebSocket with 4200
//     and the container exits 0 well within the grace period.
//  2. With the fake push gateways: no credentials logged again; a device
//     per gateway registered and published to with the Beams SDK; a second
//     publish whose APNs delivery the gateway refuses for now, queued for a
//     retry when the container stops.
//  3. With the gateways back: that delivery arrives, so the devices and the
//     queued publish were kept, and the first credentials still work.
//
// The image's labels name its version, commit and source, and its size
// stays within 64 MiB.
func TestContainerImage(t *testing.T) {
	p := startPodman(t)
	checkImage(t, p)

	volume := p.name("data")
	t.Cleanup(func() { p.output("volume", "rm", "--force", volume) })
	const grace = 30 * time.Second

	// 1. An empty environment, as `docker run -p 8080:8080 -v herald-data:/data herald`.
	addr := freeAddr(t)
	first := p.run("first", []string{"--read-only", "--volume", volume + ":/data", "--publish", addr + ":8080"})
	base := "http://" + addr
	ready(t, first, base)
	creds := loggedCredentials(t, first.logs())
	mountpoint := p.must("volume", "inspect", "--format", "{{.Mountpoint}}", volume)
	if _, err := os.Stat(filepath.Join(mountpoint, "herald.db")); err != nil {
		t.Fatalf("the database is not on the /data volume: %v", err)
	}
	pid := first.inspect("{{.State.Pid}}")
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if uid := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(status); uid == nil || string(uid[1]) != "65532" {
		t.Fatalf("herald runs as %q, want the unprivileged user 65532", uid)
	}
	mounts, err := os.ReadFile("/proc/" + pid + "/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if root := regexp.MustCompile(`(?m)^\S+ / \S+ (\S+)`).FindSubmatch(mounts); root == nil || !strings.HasPrefix(string(root[1]), "ro,") {
		t.Fatalf("the root file system is mounted %q, want read-only", root)
	}
	if out, err := p.output("healthcheck", "run", first.name); err != nil {
		t.Fatalf("the image's HEALTHCHECK: %v %s", err, out)
	}
	channelsSmoke(t, creds, addr, addr)

	// podman stop: SIGTERM, the WebSocket closed with 4200 (pusher-js
	// reconnects, to another node behind a load balancer), exit 0.
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/"+creds.Key+"?protocol=7", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if _, msg, err := ws.Read(ctx); err != nil || !strings.Contains(string(msg), "pusher:connection_established") {
		t.Fatalf("first message %q, %v", msg, err)
	}
	closed := make(chan error, 1)
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				closed <- err
				return
			}
		}
	}()
	code, took := first.stop(grace)
	if code != 0 || took > grace/2 {
		t.Fatalf("podman stop: exit code %d after %v, want 0 well within the %v grace period:\n%s", code, took, grace, first.logs())
	}
	if err := <-closed; websocket.CloseStatus(err) != 4200 {
		t.Fatalf("the WebSocket ended with %v, want close code 4200", err)
	}
	t.Logf("podman stop took %v", took)

	// 2. The fake gateways, and a publish queued when the container stops.
	g := startGateways(t)
	addr = freeAddr(t)
	base = "http://" + addr
	host := append([]string{"--read-only", "--network", "host", "--volume", volume + ":/data", "--env", "HERALD_ADDR=" + addr}, g.args()...)
	second := p.run("second", host)
	ready(t, second, base)
	if logs := second.logs(); strings.Contains(logs, creds.Secret) || strings.Contains(logs, creds.SecretKey) {
		t.Fatalf("the second start logged the credentials again:\n%s", logs)
	}
	devices := registerDevices(t, g, base, creds.InstanceID, "containers")
	beamsPublish(t, creds, addr, "containers")
	notified(t, g, devices, 1)
	apns := devices[0]
	g.apns.Unavailable(1_000_000, apns.token)
	beamsPublish(t, creds, addr, "containers")
	notified(t, g, devices[1:], 2)
	wait.Until(t, "a retry of the refused APNs delivery", func() bool {
		return metric(t, base, "herald_push_deliveries_total", `gateway="apns"`, `outcome="retried"`) >= 1
	})
	if code, took := second.stop(grace); code != 0 {
		t.Fatalf("podman stop: exit code %d after %v, want 0", code, took)
	}

	// 3. Gateways that accept it: a new APNs fake (its own key and address,
	// which the start gives the instance).
	g2 := startGateways(t)
	g2.fcm, g2.web = g.fcm, g.web
	addr = freeAddr(t)
	base = "http://" + addr
	host = append([]string{"--read-only", "--network", "host", "--volume", volume + ":/data", "--env", "HERALD_ADDR=" + addr}, g2.args()...)
	third := p.run("third", host)
	ready(t, third, base)
	notified(t, g2, devices[:1], 1)
	notified(t, g, devices[1:], 2)
	channelsSmoke(t, creds, addr, addr)
}

// checkImage checks the image's labels and size.
func checkImage(t *testing.T, p *podman) {
	t.Helper()
	var images []struct {
		Size   int64
		Labels map[string]string
		Config struct{ User string }
	}
	if err := json.Unmarshal([]byte(p.must("image", "inspect", p.image)), &images); err != nil || len(images) != 1 {
		t.Fatalf("podman image inspect %s: %v", p.image, err)
	}
	im := images[0]
	for _, l := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision"} {
		if v := im.Labels[l]; v == "" || v == "unknown" {
			t.Errorf("label %s is %q, want the build's", l, v)
		}
	}
	if src := im.Labels["org.opencontainers.image.source"]; src != "https://github.com/heraldrt/herald" {
		t.Errorf("label org.opencontainers.image.source is %q", src)
	}
	// The version the binary reports is the one the labels name.
	out := p.must("run", "--rm", p.image, "version")
	for _, l := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision"} {
		if !strings.Contains(out, im.Labels[l]) {
			t.Errorf("herald version in the image says %q, not the label %s=%q", out, l, im.Labels[l])
		}
	}
	const limit = 64 << 20
	if im.Size > limit {
		t.Errorf("the image is %d bytes, over %d", im.Size, limit)
	}
	t.Logf("image %s: %.1f MiB, version %s, revision %s", p.image, float64(im.Size)/(1<<20),
		im.Labels["org.opencontainers.image.version"], im.Labels["org.opencontainers.image.revision"])
}

// Three containers of the image as one cluster, on one Redis and one
// PostgreSQL database (run by the test on 127.0.0.1), each node on its own
// port: pusher-js on node 1 receives an event triggered through node 3; a
// device registered through node 2 and 20 pages of devices in the database
// are notified once each by a publish through node 1, whose pages every
// node took a share of.
func TestContainerCluster(t *testing.T) {
	p := startPodman(t)
	redis := testredis.Start(t)
	dsn := testpg.Start(t)
	g := startGateways(t)
	creds := credentials{AppID: "7", Key: "cluster-key", Secret: "cluster-secret",
		InstanceID: "5d0c7f0e-8d1a-4f6b-9a3e-2c1b0a9f8e7d", SecretKey: "CLUSTER0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF01234567"}
	var addrs []string
	for i := 1; i <= 3; i++ {
		addr := freeAddr(t)
		args := append([]string{"--read-only", "--network", "host",
			"--env", "HERALD_ADDR=" + addr, "--env", "HERALD_NODE_ID=node-" + strconv.Itoa(i),
			"--env", "HERALD_REDIS_URL=" + redis.URL(), "--env", "HERALD_DB=" + dsn,
			"--env", "HERALD_APP_ID=" + creds.AppID, "--env", "HERALD_APP_KEY=" + creds.Key, "--env", "HERALD_APP_SECRET=" + creds.Secret,
			"--env", "HERALD_INSTANCE_ID=" + creds.InstanceID, "--env", "HERALD_INSTANCE_SECRET_KEY=" + creds.SecretKey,
			// Nodes on a loaded machine may stall: no page is taken over.
			"--env", "HERALD_PUSH_LEASE=10m",
		}, g.args()...)
		c := p.run("node-"+strconv.Itoa(i), args)
		// One at a time: the first applies the migrations.
		ready(t, c, "http://"+addr)
		addrs = append(addrs, addr)
	}
	channelsSmoke(t, creds, addrs[0], addrs[2])

	// 20 pages of FCM devices, stored as an import would.
	const pages, pageSize = 20, 512
	db, err := storage.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	batch := make([]storage.DeviceImport, 0, pages*pageSize)
	for i := range pages * pageSize {
		d := storage.Device{InstanceID: creds.InstanceID, Platform: storage.PlatformFCM, Token: "fcm-seeded-" + strconv.Itoa(i)}
		d.ID = storage.NewDeviceID(d.Platform)
		batch = append(batch, storage.DeviceImport{Device: d, Interests: []string{"cluster"}})
	}
	if err := db.ImportDevices(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	devices := registerDevices(t, g, "http://"+addrs[1], creds.InstanceID, "cluster")
	publishID := beamsPublish(t, creds, addrs[0], "cluster")
	notified(t, g, devices, 1)
	wait.Until(t, "the seeded devices' notifications", func() bool { return g.fcm.Count() >= pages*pageSize+1 })
	var shares []storage.NodeShare
	wait.NoError(t, func() error {
		if shares, err = db.PublishShares(context.Background(), publishID); err != nil {
			return err
		}
		n := 0
		for _, s := range shares {
			n += s.Sent
		}
		if n != pages*pageSize+len(devices) {
			return fmt.Errorf("the publish's pages record %d deliveries, want %d: %+v", n, pages*pageSize+len(devices), shares)
		}
		return nil
	})
	if got := g.fcm.Count(); got != pages*pageSize+1 {
		t.Fatalf("the FCM fake accepted %d notifications, want %d", got, pages*pageSize+1)
	}
	if len(shares) != 3 {
		t.Fatalf("the publish was sent by %+v, want a share on each of the three nodes", shares)
	}
	t.Logf("the publish's shares: %+v", shares)
}

// The Helm chart's cluster mode (scripts/helm/herald), rendered by
// tools/helm with Helm's packages and played with podman kube play: the
// Deployment, its ConfigMap and its Secret (given to podman secret create,
// see tools/helm), on a Redis run by the test. The pod starts, passes the
// readiness probe's request (GET /readyz, Redis included), takes its node
// id from its name, and pusher-js receives a trigger signed with the app
// secret from the Secret.
func TestContainerHelmChart(t *testing.T) {
	p := startPodman(t)
	redis := testredis.Start(t)
	addr := freeAddr(t)
	release := p.name("chart")
	colon := strings.LastIndex(p.image, ":")
	if colon < strings.LastIndex(p.image, "/") {
		t.Fatalf("HERALD_IMAGE=%s has no tag", p.image)
	}
	creds := credentials{AppID: "9", Key: "chart-key", Secret: "chart-secret"}
	secrets := t.TempDir()
	render := exec.Command("go", "run", ".", "template", "--podman", addr, "--secrets", secrets,
		"--set", "fullnameOverride="+release, "--set", "replicaCount=1", "--set", "redis.url="+redis.URL(),
		"--set", "image.repository="+p.image[:colon], "--set", "image.tag="+p.image[colon+1:], "--set", "image.pullPolicy=Never",
		"--set", "env.HERALD_APP_ID="+creds.AppID, "--set", "env.HERALD_APP_KEY="+creds.Key,
		"--set", "secretEnv.HERALD_APP_SECRET="+creds.Secret,
		filepath.Join("..", "..", "scripts", "helm", "herald"))
	render.Dir = filepath.Join("..", "tools", "helm")
	var stderr strings.Builder
	render.Stderr = &stderr
	manifest, err := render.Output()
	if err != nil {
		t.Fatalf("tools/helm template: %v\n%s", err, stderr.String())
	}
	file := filepath.Join(t.TempDir(), "herald.yaml")
	if err := os.WriteFile(file, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	p.must("secret", "create", release, filepath.Join(secrets, release+".json"))
	t.Cleanup(func() { p.output("secret", "rm", release) })
	// From a folder of its own: podman 4.3 builds an image from a folder of
	// the image's name in its working folder (here ./herald, the binary).
	play := exec.Command("podman", "kube", "play", file)
	play.Env, play.Dir = p.env, t.TempDir()
	out, err := play.CombinedOutput()
	t.Cleanup(func() {
		c := &container{p: p, name: release + "-pod-0-herald"}
		if t.Failed() {
			t.Logf("logs of %s:\n%s", c.name, c.logs())
		}
		p.output("kube", "down", file)
	})
	if err != nil {
		t.Fatalf("podman kube play: %v\n%s\n%s", err, out, manifest)
	}
	c := &container{p: p, name: release + "-pod-0-herald"}
	ready(t, c, "http://"+addr)
	if nodes := logEntries(c.logs(), "cluster mode"); len(nodes) != 1 || nodes[0]["node"] != release+"-pod-0" {
		t.Fatalf("the pod's node id, from its name: %v", nodes)
	}
	channelsSmoke(t, creds, addr, addr)
}
