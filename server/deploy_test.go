package main

// Tests of the deployment recipes in scripts/: the container image's
// contract (without Docker: the same static binary, run with the image's
// environment only and no CA bundle) and the systemd unit.

import (
	"bufio"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/wait"
)

// instruction is one line of a Dockerfile, continuations joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
}

// parseDockerfile returns the instructions of each stage (the FROM line
// first) of the Dockerfile at path.
func parseDockerfile(t *testing.T, path string) [][]instruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages [][]instruction
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "#") || (text == "" && line == "") {
			continue
		}
		if rest, ok := strings.CutSuffix(text, "\\"); ok {
			line += rest + " "
			continue
		}
		line += text
		cmd, args, _ := strings.Cut(line, " ")
		line = ""
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.Join(strings.Fields(args), " ")}
		switch {
		case in.cmd == "FROM":
			stages = append(stages, []instruction{in})
		case len(stages) > 0:
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// imageContract is what the final stage of scripts/Dockerfile promises.
type imageContract struct {
	env         []string // ENV, as KEY=value
	entrypoint  []string
	cmd         []string
	healthcheck []string // the HEALTHCHECK's CMD, exec form
}

// readImageContract checks the Dockerfile's shape and returns its contract.
func readImageContract(t *testing.T) imageContract {
	t.Helper()
	stages := parseDockerfile(t, filepath.Join("..", "scripts", "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("scripts/Dockerfile has %d stages, want a build stage and the image", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	execForm := func(in instruction) []string {
		var argv []string
		if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
			t.Fatalf("%s %s: want the exec form, a JSON array: %v", in.cmd, in.args, err)
		}
		return argv
	}
	var c imageContract
	var user, volume, copied string
	for _, in := range final {
		switch in.cmd {
		case "FROM":
			if base := in.args; base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
				t.Errorf("the image is FROM %s, want scratch or distroless/static", base)
			}
		case "ENV":
			c.env = append(c.env, strings.Fields(in.args)...)
		case "USER":
			user = in.args
		case "VOLUME":
			volume = in.args
		case "ENTRYPOINT":
			c.entrypoint = execForm(in)
		case "CMD":
			c.cmd = execForm(in)
		case "HEALTHCHECK":
			_, hc, ok := strings.Cut(in.args, "CMD ")
			if !ok {
				t.Fatalf("HEALTHCHECK %s has no CMD", in.args)
			}
			c.healthcheck = execForm(instruction{cmd: "HEALTHCHECK CMD", args: hc})
		case "COPY":
			if strings.HasSuffix(in.args, " /herald") {
				copied = in.args
			}
		}
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("USER %q: the image must not run as root", user)
	}
	if volume != "/data" {
		t.Errorf("VOLUME %q, want /data", volume)
	}
	for _, want := range []string{"HERALD_ADDR=0.0.0.0:8080", "HERALD_DB=/data/herald.db"} {
		if !slices.Contains(c.env, want) {
			t.Errorf("ENV %q lacks %s", c.env, want)
		}
	}
	if !slices.Equal(c.entrypoint, []string{"/herald"}) || len(c.healthcheck) == 0 || c.healthcheck[0] != "/herald" {
		t.Errorf("ENTRYPOINT %q, HEALTHCHECK %q: want both to run /herald", c.entrypoint, c.healthcheck)
	}
	if !strings.HasPrefix(copied, "--from=") {
		t.Errorf("the image's /herald is not copied from the build stage: COPY %q", copied)
	}

	// The build stage builds what this test builds, from what .dockerignore
	// lets into the context.
	var run string
	var sources []string
	for _, in := range build {
		switch in.cmd {
		case "RUN":
			if strings.Contains(in.args, "go build") {
				run = in.args
			}
		case "COPY":
			fields := strings.Fields(in.args)
			sources = append(sources, fields[:len(fields)-1]...)
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=", "./server"} {
		if !strings.Contains(run, want) {
			t.Errorf("the build stage's go build %q lacks %s", run, want)
		}
	}
	ignore, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(ignore), "\n")
	if !slices.Contains(lines, "*") {
		t.Errorf(".dockerignore does not start from nothing (*)")
	}
	for _, src := range sources {
		if !slices.Contains(lines, "!"+src) && !slices.Contains(lines, "!"+src+"/") {
			t.Errorf(".dockerignore does not let %s into the build context", src)
		}
		if _, err := os.Stat(filepath.Join("..", src)); err != nil {
			t.Errorf("the Dockerfile copies %s: %v", src, err)
		}
	}
	return c
}

