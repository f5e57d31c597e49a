#!/usr/bin/env bash
# Herald against the limit baseline (tools/baseline: the smallest broadcast server on the same
# WebSocket library), with the same load tool (tools/load) and identical settings, in one run.
# For each scenario a fresh server (Herald on a temporary database with one app, or the baseline)
# is started on a free loopback port, measured, and stopped; Herald and the baseline alternate.
#
#   idle      BENCH_SUBS (10,000) idle subscribed connections: server RSS per connection
#   latency   BENCH_SUBS subscribers on 1 channel, 2 events/s for BENCH_LATENCY_DURATION (15s):
#             latency p50 / p99 from the HTTP publish to the subscriber
#   channels  BENCH_SUBS subscribers over 1,000 channels, 4 publishers as fast as possible for
#             BENCH_DURATION (10s): deliveries/s
#   fanout    1,000 subscribers on 1 channel, 4 publishers as fast as possible: deliveries/s, loss
#   http      wrk, 2 threads, 16 keep-alive connections, BENCH_WRK_DURATION (10s), no subscribers:
#             Herald's signed trigger (signed once; a signature stays valid for 600 s) against
#             the baseline's bare handler ({} to any POST) and its unsigned trigger; Herald's
#             signed trigger again with an Idempotency-Key of its own on every request, against
#             the same with an X-Request-Id it ignores (the same work for wrk)
#
# It prints each tool's table on stderr, one JSON line per run on stdout (the tool's line with
# "server" and "scenario" added; wrk runs as their own line), appends them to BENCH_OUT when set,
# and ends with the table Herald | baseline | Herald ÷ baseline. Needs wrk (apt-get install wrk)
# for the http rows; without it they are skipped. BENCH_SCENARIOS picks scenarios (default all);
# BENCH_SERVERS picks servers (default "herald baseline"); BENCH_HERALD_BIN runs a prebuilt
# Herald instead of building ./server; BENCH_ARGS adds load-tool flags.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
SUBS=${BENCH_SUBS:-10000}
DURATION=${BENCH_DURATION:-10s}
LAT_DURATION=${BENCH_LATENCY_DURATION:-15s}
WRK_DURATION=${BENCH_WRK_DURATION:-10s}
SCENARIOS=${BENCH_SCENARIOS:-idle latency channels fanout http}
SERVERS=${BENCH_SERVERS:-herald baseline}
CONNECT_CONCURRENCY=${BENCH_CONNECT_CONCURRENCY:-64}
IDLE_SETTLE=${BENCH_IDLE_SETTLE:-5s}
BEFORE=${BENCH_BEFORE:-}
if [[ -n $BEFORE && $SERVERS != *before* ]]; then
	SERVERS="herald before ${SERVERS#herald }"
fi
read -r -a EXTRA <<<"${BENCH_ARGS:-}"

tmp=$(mktemp -d -t herald-bench.XXXXXX)
server_pid=
stop_server() {
	if [[ -n $server_pid ]]; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
		server_pid=
	fi
}
trap 'stop_server; rm -rf "$tmp"' EXIT
say() { echo "bench-compare: $*" >&2; }

# One descriptor per connection on each side; the servers inherit this limit.
want=$((SUBS + 1000))
if (($(ulimit -Hn) < want)); then
	ulimit -Hn "$want" 2>/dev/null || true
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
nofile=$(ulimit -n)
if ((nofile < want)); then
	say "warning: open-file limit $nofile is below $SUBS connections + 1000; raise the hard limit (ulimit -Hn)"
fi

say "building herald, herald-load and herald-baseline"
if [[ -n ${BENCH_HERALD_BIN:-} ]]; then
	cp "$BENCH_HERALD_BIN" "$tmp/herald"
else
	$GO build -o "$tmp/herald" ./server
fi
if [[ -n $BEFORE ]]; then
	say "building herald at $BEFORE (before)"
	mkdir "$tmp/before-src"
	git archive "$BEFORE" | tar -x -C "$tmp/before-src"
	(cd "$tmp/before-src" && $GO build -o "$tmp/herald-before" ./server)
	rm -rf "$tmp/before-src"
fi
(cd tools/load && $GO build -o "$tmp/herald-load" .)
(cd tools/baseline && $GO build -o "$tmp/herald-baseline" .)
ws_herald=$($GO list -m -f '{{.Version}}' github.com/coder/websocket)
ws_baseline=$(cd tools/baseline && $GO list -m -f '{{.Version}}' github.com/coder/websocket)
if [[ $ws_herald != "$ws_baseline" ]]; then
	say "warning: Herald is on coder/websocket $ws_herald, the baseline on $ws_baseline: not like for like"
