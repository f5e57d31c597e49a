#!/usr/bin/env bash
# Recovery storm with the load tool (tools/load, herald-load -storm): a fresh Herald on a free
# loopback port, its app keeping 100 events per channel with a 2-minute recovery window;
# STORM_SUBS (10,000) connections over STORM_CHANNELS (100) channels subscribe recoverably,
# STORM_RATE (100) events/s flow through the signed HTTP API, every connection is reset at once
# from the client side after STORM_CUT_AFTER (5s), publishing goes on, and after STORM_CUT_FOR
# (3s) all reconnect and resume with their token and position. The tool reports the time until
# every subscriber has its recovery outcome, gaps, duplicates and reordering by sequence number,
# and the server's peak RSS and CPU per phase; the table goes to stderr, one JSON line to stdout
# (appended to STORM_OUT when set). STORM_ARGS: extra tool flags (-reconnect-spread 5s, -tail …).
# STORM_SUBSCRIPTION_COUNT=0 turns the app's subscription_count off (new apps have it on: each
# subscribe to a channel of up to 100 subscribers then sends the count to all of them).
# Not part of make test: it takes about a minute and both cores.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
SUBS=${STORM_SUBS:-10000}
read -r -a EXTRA <<<"${STORM_ARGS:-}"

work=$(mktemp -d)
herald_pid=
cleanup() {
	[[ -n $herald_pid ]] && kill -TERM "$herald_pid" 2>/dev/null && wait "$herald_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

# One descriptor per connection in the server and in the tool (which holds at most one
# connection per subscriber at a time: the old ones are reset before the reconnect).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (($(ulimit -n) < SUBS + 1000)); then
	echo "bench-recovery-storm: open-file limit $(ulimit -n) is below $SUBS + 1000; raise it (ulimit -Hn)" >&2
	exit 1
fi

$GO build -o "$work/herald" ./server
(cd tools/load && $GO build -o "$work/herald-load" .)

if [[ ${STORM_SUBSCRIPTION_COUNT:-1} == 0 ]]; then
	"$work/herald" apps create --db "$work/herald.db" --id storm --key storm-key --secret storm-secret \
		--subscription-count=false >/dev/null
fi
HERALD_ADDR=127.0.0.1:0 HERALD_DB="$work/herald.db" HERALD_LOG_FORMAT=json HERALD_LOG_LEVEL=info \
	HERALD_APP_ID=storm HERALD_APP_KEY=storm-key HERALD_APP_SECRET=storm-secret \
	HERALD_APP_HISTORY_EVENTS=100 HERALD_APP_RECOVERY_WINDOW=2m \
	"$work/herald" serve 2>"$work/herald.log" &
herald_pid=$!
addr=
until [[ -n $addr ]]; do
	kill -0 "$herald_pid" 2>/dev/null || { cat "$work/herald.log" >&2; exit 1; }
	sleep 0.1
	addr=$(grep -o '"msg":"listening","addr":"[^"]*"' "$work/herald.log" | head -1 | cut -d'"' -f8)
done

echo "bench-recovery-storm: herald pid $herald_pid on $addr, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
json=$("$work/herald-load" -storm -url "ws://$addr" -key storm-key -app-id storm -secret storm-secret \
	-server-pid "$herald_pid" -subs "$SUBS" -channels "${STORM_CHANNELS:-100}" -rate "${STORM_RATE:-100}" \
	-cut-after "${STORM_CUT_AFTER:-5s}" -cut-for "${STORM_CUT_FOR:-3s}" "${EXTRA[@]}")
echo "$json"
[[ -z ${STORM_OUT:-} ]] || echo "$json" >>"$STORM_OUT"
if grep -q '"recovered_all_s"' <<<"$json" && ! grep -q '"gaps":0,.*"duplicates":0,"out_of_order":0' <<<"$json"; then
	echo "bench-recovery-storm: events were lost, duplicated or reordered" >&2
	exit 1
fi
