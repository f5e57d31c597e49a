package config

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeFile writes a configuration file with mode 0600 and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadConfigFile(t *testing.T) {
	file := writeFile(t, `
# Herald's settings, keyed by variable name.
HERALD_ADDR = "0.0.0.0:9000"
HERALD_DB = "/var/lib/herald/herald.db"
HERALD_LOG_LEVEL = "warn"
HERALD_APP_ID = "0123"                          # a string stays as written
HERALD_APP_KEY = "file-key"
HERALD_ANON_RATE_LIMIT = 2.5                     # numbers and booleans are plain TOML values
HERALD_MAX_SUBSCRIPTIONS_PER_APP = 5000
HERALD_WEBHOOK_ALLOW_PRIVATE = false
HERALD_TRUSTED_PROXIES = ["10.0.0.0/8", "192.168.1.1"]   # lists are the comma-separated settings
HERALD_PONG_TIMEOUT = "10s"
`)
	fromFile := defaults
	fromFile.Addr = "0.0.0.0:9000"
	fromFile.DB = "/var/lib/herald/herald.db"
	fromFile.LogLevel = "warn"
	fromFile.AppID = "0123"
	fromFile.AppKey = "file-key"
	fromFile.AnonRateLimit = 2.5
	fromFile.MaxSubscriptions = 5000
	fromFile.WebhookBlockPrivate = true
	fromFile.TrustedProxies = []string{"10.0.0.0/8", "192.168.1.1"}
	fromFile.PongTimeout = 10 * time.Second
	with := func(c Config, change func(*Config)) Config {
		change(&c)
		return c
	}

	tests := []struct {
		name string
		args []string
		env  map[string]string
		want Config
	}{
		{name: "OKFromHERALD_CONFIG", env: map[string]string{"HERALD_CONFIG": file}, want: fromFile},
		{name: "OKFromFlag", args: []string{"--config", file}, want: fromFile},
		{
			name: "OKFlagWinsOverHERALD_CONFIG",
			args: []string{"--config", file},
			env:  map[string]string{"HERALD_CONFIG": "/nonexistent.toml"},
			want: fromFile,
		},
		{
			name: "OKEnvironmentWinsOverFile",
			env:  map[string]string{"HERALD_CONFIG": file, "HERALD_ADDR": "127.0.0.1:7000", "HERALD_WEBHOOK_ALLOW_PRIVATE": "true", "HERALD_LOG_FORMAT": "console"},
			want: with(fromFile, func(c *Config) { c.Addr, c.WebhookBlockPrivate, c.LogFormat = "127.0.0.1:7000", false, "console" }),
		},
		{
			name: "OKEmptyVariableIsUnset",
			env:  map[string]string{"HERALD_CONFIG": file, "HERALD_ADDR": ""},
			want: fromFile,
		},
		{
			name: "OKFlagsWinOverBoth",
			args: []string{"--addr", "127.0.0.1:1", "--db", "flag.db"},
			env:  map[string]string{"HERALD_CONFIG": file, "HERALD_ADDR": "127.0.0.1:7000"},
			want: with(fromFile, func(c *Config) { c.Addr, c.DB = "127.0.0.1:1", "flag.db" }),
		},
		{name: "OKEmptyConfigFlagReadsNoFile", args: []string{"--config="}, env: map[string]string{"HERALD_CONFIG": file}, want: defaults},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(tt.args, getenv(tt.env), &bytes.Buffer{})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Load:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestReadFileErrors(t *testing.T) {
	tests := []struct {
		name, text string
		wantErrs   []string // parts of the error
	}{
		{name: "ErrUnknownKey", text: "HERALD_ADRR = \"x\"\nHERALD_PORT = 80\n", wantErrs: []string{`unknown setting "HERALD_ADRR"`, `unknown setting "HERALD_PORT"`}},
		{name: "ErrLowerCaseKey", text: `herald_addr = "x"`, wantErrs: []string{`unknown setting "herald_addr"`}},
		{name: "ErrConfigInConfig", text: `HERALD_CONFIG = "other.toml"`, wantErrs: []string{`unknown setting "HERALD_CONFIG"`}},
		{name: "ErrTable", text: "[HERALD_ADDR]\nhost = \"x\"\n", wantErrs: []string{"HERALD_ADDR: must be a string, number, boolean or list, not a table"}},
		{name: "ErrDate", text: "HERALD_APP_ID = 2024-01-02\n", wantErrs: []string{"HERALD_APP_ID: must be a string, number, boolean or list"}},
		{name: "ErrNestedList", text: "HERALD_TRUSTED_PROXIES = [[\"10.0.0.1\"]]\n", wantErrs: []string{"a list holds plain items without commas"}},
		{name: "ErrCommaInListItem", text: "HERALD_TRUSTED_PROXIES = [\"10.0.0.1,10.0.0.2\"]\n", wantErrs: []string{"a list holds plain items without commas"}},
		{name: "ErrSyntax", text: "HERALD_ADDR = \"x\"\nHERALD_DB = \n", wantErrs: []string{"herald.toml:2:"}},
		{name: "ErrDuplicateKey", text: "HERALD_ADDR = \"x\"\nHERALD_ADDR = \"y\"\n", wantErrs: []string{"key HERALD_ADDR is already defined"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadFile(writeFile(t, tt.text))
			for _, want := range tt.wantErrs {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("ReadFile: got error %v, want one containing %q", err, want)
				}
			}
		})
	}

	// A file that the group or anyone may write, in any combination, is
	// refused at start (Load, as serve reads it); one only its owner may
	// write is read, whoever may read it.
	for _, mode := range []os.FileMode{0o602, 0o620, 0o622, 0o646, 0o664, 0o666, 0o777} {
		t.Run(fmt.Sprintf("ErrWritableByOthers%04o", mode), func(t *testing.T) {
			path := writeFile(t, `HERALD_ADDR = "x"`)
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			_, err := Load(nil, getenv(map[string]string{"HERALD_CONFIG": path}), &bytes.Buffer{})
			if want := fmt.Sprintf("has mode %04o: others could change any setting", mode); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Load: got error %v, want the mode refused", err)
			}
		})
	}
	for _, mode := range []os.FileMode{0o400, 0o600, 0o640, 0o644, 0o700, 0o755} {
		t.Run(fmt.Sprintf("OKWritableByOwnerOnly%04o", mode), func(t *testing.T) {
			path := writeFile(t, `HERALD_ADDR = "x"`)
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			if got, err := Load(nil, getenv(map[string]string{"HERALD_CONFIG": path}), &bytes.Buffer{}); err != nil || got.Addr != "x" {
				t.Fatalf("Load: %v, addr %q", err, got.Addr)
			}
		})
	}

	t.Run("ErrBadValueNamesTheSetting", func(t *testing.T) {
		_, err := Load(nil, getenv(map[string]string{"HERALD_CONFIG": writeFile(t, `HERALD_PONG_TIMEOUT = 30`)}), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), `HERALD_PONG_TIMEOUT must be a positive duration such as 30s, not "30"`) {
			t.Fatalf("Load: got error %v, want the duration refused", err)
		}
	})
}

