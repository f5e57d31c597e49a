package clientauth_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldrt/herald/gen/deviceclient"
	"github.com/heraldrt/herald/gen/publishclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/hub"
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
// directive and, run against the live Herald of TestMain, triggers an event,
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
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if mod, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(mod, []byte("module github.com/heraldrt/herald\n")) {
		t.Fatalf("%s is not Herald's module root: %v", root, err)
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
	h := liveNode.Hub()
	sub, err := h.Connect(appID, hub.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Remove(sub) })
	if err := h.Subscribe(sub, "consumer-channel", hub.SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Flush()
	sub.Take(nil) // the subscription's own frames

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

	// The event reached the subscriber.
	h.Flush()
	frames, _ := sub.Take(nil)
	want := `{"event":"consumer-event","channel":"consumer-channel","data":"{\"from\":\"consumer\"}"}`
	if len(frames) != 1 || string(frames[0]) != want {
		t.Errorf("subscriber got %q, want [%s]", frames, want)
	}

	// The device exists, bound to the user, with the interest.
	ctx := context.Background()
	deviceID, publishID := lines["device"], lines["publish"]
	devices, err := deviceclient.NewClientWithResponses(heraldURL)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := devices.GetDeviceWithResponse(ctx, instanceID, "fcm", deviceID)
	if err != nil {
		t.Fatal(err)
	}
	if dev.JSON200 == nil || dev.JSON200.UserId != "consumer-user" {
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
