package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// result is everything a run measured; it is printed as one JSON line.
// Figures that could not be measured are -1 (RSS, CPU without a server pid).
type result struct {
	Mode     string `json:"mode"`     // publish or idle
	Client   string `json:"client"`   // raw or coder
	Protocol string `json:"protocol"` // pusher or centrifugo
	Subs     int    `json:"subs"`
	Channels int    `json:"channels"`
	Sources  int    `json:"source_addrs"`

	Connected           int      `json:"connected"`
	ConnectErrors       int      `json:"connect_errors"`
	ConnectErrorSamples []string `json:"connect_error_samples,omitempty"`
	ConnectSeconds      float64  `json:"connect_s"`
	ConnectRate         float64  `json:"connect_rate"`
	ConnectP50Ms        float64  `json:"connect_p50_ms"` // dial to subscribed
	ConnectP99Ms        float64  `json:"connect_p99_ms"`
	ConnectMaxMs        float64  `json:"connect_max_ms"`
	HandshakeP50Ms      float64  `json:"handshake_p50_ms"` // dial to the HTTP 101
	HandshakeP99Ms      float64  `json:"handshake_p99_ms"`
	ConnectToolCPUPct   float64  `json:"connect_tool_cpu_pct"`
	ConnectServerCPUPct float64  `json:"connect_server_cpu_pct"`
	ConnectOtherCPUPct  float64  `json:"connect_other_cpu_pct"`
	// ConnectServerUsPerConn is the server's CPU time over the connect phase
	// (upgrade, connection_established, subscribe) divided by the
	// connections: microseconds per connection.
	ConnectServerUsPerConn float64 `json:"connect_server_us_per_conn"`

	ServerPID     int     `json:"server_pid"`
	RSSBeforeKiB  int64   `json:"rss_before_kib"`
	RSSAfterKiB   int64   `json:"rss_after_kib"`
	RSSPerConnKiB float64 `json:"rss_per_conn_kib"`
	RSSEndKiB     int64   `json:"rss_end_kib"`
	ToolRSSKiB    int64   `json:"tool_rss_kib"`

	Rate                float64  `json:"rate"`
	Publishers          int      `json:"publishers"`
	DurationS           float64  `json:"duration_s"`
	PublishSeconds      float64  `json:"publish_s"`
	Publishes           int64    `json:"publishes"`
	PublishErrors       int64    `json:"publish_errors"`
	PublishErrorSamples []string `json:"publish_error_samples,omitempty"`
	PublishesPerS       float64  `json:"publishes_per_s"`
	PublishP50Ms        float64  `json:"publish_p50_ms"` // HTTP request to response
	PublishP99Ms        float64  `json:"publish_p99_ms"`
	PublishMaxMs        float64  `json:"publish_max_ms"`

	Expected       int64   `json:"expected"`
	Received       int64   `json:"received"`
	DeliveriesPerS float64 `json:"deliveries_per_s"`
	Lost           int64   `json:"lost"`
	SubsWithLoss   int     `json:"subs_with_loss"`
	Duplicates     int64   `json:"duplicates"`
	Unexpected     int64   `json:"unexpected"`
	BadFrames      int64   `json:"bad_frames"`
	OtherFrames    int64   `json:"other_frames"` // e.g. pusher_internal:subscription_count, over the whole run

	LatencySamples uint64  `json:"latency_samples"`
	LatencyP50Ms   float64 `json:"latency_p50_ms"`
	LatencyP90Ms   float64 `json:"latency_p90_ms"`
	LatencyP99Ms   float64 `json:"latency_p99_ms"`
	LatencyMaxMs   float64 `json:"latency_max_ms"`

	// CPU shares over the measured phase (publishing and draining, or the
	// idle hold), in percent of one core.
	PhaseSeconds float64 `json:"phase_s"`
	ToolCPUPct   float64 `json:"tool_cpu_pct"`
	ServerCPUPct float64 `json:"server_cpu_pct"`
	// ServerCPUPctEach is ServerCPUPct per process of -server-pid, in its
	// order, when there are several.
	ServerCPUPctEach []float64 `json:"server_cpu_pct_each,omitempty"`
	OtherCPUPct      float64   `json:"other_cpu_pct"` // rest of the machine: other processes, interrupts
	CPUs             int       `json:"cpus"`
	// ServerUsPerDelivery is the server's CPU time over the measured phase
	// divided by the deliveries received (-1 without either).
	ServerUsPerDelivery float64 `json:"server_us_per_delivery"`

	ClosedByServer      map[string]int `json:"closed_by_server"`
	ClosedByServerTotal int            `json:"closed_by_server_total"`
	// PusherErrors counts the pusher:error frames by code, or with
	// -protocol centrifugo the errors in replies by code.
	PusherErrors map[string]int `json:"pusher_errors,omitempty"`
	NoFileLimit  uint64         `json:"nofile_limit"`
}

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	if v < 0 {
		return -float64(int64(-v*p+0.5)) / p
	}
	return float64(int64(v*p+0.5)) / p
}

