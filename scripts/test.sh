#!/usr/bin/env bash
# Installs what is needed, then runs every test: type check, unit and end-to-end tests over real sockets.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --tests
cd "$TPS_ROOT"
npm run --silent typecheck
# Formatting and lint rules (biome.jsonc): `npm run format` fixes what it can.
npx biome check --reporter=summary
# The OWASP CRS regression suite, our WAF conformance yardstick (docs/waf-conformance.md), when present:
# through the proxy with each engine (ours, the default, then ModSecurity), and given to the tests
# that need it (the differential test, the golden vectors' live check). A run below the figure of
# docs/waf-conformance.md fails the command: a fall must not pass unnoticed.
CRS_SUITE="$TPS_ROOT/../shared/crs-regression-v3.3.4"
if [ -d "$CRS_SUITE" ]; then
  export TPS_CRS_REGRESSION_SUITE="$CRS_SUITE"
  for engine in compiled modsecurity; do
    report="$(node test/waf-conformance/run.ts "$CRS_SUITE" --target socket --engine "$engine" --quiet --min-passed 2345)" || { echo "$report"; exit 1; }
    echo "$report" | sed -n '1,2p'
  done
fi
exec node --test --test-global-setup=test/support/global-setup.ts --test-reporter=spec "$@" 'src/**/*.test.ts' 'test/**/*.test.ts' 'packages/*/src/**/*.test.ts'
