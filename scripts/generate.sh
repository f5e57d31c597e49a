#!/usr/bin/env bash
# Regenerates gen/ from spec/: the Go packages with the oapi-codegen pinned in
# tools/go.mod, and the types of the TypeScript package (gen/typescript/src/generated)
# with the openapi-typescript pinned in gen/typescript/package.json (installed by
# `npm ci` there, which the Makefile's generate and check-generated do first).
# Usage: scripts/generate.sh [output-root]   (default: the repository root)
# check-generated passes a temporary root and compares the result with gen/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
oapi() { go tool -modfile=tools/go.mod oapi-codegen "$@"; }

# gen CONFIG SPEC TARGET: tools/codegen/CONFIG.yaml applied to spec/SPEC.yaml, written to TARGET.
gen() {
  local config=$1 spec=$2 target=$3
  mkdir -p "$out/$(dirname "$target")"
  oapi -config "tools/codegen/$config.yaml" -o "$out/$target" "spec/$spec.yaml"
}

gen common common gen/common/common.gen.go
gen channels channels gen/channels/channels.gen.go
gen channels-client channels gen/channelsclient/channelsclient.gen.go
gen device device gen/device/device.gen.go
gen device-client device gen/deviceclient/deviceclient.gen.go
gen reporting reporting gen/reporting/reporting.gen.go
gen reporting-client reporting gen/reportingclient/reportingclient.gen.go
gen publish publish gen/publish/publish.gen.go
gen publish-client publish gen/publishclient/publishclient.gen.go
gen admin admin gen/admin/admin.gen.go
gen admin-client admin gen/adminclient/adminclient.gen.go

# The TypeScript types of the APIs (paths, components, operations), which
# gen/typescript/src/index.ts puts an openapi-fetch client over; see gen/typescript/generate.mjs.
ts=gen/typescript
if [ ! -d "$ts/node_modules/openapi-typescript" ]; then
  echo "scripts/generate.sh: $ts/node_modules is missing: run 'make generate' (or 'npm ci' in $ts)" >&2
  exit 1
fi
node "$ts/generate.mjs" "$out/$ts/src/generated" spec/channels.yaml spec/device.yaml spec/publish.yaml spec/reporting.yaml spec/admin.yaml
