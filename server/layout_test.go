package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/heraldrt/herald/"

// importRule is one package's rule: the packages it must not depend on, and
// why.
type importRule struct {
	pkg    string
	forbid []string
	why    string
}

// importRules says, per package, which packages it must not depend on,
// directly or through others: the direction server/README.md's table
// draws. A rule names packages by path under the module; a trailing "/..."
// covers everything beneath, and one that starts with "!" is allowed though
// another of the rule's names covers it.
var importRules = []importRule{
	{"storage", []string{"server/...", "gen/..."}, "storage is the bottom floor: its own types, no API or delivery code"},
	{"server/signing", []string{"server/...", "storage", "gen/..."}, "signing is pure functions over bytes"},
	{"server/beamsauth", []string{"server/...", "storage", "gen/..."}, "beamsauth checks tokens and nothing else"},
	{"server/clientauth", []string{"server/...", "storage", "gen/..."},
		"clientauth is what callers of the generated clients import: nothing of the server, and editors that fit every client without importing one"},
	{"server/config", []string{"server/...", "!server/internal/text", "storage", "gen/..."}, "config only reads settings (and redacts passwords with text.RedactURL)"},
	{"server/hub", []string{"storage", "server/signing", "github.com/coder/websocket", "server/ws/...", "gen/...", "server/cluster", "github.com/redis/go-redis/v9"},
		"the registry knows no sockets, storage or signing, so a cluster broker plugs into it alone"},
	{"server/cluster", []string{"storage", "server/ws/...", "server/httpapi", "server/webhook", "server/push", "server/directory", "server/node", "gen/..."},
		"the cluster joins hubs over Redis through the hub's Cluster seam alone"},
	{"server/cluster/redisconn", []string{"server/...", "!server/internal/text", "storage", "gen/..."},
		"redisconn builds Redis clients from a URL and knows nothing of what the cluster does over them"},
	{"server/internal/testredis", []string{"server/...", "storage", "gen/..."}, "testredis starts a redis-server for tests, nothing more"},
	{"storage/testpg", []string{"server/...", "storage", "gen/..."}, "testpg starts a PostgreSQL server for tests, nothing more"},
	{"storage/testdb", []string{"server/...", "storage", "gen/..."},
		"testdb chooses and opens a test's database; it is handed storage.Open, so that storage's own tests use it too"},
	{"server/ws", []string{"storage", "server/directory", "server/httpapi", "server/webhook", "server/push", "gen/..."},
		"the WebSocket transport reads apps as its own ws.App and reaches the registry through hub alone"},
	{"server/ws/socket", []string{"server/...", "storage", "github.com/coder/websocket"},
		"the socket mechanics (poller, pool, corked connection) know no protocol"},
	{"server/upgrade", []string{"server/hub", "server/ws/...", "server/httpapi", "server/node", "storage", "gen/...", "github.com/coder/websocket"},
		"the fast path of upgrade requests knows HTTP only: the handler it is given does the rest"},
	{"server/push", []string{"server/hub", "server/ws/...", "server/metrics", "server/httpapi", "server/webhook"},
		"push delivery reports through its own types and knows nothing of Channels"},
	{"server/manage", []string{"server/bootstrap", "server/hub", "server/push", "server/webhook", "server/httpapi"},
		"the management rules are shared by the CLI and the admin API, below both"},
	{"server/cli", []string{"server/hub", "server/ws/...", "server/push", "server/webhook", "server/httpapi", "server/node", "github.com/coder/websocket"},
		"the apps and instances commands edit the database; they link no delivery code"},
	{"server/httpapi", []string{"server/node"}, "handlers are parts the node assembles"},
	{"server/console", []string{"server/node", "server/cluster", "github.com/redis/go-redis/v9"},
		"the console is a part the node assembles; it reaches the other nodes through its Relay alone"},
	{"server/metrics", []string{"server/node"}, "metrics read the parts; the node assembles them"},
	{"server/directory", []string{"server/...", "gen/..."}, "the directories hold storage's types, nothing else"},
	{"server/webhook", []string{"server/ws/...", "server/httpapi", "server/push"}, "webhooks take the hub's events, nothing more"},
	{"server/netguard", []string{"server/...", "storage", "gen/..."}, "netguard judges network addresses and knows nothing of Herald"},
	{"server/internal/recovery", []string{"server/...", "storage", "gen/..."}, "recovery logs and counts panics, nothing more"},
	{"server/internal/testcert", []string{"server/...", "storage", "gen/..."}, "testcert makes certificates for tests, nothing more"},
	{"server/internal/testkit", []string{"server/...", "storage", "gen/..."}, "testkit measures CPU time and checks VAPID keys for tests, nothing more"},
	{"server/internal/clientrate", []string{"server/...", "storage", "gen/..."}, "clientrate keeps token buckets per client and knows nothing of Herald"},
	{"server/console/traffic", []string{"storage", "gen/...", "server/node", "server/httpapi", "server/console", "server/metrics", "server/cluster", "server/ws/...", "server/webhook", "server/push", "server/directory"},
		"the console's charts are a bounded store of figures that the node feeds; they read the hub's counters and know nothing of the rest"},
	{"server/idempotency", []string{"server/...", "storage", "gen/..."}, "the Idempotency-Key rules and the memory store know nothing of where keys are kept elsewhere"},
	{"server/idempotency/idempotencytest", []string{"server/...", "!server/idempotency", "storage", "gen/..."}, "the suite every key store passes knows the stores by their interface only"},
	{"server/idempotency/dbstore", []string{"server/...", "!server/idempotency", "gen/..."}, "the database's key store is storage and the idempotency rules, nothing more"},
	{"server/eventlog/eventlogtest", []string{"server/...", "!server/eventlog", "storage", "gen/..."}, "the suite every channel history store passes knows the stores by their interface only"},
	{"server/push/pushtest", []string{"server/...", "storage", "gen/..."}, "the fake gateways speak the gateways' wire formats and know nothing of Herald"},
	{"server/push/pushtest/cmd/fakegateways", []string{"server/...", "!server/push/pushtest", "storage", "gen/..."}, "the fake gateways' process runs pushtest and nothing of Herald"},
	{"server/internal/text", []string{"server/...", "storage", "gen/..."}, "text helpers know nothing of Herald"},
	{"server/internal/wait", []string{"server/...", "storage", "gen/..."}, "the tests' eventually helper knows nothing of Herald"},
	{"server/eventlog", []string{"server/...", "storage", "gen/..."}, "the channel history keeps events by the rules of its own types; the Channels API feeds it, the cluster stores it in Redis"},
	{"server/docs", []string{"server/...", "storage", "gen/..."}, "docs serves the embedded API reference and knows nothing of the APIs themselves"},
}

