package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/heraldrt/herald/"

// importRules says, per package, which packages it must not depend on,
// directly or through others: the direction server/README.md's table
// draws. A rule names packages by path under the module; a trailing "/..."
// covers everything beneath.
var importRules = []struct {
	pkg    string
	forbid []string
	why    string
}{
	{"storage", []string{"server/...", "gen/..."}, "storage is the bottom floor: its own types, no API or delivery code"},
	{"server/signing", []string{"server/...", "storage", "gen/..."}, "signing is pure functions over bytes"},
	{"server/beamsauth", []string{"server/...", "storage", "gen/..."}, "beamsauth checks tokens and nothing else"},
	{"server/clientauth", []string{"server/...", "storage", "gen/..."},
		"clientauth is what callers of the generated clients import: nothing of the server, and editors that fit every client without importing one"},
	{"server/config", []string{"server/...", "storage", "gen/..."}, "config only reads settings"},
	{"server/hub", []string{"storage", "server/signing", "github.com/coder/websocket", "server/ws/...", "gen/...", "server/cluster", "github.com/redis/go-redis/v9"},
		"the registry knows no sockets, storage or signing, so a cluster broker plugs into it alone"},
	{"server/cluster", []string{"storage", "server/ws/...", "server/httpapi", "server/webhook", "server/push", "server/directory", "server/node", "gen/..."},
		"the cluster joins hubs over Redis through the hub's Cluster seam alone"},
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
	{"server/internal/clientrate", []string{"server/...", "storage", "gen/..."}, "clientrate keeps token buckets per client and knows nothing of Herald"},
	{"server/history", []string{"server/...", "storage", "gen/..."}, "the history is a bounded store of figures that the node feeds; it knows nothing of where they come from"},
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
			for _, f := range r.forbid {
				if forbidden(dep, f) {
					t.Errorf("%s depends on %s: %s", r.pkg, strings.TrimPrefix(dep, module), r.why)
				}
			}
		}
	}
}

// forbidden reports whether the import path dep matches rule f.
func forbidden(dep, f string) bool {
	if !strings.Contains(f, ".") { // a path inside this module
		f = module + f
	}
	if base, ok := strings.CutSuffix(f, "/..."); ok {
		return dep == base || strings.HasPrefix(dep, base+"/")
	}
	return dep == f
}