fi

# start_server herald|baseline starts a fresh server and sets server_pid and addr.
start_server() {
	rm -f "$tmp"/herald.db* "$tmp/server.log"
	if [[ $1 == herald || $1 == before ]]; then
		local bin=$tmp/herald
		if [[ $1 == before ]]; then bin=$tmp/herald-before; fi
		env HERALD_ADDR=127.0.0.1:0 HERALD_DB="$tmp/herald.db" \
			HERALD_APP_ID=bench HERALD_APP_KEY=bench-key HERALD_APP_SECRET=bench-secret \
			HERALD_LOG_LEVEL=info HERALD_LOG_FORMAT=json \
			"$bin" serve 2>"$tmp/server.log" &
	else
		"$tmp/herald-baseline" -addr 127.0.0.1:0 2>"$tmp/server.log" &
	fi
	server_pid=$!
	addr=
	for _ in $(seq 300); do
		addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$tmp/server.log" 2>/dev/null | head -1 || true)
		[[ -n $addr ]] && return 0
		if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
		sleep 0.1
	done
	say "$1 did not start:"
	tail -20 "$tmp/server.log" >&2
	exit 1
}

# machine_busy prints how busy the machine is (percent of one core) over one second.
machine_busy() {
	local a b
	read -r -a a < <(head -1 /proc/stat)
	sleep 1
	read -r -a b < <(head -1 /proc/stat)
	echo $(((b[1] + b[2] + b[3] + b[6] + b[7] + b[8]) - (a[1] + a[2] + a[3] + a[6] + a[7] + a[8])))
}

# field NAME JSON prints one top-level field of a JSON line.
field() { grep -o "\"$1\":\({[^}]*}\|\[[^]]*\]\|[^,}]*\)" <<<"$2" | head -1 | cut -d: -f2-; }

declare -A J # J[server/scenario] = JSON line

emit() { # emit SERVER SCENARIO JSON
	local line="{\"server\":\"$1\",\"scenario\":\"$2\",${3#\{}"
	J[$1/$2]=$line
	echo "$line"
	if [[ -n ${BENCH_OUT:-} ]]; then echo "$line" >>"$BENCH_OUT"; fi
}

# scenario SERVER NAME TOOL-ARGS... runs the load tool against a fresh server.
scenario() {
	local server=$1 name=$2
	shift 2
	start_server "$server"
	local busy
	busy=$(machine_busy)
	if ((busy > 20)); then
		say "warning: the machine is already ${busy}% busy (of one core) before $server $name; figures will be disturbed"
	fi
	say "$name: $server pid $server_pid on $addr"
	local json
	json=$("$tmp/herald-load" -url "ws://$addr" -key bench-key -app-id bench -secret bench-secret \
		-server-pid "$server_pid" "$@" "${EXTRA[@]}") || say "warning: the load tool failed on $server $name"
	stop_server
	[[ -n $json ]] && emit "$server" "$name" "$json"
	return 0
}

# wrk_run SERVER NAME URL BODY [HEADER] runs wrk with a POST of BODY and emits its figures; with
# HEADER, every request carries that header with a value of its own (thread number and a
# counter): Idempotency-Key makes each one claim and keep a new key, as a publisher that sets
# one on every trigger does; X-Request-Id is the same work for wrk and nothing for Herald.
wrk_run() {
	local server=$1 name=$2 url=$3 body=$4 header=${5:-} out
	cat >"$tmp/post.lua" <<LUA
wrk.method = "POST"
wrk.body = [[$body]]
wrk.headers["Content-Type"] = "application/json"
LUA
	if [[ -n $header ]]; then
		cat >>"$tmp/post.lua" <<LUA
local header = "$header"
LUA
		cat >>"$tmp/post.lua" <<'LUA'
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
function request()
  n = n + 1
  return wrk.format(nil, nil, {["Content-Type"] = "application/json", [header] = tid .. "-" .. n})
end
LUA
	fi
	out=$(wrk -t2 -c16 -d"$WRK_DURATION" --latency -s "$tmp/post.lua" "$url")
	echo "$out" >&2
	local rps non2xx errs p50 p99
	rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
	non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")
	errs=$(awk '/Socket errors:/ {gsub(",", ""); print $4+$6+$8+$10}' <<<"$out")
	p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
	p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
	emit "$server" "$name" "{\"requests_per_s\":${rps:-0},\"non_2xx\":${non2xx:-0},\"socket_errors\":${errs:-0},\"latency_p50\":\"$p50\",\"latency_p99\":\"$p99\",\"connections\":16,\"threads\":2,\"duration\":\"$WRK_DURATION\"}"
	if [[ ${non2xx:-0} != 0 ]]; then
		say "warning: $server $name: $non2xx responses were not 2xx"
	fi
}