// buildStatic builds the server as the Dockerfile does and checks that the
// binary is static: no interpreter, no shared libraries.
func buildStatic(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "herald")
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version=contract-test", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary has a program interpreter: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs shared libraries %q", libs)
	}
	return bin
}

// noCABundle is an environment in which crypto/x509 finds no system
// certificates: SSL_CERT_FILE names a file that does not exist and
// SSL_CERT_DIR an empty folder, as in a FROM scratch image without /etc/ssl.
func noCABundle(t *testing.T) []string {
	empty := t.TempDir()
	return []string{"SSL_CERT_FILE=" + filepath.Join(empty, "none.pem"), "SSL_CERT_DIR=" + empty}
}

// The container image's contract, tested without Docker: the binary built as
// scripts/Dockerfile builds it is static, starts with the image's
// environment and nothing else (not even PATH or HOME; no CA bundle),
// answers /readyz, and the image's HEALTHCHECK command exits 0 while it
// serves and 1 once it has stopped.
func TestImageContract(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	contract := readImageContract(t)
	bin := buildStatic(t)

	// The image's environment, with the address on a free loopback port and
	// /data in a temporary folder.
	addr := freeAddr(t)
	data := t.TempDir()
	var env []string
	for _, kv := range contract.env {
		switch name, value, _ := strings.Cut(kv, "="); name {
		case "HERALD_ADDR":
			_, port, _ := strings.Cut(addr, ":")
			if !strings.HasSuffix(value, ":8080") {
				t.Fatalf("HERALD_ADDR=%s", value)
			}
			env = append(env, "HERALD_ADDR=127.0.0.1:"+port)
		case "HERALD_DB":
			env = append(env, "HERALD_DB="+filepath.Join(data, strings.TrimPrefix(value, "/data/")))
		default:
			env = append(env, kv)
		}
	}
	env = append(env, noCABundle(t)...)
	command := func(argv []string) *exec.Cmd {
		if argv[0] != "/herald" {
			t.Fatalf("command %q does not run /herald", argv)
		}
		cmd := exec.Command(bin, argv[1:]...)
		cmd.Env = env
		cmd.Dir = t.TempDir() // the image's working folder is / , which it cannot write
		return cmd
	}

	if out, err := command([]string{"/herald", "--version"}).Output(); err != nil || !strings.HasPrefix(string(out), "herald contract-test\n") {
		t.Fatalf("herald --version: %v: %q", err, out)
	}

	server := command(append(contract.entrypoint, contract.cmd...))
	var logs strings.Builder
	server.Stderr = &logs
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	t.Cleanup(func() {
		if server.ProcessState == nil {
			server.Process.Kill()
			<-exited
		}
	})

	wait.NoError(t, func() error {
		select {
		case err := <-exited:
			t.Fatalf("herald exited before serving: %v\n%s", err, logs.String())
		default:
		}
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %d %s", res.StatusCode, body)
		}
		return nil
	})
	if out, err := command(contract.healthcheck).CombinedOutput(); err != nil || !strings.Contains(string(out), `"database":"ok"`) {
		t.Fatalf("HEALTHCHECK %q of a serving herald: %v: %s", contract.healthcheck, err, out)
	}
	if _, err := os.Stat(filepath.Join(data, "herald.db")); err != nil {
		t.Fatalf("the database is not on the volume: %v", err)
	}

	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("herald after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(wait.Limit):
		t.Fatal("herald did not stop after SIGTERM")
	}
	err := command(contract.healthcheck).Run()
	if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("HEALTHCHECK of a stopped herald: %v, want exit code 1", err)
	}
}

// rootsChildEnv marks the process TestSystemRootsWithoutACABundle starts.
const rootsChildEnv = "HERALD_TEST_ROOTS_CHILD"

