/**
 * The differential test of issue 6: the compiled engine and the ModSecurity addon must match the
 * same rule ids on at least 99.5 % of (1) every CRS 3.3.4 regression stage and (2) a generated
 * corpus of 10,000 requests (TPS_WAF_DIFF_GENERATED overrides the size). Every difference is
 * printed. Takes about a minute, most of it in ModSecurity.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { crsRegressionEngineOptions, CRS_REGRESSION_SETTINGS } from '../../../../../waf-conformance/target.ts';
import { formatReport, loadEngines, runDifferential } from './compare.ts';
import { crsRegressionCases, generatedCases } from './corpus.ts';
import { ORACLE_AVAILABLE } from './oracle.ts';

const GENERATED = Number(process.env.TPS_WAF_DIFF_GENERATED ?? 10_000);

test('differential: CRS regression stages, same rule ids as ModSecurity', { skip: !ORACLE_AVAILABLE, timeout: 300_000 }, (t) => {
  const cases = crsRegressionCases(undefined, CRS_REGRESSION_SETTINGS);
  if (cases.length === 0) return t.skip('CRS regression suite not present');
  const { workers: _w, ...rules } = crsRegressionEngineOptions();
  const engines = loadEngines(rules);
  try {
    const report = runDifferential(engines, cases);
    t.diagnostic(formatReport('CRS regression stages', report));
    assert.ok(report.agreeing / report.total >= 0.995, formatReport('CRS regression stages', report));
  } finally {
    engines.close();
  }
});

test(`differential: ${GENERATED} generated requests, same rule ids as ModSecurity`, { skip: !ORACLE_AVAILABLE, timeout: 600_000 }, (t) => {
  const cases = generatedCases(GENERATED);
  const engines = loadEngines();
  try {
    const report = runDifferential(engines, cases);
    t.diagnostic(formatReport('generated corpus', report));
    assert.ok(report.agreeing / report.total >= 0.995, formatReport('generated corpus', report));
  } finally {
    engines.close();
  }
});
