package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Set by the build with -ldflags "-X main.version=… -X main.commit=…
// -X main.date=…", as the Makefile and the Dockerfile do; empty otherwise.
var (
	version string
	commit  string
	date    string
)

// versionInfo is what `herald version` prints.
type versionInfo struct {
	Version string // the release (a git tag), or "devel"
	Commit  string // the git commit, "+modified" when built from a changed tree; "unknown"
	Date    string // when the binary was built, or failing that the commit's time; "unknown"
	Go      string // the Go release that built it, and the platform
}

// buildVersion reads the build's settings: the -X values first, then what
// the Go toolchain recorded (the module version of `go install …@vX.Y.Z`,
// the VCS revision and time when it could see the repository).
func buildVersion() versionInfo {
	v := versionInfo{Version: version, Commit: commit, Date: date, Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Go = bi.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.time":
				if v.Date == "" {
					v.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && commit == "" && v.Commit != "" {
			v.Commit += "+modified"
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	if v.Date == "" {
		v.Date = "unknown"
	}
	return v
}

// writeVersion prints the version, one field per line.
func writeVersion(w io.Writer) {
	v := buildVersion()
	fmt.Fprintf(w, "herald %s\ncommit: %s\nbuilt:  %s\ngo:     %s\n", v.Version, v.Commit, v.Date, v.Go)
}
