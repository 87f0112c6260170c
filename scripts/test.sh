#!/usr/bin/env bash
# Installs what is needed, then runs every test: type check, unit and end-to-end tests over real sockets.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --tests
cd "$TPS_ROOT"
npm run --silent typecheck
# The OWASP CRS regression suite, our WAF conformance yardstick (docs/waf-conformance.md), when present.
CRS_SUITE="$TPS_ROOT/../shared/crs-regression-v3.3.4"
if [ -d "$CRS_SUITE" ]; then node src/waf-conformance/run.ts "$CRS_SUITE" --target socket --quiet | sed -n '1,2p'; fi
exec node --test --test-global-setup=test/support/global-setup.ts --test-reporter=spec "$@" 'src/**/*.test.ts' 'test/**/*.test.ts'
