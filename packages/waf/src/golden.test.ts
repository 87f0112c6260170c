/**
 * Our engine against the golden vectors (testdata/, what ModSecurity v3.0.9 answered for the same
 * requests): small rule sets for operators and body processors, the CRS on requests at every
 * paranoia level, every stage of the CRS v3.3.4 regression suite, and a sample of the generated
 * corpus of the differential test. No addon needed; the live comparison is @tps/waf-conformance's.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sharedRuleSet } from './compiled-engine.ts';
import type { WafEngineVerdict } from './engine.ts';
import { decodeRequest, readGolden, ruleCaseLines, SMALL_RULE_SET_PREAMBLE } from '@tps/waf-conformance';
import type { CrsVectors, RuleCaseVectors } from '@tps/waf-conformance';
import { CompiledInspector } from './inspector.ts';
import { resolvedLimits } from './rule-set.ts';
import { compileRuleSet } from './seclang/compiler.ts';

const ids = (v: WafEngineVerdict): number[] => [...new Set(v.matchedRules.map((m) => m.id))].sort((a, b) => a - b);

test('golden: operators and body processors on small rule sets log what ModSecurity logs', () => {
  const golden = readGolden<RuleCaseVectors>('rule-cases.json');
  assert.ok(golden.cases.length >= 15);
  for (const c of golden.cases) {
    const inspector = new CompiledInspector(compileRuleSet([{ text: `${SMALL_RULE_SET_PREAMBLE}${c.rules}`, name: 'test rules' }]), {
      request: 1048576,
      response: 524288,
    });
    const verdict = inspector.inspectRequest(decodeRequest(c.request), { paranoiaLevel: 1, mode: 'LOGGING' }).verdict;
    const got = ruleCaseLines(
      verdict.matchedRules.map((m) => ({ id: m.id, data: m.matchedData ?? '' })),
      c.onlyRule,
      c.dataOnly,
      true,
    );
    assert.deepEqual(got, c.expected, c.name);
  }
});

/** Every case of a file of CRS vectors: the same rule ids (and interrupt, anomaly score) as ModSecurity, but for the known differences. */
function checkCrsVectors(file: string, minimum: number, exact: boolean): void {
  const golden = readGolden<CrsVectors>(file);
  assert.ok(golden.cases.length >= minimum, `${file}: ${golden.cases.length} cases`);
  const inspector = new CompiledInspector(sharedRuleSet(golden.ruleSet), resolvedLimits(golden.ruleSet));
  const known = new Set(golden.knownDifferences.map((d) => d.name));
  const differences: string[] = [];
  let blocked = 0;
  for (const c of golden.cases) {
    if (known.has(c.name)) continue;
    const verdict = inspector.inspectRequest(decodeRequest(c.request), c.settings, false).verdict;
    const got = ids(verdict);
    if (got.join() !== c.ids.join()) differences.push(`${c.name}: ours [${got.join(',')}] ModSecurity [${c.ids.join(',')}]`);
    if (verdict.interrupt?.status !== c.interrupt)
      differences.push(`${c.name}: interrupt ${String(verdict.interrupt?.status)}, ModSecurity ${String(c.interrupt)}`);
    if (exact && verdict.anomalyScore !== c.anomalyScore)
      differences.push(`${c.name}: anomaly score ${String(verdict.anomalyScore)}, ModSecurity ${String(c.anomalyScore)}`);
    if (c.interrupt !== undefined) blocked++;
  }
  assert.deepEqual(differences, [], `${file}: ${differences.length} of ${golden.cases.length} cases differ`);
  if (exact) assert.ok(blocked > 0, `${file}: some cases are blocked`);
}

test('golden: the CRS at paranoia 1-4, BLOCKING: the same rule ids, interrupt and anomaly score as ModSecurity', () => {
  checkCrsVectors('crs-blocking.json', 20, true);
});

test('golden: every stage of the CRS v3.3.4 regression suite: the same rule ids as ModSecurity', () => {
  checkCrsVectors('crs-regression.json', 2375, false);
});

test('golden: a sample of the generated corpus (every 10th of 10,000 requests, seed 20240601): the same rule ids as ModSecurity', () => {
  checkCrsVectors('generated-corpus.json', 1000, false);
});
