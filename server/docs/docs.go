// Package docs serves the HTML reference of Herald's APIs at /docs: one page
// per file of spec/ (the OpenAPI files and the AsyncAPI document of the
// WebSocket protocol), rendered by Redocly CLI's build-docs together with the
// Redoc bundle the pages load, and an index. scripts/spec/build-docs.sh builds
// the pages into site/ (make docs), where they are embedded in the binary;
// make check-docs fails when they are stale.
package docs

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"strings"
)

// Prefix is the path the reference is served under.
const Prefix = "/docs"

//go:embed site
var embedded embed.FS

// site is the reference, rooted at its folder.
var site = mustSub(embedded, "site")

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic("docs: " + err.Error()) // dir is a constant that go:embed checked
	}
	return sub
}

// etags holds a strong ETag per file, so that browsers revalidate the
// reference (about 4 MB, most of it the Redoc bundle) instead of loading it
// again: embedded files have no modification time to do it with.
var etags = func() map[string]string {
	tags := map[string]string{}
	err := fs.WalkDir(site, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(site, path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		tags[path] = `"` + hex.EncodeToString(sum[:16]) + `"`
		return nil
	})
	if err != nil {
		panic("docs: reading the embedded reference: " + err.Error())
	}
	return tags
}()

// Handler serves the reference for requests whose path starts with Prefix:
// Prefix+"/" is the index, Prefix+"/<api>.html" the page of spec/<api>.yaml.
// Other paths are 404. Mount it on Prefix+"/" and everything below.
func Handler() http.Handler {
	files := http.FileServerFS(site)
	return http.StripPrefix(Prefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" {
			name = "index.html"
		}
		tag, ok := etags[name]
		if !ok {
			http.NotFound(w, r) // no folder listings, nothing but the files
			return
		}
		h := w.Header()
		h.Set("ETag", tag) // http.ServeContent answers If-None-Match with 304 from it
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	}))
}
