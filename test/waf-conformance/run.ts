/**
 * CLI: the CRS regression tests (FTW YAML) against a WAF engine, in process or through the product's
 * HTTP proxy (`--target socket`: its parser and pipeline, one stage at a time; socket-target.ts).
 * The options are those of @tps/waf-conformance's run.ts:
 *
 *   node test/waf-conformance/run.ts FOLDER-OR-FILE [--engine compiled|modsecurity] [--target in-process|socket]
 *        [--workers N] [--json FILE] [--quiet] [--min-passed N]
 */
import { conformanceCli } from '@tps/waf-conformance';
import { SocketTarget } from './socket-target.ts';

void conformanceCli(process.argv.slice(2), {
  socket: { start: (options) => SocketTarget.start(options), oneStageAtATime: true },
}).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`waf-conformance: ${(error as Error).stack ?? String(error)}\n`);
    process.exitCode = 2;
  },
);
