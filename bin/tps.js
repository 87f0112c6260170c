#!/usr/bin/env node
// The `tps` command. The sources are TypeScript run by Node's own type stripping (Node 24), so no build step.
import '../src/cli/main.ts';
