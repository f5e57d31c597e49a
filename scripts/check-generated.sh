#!/usr/bin/env bash
# Fails when gen/ differs from what spec/ generates now (a stale or hand-edited gen/).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/generate.sh "$tmp"
# gen/typescript holds the package's hand-written files, package.json and, once
# built, node_modules and dist: only its generated types are compared.
ts=typescript/src/generated
if ! { diff -r -x typescript gen "$tmp/gen" && diff -r "gen/$ts" "$tmp/gen/$ts"; } >"$tmp/diff"; then
  head -50 "$tmp/diff"
  echo "gen/ is stale: run 'make generate' and commit the result" >&2
  exit 1
fi
echo "gen/ is up to date"
