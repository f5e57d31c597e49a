#!/usr/bin/env bash
# Cluster benchmarks with the load tool (tools/load, herald-load) and a real redis-server, on
# loopback, every server in a temporary folder and stopped at the end:
#   compare:     one Herald node in cluster mode against a single node, same run, end to end
#                (signed HTTP triggers, WebSocket subscribers): BENCH_PUBLISHERS (16) publishers as
#                fast as they can for BENCH_DURATION (10s), 1,000 subscribers on 1 channel and
#                10,000 over 1,000 channels: deliveries/s, Herald's and Redis's CPU per delivery.
#   connections: BENCH_CONNS (100,000) connections over BENCH_NODES (6) nodes, one herald-load per
#                node (one process may open only so many files), all on one channel; once all are
#                subscribed, BENCH_EVENTS (5) events triggered through the first node reach every
#                connection: the nodes' total RSS, Redis's, and what was lost.
#   nodes:       one node against BENCH_CLUSTER_NODES (3) nodes on one Redis, same run, end to end:
#                subscribers spread over the nodes (each channel's round them), every trigger sent to
#                the first node, as fast as BENCH_PUBLISHERS publishers go, 1,500 subscribers on 1
#                channel and 9,000 over 900 channels: deliveries/s, the CPU of every process (the
#                nodes and Redis) per delivery, Redis's per message, the messages the first node put in
#                each script call to Redis (its metrics; - before they said it), and the ratio of the
#                CPU per delivery of the nodes to one node's (the cost of the cluster path).
#                BENCH_PEER=centrifugo adds, after Herald's rows of each shape, the peer issue 48
#                compares against, Centrifugo v6.9.1, measured the same way (herald-load -protocol
#                centrifugo: its JSON client protocol, one publication per HTTP API request to the
#                first node): cent-one (one node, memory engine), cent-N (N nodes on its Redis
#                engine, no history, the issue's setting) and cent-Nh (history_size 100,
#                history_ttl 300s, force_recovery: like for like, Herald's cluster path keeping a
#                stream for replay), each ratio against cent-one. The binary is BENCH_CENTRIFUGO_BIN,
#                or else built once with go install into the temporary folder.
# BENCH_PARTS chooses ("compare nodes connections" by default). JSON lines are appended to BENCH_OUT
# when it is set. BENCH_BEFORE=<git revision> also builds Herald at that revision and runs it in
# cluster mode as a third row of every compare shape ("before"), alternating with the others;
# BENCH_ROUNDS (1) repeats the compare rows, so that before-and-after figures come from one run.
# Every other round runs "before" ahead of the revision measured: of two three-node runs in a row,
# the second measured better on this machine in ten pairs of ten, whichever binary it ran.
# BENCH_NODES_SHAPES (1500x1,9000x900) sets the nodes part's shapes: subscribers x channels, comma-separated.
# BENCH_CHECK=1 makes a nodes row that lost an event, subscribed fewer than all or delivered nothing
# fail the run (make test-load-smoke runs the nodes part so, small and short); BENCH_CHECK=self
# only tries that check on rows made up for it, and fails when it lets a bad one pass.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
PARTS=${BENCH_PARTS:-compare nodes connections}
CLUSTER_NODES=${BENCH_CLUSTER_NODES:-3}
PUBLISHERS=${BENCH_PUBLISHERS:-16}
DURATION=${BENCH_DURATION:-10s}
CONNS=${BENCH_CONNS:-100000}
NODES=${BENCH_NODES:-6}
EVENTS=${BENCH_EVENTS:-5}
BEFORE=${BENCH_BEFORE:-}
ROUNDS=${BENCH_ROUNDS:-1}
PEER=${BENCH_PEER:-}
CENTRIFUGO=github.com/centrifugal/centrifugo/v6@v6.9.1

field() { grep -o "\"$1\":\({[^}]*}\|\[[^]]*\]\|[^,}]*\)" <<<"$2" | head -1 | cut -d: -f2-; }
record() { if [[ -n ${BENCH_OUT:-} ]]; then echo "$1" >>"$BENCH_OUT"; fi; }
# row_ok reports whether a nodes row (herald-load's JSON) of subs subscribers lost nothing,
# subscribed every one and delivered something.
row_ok() {
	[[ $(field lost "$1") == 0 && $(field connected "$1") == "$2" ]] &&
		awk -v d="$(field deliveries_per_s "$1")" 'BEGIN { exit !(d > 0) }'
}
if [[ ${BENCH_CHECK:-} == self ]]; then
	row_ok '{"connected":30,"deliveries_per_s":5.5,"lost":0}' 30 || { echo "bench-cluster: a good row fails the check" >&2; exit 1; }
	for bad in '{"connected":30,"deliveries_per_s":5.5,"lost":2}' '{"connected":29,"deliveries_per_s":5.5,"lost":0}' \
		'{"connected":30,"deliveries_per_s":0,"lost":0}'; do
		if row_ok "$bad" 30; then echo "bench-cluster: the check lets $bad pass" >&2; exit 1; fi
	done
	exit 0