// Without a CA bundle, as in the scratch image, herald still trusts the
// public roots: the binary embeds Mozilla's (x509roots/fallback, imported by
// main.go, so linked into this test binary too). The check runs in a child
// process with an empty environment, since the system pool is loaded once
// per process.
func TestSystemRootsWithoutACABundle(t *testing.T) {
	if os.Getenv(rootsChildEnv) == "1" {
		verifyPublicChain(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSystemRootsWithoutACABundle$", "-test.count=1")
	cmd.Env = append(noCABundle(t), rootsChildEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("the child without a CA bundle: %v\n%s", err, out)
	}
}

// verifyPublicChain verifies www.google.com's certificate of testdata, via
// its intermediate, against the system pool.
func verifyPublicChain(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "www.google.com.pem"))
	if err != nil {
		t.Fatal(err)
	}
	var certs []*x509.Certificate
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, cert)
	}
	if len(certs) != 2 {
		t.Fatalf("testdata holds %d certificates, want the leaf and its issuer", len(certs))
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		t.Fatalf("system pool: %v", err)
	}
	intermediates := x509.NewCertPool()
	intermediates.AddCert(certs[1])
	chains, err := certs[0].Verify(x509.VerifyOptions{
		DNSName:       "www.google.com",
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   time.Unix(1677615892, 0),
	})
	if err != nil {
		t.Fatalf("www.google.com does not verify against the system pool without a CA bundle: %v", err)
	}
	chain := chains[0]
	if root := chain[len(chain)-1].Subject.CommonName; root != "GTS Root R1" {
		t.Fatalf("verified up to %q, want GTS Root R1", root)
	}
}

// unitFile is a systemd unit: its sections' keys, each with every value
// given (Environment= and SystemCallFilter= may repeat).
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{}
	var section string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is not key=value in a section", path, i+1, line)
			}
			u[section][key] = append(u[section][key], value)
		}
	}
	return u
}

// The systemd unit example: a dynamic user with its state directory, the
// sandboxing options, settings that Load accepts; and, where systemd-analyze
// exists, its verify and its offline security rating.
func TestSystemdUnit(t *testing.T) {
	path := filepath.Join("..", "scripts", "herald.service")
	u := parseUnit(t, path)
	s := u["Service"]
	for key, want := range map[string]string{
		"DynamicUser": "yes", "StateDirectory": "herald", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
		"LockPersonality": "yes", "MemoryDenyWriteExecute": "yes", "RestrictNamespaces": "yes",
		"RestrictSUIDSGID": "yes", "ProtectKernelTunables": "yes", "ProtectControlGroups": "yes",
		"SystemCallArchitectures": "native", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"ExecStart": "/usr/local/bin/herald serve", "ExecReload": "/bin/kill -HUP $MAINPID",
	} {
		if got := s[key]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s=%q, want %q", key, got, want)
		}
	}
	if !slices.Contains(s["SystemCallFilter"], "@system-service") {
		t.Errorf("[Service] SystemCallFilter=%q, want @system-service", s["SystemCallFilter"])
	}
	if n, err := strconv.Atoi(strings.Join(s["LimitNOFILE"], "")); err != nil || n < 65536 {
		t.Errorf("[Service] LimitNOFILE=%q, want a high limit (one descriptor per WebSocket)", s["LimitNOFILE"])
	}
	// The unit's settings are ones Load knows and accepts.
	vars := map[string]string{}
	for _, e := range s["Environment"] {
		name, value, _ := strings.Cut(e, "=")
		vars[name] = value
	}
	if vars["HERALD_DB"] != "/var/lib/herald/herald.db" {
		t.Errorf("HERALD_DB=%q, want the state directory's /var/lib/herald/herald.db", vars["HERALD_DB"])
	}
	for name := range vars {
		if !slices.ContainsFunc(config.Vars, func(v config.Var) bool { return v.Name == name }) {
			t.Errorf("Environment=%s: not a setting of herald serve", name)
		}
	}
	if _, err := config.Load(nil, func(name string) string { return vars[name] }, io.Discard); err != nil {
		t.Errorf("the unit's settings: %v", err)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed (.ci/run installs systemd)")
		}
		t.Skip("systemd-analyze is not installed: the unit was only parsed")
	}
	// verify checks that ExecStart's program exists: point it at this test
	// binary.
	dir := t.TempDir()
	unit, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "herald.service")
	if err := os.WriteFile(copyPath, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/herald", exe)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The exposure rating, 0 (locked down) to 10: at most 2 ("OK").
	if out, err := exec.Command(analyze, "security", "--offline=yes", "--threshold=20", "--no-pager", copyPath).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: %v\n%s", err, out)
	}
}
