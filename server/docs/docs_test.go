package docs

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every API in spec/ has its page in the embedded reference, linked from the
// index, loading Redoc from beside it and nothing from a third party.
func TestEverySpecHasAPage(t *testing.T) {
	specs, err := filepath.Glob("../../spec/*.yaml")
	if err != nil || len(specs) == 0 {
		t.Fatalf("no specs found: %v", err)
	}
	index, err := os.ReadFile("site/index.html")
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]bool{}
	for _, spec := range specs {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(spec), ".yaml"), ".asyncapi")
		if name == "common" {
			continue // the shared schemas, shown inside every API's page
		}
		page := name + ".html"
		pages[page] = true
		html, err := os.ReadFile(filepath.Join("site", page))
		if err != nil {
			t.Errorf("%s has no page (run make docs): %v", spec, err)
			continue
		}
		if !strings.Contains(string(index), `href="`+page+`"`) {
			t.Errorf("index.html does not link %s", page)
		}
		if !strings.Contains(string(html), `from "./redoc.standalone.js"`) {
			t.Errorf("%s does not load the Redoc bundle served beside it", page)
		}
		if third := regexp.MustCompile(`src="https?://|<link[^>]*href="https?://|from "https?://|@import`).Find(html); third != nil {
			t.Errorf("%s loads %s… from another site", page, third)
		}
	}
	entries, err := os.ReadDir("site")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".html") && e.Name() != "index.html" && !pages[e.Name()] {
			t.Errorf("site/%s belongs to no file of spec/ (run make docs)", e.Name())
		}
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		path, contentType, contains string
		status                      int
	}{
		{"/docs/", "text/html; charset=utf-8", "Herald API reference", http.StatusOK},
		{"/docs/channels.html", "text/html; charset=utf-8", "Herald Channels HTTP API", http.StatusOK},
		{"/docs/publish.html", "text/html; charset=utf-8", "Herald Push Publish API", http.StatusOK},
		{"/docs/websocket.html", "text/html; charset=utf-8", "pusher:connection_established", http.StatusOK},
		{"/docs/redoc.standalone.js", "text/javascript; charset=utf-8", "hydrate", http.StatusOK},
		{"/docs/nothing.html", "", "", http.StatusNotFound},
		{"/docs/../docs.go", "", "", http.StatusNotFound},
		{"/elsewhere", "", "", http.StatusNotFound},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			if tc.status != http.StatusOK {
				return
			}
			if got := res.Header.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type %q, want %q", got, tc.contentType)
			}
			if !strings.Contains(string(body), tc.contains) {
				t.Errorf("the body does not hold %q", tc.contains)
			}
			if res.Header.Get("ETag") == "" || res.Header.Get("Cache-Control") != "no-cache" {
				t.Errorf("ETag %q, Cache-Control %q: browsers could not revalidate", res.Header.Get("ETag"), res.Header.Get("Cache-Control"))
			}
		})
	}
}

// A browser that has the bundle revalidates it with its ETag and gets 304.
func TestHandlerRevalidates(t *testing.T) {
	srv := httptest.NewServer(Handler())
	t.Cleanup(srv.Close)
	res, err := http.Get(srv.URL + "/docs/redoc.standalone.js")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	tag := res.Header.Get("ETag")
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/docs/redoc.standalone.js", nil)
	req.Header.Set("If-None-Match", tag)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match %s: status %d, want 304", tag, res.StatusCode)
	}
}