func (r *result) writeJSON(w io.Writer) error {
	c := *r
	for _, f := range []*float64{&c.ConnectSeconds, &c.ConnectRate, &c.ConnectToolCPUPct, &c.ConnectServerCPUPct, &c.ConnectOtherCPUPct, &c.ConnectServerUsPerConn,
		&c.RSSPerConnKiB, &c.PublishSeconds, &c.PublishesPerS, &c.DeliveriesPerS, &c.PhaseSeconds,
		&c.ToolCPUPct, &c.ServerCPUPct, &c.OtherCPUPct, &c.ServerUsPerDelivery} {
		*f = round(*f, 2)
	}
	for _, f := range []*float64{&c.ConnectP50Ms, &c.ConnectP99Ms, &c.ConnectMaxMs, &c.HandshakeP50Ms, &c.HandshakeP99Ms,
		&c.PublishP50Ms, &c.PublishP99Ms, &c.PublishMaxMs, &c.LatencyP50Ms, &c.LatencyP90Ms, &c.LatencyP99Ms, &c.LatencyMaxMs} {
		*f = round(*f, 3)
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func pct(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", v)
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// writeTable prints the figures for people.
func (r *result) writeTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{k}, args...)...)
	}
	fmt.Fprintf(tw, "herald-load (%s, %s protocol, %s client, %d CPUs)\n", r.Mode, r.Protocol, r.Client, r.CPUs)
	row("connected", "%d / %d over %d channel(s), %d errors", r.Connected, r.Subs, r.Channels, r.ConnectErrors)
	for _, e := range r.ConnectErrorSamples {
		row("", "%s", e)
	}
	row("connect rate", "%.0f /s (%.2f s; CPU tool %s, server %s, rest of machine %s)", r.ConnectRate, r.ConnectSeconds,
		pct(r.ConnectToolCPUPct), pct(r.ConnectServerCPUPct), pct(r.ConnectOtherCPUPct))
	if r.ConnectServerUsPerConn >= 0 {
		row("connect CPU", "%.0f µs of server CPU per connection", r.ConnectServerUsPerConn)
	}
	row("connect ms", "to subscribed p50 %.1f  p99 %.1f  max %.1f; upgrade p50 %.1f  p99 %.1f", r.ConnectP50Ms, r.ConnectP99Ms, r.ConnectMaxMs, r.HandshakeP50Ms, r.HandshakeP99Ms)
	if r.RSSPerConnKiB >= 0 {
		row("server RSS", "%.1f MiB → %.1f MiB: %.2f KiB per connection (%.1f MiB at the end)",
			float64(r.RSSBeforeKiB)/1024, float64(r.RSSAfterKiB)/1024, r.RSSPerConnKiB, float64(r.RSSEndKiB)/1024)
	} else {
		row("server RSS", "n/a (no server pid)")
	}
	if r.Mode == "publish" {
		rate := "as fast as possible"
		if r.Rate > 0 {
			rate = fmt.Sprintf("%g/s", r.Rate)
		}
		row("publishes", "%d ok, %d errors in %.2f s: %.0f /s (target %s, %d publishers)", r.Publishes, r.PublishErrors, r.PublishSeconds, r.PublishesPerS, rate, r.Publishers)
		row("publish ms", "HTTP request p50 %.1f  p99 %.1f  max %.1f", r.PublishP50Ms, r.PublishP99Ms, r.PublishMaxMs)
		if r.Rate > 0 && r.PublishesPerS < 0.95*r.Rate {
			row("", "BEHIND: %.1f of %g events/s; each of the %d publishers waits for its response (raise -publishers to offer more)",
				r.PublishesPerS, r.Rate, r.Publishers)
		}
		for _, e := range r.PublishErrorSamples {
			row("", "%s", e)
		}
		row("deliveries", "%d of %d expected: %.0f /s", r.Received, r.Expected, r.DeliveriesPerS)
		row("lost", "%d (%d subscribers short), %d duplicates, %d unexpected, %d bad frames", r.Lost, r.SubsWithLoss, r.Duplicates, r.Unexpected, r.BadFrames)
		row("latency ms", "p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  (%d samples)", r.LatencyP50Ms, r.LatencyP90Ms, r.LatencyP99Ms, r.LatencyMaxMs, r.LatencySamples)
	}
	row("other frames", "%d received (subscription_count and the like)", r.OtherFrames)
	row("CPU", "tool %s, server %s, rest of machine %s (of one core, %d cores) over %.1f s",
		pct(r.ToolCPUPct), pct(r.ServerCPUPct), pct(r.OtherCPUPct), r.CPUs, r.PhaseSeconds)
	if r.ServerUsPerDelivery >= 0 {
		row("CPU per delivery", "%.2f µs of server CPU", r.ServerUsPerDelivery)
	}
	row("closed by server", "%s", counts(r.ClosedByServer))
	if len(r.PusherErrors) > 0 {
		name := "pusher:error"
		if r.Protocol == protoCentrifugo {
			name = "reply errors"
		}
		row(name, "%s", counts(r.PusherErrors))
	}
	tw.Flush()
}
