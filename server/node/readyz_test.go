package node

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/heraldrt/herald/server/config"
)

// GET /readyz asks the database; /healthz only says the process is up.
func TestReadyzAsksTheDatabase(t *testing.T) {
	n, url := serveNode(t, config.Config{DB: filepath.Join(t.TempDir(), "herald.db")})
	get := func(path string) (int, map[string]any) {
		t.Helper()
		res, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, body
	}
	if code, body := get("/readyz"); code != http.StatusOK || body["checks"].(map[string]any)["database"] != "ok" {
		t.Fatalf("readyz: %d %v, want 200 with the database ok", code, body)
	}

	// A database that no longer answers makes the node unready, not dead.
	if err := n.db.Close(); err != nil {
		t.Fatal(err)
	}
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || body["error"] != "not_ready" || body["checks"].(map[string]any)["database"] != "data version: sql: database is closed" {
		t.Fatalf("readyz with the database closed: %d %v, want 503 naming the database", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz with the database closed: %d, want 200", code)
	}
}
