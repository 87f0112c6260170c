/**
 * CLI: the differential test at full size.
 *
 *   node packages/waf-conformance/src/differential/run.ts SUITE [--generated N] [--seed S] [--json FILE] [--limit N]
 *
 * Runs every CRS regression stage of SUITE (e.g. ../shared/crs-regression-v3.3.4, under the CRS
 * project's own regression settings) and N generated requests (default 10,000, with the suite's
 * payloads) through both engines in process and prints the agreement and every difference (up to
 * --limit).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { crsRegressionEngineOptions, CRS_REGRESSION_SETTINGS } from '../target.ts';
import { formatReport, loadEngines, runDifferential } from './compare.ts';
import { crsRegressionCases, generatedCases } from './corpus.ts';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    generated: { type: 'string', default: '10000' },
    seed: { type: 'string', default: '20240601' },
    json: { type: 'string' },
    limit: { type: 'string', default: '100' },
  },
});
const suite = positionals[0];
if (suite === undefined || !existsSync(suite)) {
  process.stderr.write(
    `differential: give the CRS regression suite folder (e.g. ../shared/crs-regression-v3.3.4)${suite ? `: ${suite} does not exist` : ''}\n`,
  );
  process.exit(2);
}
const limit = Number(values.limit);
const t0 = performance.now();

const regression = loadEngines(crsRegressionEngineOptions());
const crsCases = crsRegressionCases(suite, CRS_REGRESSION_SETTINGS);
const crs = runDifferential(regression, crsCases);
regression.close();
process.stdout.write(`${formatReport('CRS regression stages (PL4, detection only)', crs, limit)}\n`);

const engines = loadEngines();
const gen = generatedCases(suite, Number(values.generated), Number(values.seed));
const generated = runDifferential(engines, gen);
engines.close();
process.stdout.write(`${formatReport(`generated corpus (seed ${values.seed})`, generated, limit)}\n`);

const total = crs.total + generated.total;
const agreeing = crs.agreeing + generated.agreeing;
process.stdout.write(
  `overall: ${agreeing} of ${total} (${((100 * agreeing) / total).toFixed(2)} %) in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
);
if (values.json) writeFileSync(values.json, `${JSON.stringify({ crs, generated }, null, 2)}\n`);
