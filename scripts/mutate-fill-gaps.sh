#!/usr/bin/env bash
# Adds to a Go coverage profile a block for each gap between two blocks of a
# file (or before the first) when one of the two ran (see scripts/mutate.sh: it is what lets
# gremlins mutate a switch case's expression). The gap block has no
# statements, so `go tool cover` figures do not change.
#
#   scripts/mutate-fill-gaps.sh coverage.out
set -euo pipefail
profile=$1
gaps=$(
	tail -n +2 "$profile" |
		# "file:sl.sc,el.ec stmts count" -> "file sl sc el ec count"
		awk '{ i = match($1, /:[0-9]+\.[0-9]+,[0-9]+\.[0-9]+$/)
			split(substr($1, i + 1), p, /[.,]/)
			print substr($1, 1, i - 1), p[1], p[2], p[3], p[4], $3 }' |
		sort -k1,1 -k2,2n -k3,3n -k6,6nr |
		awk '$1 != file { file = $1; el = 1; ec = 1; ran = 0 } # from the top of the file
			($2 > el || ($2 == el && $3 > ec)) && (ran || $6 > 0) {
				printf "%s:%d.%d,%d.%d 0 1\n", file, el, ec, $2, $3 }
			$4 > el || ($4 == el && $5 > ec) { el = $4; ec = $5; ran = $6 > 0 }'
)
if [ -n "$gaps" ]; then printf '%s\n' "$gaps" >>"$profile"; fi
