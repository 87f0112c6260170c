#!/usr/bin/env bash
# Installs what is needed, then runs every test: type check, unit and end-to-end tests over real sockets.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$TPS_ROOT"
npx tsc -p .
exec node --test --test-global-setup=test/support/global-setup.ts --test-reporter=spec "$@" 'src/**/*.test.ts' 'test/**/*.test.ts'
