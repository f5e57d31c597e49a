#!/usr/bin/env bash
# Fan-out benchmark with the load tool (tools/load, herald-load). Builds Herald and the tool,
# then for each scenario starts a fresh Herald on a free loopback port with a temporary database
# and an app, runs the tool against it and stops the server:
#   1. idle:   BENCH_SUBS (10,000) connections, no publishing: server RSS per connection;
#   2. fanout: BENCH_SUBS subscribers on one channel, BENCH_RATE (20) events/s for BENCH_DURATION
#              (10s) through the signed HTTP API: deliveries/s, lost deliveries, latency p50/p99.
# The tool prints a table per scenario on stderr and one JSON line on stdout; this script prints
# both and a summary, and appends the JSON lines to BENCH_OUT when it is set.
# Other knobs: BENCH_PUBLISHERS (4), BENCH_CLIENT (raw | coder), BENCH_ARGS (extra tool flags).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
SUBS=${BENCH_SUBS:-10000}
RATE=${BENCH_RATE:-20}
DURATION=${BENCH_DURATION:-10s}
PUBLISHERS=${BENCH_PUBLISHERS:-4}
CLIENT=${BENCH_CLIENT:-raw}
read -r -a EXTRA <<<"${BENCH_ARGS:-}"

tmp=$(mktemp -d)
server_pid=
stop_server() {
	if [[ -n $server_pid ]]; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
		server_pid=
	fi
}
trap 'stop_server; rm -rf "$tmp"' EXIT

# Both processes hold one descriptor per connection; the server inherits this limit. Root may
# lift the hard limit too.
want=$((SUBS + 1000))
if (($(ulimit -Hn) < want)); then
	ulimit -Hn "$want" 2>/dev/null || true
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (($(ulimit -n) < want)); then
	echo "bench-fanout: warning: open-file limit $(ulimit -n) is below $SUBS connections + 1000; raise the hard limit (ulimit -Hn)" >&2
fi

echo "bench-fanout: building herald and herald-load" >&2
$GO build -o "$tmp/herald" ./server
(cd tools/load && $GO build -o "$tmp/herald-load" .)

# start_server starts Herald on a fresh database and sets server_pid and addr.
start_server() {
	# The log goes too: the wait below must not read an earlier server's address.
	rm -f "$tmp"/herald.db* "$tmp/herald.log"
	env HERALD_ADDR=127.0.0.1:0 HERALD_DB="$tmp/herald.db" \
		HERALD_APP_ID=bench HERALD_APP_KEY=bench-key HERALD_APP_SECRET=bench-secret \
		HERALD_LOG_LEVEL=info HERALD_LOG_FORMAT=json \
		"$tmp/herald" serve 2>"$tmp/herald.log" &
	server_pid=$!
	addr=
	for _ in $(seq 300); do
		addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$tmp/herald.log" 2>/dev/null | head -1 || true)
		[[ -n $addr ]] && return 0
		if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
		sleep 0.1
	done
	echo "bench-fanout: herald did not start:" >&2
	tail -20 "$tmp/herald.log" >&2
	exit 1
}

# machine_busy prints the CPU share (percent of one core) the machine is busy
# over one second, before a scenario: other work there disturbs the figures.
machine_busy() {
	local a b
	read -r -a a < <(head -1 /proc/stat)
	sleep 1
	read -r -a b < <(head -1 /proc/stat)
	# user nice system idle iowait irq softirq steal, in USER_HZ (100/s)
	echo $(((b[1] + b[2] + b[3] + b[6] + b[7] + b[8]) - (a[1] + a[2] + a[3] + a[6] + a[7] + a[8])))
}

# field NAME JSON prints one top-level field of the tool's JSON line.
field() { grep -o "\"$1\":\({[^}]*}\|\[[^]]*\]\|[^,}]*\)" <<<"$2" | head -1 | cut -d: -f2-; }

# scenario NAME TOOL-ARGS... runs the tool against a fresh server; the JSON line lands in $json.
scenario() {
	local name=$1
	shift
	start_server
	local busy
	busy=$(machine_busy)
	if ((busy > 20)); then
		echo "bench-fanout: warning: the machine is already ${busy}% busy (of one core) before '$name'; figures will be disturbed" >&2
	fi
	echo "bench-fanout: $name: herald pid $server_pid on $addr" >&2
	json=$("$tmp/herald-load" -url "ws://$addr" -key bench-key -app-id bench -secret bench-secret \
		-server-pid "$server_pid" -client "$CLIENT" "$@" "${EXTRA[@]}")
	stop_server
	echo "$json"
	if [[ -n ${BENCH_OUT:-} ]]; then
		echo "$json" >>"$BENCH_OUT"
	fi
}

scenario idle -idle -subs "$SUBS" -hold 5s
idle_json=$json
scenario fanout -subs "$SUBS" -channels 1 -rate "$RATE" -publishers "$PUBLISHERS" -duration "$DURATION"
fanout_json=$json

cat <<SUMMARY
== bench-fanout ($(nproc) CPUs, $CLIENT client) ==
$SUBS idle connections:  connected $(field connected "$idle_json"), server RSS $(field rss_per_conn_kib "$idle_json") KiB per connection, connect rate $(field connect_rate "$idle_json")/s, closed by server $(field closed_by_server "$idle_json")
$SUBS subscribers, 1 channel, $RATE events/s for $DURATION:
  publishes/s $(field publishes_per_s "$fanout_json") (target $RATE, $PUBLISHERS publishers; HTTP trigger ms p50 $(field publish_p50_ms "$fanout_json"), p99 $(field publish_p99_ms "$fanout_json"))
  deliveries/s $(field deliveries_per_s "$fanout_json"), lost $(field lost "$fanout_json") of $(field expected "$fanout_json")
  latency ms p50 $(field latency_p50_ms "$fanout_json"), p90 $(field latency_p90_ms "$fanout_json"), p99 $(field latency_p99_ms "$fanout_json"), max $(field latency_max_ms "$fanout_json")
  CPU (% of one core) tool $(field tool_cpu_pct "$fanout_json"), server $(field server_cpu_pct "$fanout_json"), rest of machine $(field other_cpu_pct "$fanout_json"); closed by server $(field closed_by_server "$fanout_json")
SUMMARY
for j in "$idle_json" "$fanout_json"; do
	mode=$(field mode "$j" | tr -d '"')
	if [[ $(field connected "$j") != "$SUBS" ]]; then
		echo "bench-fanout: $mode: only $(field connected "$j") of $SUBS connected: $(field connect_error_samples "$j")" >&2
	fi
	if [[ $(field closed_by_server_total "$j") != 0 || $(field lost "$j") != 0 ]]; then
		echo "bench-fanout: $mode: the server closed $(field closed_by_server "$j") and $(field lost "$j") deliveries were lost" >&2
	fi
done
