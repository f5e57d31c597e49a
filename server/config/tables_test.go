package config

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the settings tables of the docs from Vars")

// tableDocs are the settings tables of the docs: which Vars each lists, and
// the file it is in, from the repository's root.
var tableDocs = []struct {
	table Table
	name  string // in the markers around it
	path  string
}{
	{Main, "main", "README.md"},
	{Tuning, "tuning", "server/config/README.md"},
}

// The settings tables of README.md and server/config/README.md are Vars:
// this test writes them with -update (go test ./server/config -run
// TestSettingsTables -update) and fails when they are stale (make
// check-docs). Only the lines between the markers are the generated ones.
func TestSettingsTables(t *testing.T) {
	for _, d := range tableDocs {
		path := filepath.Join("..", "..", filepath.FromSlash(d.path))
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		now, err := withTable(string(old), d.name, settingsTable(d.table, d.path))
		if err != nil {
			t.Errorf("%s: %v", d.path, err)
			continue
		}
		if now == string(old) {
			continue
		}
		if *update {
			if err := os.WriteFile(path, []byte(now), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: wrote the %s settings table", d.path, d.name)
			continue
		}
		t.Errorf("%s: the %s settings table is not Vars's (server/config/vars.go): run go test ./server/config -run TestSettingsTables -update", d.path, d.name)
	}
}

// withTable returns doc with the lines between the begin and end markers of
// the table name replaced by table.
func withTable(doc, name, table string) (string, error) {
	begin := fmt.Sprintf("<!-- begin settings table %q: written from server/config/vars.go by TestSettingsTables -->\n", name)
	end := fmt.Sprintf("<!-- end settings table %q -->\n", name)
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i || strings.Count(doc, begin) != 1 || strings.Count(doc, end) != 1 {
		return "", fmt.Errorf("want one %q and one %q after it", strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	return doc[:i+len(begin)] + table + doc[j:], nil
}

// settingsTable is the Markdown table of the Vars of table, for the file at
// path (from the repository's root): one row per Var, or per Var and the
// ones joined to it.
func settingsTable(table Table, path string) string {
	var b strings.Builder
	b.WriteString("| Variable | Flag | Default | Meaning |\n|---|---|---|---|\n")
	var names, docs []string
	var first Var
	flush := func() {
		if names == nil {
			return
		}
		flag, def := "", ""
		if first.Flag != "" {
			flag = "`--" + first.Flag + "`"
		}
		if first.Default != "" {
			def = "`" + first.Default + "`"
			if n, err := strconv.Atoi(first.Default); err == nil && first.to.kind() == "bytes" && n%(1<<20) == 0 {
				def += fmt.Sprintf(" (%d MiB)", n>>20)
			}
		}
		b.WriteString("|")
		for _, cell := range []string{strings.Join(names, ", "), flag, def, strings.Join(docs, " ")} {
			if cell != "" {
				cell += " "
			}
			b.WriteString(" " + cell + "|") // an empty cell is "| |", as people write it
		}
		b.WriteString("\n")
		names, docs = nil, nil
	}
	for _, v := range Vars {
		if v.Table != table {
			continue
		}
		if !v.Joined {
			flush()
			first = v
		}
		names = append(names, "`"+v.Name+"`")
		docs = append(docs, relativeLinks(v.Doc, path))
	}
	flush()
	return b.String()
}

// relativeLinks rewrites the links of doc, relative to the repository's
// root, to be relative to the file at path.
func relativeLinks(doc, path string) string {
	return markdownLink.ReplaceAllStringFunc(doc, func(link string) string {
		m := markdownLink.FindStringSubmatch(link)
		target, fragment, _ := strings.Cut(m[2], "#")
		switch {
		case strings.Contains(target, "://"):
			return link
		case target == path:
			target = ""
		default:
			rel, err := filepath.Rel(filepath.Dir(path), target)
			if err != nil {
				return link
			}
			target = filepath.ToSlash(rel)
		}
		if fragment != "" {
			target += "#" + fragment
		}
		return "[" + m[1] + "](" + target + ")"
	})
}

// Every Var is well formed: a unique HERALD_ name and flag, a one-line doc
// that fits a table cell, joined only to a row of its table, and a Config
// field to fill (but HERALD_CONFIG).
func TestVarsAreWellFormed(t *testing.T) {
	names, flags := map[string]bool{}, map[string]bool{}
	for i, v := range Vars {
		if !strings.HasPrefix(v.Name, "HERALD_") || names[v.Name] {
			t.Errorf("%s: want a HERALD_ name listed once", v.Name)
		}
		names[v.Name] = true
		if v.Flag != "" && flags[v.Flag] {
			t.Errorf("%s: the flag --%s is another's", v.Name, v.Flag)
		}
		flags[v.Flag] = true
		if v.Doc == "" || strings.ContainsAny(v.Doc, "|\n") {
			t.Errorf("%s: want a doc of one line without '|' (a table cell)", v.Name)
		}
		if v.Joined && (i == 0 || Vars[i-1].Table != v.Table || v.Flag != "" || v.Default != "") {
			t.Errorf("%s: a joined Var follows one of its table and has no flag or default", v.Name)
		}
		if (v.to == nil) != (v.Name == "HERALD_CONFIG") {
			t.Errorf("%s: every Var but HERALD_CONFIG fills a Config field", v.Name)
		}
	}
}

// Each field of Config is filled by exactly one Var (Warnings aside), so
// a setting cannot be declared twice or a field forgotten.
func TestEveryConfigFieldHasOneVar(t *testing.T) {
	var c Config
	filledBy := map[uintptr][]string{}
	for _, v := range Vars {
		if v.to != nil {
			p := reflect.ValueOf(v.to.field(&c)).Pointer()
			filledBy[p] = append(filledBy[p], v.Name)
		}
	}
	fields := reflect.ValueOf(&c).Elem()
	for i := range fields.NumField() {
		name := fields.Type().Field(i).Name
		if name == "Warnings" {
			continue
		}
		p := fields.Field(i).Addr().Pointer()
		if by := filledBy[p]; len(by) != 1 {
			t.Errorf("Config.%s is filled by %d Vars %v, want 1", name, len(by), by)
		}
		delete(filledBy, p)
	}
	for _, by := range filledBy {
		t.Errorf("%v fill no field of Config", by)
	}
}

// A Var's doc links are made relative to the file of its table.
func TestRelativeLinks(t *testing.T) {
	doc := "see [PostgreSQL](README.md#postgresql), [the forms](server/config/README.md#herald_redis_url), [Go](https://go.dev/doc)"
	for path, want := range map[string]string{
		"README.md":               "see [PostgreSQL](#postgresql), [the forms](server/config/README.md#herald_redis_url), [Go](https://go.dev/doc)",
		"server/config/README.md": "see [PostgreSQL](../../README.md#postgresql), [the forms](#herald_redis_url), [Go](https://go.dev/doc)",
	} {
		if got := relativeLinks(doc, path); got != want {
			t.Errorf("for %s:\n got %s\nwant %s", path, got, want)
		}
	}
}
