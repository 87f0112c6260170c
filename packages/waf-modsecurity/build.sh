#!/usr/bin/env bash
# Builds the ModSecurity Node-API addon into packages/waf-modsecurity/build/Release/modsecurity.node.
# Idempotent: does nothing when the .node file is newer than every source (binding.gyp, addon/*,
# this script). Needs: libmodsecurity-dev (pkg-config modsecurity), build-essential, python3,
# node-addon-api in the project's node_modules, and the Node headers of the Node that will load
# the addon: set npm_config_nodedir (scripts/setup.sh exports it) or pass --nodedir=DIR.
# Usage: bash packages/waf-modsecurity/build.sh [--force] [--nodedir=DIR]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$HERE/build/Release/modsecurity.node"
FORCE=0
NODEDIR="${npm_config_nodedir:-}"
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --nodedir=*) NODEDIR="${arg#--nodedir=}" ;;
    *) echo "build.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

if [ "$FORCE" = 0 ] && [ -f "$OUT" ]; then
  newer="$(find "$HERE/binding.gyp" "$HERE/addon" "$HERE/build.sh" -newer "$OUT" -print -quit)"
  if [ -z "$newer" ]; then
    echo "modsecurity addon is up to date: $OUT"
    exit 0
  fi
fi

pkg-config --exists modsecurity || {
  echo "build.sh: pkg-config cannot find modsecurity; install libmodsecurity-dev" >&2
  exit 1
}

# node-gyp ships with npm; prefer the one next to the running npm.
NODE_GYP=""
if command -v npm >/dev/null 2>&1; then
  npm_root="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")"
  for candidate in "$npm_root/node_modules/node-gyp/bin/node-gyp.js" \
                   "$npm_root/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js" \
                   /usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js \
                   /usr/share/nodejs/node-gyp/bin/node-gyp.js; do
    if [ -f "$candidate" ]; then NODE_GYP="$candidate"; break; fi
  done
fi
# Without a nodedir node-gyp would download headers: use the running Node's own when it has them.
if [ -z "$NODEDIR" ] && command -v node >/dev/null 2>&1; then
  node_prefix="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
  if [ -f "$node_prefix/include/node/node_api.h" ]; then NODEDIR="$node_prefix"; fi
fi
gyp_args=(rebuild --release --jobs=1)
if [ -n "$NODEDIR" ]; then gyp_args+=("--nodedir=$NODEDIR"); fi

cd "$HERE"
if [ -n "$NODE_GYP" ]; then
  node "$NODE_GYP" "${gyp_args[@]}"
else
  npx --yes node-gyp "${gyp_args[@]}"
fi
test -f "$OUT"
echo "built $OUT"