fi

case $PEER in
"" | centrifugo) ;;
*) echo "bench-cluster: BENCH_PEER must be centrifugo or empty, got $PEER" >&2; exit 1 ;;
esac
command -v redis-server >/dev/null || { echo "bench-cluster: redis-server is not installed (Debian package redis-server)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
stop_all() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

echo "bench-cluster: building herald and herald-load" >&2
$GO build -o "$tmp/herald" ./server
(cd tools/load && $GO build -o "$tmp/herald-load" .)
if [[ -n $BEFORE ]]; then
	echo "bench-cluster: building herald at $BEFORE (before)" >&2
	mkdir "$tmp/before-src"
	git archive "$BEFORE" | tar -x -C "$tmp/before-src"
	(cd "$tmp/before-src" && $GO build -o "$tmp/herald-before" ./server)
	rm -rf "$tmp/before-src"
fi
centrifugo_bin=${BENCH_CENTRIFUGO_BIN:-}
if [[ -n $PEER && -z $centrifugo_bin && " $PARTS " == *" nodes "* ]]; then
	echo "bench-cluster: building Centrifugo ($CENTRIFUGO; BENCH_CENTRIFUGO_BIN uses one built before)" >&2
	GOBIN="$tmp/peer" $GO install "$CENTRIFUGO"
	centrifugo_bin=$tmp/peer/centrifugo
fi

# start_redis starts a redis-server without persistence on a free port; sets redis_pid, redis_url.
start_redis() {
	local port
	for _ in $(seq 20); do
		port=$((20000 + RANDOM % 20000))
		rm -f "$tmp/redis.log"
		redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$tmp" \
			--logfile "$tmp/redis.log" --maxclients 1000 &
		redis_pid=$!
		for _ in $(seq 50); do
			if grep -q "Ready to accept" "$tmp/redis.log" 2>/dev/null; then
				pids+=("$redis_pid")
				redis_url="redis://127.0.0.1:$port"
				return 0
			fi
			kill -0 "$redis_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
	done
	echo "bench-cluster: redis-server did not start" >&2
	exit 1
}

# start_node NAME [REDIS_URL [BINARY]] starts Herald on a fresh database; sets node_pid and node_addr.
start_node() {
	local name=$1 redis=${2:-} bin=${3:-$tmp/herald}
	# The log goes first: the wait below must not read the address of an
	# earlier node of that name before this one's shell has truncated it.
	rm -f "$tmp/$name".db* "$tmp/$name.log"
	env HERALD_ADDR=127.0.0.1:0 HERALD_DB="$tmp/$name.db" HERALD_NODE_ID="$name" ${redis:+HERALD_REDIS_URL=$redis} \
		HERALD_APP_ID=bench HERALD_APP_KEY=bench-key HERALD_APP_SECRET=bench-secret \
		HERALD_LOG_LEVEL=info HERALD_LOG_FORMAT=json \
		"$bin" serve 2>"$tmp/$name.log" &
	node_pid=$!
	pids+=("$node_pid")
	for _ in $(seq 300); do
		node_addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$tmp/$name.log" 2>/dev/null | head -1 || true)
		[[ -n $node_addr ]] && return 0
		kill -0 "$node_pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "bench-cluster: herald $name did not start:" >&2
	tail -20 "$tmp/$name.log" >&2
	exit 1
}

# start_centrifugo NAME [REDIS_URL [HISTORY]] starts a Centrifugo node on a free loopback port,
# its config in NAME.json: subscribers connect and subscribe anonymously, publishes go to its HTTP
# API with the key bench-api-key, the memory engine or Redis's at REDIS_URL, and with HISTORY=1
# each channel keeps 100 publications for 300 s and every subscription is recovered. Sets node_pid
# and node_addr.
start_centrifugo() {
	local name=$1 redis=${2:-} history=${3:-0} port engine= channel
	[[ -n $redis ]] && engine=', "engine": {"type": "redis", "redis": {"address": ["'$redis'"]}}'
	channel='"allow_subscribe_for_client": true, "allow_subscribe_for_anonymous": true'
	((history)) && channel+=', "history_size": 100, "history_ttl": "300s", "force_recovery": true'
	for _ in $(seq 20); do
		port=$((20000 + RANDOM % 20000))
		cat >"$tmp/$name.json" <<CONFIG
{"node": {"name": "$name-$port"}, "http_server": {"address": "127.0.0.1", "port": $port},
 "log": {"level": "info"}, "usage_stats": {"disabled": true},
 "client": {"allow_anonymous_connect_without_token": true}, "http_api": {"key": "bench-api-key"},
 "channel": {"without_namespace": {$channel}}$engine}
CONFIG
		rm -f "$tmp/$name.log"
		"$centrifugo_bin" --config "$tmp/$name.json" >"$tmp/$name.log" 2>&1 &
		node_pid=$!
		for _ in $(seq 300); do
			kill -0 "$node_pid" 2>/dev/null || break
			# Its name in the answer: this node serves the port, not one that had it first.
			if curl -s -X POST -H 'X-API-Key: bench-api-key' -d '{}' "http://127.0.0.1:$port/api/info" 2>/dev/null | grep -q "\"name\":\"$name-$port\""; then
				pids+=("$node_pid")
				node_addr=127.0.0.1:$port
				return 0
			fi
			sleep 0.1
		done
		kill "$node_pid" 2>/dev/null || true
		wait "$node_pid" 2>/dev/null || true
	done
	echo "bench-cluster: centrifugo $name did not start:" >&2
	tail -20 "$tmp/$name.log" >&2
	exit 1
}

# cpu_ticks PID prints the process's user+system CPU time in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
compare() {
	local hz
	hz=$(getconf CLK_TCK)
	echo "== bench-cluster compare ($(nproc) CPUs; $PUBLISHERS publishers for $DURATION, as fast as they can) =="
	printf '%-34s %-8s %14s %12s %12s %6s\n' shape mode deliveries/s herald-ns/d redis-ns/d lost
	local round
	for round in $(seq "$ROUNDS"); do
		for shape in "1000 1" "10000 1000"; do
			read -r subs channels <<<"$shape"
			local single_d=0 single_ns=0 cluster_d=0 cluster_ns=0 before_d=0 before_ns=0
			for mode in $(round_modes single cluster "$round"); do
				local url= bin=$tmp/herald
				if [[ $mode != single ]]; then
					start_redis
					url=$redis_url
				fi
				[[ $mode == before ]] && bin=$tmp/herald-before
				start_node node "$url" "$bin"
				local r0=0
				[[ $mode != single ]] && r0=$(cpu_ticks "$redis_pid")
				local json
				json=$("$tmp/herald-load" -url "ws://$node_addr" -key bench-key -app-id bench -secret bench-secret -quiet \
					-server-pid "$node_pid" -subs "$subs" -channels "$channels" -rate 0 -publishers "$PUBLISHERS" -duration "$DURATION")
				local rns=-
				if [[ $mode != single ]]; then
					rns=$(awk -v t="$(($(cpu_ticks "$redis_pid") - r0))" -v hz="$hz" -v s="$(field phase_s "$json")" -v d="$(field deliveries_per_s "$json")" \
						'BEGIN { if (d > 0 && s > 0) printf "%.0f", t / hz * 1e9 / (d * s); else print "-" }')
				fi
				stop_all
				record "$json"
				local d ns
				d=$(field deliveries_per_s "$json")
				ns=$(awk -v c="$(field server_cpu_pct "$json")" -v d="$d" 'BEGIN { if (d > 0) printf "%.0f", c / 100 * 1e9 / d; else print 0 }')
				printf '%-34s %-8s %14.0f %12s %12s %6s\n' "$subs subscribers, $channels channels" "$mode" "$d" "$ns" "$rns" "$(field lost "$json")"
				if [[ $mode == single ]]; then
					single_d=$d single_ns=$ns
				elif [[ $mode == cluster ]]; then
					cluster_d=$d cluster_ns=$ns
					awk -v a="$d" -v b="$single_d" -v c="$ns" -v e="$single_ns" \
						'BEGIN { printf "%-34s cluster ÷ single: deliveries/s %.2f ×, Herald CPU per delivery %.2f ×\n", "", a / b, c / e }'
				else
					before_d=$d before_ns=$ns
				fi
			done
			if [[ -n $BEFORE ]]; then
				awk -v a="$cluster_d" -v b="$before_d" -v c="$cluster_ns" -v e="$before_ns" \
					'BEGIN { printf "%-34s cluster ÷ before: deliveries/s %.2f ×, Herald CPU per delivery %.2f ×\n", "", a / b, c / e }'
			fi
		done
	done
}

# msgs_per_call prints how many messages the publishing node at ADDR put in
# each script call to Redis (its metrics), or - when it does not say (a
# revision before the count).
msgs_per_call() {
	{ curl -s "http://$1/metrics" 2>/dev/null || true; } | awk '
		/^herald_cluster_messages_published_total / { m = $2 }
		/^herald_cluster_publish_calls_total / { c = $2 }
		END { if (c > 0) printf "%.1f", m / c; else print "-" }'
}

# round_modes is the order of a round's runs: first, then measured, then
# "before" when BENCH_BEFORE is set, "before" ahead of measured every other
# round.
round_modes() {
	local first=$1 measured=$2 round=$3
	if [[ -z $BEFORE ]]; then
		echo "$first $measured"
	elif ((round % 2)); then
		echo "$first $measured before"
	else
		echo "$first before $measured"
	fi
}

nodes() {
	echo "== bench-cluster nodes ($(nproc) CPUs; $PUBLISHERS publishers for $DURATION, as fast as they can; triggers to the first node) =="
	printf '%-34s %-8s %14s %12s %14s %10s %6s\n' shape mode deliveries/s cpu-µs/d redis-µs/msg msgs/call lost
	local round
	for round in $(seq "$ROUNDS"); do
		local shapes
		IFS=, read -ra shapes <<<"${BENCH_NODES_SHAPES:-1500x1,9000x900}"
		for shape in "${shapes[@]}"; do
			local subs=${shape%x*} channels=${shape#*x}
			local one_us=0 cent_one_us=0 peer_modes=
			[[ -n $PEER ]] && peer_modes="cent-one cent-$CLUSTER_NODES cent-${CLUSTER_NODES}h"
			for mode in $(round_modes one "$CLUSTER_NODES" "$round") $peer_modes; do
				# Herald's nodes (start_node NAME REDIS BINARY) or Centrifugo's (start_centrifugo
				# NAME REDIS HISTORY), and how herald-load speaks to them.
				local start=start_node name=node arg=$tmp/herald n=$CLUSTER_NODES urls=() procs=()
				local speak=(-key bench-key -app-id bench -secret bench-secret)
				[[ $mode == before ]] && arg=$tmp/herald-before
				if [[ $mode == cent-* ]]; then
					start=start_centrifugo name=cent arg=0 speak=(-protocol centrifugo -api-key bench-api-key)
					[[ $mode == *h ]] && arg=1
				fi
				local single=0
				[[ $mode == one || $mode == cent-one ]] && single=1
				if ((single)); then
					$start "$name" "" "$arg"
					urls=("ws://$node_addr") procs=("$node_pid")
				else
					start_redis
					for i in $(seq "$n"); do
						$start "$name$i" "$redis_url" "$arg"
						urls+=("ws://$node_addr") procs+=("$node_pid")
					done
					procs+=("$redis_pid") # last: Redis's share is the last of server_cpu_pct_each
				fi
				local json
				json=$("$tmp/herald-load" -url "$(IFS=,; echo "${urls[*]}")" -server-pid "$(IFS=,; echo "${procs[*]}")" \
					"${speak[@]}" -quiet -subs "$subs" -channels "$channels" -rate 0 -publishers "$PUBLISHERS" -duration "$DURATION")
				local per_call=-
				[[ $single == 0 && $mode != cent-* ]] && per_call=$(msgs_per_call "${urls[0]#ws://}")
				stop_all
				record "$json"
				if [[ $(field connected "$json") != "$subs" ]]; then
					echo "bench-cluster: nodes: $(field connected "$json") of $subs subscribed: $(field connect_error_samples "$json")" >&2
				fi
				local d us rus=-
				d=$(field deliveries_per_s "$json")
				us=$(field server_us_per_delivery "$json")
				if ((!single)); then
					rus=$(awk -v each="$(field server_cpu_pct_each "$json")" -v s="$(field phase_s "$json")" -v p="$(field publishes "$json")" \
						'BEGIN { n = split(each, a, ","); gsub(/[][]/, "", a[n]); if (p > 0) printf "%.1f", a[n] / 100 * s * 1e6 / p; else print "-" }')
				fi
				printf '%-34s %-8s %14.0f %12.2f %14s %10s %6s\n' "$subs subscribers, $channels channels" "$mode" "$d" "$us" "$rus" "$per_call" "$(field lost "$json")"
				if [[ -n ${BENCH_CHECK:-} ]] && ! row_ok "$json" "$subs"; then
					echo "bench-cluster: nodes: $mode on $subs subscribers over $channels channels lost events, subscribed fewer than all or delivered nothing" >&2
					exit 1
				fi
				case $mode in
				one) one_us=$us ;;
				cent-one) cent_one_us=$us ;;
				*)
					local base=$one_us
					[[ $mode == cent-* ]] && base=$cent_one_us
					awk -v a="$us" -v b="$base" -v m="$mode" \
						'BEGIN { printf "%-34s %s ÷ one node: CPU per delivery %.2f ×\n", "", m, a / b }'
					;;
				esac
			done
		done
	done
}

