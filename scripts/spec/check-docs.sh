#!/usr/bin/env bash
# Fails when server/docs/site differs from what build-docs.sh builds from
# spec/ now: a spec changed without make docs, or a hand-edited page.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/spec/build-docs.sh "$tmp/site" >/dev/null
if ! diff -rq server/docs/site "$tmp/site" >"$tmp/diff"; then
  cat "$tmp/diff"
  echo "server/docs/site is stale: run 'make docs' and commit the result" >&2
  exit 1
fi
echo "server/docs/site is up to date"
