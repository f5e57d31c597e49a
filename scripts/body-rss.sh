#!/usr/bin/env bash
# What request bodies that never arrive cost Herald's memory (tools/bodyhold, herald-bodyhold):
# for each API that reads a body before it authenticates the request (the Channels API, the
# Device API, the admin API), starts a fresh Herald, holds RSS_CONNS (1,000) connections whose
# heads announce RSS_ANNOUNCE (256 KiB) bytes and send none, and prints the tool's JSON line:
# the server's resident memory before and while they are held. Not part of make test: a
# measurement by hand. HERALD_BIN runs that binary instead of one built from this tree (an
# older build, to compare).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
CONNS=${RSS_CONNS:-1000}
ANNOUNCE=${RSS_ANNOUNCE:-262144}
INSTANCE=5b1a2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d
TOKEN=body-rss-admin-token-0123456789

tmp=$(mktemp -d)
# A Herald still running (the script stopped midway) goes with the folder.
trap 'for job in $(jobs -p); do kill -TERM "$job" 2>/dev/null || true; done; wait; rm -rf "$tmp"' EXIT

if [[ -n ${HERALD_BIN:-} ]]; then cp "$HERALD_BIN" "$tmp/herald"; else $GO build -o "$tmp/herald" ./server; fi
(cd tools && $GO build -o "$tmp/herald-bodyhold" ./bodyhold)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# serve starts a fresh Herald on a new database and sets pid and addr.
serve() {
	rm -f "$tmp"/herald.db*
	HERALD_ADDR=127.0.0.1:0 HERALD_DB="$tmp/herald.db" HERALD_LOG_FORMAT=json HERALD_ANON_RATE_LIMIT=0 \
		HERALD_APP_ID=rss HERALD_APP_KEY=rss-key HERALD_APP_SECRET=rss-secret \
		HERALD_INSTANCE_ID=$INSTANCE HERALD_INSTANCE_SECRET_KEY=rss-instance-secret HERALD_ADMIN_TOKEN=$TOKEN \
		"$tmp/herald" serve 2>"$tmp/herald.log" &
	pid=$!
	addr=
	local tries=300
	while [[ -z $addr ]] && ((tries-- > 0)); do
		sleep 0.1
		addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$tmp/herald.log" | head -1)
	done
	[[ -n $addr ]] || { echo "body-rss: herald did not start:" >&2; tail -20 "$tmp/herald.log" >&2; exit 1; }
	sleep 1 # let the start's garbage be collected before the first reading
}

for api in channels device admin; do
	extra=()
	case $api in
	channels) path='/apps/rss/events?auth_key=rss-key' ;;
	device) path="/device_api/v1/instances/$INSTANCE/devices/fcm" ;;
	admin)
		path=/admin/v1/apps
		extra=(-header "Authorization: Bearer $TOKEN")
		;;
	esac
	serve
	echo "body-rss: $api: $CONNS connections announcing $ANNOUNCE bytes against herald at $addr" >&2
	"$tmp/herald-bodyhold" -addr "$addr" -server-pid "$pid" -path "$path" -conns "$CONNS" -announce "$ANNOUNCE" "${extra[@]}"
	kill -TERM "$pid"
	wait "$pid" || true
done
