// Command helm lints and renders Herald's Helm chart (scripts/helm/herald)
// with Helm's own packages, pinned in this module, so that neither the
// server's go.mod nor a downloaded helm binary is needed:
//
//	go run ./tools/helm lint     [--set key=value]... CHART
//	go run ./tools/helm template [--set key=value]... [--podman ADDR --secrets DIR] CHART
//
// lint prints Helm's lint messages and fails on a warning or an error (helm
// lint --strict); template prints the rendered objects as one YAML
// stream, as helm template does. With --podman ADDR the objects are made
// ready for podman kube play on a machine without Kubernetes: the pods share
// the host's network, listening on ADDR (127.0.0.1:PORT), and the objects
// podman does not play (Service, PodDisruptionBudget, ServiceMonitor,
// Ingress) are left out; each Secret is written to DIR as NAME.json, for
// podman secret create (podman 4.3 cannot read a Secret it played). The chart's tests are in this folder (go test).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/strvals"
)

// kubeVersion is the Kubernetes version charts are rendered and linted
// for: the oldest the chart supports (Chart.yaml's kubeVersion).
var kubeVersion = chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}

// release names the release as helm install herald would.
var release = chartutil.ReleaseOptions{Name: "herald", Namespace: "default", Revision: 1, IsInstall: true}

// setFlags collects repeated --set flags.
type setFlags []string

func (s *setFlags) String() string     { return strings.Join(*s, ",") }
func (s *setFlags) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var sets setFlags
	fs.Var(&sets, "set", "a value, key=value, as helm --set (repeatable)")
	podman := fs.String("podman", "", "template: adapt the objects for podman kube play, listening on this address")
	secrets := fs.String("secrets", ".", "template --podman: the folder to write the Secrets to, as NAME.json for podman secret create")
	fs.Parse(os.Args[2:])
	if fs.NArg() != 1 {
		usage()
	}
	vals, err := values(sets)
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "lint":
		msgs := lintChart(fs.Arg(0), vals)
		for _, m := range msgs {
			fmt.Println(m)
		}
		if bad := lintFailures(msgs); len(bad) > 0 {
			fail(fmt.Errorf("helm lint: %d warnings or errors", len(bad)))
		}
	case "template":
		docs, err := render(fs.Arg(0), vals)
		if err != nil {
			fail(err)
		}
		if *podman != "" {
			if docs, err = forPodman(docs, *podman, *secrets); err != nil {
				fail(err)
			}
		}
		os.Stdout.Write(join(docs))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: helm lint|template [--set key=value]... [--podman ADDR --secrets DIR] CHART")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "helm:", err)
	os.Exit(1)
}

// values parses --set flags as helm does.
func values(sets []string) (map[string]any, error) {
	vals := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return vals, nil
}

// lintChart returns helm lint's messages for the chart with the values.
func lintChart(dir string, vals map[string]any) []support.Message {
	return lint.AllWithKubeVersion(dir, vals, release.Namespace, &kubeVersion).Messages
}

// lintFailures are the messages helm lint --strict fails on: warnings and
// errors (an INFO, such as "icon is recommended", is not one).
func lintFailures(msgs []support.Message) []support.Message {
	var out []support.Message
	for _, m := range msgs {
		if m.Severity >= support.WarningSev {
			out = append(out, m)
		}
	}
	return out
}

// doc is one rendered manifest.
type doc struct {
	source string // the template it came from
	yaml   []byte
}

// render renders the chart with the values as helm template does, and
// returns its objects (NOTES.txt and empty documents left out) in the
// order of their templates' names.
func render(dir string, vals map[string]any) ([]doc, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kubeVersion
	rv, err := chartutil.ToRenderValues(chrt, vals, release, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(chrt, rv)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	var docs []doc
	for _, name := range names {
		if path.Base(name) == "NOTES.txt" || strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		for _, part := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			docs = append(docs, doc{source: name, yaml: []byte(strings.TrimLeft(part, "\n"))})
		}
	}
	return docs, nil
}

// join is the documents as one YAML stream, each under its source.
func join(docs []doc) []byte {
	var b bytes.Buffer
	for _, d := range docs {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", d.source, bytes.TrimRight(d.yaml, "\n"))
	}
	return b.Bytes()
}