connections() {
	echo "== bench-cluster connections: $CONNS connections over $NODES nodes, $EVENTS events to all =="
	start_redis
	local nodes=() addrs=()
	for i in $(seq "$NODES"); do
		start_node "node$i" "$redis_url"
		nodes+=("$node_pid")
		addrs+=("$node_addr")
	done
	local listeners=()
	for i in $(seq 0 $((NODES - 1))); do
		local subs=$((CONNS / NODES + (i < CONNS % NODES ? 1 : 0)))
		"$tmp/herald-load" -url "ws://${addrs[$i]}" -key bench-key -quiet -server-pid "${nodes[$i]}" \
			-subs "$subs" -channels 1 -channel-prefix bcast- -listen "$EVENTS" -ready-file "$tmp/ready$i" \
			-connect-concurrency 100 -connect-timeout 120s -settle 2s -drain 600s -drain-idle 10s \
			>"$tmp/listen$i.json" 2>"$tmp/listen$i.log" &
		listeners+=($!)
	done
	local t0=$SECONDS
	for i in $(seq 0 $((NODES - 1))); do
		while [[ ! -e $tmp/ready$i ]]; do
			if ! kill -0 "${listeners[$i]}" 2>/dev/null; then
				echo "bench-cluster: listener $i stopped before it was ready:" >&2
				tail -5 "$tmp/listen$i.log" >&2
				exit 1
			fi
			sleep 0.5
		done
	done
	local connect_s=$((SECONDS - t0))
	sleep 3 # the nodes' records and heartbeats settle
	local rss=0 r
	for p in "${nodes[@]}"; do
		r=$(rss_kib "$p")
		rss=$((rss + r))
	done
	local redis_rss
	redis_rss=$(rss_kib "$redis_pid")
	local pub
	pub=$("$tmp/herald-load" -url "ws://${addrs[0]}" -key bench-key -app-id bench -secret bench-secret -quiet \
		-subs 0 -channels 1 -channel-prefix bcast- -events "$EVENTS" -rate 1 -duration 1h)
	record "$pub"
	local received=0 expected=0 lost=0 dups=0 closed=0 connected=0 p50=0 p99=0 j
	for i in $(seq 0 $((NODES - 1))); do
		wait "${listeners[$i]}" || true
		j=$(cat "$tmp/listen$i.json")
		record "$j"
		connected=$((connected + $(field connected "$j")))
		received=$((received + $(field received "$j")))
		expected=$((expected + $(field expected "$j")))
		lost=$((lost + $(field lost "$j")))
		dups=$((dups + $(field duplicates "$j")))
		closed=$((closed + $(field closed_by_server_total "$j")))
		p50=$(awk -v a="$p50" -v b="$(field latency_p50_ms "$j")" 'BEGIN { print (b > a ? b : a) }')
		p99=$(awk -v a="$p99" -v b="$(field latency_p99_ms "$j")" 'BEGIN { print (b > a ? b : a) }')
	done
	cat <<SUMMARY
connected $connected of $CONNS in ${connect_s}s; nodes' RSS $((rss / 1024)) MiB in all ($((rss / connected)) KiB per connection, the nodes' own baseline included), Redis $((redis_rss / 1024)) MiB
$(field publishes "$pub") events accepted ($(field publish_errors "$pub") refused) through node1; deliveries $received of $expected: lost $lost, duplicates $dups; closed by server $closed
latency ms (worst node) p50 $p50, p99 $p99
SUMMARY
	stop_all
	if ((connected != CONNS || lost != 0 || dups != 0 || closed != 0)); then
		echo "bench-cluster: connections: not every connection got every event" >&2
		exit 1
	fi
}

for part in $PARTS; do
	"$part"
done