# signed_url ADDR BODY prints a URL signed for POST /apps/bench/events with BODY, valid 600 s.
signed_url() {
	local path=/apps/bench/events md5 q sig
	md5=$(printf '%s' "$2" | md5sum | cut -d' ' -f1)
	q="auth_key=bench-key&auth_timestamp=$(date +%s)&auth_version=1.0&body_md5=$md5"
	sig=$(printf 'POST\n%s\n%s' "$path" "$q" | openssl dgst -sha256 -hmac bench-secret | sed 's/^.* //')
	echo "http://$1$path?$q&auth_signature=$sig"
}

http_scenario() { # http_scenario herald|before|baseline
	local body='{"name":"bench","channel":"bench-nobody","data":"{\"n\":1}"}' url code
	if [[ $1 == baseline ]]; then
		start_server baseline
		say "http: baseline bare handler, pid $server_pid on $addr"
		wrk_run baseline http "http://$addr/bare" "$body"
		say "http: baseline unsigned trigger (for reference), pid $server_pid on $addr"
		wrk_run baseline http-trigger "http://$addr/apps/bench/events" "$body"
		stop_server
		return
	fi
	start_server "$1"
	url=$(signed_url "$addr" "$body")
	code=$(curl -s -o "$tmp/answer" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary "$body" "$url")
	if [[ $code != 200 ]]; then
		say "error: the signed trigger was answered $code: $(cat "$tmp/answer")"
		exit 1
	fi
	say "http: $1 signed trigger, pid $server_pid on $addr"
	wrk_run "$1" http "$url" "$body"
	stop_server
	# With a header of its own on every request, on fresh servers: Idempotency-Key, and for
	# the same work in wrk an X-Request-Id Herald ignores.
	for h in X-Request-Id Idempotency-Key; do
		start_server "$1"
		url=$(signed_url "$addr" "$body")
		say "http: $1 signed trigger with an $h of its own, pid $server_pid on $addr"
		if [[ $h == Idempotency-Key ]]; then wrk_run "$1" http-key "$url" "$body" "$h"; else wrk_run "$1" http-nokey "$url" "$body" "$h"; fi
		stop_server
	done
}

for s in $SCENARIOS; do
	for server in $SERVERS; do
		case $s in
		idle) scenario "$server" idle -idle -subs "$SUBS" -connect-concurrency "$CONNECT_CONCURRENCY" -settle "$IDLE_SETTLE" -hold 3s ;;
		latency) scenario "$server" latency -subs "$SUBS" -channels 1 -rate 2 -publishers 2 -duration "$LAT_DURATION" ;;
		channels) scenario "$server" channels -subs "$SUBS" -channels 1000 -rate 0 -publishers 4 -duration "$DURATION" ;;
		fanout) scenario "$server" fanout -subs 1000 -channels 1 -rate 0 -publishers 4 -duration "$DURATION" ;;
		http)
			if ! command -v wrk >/dev/null; then
				say "wrk is not installed (apt-get install wrk): no http rows"
			else
				http_scenario "$server"
			fi
			;;
		*) say "unknown scenario $s" && exit 2 ;;
		esac
	done
done

