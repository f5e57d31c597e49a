#!/usr/bin/env bash
# Regenerates gen/ from spec/ with the oapi-codegen pinned in tools/go.mod.
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
