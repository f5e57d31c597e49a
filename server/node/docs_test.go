package node

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldrt/herald/server/config"
)

// The node serves the API reference at /docs/; /docs redirects there.
func TestNodeServesDocs(t *testing.T) {
	_, url := serveNode(t, config.Config{DB: filepath.Join(t.TempDir(), "herald.db")})
	for _, tc := range []struct{ path, contains string }{
		{"/docs", "Herald API reference"},
		{"/docs/", "Herald API reference"},
		{"/docs/channels.html", "Herald Channels HTTP API"},
	} {
		res, err := http.Get(url + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: %d, want 200 with %q", tc.path, res.StatusCode, tc.contains)
		}
	}
}
