#!/usr/bin/env bash
# Installs what is needed, then runs the service on the embedded SQLite store (./data) with a demo
# tenant and a demo origin behind a protected HTTP proxy: it prints curl lines for a request that
# passes, an attack the WAF blocks and a burst the rate limit stops, where the portal shows them, a
# tenant id, a client id and secret, and a ready curl line for the token endpoint.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$TPS_ROOT"
# The sample threat feed lists documentation ranges only (192.0.2.0/24, ...).
export TPS_THREAT_FEEDS="${TPS_THREAT_FEEDS:-$TPS_ROOT/src/edge/l4/sample-threat-feed.txt}"
# Demo origins run on this machine's loopback, which the origin policy refuses as origins unless
# allowed; the service's own listeners (API, metrics, front-end IPs) stay refused anyway.
export TPS_ORIGIN_ALLOWED_NETWORKS="${TPS_ORIGIN_ALLOWED_NETWORKS:-127.0.0.0/8}"
# The demo runs in this machine's own network namespace, often as root: it leaves the machine's
# firewall alone (kernel blocking, an nftables table of the service's own, is for an install that
# chose it: TPS_KERNEL_BLOCKING=auto or nftables, docs/decisions.md).
export TPS_KERNEL_BLOCKING="${TPS_KERNEL_BLOCKING:-off}"
exec node bin/tps.js serve --demo "$@"
