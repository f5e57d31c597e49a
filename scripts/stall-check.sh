#!/usr/bin/env bash
# Stress check of stalled request bodies (tools/stall, herald-stall): starts Herald limited to
# STALL_FDS (1,200) descriptors with HERALD_HTTP_READ_TIMEOUT=STALL_READ_TIMEOUT (10s), opens
# STALL_CONNS (1,000) connections whose heads to the long-lived routes announce a body that never
# comes, and asks /healthz meanwhile. It passes when every connection is answered or closed within
# the read timeout (plus 5 s) and every health check is answered; it prints the tool's JSON line.
# Not part of make test: a check by hand, or before a release. HERALD_BIN runs that binary
# instead of one built from this tree (an older build, to compare).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
CONNS=${STALL_CONNS:-1000}
FDS=${STALL_FDS:-1200}
READ_TIMEOUT=${STALL_READ_TIMEOUT:-10s}

tmp=$(mktemp -d)
server_pid=
trap 'if [[ -n $server_pid ]]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi; rm -rf "$tmp"' EXIT

if [[ -n ${HERALD_BIN:-} ]]; then cp "$HERALD_BIN" "$tmp/herald"; else $GO build -o "$tmp/herald" ./server; fi
(cd tools && $GO build -o "$tmp/herald-stall" ./stall)
# The tool needs a descriptor per connection too: lift its own limit, not the server's.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

(
	ulimit -n "$FDS"
	exec env HERALD_ADDR=127.0.0.1:0 HERALD_DB="$tmp/herald.db" HERALD_HTTP_READ_TIMEOUT="$READ_TIMEOUT" \
		HERALD_APP_ID=stall HERALD_APP_KEY=stall-key HERALD_APP_SECRET=stall-secret HERALD_LOG_FORMAT=json \
		"$tmp/herald" serve 2>"$tmp/herald.log"
) &
server_pid=$!
addr=
for _ in $(seq 300); do
	addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$tmp/herald.log" | head -1)
	[[ -n $addr ]] && break
	sleep 0.1
done
if [[ -z $addr ]]; then
	echo "stall-check: herald did not start:" >&2
	tail -20 "$tmp/herald.log" >&2
	exit 1
fi
echo "stall-check: $CONNS stalled connections against herald at $addr (limit $FDS descriptors, read timeout $READ_TIMEOUT)" >&2
"$tmp/herald-stall" -addr "$addr" -key stall-key -conns "$CONNS" -read-timeout "$READ_TIMEOUT" -server-pid "$server_pid"
