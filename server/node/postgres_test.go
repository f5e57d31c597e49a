package node

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage/testpg"
)

// Two nodes on one PostgreSQL database share their apps: a secret rotated
// through one node's admin API is refused by the other once it reloaded
// (it checks the database every second).
func TestTwoNodesShareTheirAppsOnPostgreSQL(t *testing.T) {
	dsn := testpg.Start(t)
	a := startOpsNode(t, func(c *config.Config) { c.DB = dsn })
	b := startOpsNode(t, func(c *config.Config) { c.DB = dsn })

	if err := goClient(b, "go-sdk-key", "go-sdk-secret").Trigger("news", "before", map[string]int{"n": 1}); err != nil {
		t.Fatalf("trigger through node B before the rotation: %v", err)
	}
	status, body := call(t, http.MethodPost, "http://"+a+"/admin/v1/apps/77/rotate-secret", nil, "Authorization", "Bearer "+testAdminToken)
	if status != http.StatusOK {
		t.Fatalf("rotate-secret on node A: %d %s", status, body)
	}
	var app struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(body, &app); err != nil || app.Secret == "" || app.Secret == "go-sdk-secret" {
		t.Fatalf("rotate-secret answered %s", body)
	}
	rotated := time.Now()
	wait.Until(t, "node B refuses the old secret", func() bool {
		err := goClient(b, "go-sdk-key", "go-sdk-secret").Trigger("news", "old", map[string]int{"n": 2})
		return err != nil && strings.Contains(err.Error(), "401")
	})
	t.Logf("node B refused the old secret %v after node A rotated it", time.Since(rotated).Round(time.Millisecond))
	if err := goClient(b, "go-sdk-key", app.Secret).Trigger("news", "after", map[string]int{"n": 3}); err != nil {
		t.Fatalf("trigger through node B with the new secret: %v", err)
	}
}
