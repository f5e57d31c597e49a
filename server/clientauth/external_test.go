package clientauth_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/heraldrt/herald/gen/deviceclient"
	"github.com/heraldrt/herald/gen/publishclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/internal/wait"
)

// goModOf is the go.mod of the other team's module: Herald required at
// v0.0.0 and replaced by this checkout, as a user replaces a tagged version
// while trying a change.
const goModOf = `module example.com/consumer

go 1.26.0

require github.com/heraldrt/herald v0.0.0

replace github.com/heraldrt/herald => %s
`

// The clients are importable from outside the module: a program with its own
// go.mod (testdata/consumer) builds against this checkout through a replace
// directive and, run against the Herald of TestMain, triggers an event,
// registers a device bound to a user, publishes to it, reports and reads the
// app back. The test checks each effect on the server.
func TestExternalModule(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the go command is needed to build a program outside the module: %v", err)
		}
		t.Skip("skipping: no go command on PATH to build a program outside the module")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile(filepath.Join("testdata", "consumer", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	write("main.go", src)
	write("go.mod", []byte(strings.Replace(goModOf, "%s", root, 1)))
	// Herald's go.sum holds the checksums of every module its packages
	// need, so the build verifies against it instead of asking the
	// checksum database: the test needs no network once the module cache
	// is warm (and uses the environment's proxy when it is not).
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", sum)

	bin := filepath.Join(dir, "consumer")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Dir = dir
	// -mod=mod lets go add the requirements the program pulls in through
	// Herald to its go.mod, as `go mod tidy` would for a user; GOWORK=off
	// keeps a workspace of the developer's out of it.
	build.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the program outside the module: %v\n%s", err, out)
	}

	// A subscriber on the channel the program triggers on.
	ctx := context.Background()
	sub := subscribe(t, "consumer-channel")

	run := exec.Command(bin, "-url", heraldURL, "-app-id", appID, "-key", appKey, "-secret", appSecret,
		"-instance", instanceID, "-secret-key", secretKey, "-admin-token", adminToken)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("running the program: %v\n%s", err, out)
	}
	lines := map[string]string{} // first word -> the rest
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		word, rest, _ := strings.Cut(sc.Text(), " ")
		lines[word] = rest
	}
	for word, want := range map[string]string{
		"triggered": "consumer-channel consumer-event",
		"reported":  "open",
		"app":       appID + " " + appKey,
	} {
		if lines[word] != want {
			t.Errorf("program printed %q for %s, want %q\n%s", lines[word], word, want, out)
		}
	}

	// The event reached the subscriber, after any of Herald's own
	// (pusher_internal:subscription_count: the app counts subscriptions).
	want := `{"event":"consumer-event","channel":"consumer-channel","data":"{\"from\":\"consumer\"}"}`
	got := readFrame(t, sub)
	for strings.HasPrefix(got, `{"event":"pusher_internal:`) {
		got = readFrame(t, sub)
	}
	if got != want {
		t.Errorf("subscriber got %s, want %s", got, want)
	}

	// The device exists, bound to the user, with the interest.
	deviceID, publishID := lines["device"], lines["publish"]
	devices, err := deviceclient.NewClientWithResponses(heraldURL)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := devices.GetDeviceWithResponse(ctx, instanceID, "fcm", deviceID)
	if err != nil {
		t.Fatal(err)
	}
	if dev.JSON200 == nil || dev.JSON200.UserID != "consumer-user" {
		t.Fatalf("device %q: %s %s, want it bound to consumer-user", deviceID, dev.Status(), dev.Body)
	}
	interests, err := devices.ListDeviceInterestsWithResponse(ctx, instanceID, "fcm", deviceID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if interests.StatusCode() != 200 || !bytes.Contains(interests.Body, []byte(`"consumer-interest"`)) {
		t.Fatalf("device interests: %s %s", interests.Status(), interests.Body)
	}

	// The publish was stored and resolved to that device.
	publishes, err := publishclient.NewClientWithResponses(heraldURL, publishclient.WithRequestEditorFn(clientauth.BearerToken(secretKey)))
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the publish to target the device", func() bool {
		res, err := publishes.GetPublishWithResponse(ctx, instanceID, publishID)
		if err != nil {
			t.Fatal(err)
		}
		if res.JSON200 == nil {
			t.Fatalf("publish %q: %s %s", publishID, res.Status(), res.Body)
		}
		return res.JSON200.Targeted == 1
	})
}

// subscribe opens a pusher-js-like WebSocket connection to the app and
// subscribes it to channel, returning once the subscription succeeded.
func subscribe(t *testing.T, channel string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	url := "ws" + strings.TrimPrefix(heraldURL, "http") + "/app/" + appKey + "?protocol=7&client=go&version=1"
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	if got := readFrame(t, c); !strings.Contains(got, `"pusher:connection_established"`) {
		t.Fatalf("first frame %s, want pusher:connection_established", got)
	}
	msg, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": channel}})
	if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
		t.Fatal(err)
	}
	if got := readFrame(t, c); !strings.Contains(got, `"pusher_internal:subscription_succeeded"`) {
		t.Fatalf("frame %s, want pusher_internal:subscription_succeeded", got)
	}
	return c
}

// readFrame returns the next frame c receives; wait.Limit bounds a test
// that would otherwise hang.
func readFrame(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.Limit)
	defer cancel()
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	return string(data)
}