# ---- summary ----
get() { [[ -n ${J[$1]:-} ]] && field "$2" "${J[$1]}" | tr -d '"' || echo ""; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a + 0 < 0 || b + 0 <= 0) print "-"; else printf "%.2f", a / b }'; }
row() { # row LABEL HERALD BASELINE NOTE [BEFORE]
	if [[ -n $BEFORE ]]; then
		printf '| %-56s | %10s | %10s | %6s | %10s | %6s | %s |\n' "$1" "${2:--}" "${3:--}" "$(ratio "$2" "$3")" "${5:--}" "$(ratio "$2" "$5")" "$4"
	else
		printf '| %-56s | %10s | %10s | %6s | %s |\n' "$1" "${2:--}" "${3:--}" "$(ratio "$2" "$3")" "$4"
	fi
}
srow() { # srow LABEL SCENARIO FIELD NOTE: row of one field of the three servers' runs
	row "$1" "$(get "herald/$2" "$3")" "$(get "baseline/$2" "$3")" "$4" "$(get "before/$2" "$3")"
}
lossnote() { # lossnote SCENARIO
	local s=$1
	echo "lost herald $(get "herald/$s" lost)/$(get "herald/$s" expected), baseline $(get "baseline/$s" lost)/$(get "baseline/$s" expected); closed by server $(get "herald/$s" closed_by_server_total)/$(get "baseline/$s" closed_by_server_total); CPU server $(get "herald/$s" server_cpu_pct)%/$(get "baseline/$s" server_cpu_pct)%, tool $(get "herald/$s" tool_cpu_pct)%/$(get "baseline/$s" tool_cpu_pct)%"
}
ms_to_num() { awk '{ v = $1; if (v ~ /us$/) { sub(/us$/, "", v); v /= 1000 } else if (v ~ /ms$/) { sub(/ms$/, "", v) } else if (v ~ /s$/) { sub(/s$/, "", v); v *= 1000 } print v }' <<<"$1"; }

{
	echo
	echo "== bench-compare: Herald vs limit baseline ($(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), coder/websocket $ws_herald, open-file limit $nofile) =="
	if [[ -n $BEFORE ]]; then
		printf '| %-56s | %10s | %10s | %6s | %10s | %6s | %s |\n' "scenario (lower is better where marked [low])" "Herald" "baseline" "H/B" "before" "H/bef" "notes"
		echo "|---|---:|---:|---:|---:|---:|---|"
	else
		printf '| %-56s | %10s | %10s | %6s | %s |\n' "scenario (lower is better where marked [low])" "Herald" "baseline" "H/B" "notes"
		echo "|---|---:|---:|---:|---|"
	fi
	for s in $SCENARIOS; do
		case $s in
		idle)
			srow "$SUBS idle connections: RSS KiB per connection [low]" idle rss_per_conn_kib \
				"connected $(get herald/idle connected)/$(get baseline/idle connected); RSS $IDLE_SETTLE after the last"
			srow "$SUBS idle connections: connect rate /s" idle connect_rate "$CONNECT_CONCURRENCY connecting at a time"
			srow "$SUBS idle connections: server CPU µs per connection [low]" idle connect_server_us_per_conn ""
			;;
		latency)
			srow "$SUBS subs, 1 channel, 2 ev/s: latency p50 ms [low]" latency latency_p50_ms ""
			srow "$SUBS subs, 1 channel, 2 ev/s: latency p99 ms [low]" latency latency_p99_ms "$(lossnote latency)"
			;;
		channels)
			srow "$SUBS subs over 1,000 channels, 4 publishers: deliveries/s" channels deliveries_per_s "$(lossnote channels)"
			srow "  server CPU µs per delivery [low]" channels server_us_per_delivery ""
			;;
		fanout)
			srow "1,000 subs, 1 channel, 4 publishers: deliveries/s" fanout deliveries_per_s "$(lossnote fanout)"
			srow "  server CPU µs per delivery [low]" fanout server_us_per_delivery ""
			;;
		http)
			srow "wrk 16 conns: req/s, Herald signed trigger / bare handler" http requests_per_s \
				"baseline unsigned trigger $(get baseline/http-trigger requests_per_s)/s; non-2xx $(get herald/http non_2xx)/$(get baseline/http non_2xx)"
			row "wrk 16 conns: req/s, Herald with Idempotency-Key / without" "$(get herald/http-key requests_per_s)" "$(get herald/http-nokey requests_per_s)" \
				"columns: a new key / an X-Request-Id per request (both Herald); non-2xx $(get herald/http-key non_2xx)/$(get herald/http-nokey non_2xx)"
			row "wrk 16 conns: latency p99 ms [low]" "$(ms_to_num "$(get herald/http latency_p99)")" "$(ms_to_num "$(get baseline/http latency_p99)")" "" \
				"$(ms_to_num "$(get before/http latency_p99)")"
			;;
		esac
	done
	echo "Not run here: 100,000 connections — the open-file limit is $(ulimit -Hn) (hard) and each side holds one descriptor per connection."
	echo "Loopback on one machine: the load tool shares the CPUs with the server, and a sender pays for the TCP receive processing of its peer."
} | tee -a "${BENCH_SUMMARY:-/dev/null}"
