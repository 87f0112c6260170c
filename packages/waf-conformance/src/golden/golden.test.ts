/**
 * The live oracle over the golden vectors: the checked-in files of @tps/waf (testdata/) and
 * @tps/libinjection still say what ModSecurity says now, case for case. With @tps/waf's own tests
 * (our engine against the same files) this is our engine against the live reference; a failure
 * here means the reference changed (another ModSecurity or CRS): regenerate with generate.ts.
 * Needs the ModSecurity addon, and for the suite's cases TPS_CRS_REGRESSION_SUITE; skips, saying
 * so, without them.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { readGolden } from './vectors.ts';
import type { CrsVectors, GoldenSource, RuleCaseVectors, TransformationVectors } from './vectors.ts';
import { loadModSecurity } from '@tps/waf-modsecurity';
import { crsRegressionCases, generatedCases } from '../differential/corpus.ts';
import { SKIP_WITHOUT_ORACLE } from '../differential/oracle.ts';
import { givenSuite, skipWithoutSuite } from '../suite.ts';
import { CRS_REGRESSION_SETTINGS, crsRegressionEngineOptions } from '../target.ts';
import {
  crsVectors,
  GENERATED_COUNT,
  GENERATED_EVERY,
  GENERATED_SEED,
  libinjectionVectors,
  ruleCaseVectors,
  transformationVectors,
} from './build.ts';
import type { LibinjectionVectors } from './build.ts';
import { crsBlockingCases } from './cases.ts';

const withSuite = SKIP_WITHOUT_ORACLE || skipWithoutSuite();

/** The checked-in file's source, so that only the answers are compared. */
const sourceOf = (file: GoldenSource): GoldenSource => ({ oracle: file.oracle, generatedBy: file.generatedBy });

/** The cases of two files of CRS vectors that differ (the known differences are compared whole). */
function crsDifferences(live: CrsVectors, file: CrsVectors): string[] {
  const out: string[] = [];
  if (live.cases.length !== file.cases.length) out.push(`${live.cases.length} cases live, ${file.cases.length} in the file`);
  live.cases.forEach((c, k) => {
    const f = file.cases[k];
    if (JSON.stringify(c) !== JSON.stringify(f))
      out.push(
        `${c.name}: live ids [${c.ids.join(',')}] ${String(c.interrupt)}, file ${f?.name} [${f?.ids.join(',')}] ${String(f?.interrupt)}`,
      );
  });
  return out;
}

test('golden vectors: the oracle is the ModSecurity the vectors were written with', { skip: SKIP_WITHOUT_ORACLE }, () => {
  const file = readGolden<GoldenSource>('crs-regression.json');
  assert.match(file.oracle, new RegExp(`^ModSecurity ${loadModSecurity().version.replace(/\./g, '\\.')} `));
});

test('golden vectors: transformations.json is what ModSecurity logs now', { skip: SKIP_WITHOUT_ORACLE }, () => {
  const file = readGolden<TransformationVectors>('transformations.json');
  assert.deepEqual(transformationVectors(sourceOf(file)), file);
});

test('golden vectors: rule-cases.json (operators, body processors) is what ModSecurity logs now', { skip: SKIP_WITHOUT_ORACLE }, () => {
  const file = readGolden<RuleCaseVectors>('rule-cases.json');
  assert.deepEqual(JSON.parse(JSON.stringify(ruleCaseVectors(sourceOf(file)))), file);
});

test('golden vectors: crs-blocking.json is what ModSecurity answers now', { skip: SKIP_WITHOUT_ORACLE }, () => {
  const file = readGolden<CrsVectors>('crs-blocking.json');
  const live = crsVectors(sourceOf(file), file.ruleSet, crsBlockingCases());
  assert.deepEqual(crsDifferences(live, file), []);
});

test('golden vectors: crs-regression.json is what ModSecurity answers now for every stage of the suite', {
  skip: withSuite,
  timeout: 300_000,
}, () => {
  const file = readGolden<CrsVectors>('crs-regression.json');
  const live = crsVectors(sourceOf(file), crsRegressionEngineOptions(), crsRegressionCases(givenSuite()!, CRS_REGRESSION_SETTINGS));
  assert.deepEqual(crsDifferences(live, file), []);
});

test('golden vectors: generated-corpus.json is what ModSecurity answers now (but where its answer is not reproducible)', {
  skip: withSuite,
  timeout: 300_000,
}, () => {
  const file = readGolden<CrsVectors>('generated-corpus.json');
  const cases = generatedCases(givenSuite()!, GENERATED_COUNT, GENERATED_SEED).filter((_, k) => k % GENERATED_EVERY === 0);
  const live = crsVectors(sourceOf(file), file.ruleSet, cases);
  const unstable = new Set(file.knownDifferences.map((d) => d.name));
  const differences = crsDifferences(live, file).filter((line) => !unstable.has(line.slice(0, line.indexOf(':'))));
  assert.deepEqual(differences, []);
});

test('golden vectors: @tps/libinjection testdata/libinjection.json is what ModSecurity detects now', {
  skip: withSuite,
  timeout: 300_000,
}, () => {
  const file = JSON.parse(
    readFileSync(new URL('../../../libinjection/testdata/libinjection.json', import.meta.url), 'utf8'),
  ) as LibinjectionVectors;
  const live = libinjectionVectors(sourceOf(file), givenSuite()!);
  const differences = live.cases.flatMap((c, k) =>
    JSON.stringify(c) === JSON.stringify(file.cases[k]) ? [] : [`${JSON.stringify(c)} / file ${JSON.stringify(file.cases[k])}`],
  );
  assert.equal(live.cases.length, file.cases.length);
  assert.deepEqual(differences.slice(0, 20), []);
});
