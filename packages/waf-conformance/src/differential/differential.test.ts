/**
 * The differential test, live: our engine and the ModSecurity addon must match the same rule ids
 * on at least 99.5 % of (1) every CRS 3.3.4 regression stage and (2) a generated corpus of 10,000
 * requests (TPS_WAF_DIFF_GENERATED overrides the size). Every difference is printed. Takes about a
 * minute, most of it in ModSecurity. Needs the addon and the suite (TPS_CRS_REGRESSION_SUITE); the
 * golden vectors of @tps/waf hold the same cases' expected verdicts for runs without them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { crsRegressionEngineOptions, CRS_REGRESSION_SETTINGS } from '../target.ts';
import { formatReport, loadEngines, runDifferential } from './compare.ts';
import { crsRegressionCases, generatedCases } from './corpus.ts';
import { SKIP_WITHOUT_ORACLE } from './oracle.ts';
import { givenSuite, skipWithoutSuite } from '../suite.ts';

const GENERATED = Number(process.env.TPS_WAF_DIFF_GENERATED ?? 10_000);

const skip = SKIP_WITHOUT_ORACLE || skipWithoutSuite();

test('differential: CRS regression stages, same rule ids as ModSecurity', { skip, timeout: 300_000 }, (t) => {
  const cases = crsRegressionCases(givenSuite()!, CRS_REGRESSION_SETTINGS);
  const engines = loadEngines(crsRegressionEngineOptions());
  try {
    const report = runDifferential(engines, cases);
    t.diagnostic(formatReport('CRS regression stages', report));
    assert.ok(report.agreeing / report.total >= 0.995, formatReport('CRS regression stages', report));
  } finally {
    engines.close();
  }
});

test(`differential: ${GENERATED} generated requests, same rule ids as ModSecurity`, { skip, timeout: 600_000 }, (t) => {
  const cases = generatedCases(givenSuite()!, GENERATED);
  const engines = loadEngines();
  try {
    const report = runDifferential(engines, cases);
    t.diagnostic(formatReport('generated corpus', report));
    assert.ok(report.agreeing / report.total >= 0.995, formatReport('generated corpus', report));
  } finally {
    engines.close();
  }
});
