#!/usr/bin/env bash
# Builds the early refusal engine (engine.cc, a Node-API addon) into build/refusal-engine.node with
# g++ against the headers of the Node that runs tps. Idempotent: nothing to do when the .node file
# is newer than its sources. Optional: without g++ or the headers it says so and exits 0, and the
# proxy refuses blocked sources on its JavaScript path (src/edge/http/refusal-engine.ts).
# Usage: bash native/refusal-engine/build.sh [--force]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$HERE/build/refusal-engine.node"
if [ "${1:-}" != "--force" ] && [ -f "$OUT" ] && [ -z "$(find "$HERE/engine.cc" "$HERE/build.sh" -newer "$OUT" -print -quit)" ]; then
  exit 0
fi
node_prefix="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
include="${npm_config_nodedir:-$node_prefix}/include/node"
if ! command -v g++ >/dev/null 2>&1 || [ ! -f "$include/node_api.h" ]; then
  echo "refusal engine not built (needs g++ and $include/node_api.h): blocked sources are refused on the JavaScript path" >&2
  exit 0
fi
mkdir -p "$HERE/build"
g++ -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter \
  -DNAPI_VERSION=9 -DNODE_GYP_MODULE_NAME=refusal_engine -I"$include" \
  "$HERE/engine.cc" -o "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
