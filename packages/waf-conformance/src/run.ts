/**
 * CLI: run the CRS regression tests (FTW YAML) against a WAF engine, in process (this file) or
 * through the proxy (test/waf-conformance/run.ts, which adds the socket target to the same CLI).
 *
 *   node packages/waf-conformance/src/run.ts FOLDER-OR-FILE [--engine compiled|modsecurity] [--target in-process]
 *        [--workers N] [--json FILE] [--quiet] [--min-passed N]
 *
 * FOLDER-OR-FILE: the suite (e.g. ../shared/crs-regression-v3.3.4). --engine: ours (`compiled`, the
 * default, as in the product) or ModSecurity; both targets run the engine named. Prints passed /
 * failed / skipped and the failed titles with their reasons. Exit code 0 whatever the pass rate
 * (the rate is a measurement, compared by people and docs), unless --min-passed is given: then 1
 * when fewer stages passed (the test command's guard against a silent fall); 2 when the suite
 * cannot be run at all.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { loadFtwTests } from './ftw.ts';
import { formatReport, runSuite } from './runner.ts';
import { ENGINE_NAMES, InProcessTarget } from './target.ts';
import type { ConformanceTarget, EngineName } from './target.ts';

/** A target the CLI can run the suite against (`--target NAME`). */
export interface TargetFactory {
  start(options: { engine: EngineName; workers: number }): Promise<ConformanceTarget>;
  /** Stages sent one at a time (a target that tells stages apart by time), not workers * 2 at once. */
  readonly oneStageAtATime?: boolean;
}

const IN_PROCESS: TargetFactory = { start: ({ engine, workers }) => InProcessTarget.crsRegression(engine, { workers }) };

/** The CLI over `args`, with the in-process target and the caller's `targets`; the exit code. */
export async function conformanceCli(args: readonly string[], targets: Readonly<Record<string, TargetFactory>> = {}): Promise<number> {
  const factories: Record<string, TargetFactory> = { 'in-process': IN_PROCESS, ...targets };
  const { values, positionals } = parseArgs({
    args: [...args],
    allowPositionals: true,
    options: {
      workers: { type: 'string' },
      json: { type: 'string' },
      quiet: { type: 'boolean', default: false },
      target: { type: 'string', default: 'in-process' },
      engine: { type: 'string', default: 'compiled' },
      'min-passed': { type: 'string' },
    },
  });
  const folder = positionals[0];
  if (folder === undefined) {
    process.stderr.write('waf-conformance: give the suite folder (e.g. ../shared/crs-regression-v3.3.4)\n');
    return 2;
  }
  if (!existsSync(folder)) {
    process.stderr.write(`waf-conformance: ${folder} does not exist\n`);
    return 2;
  }
  const minPassed = values['min-passed'] !== undefined ? Number(values['min-passed']) : 0;
  if (!Number.isInteger(minPassed) || minPassed < 0) {
    process.stderr.write('waf-conformance: --min-passed must be a whole number\n');
    return 2;
  }
  const workers = values.workers !== undefined ? Number(values.workers) : Math.min(availableParallelism(), 2);
  const tests = loadFtwTests(folder);
  const engine = values.engine as EngineName;
  if (!ENGINE_NAMES.includes(engine)) {
    process.stderr.write(`waf-conformance: --engine must be ${ENGINE_NAMES.join(' or ')}\n`);
    return 2;
  }
  const factory = factories[values.target];
  if (factory === undefined) {
    process.stderr.write(`waf-conformance: --target must be ${Object.keys(factories).join(' or ')}\n`);
    return 2;
  }
  const target = await factory.start({ engine, workers });
  try {
    let done = 0;
    const summary = await runSuite(tests, target, {
      concurrency: factory.oneStageAtATime === true ? 1 : workers * 2,
      onResult: () => {
        done++;
        if (!values.quiet && process.stderr.isTTY && done % 100 === 0) process.stderr.write(`\r${done}/${tests.length}`);
      },
    });
    if (!values.quiet && process.stderr.isTTY) process.stderr.write('\r');
    process.stdout.write(`${formatReport(summary, `CRS conformance: ${folder} (${target.description})`)}\n`);
    if (values.json) {
      writeFileSync(
        values.json,
        `${JSON.stringify(
          {
            folder,
            target: target.description,
            passed: summary.passed,
            failed: summary.failed,
            skipped: summary.skipped,
            run: summary.run,
            results: summary.results.map((r) => ({ title: r.test.title, file: r.test.file, status: r.status, reason: r.reason })),
          },
          null,
          2,
        )}\n`,
      );
    }
    if (summary.passed < minPassed) {
      process.stderr.write(`waf-conformance: ${summary.passed} stages passed, fewer than the ${minPassed} expected (--min-passed)\n`);
      return 1;
    }
    return 0;
  } finally {
    await target.close();
  }
}

if (import.meta.main)
  void conformanceCli(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`waf-conformance: ${(error as Error).stack ?? String(error)}\n`);
      process.exitCode = 2;
    },
  );