// TestImportRules fails when a package depends on one its rule forbids.
func TestImportRules(t *testing.T) {
	// The whole module, test helpers beside storage included.
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	known := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		known[p] = true
	}
	for _, r := range importRules {
		path := module + r.pkg
		if !known[path] {
			t.Errorf("rule for %s: no such package (rename the rule with the package)", r.pkg)
			continue
		}
		deps, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", path).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", path, err)
		}
		for _, dep := range strings.Fields(string(deps)) {
			if dep == path {
				continue
			}
			if slices.ContainsFunc(r.forbid, func(f string) bool { return strings.HasPrefix(f, "!") && matches(dep, f[1:]) }) {
				continue
			}
			for _, f := range r.forbid {
				if !strings.HasPrefix(f, "!") && matches(dep, f) {
					t.Errorf("%s depends on %s: %s", r.pkg, strings.TrimPrefix(dep, module), r.why)
				}
			}
		}
	}
}

// matches reports whether the import path dep is one rule name f covers.
func matches(dep, f string) bool {
	// A path inside this module: its first element has no dot, where a
	// module path's host has one ("server/..." is inside, though it has
	// dots).
	if first, _, _ := strings.Cut(f, "/"); !strings.Contains(first, ".") {
		f = module + f
	}
	if base, ok := strings.CutSuffix(f, "/..."); ok {
		return dep == base || strings.HasPrefix(dep, base+"/")
	}
	return dep == f
}

// unruled are the packages with no import rule: the binary and the node,
// which assemble the others, and the start-up's bootstrap, which edits the
// database through manage.
var unruled = []string{"server", "server/node", "server/bootstrap"}

// TestEveryPackageIsRuledAndListed fails when a package of server/ or
// storage/ has no import rule (nor is unruled) or no row in
// server/README.md's table, so that a new package comes with both.
func TestEveryPackageIsRuledAndListed(t *testing.T) {
	out, err := exec.Command("go", "list", module+"server/...", module+"storage/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The names in the table: every `name` of its rows.
	table, _, _ := strings.Cut(string(readme), "\n## ")
	listed := map[string]bool{}
	for _, row := range strings.Split(table, "\n") {
		if strings.HasPrefix(row, "| `") {
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(row, -1) {
				listed[m[1]] = true
			}
		}
	}
	for _, path := range strings.Fields(string(out)) {
		pkg := strings.TrimPrefix(path, module)
		if !slices.Contains(unruled, pkg) && !slices.ContainsFunc(importRules, func(r importRule) bool { return r.pkg == pkg }) {
			t.Errorf("%s has no import rule in importRules", pkg)
		}
		if name := strings.TrimPrefix(pkg, "server/"); pkg != "server" && !listed[name] {
			t.Errorf("%s has no row in server/README.md's table (as `%s`)", pkg, name)
		}
	}
}

// maxREADMELines bounds the top-level README: the page a newcomer reads
// first stays one sitting long; detail goes to the packages' READMEs and
// scripts/README.md, linked from it.
const maxREADMELines = 500

func TestTheREADMEStaysOneSittingLong(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, over %d: move detail to the README of its package or to scripts/README.md", n, maxREADMELines)
	}
}