// The management commands read HERALD_DB through WithFile.
func TestWithFile(t *testing.T) {
	file := writeFile(t, `HERALD_DB = "/from/file.db"`)
	env := map[string]string{"HERALD_LOG_LEVEL": "debug"}
	get, err := WithFile(getenv(env), file)
	if err != nil {
		t.Fatal(err)
	}
	if got := get("HERALD_DB"); got != "/from/file.db" {
		t.Fatalf("HERALD_DB: got %q, want the file's", got)
	}
	if got := get("HERALD_LOG_LEVEL"); got != "debug" {
		t.Fatalf("HERALD_LOG_LEVEL: got %q, want the environment's", got)
	}
	env["HERALD_DB"] = "/from/env.db"
	if got := get("HERALD_DB"); got != "/from/env.db" {
		t.Fatalf("HERALD_DB: got %q, want the environment's over the file's", got)
	}
	if _, err := WithFile(getenv(nil), filepath.Join(t.TempDir(), "none.toml")); err == nil {
		t.Fatal("WithFile: got no error for a missing file")
	}
}

// Every variable Load reads is in Vars and in the help with its default and
// flag, and every entry of Vars is read: the help cannot drift from Load.
func TestHelpListsEveryVariableLoadReads(t *testing.T) {
	read := map[string]bool{}
	recording := func(name string) string { read[name] = true; return "" }
	if _, err := Load(nil, recording, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	if _, err := Load([]string{"--help"}, getenv(nil), &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load --help: got %v, want flag.ErrHelp", err)
	}
	lines := strings.Split(help.String(), "\n")
	for name := range read {
		v, ok := lookupVar(name)
		if !ok {
			t.Errorf("Load reads %s, which Vars does not list", name)
			continue
		}
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), name+" ") })
		if i < 0 {
			t.Errorf("the help has no line for %s:\n%s", name, help.String())
			continue
		}
		fields := strings.Fields(lines[i])
		if want := cmp.Or(v.Default, "-"); fields[1] != want {
			t.Errorf("help line %q: default %q, want %q", lines[i], fields[1], want)
		}
		if v.Flag != "" && !strings.Contains(lines[i], "--"+v.Flag) {
			t.Errorf("help line %q does not name its flag --%s", lines[i], v.Flag)
		}
	}
	for _, v := range Vars {
		if !read[v.Name] {
			t.Errorf("Vars lists %s, which Load does not read", v.Name)
		}
		if !strings.HasPrefix(v.Name, "HERALD_") || v.Doc == "" {
			t.Errorf("Vars entry %+v: want a HERALD_ name and a doc line", v)
		}
	}
	for _, want := range []string{"usage: herald serve", "-addr", "-db", "-config"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("the help does not mention %s", want)
		}
	}
}

// A configuration file others can read starts, with a warning to log (it
// may hold the admin token and secrets); one only its owner reads does not.
func TestLoadWarnsOfReadableConfigFile(t *testing.T) {
	for _, tt := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o640, false}, {0o604, true}, {0o644, true}} {
		path := writeFile(t, `HERALD_ADMIN_TOKEN = "an-admin-token-of-thirty-two-characters"`)
		if err := os.Chmod(path, tt.mode); err != nil {
			t.Fatal(err)
		}
		c, err := Load([]string{"--config", path}, getenv(nil), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("mode %04o: %v", tt.mode, err)
		}
		if got := len(c.Warnings) == 1 && strings.Contains(c.Warnings[0], path) && strings.Contains(c.Warnings[0], "chmod o-r"); got != tt.warn {
			t.Errorf("mode %04o: warnings %q, want a warning: %v", tt.mode, c.Warnings, tt.warn)
		}
	}
}
