#!/usr/bin/env bash
# Builds the HTML reference of spec/ with Redocly CLI's build-docs into a
# folder (default server/docs/site, which the server embeds and serves at
# /docs): one page per OpenAPI or AsyncAPI file (common.yaml, the shared
# schemas, appears inside the others), the index page, and the Redoc bundle
# the pages load. Redocly's pages load that bundle from Redocly's CDN; here
# they load the copy served beside them, so the reference works offline and
# asks no third party. check-docs builds into a temporary folder and compares.
# Usage: scripts/spec/build-docs.sh [output-folder]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-server/docs/site}
tools=scripts/spec
redocly=$tools/node_modules/.bin/redocly
bundle=$tools/node_modules/@redocly/cli/lib/chunks/redoc.standalone.js
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
if [ ! -f "$bundle" ]; then
  echo "build-docs: $bundle is missing: run npm ci in $tools, or the Redocly CLI moved its Redoc bundle" >&2
  exit 1
fi

rm -rf "$out"
mkdir -p "$out"
for spec in spec/*.yaml; do
  name=$(basename "$spec" .yaml)
  name=${name%.asyncapi}
  [ "$name" = common ] && continue
  page=$out/$name.html
  if ! log=$("$redocly" build-docs "$spec" --config "$tools/redocly.yaml" --output "$page" 2>&1); then
    echo "$log" >&2
    exit 1
  fi
  sed -i -E 's#https://cdn\.redocly\.com/redoc/v[0-9][0-9.]*/bundles/redoc\.standalone\.js#./redoc.standalone.js#g' "$page"
  if grep -q 'cdn\.redocly\.com' "$page"; then
    echo "build-docs: $page still loads from Redocly's CDN; the page template changed" >&2
    exit 1
  fi
done
cp "$bundle" "$out/redoc.standalone.js"
cp "$tools/index.html" "$out/index.html"
echo "built the reference of spec/ in $out"
