/**
 * The golden vectors, computed: the cases (cases.ts, the CRS regression suite, a sample of the
 * generated corpus) through the ModSecurity addon, and through our engine only to name the cases
 * where ModSecurity's own answer is not reproducible. generate.ts writes what this returns;
 * ../oracle/golden.test.ts compares it with the checked-in files.
 */
import { CompiledInspector, TRANSFORMATIONS } from '@tps/waf';
import type { RuleSetOptions, WafEngineSettings, WafEngineVerdict, WafRequest } from '@tps/waf';
import { encodeRequest, ruleCaseLines } from './vectors.ts';
import type { CrsVector, CrsVectors, GoldenSource, RuleCaseVectors, TransformationVectors } from './vectors.ts';
import { ModSecurityInspector } from '@tps/waf-modsecurity';
import { crsRegressionCases, generatedCases } from '../differential/corpus.ts';
import { smallRuleSets } from '../differential/oracle.ts';
import { CRS_REGRESSION_SETTINGS, crsRegressionEngineOptions } from '../target.ts';
import {
  bodyCases,
  comparableTransformations,
  crsBlockingCases,
  LIBINJECTION_RULES,
  libinjectionInputs,
  operatorCases,
  simpleRequest,
  TRANSFORMATION_INPUTS,
  transformationRequest,
  transformationRules,
} from './cases.ts';

/** The generated corpus's seed (the differential run's) and the share of it kept: every 10th request. */
export const GENERATED_SEED = 20240601;
export const GENERATED_COUNT = 10_000;
export const GENERATED_EVERY = 10;

/** libinjection.json: per input, @detectSQLi's fingerprint (null: no SQLi) and whether @detectXSS matched. */
export interface LibinjectionVectors extends GoldenSource {
  readonly cases: readonly (readonly [input: string, sqli: string | null, xss: boolean])[];
}

export interface Golden {
  readonly transformations: TransformationVectors;
  readonly ruleCases: RuleCaseVectors;
  readonly crsBlocking: CrsVectors;
  readonly crsRegression: CrsVectors;
  readonly generatedCorpus: CrsVectors;
  readonly libinjection: LibinjectionVectors;
}

export function buildGolden(suite: string, source: GoldenSource): Golden {
  return {
    transformations: transformationVectors(source),
    ruleCases: ruleCaseVectors(source),
    crsBlocking: crsVectors(source, {}, crsBlockingCases()),
    crsRegression: crsVectors(source, crsRegressionEngineOptions(), crsRegressionCases(suite, CRS_REGRESSION_SETTINGS)),
    generatedCorpus: crsVectors(
      source,
      {},
      generatedCases(suite, GENERATED_COUNT, GENERATED_SEED).filter((_, k) => k % GENERATED_EVERY === 0),
    ),
    libinjection: libinjectionVectors(source, suite),
  };
}

export function transformationVectors(source: GoldenSource): TransformationVectors {
  const names = comparableTransformations();
  const both = smallRuleSets(transformationRules(names));
  try {
    const got = new Map<string, string>();
    for (const m of both.modsecurity(transformationRequest())) {
      const eq = m.data.indexOf('=');
      got.set(`${m.message}/${m.data.slice(0, eq)}`, m.data.slice(eq + 1)); // last value wins: the transformed one
    }
    const outputs: Record<string, string[]> = {};
    for (const name of names) {
      if (!TRANSFORMATIONS.has(name)) throw new Error(`no transformation ${name}`);
      outputs[name] = TRANSFORMATION_INPUTS.map((_, k) => {
        const out = got.get(`${name}/REQUEST_HEADERS:h${k}`);
        if (out === undefined) throw new Error(`ModSecurity logged nothing for t:${name} on input ${k}`);
        return out;
      });
    }
    return { ...source, inputs: TRANSFORMATION_INPUTS, outputs };
  } finally {
    both.close();
  }
}

export function ruleCaseVectors(source: GoldenSource): RuleCaseVectors {
  const cases = [...operatorCases(), ...bodyCases()].map((c) => {
    const both = smallRuleSets(c.rules);
    try {
      const expected = ruleCaseLines(both.modsecurity(c.request), c.onlyRule, c.dataOnly, false);
      return { name: c.name, rules: c.rules, request: encodeRequest(c.request), onlyRule: c.onlyRule, dataOnly: c.dataOnly, expected };
    } finally {
      both.close();
    }
  });
  return { ...source, cases };
}

const ids = (v: WafEngineVerdict): number[] => [...new Set(v.matchedRules.map((m) => m.id))].sort((a, b) => a - b);

export function crsVectors(
  source: GoldenSource,
  ruleSet: RuleSetOptions,
  cases: readonly { name: string; request: WafRequest; settings: WafEngineSettings }[],
): CrsVectors {
  const modsecurity = ModSecurityInspector.load(ruleSet);
  const ours = CompiledInspector.load(ruleSet);
  try {
    const vectors: CrsVector[] = [];
    const knownDifferences: { name: string; ours: number[]; modsecurity: number[] }[] = [];
    for (const c of cases) {
      const reference = modsecurity.inspectRequest(c.request, c.settings, false).verdict;
      const expected = ids(reference);
      vectors.push({
        name: c.name,
        request: encodeRequest(c.request),
        settings: c.settings,
        ids: expected,
        ...(reference.interrupt ? { interrupt: reference.interrupt.status } : {}),
        ...(reference.anomalyScore !== undefined ? { anomalyScore: reference.anomalyScore } : {}),
      });
      const got = ids(ours.inspectRequest(c.request, c.settings, false).verdict);
      if (got.join() !== expected.join()) knownDifferences.push({ name: c.name, ours: got, modsecurity: expected });
    }
    return { ...source, ruleSet, cases: vectors, knownDifferences };
  } finally {
    modsecurity.close();
  }
}

export function libinjectionVectors(source: GoldenSource, suite: string): LibinjectionVectors {
  const both = smallRuleSets(LIBINJECTION_RULES);
  const inputs = libinjectionInputs(suite);
  const cases: [string, string | null, boolean][] = [];
  try {
    for (let i = 0; i < inputs.length; i += 400) {
      const chunk = inputs.slice(i, i + 400);
      const sqli = new Map<number, string>();
      const xss = new Set<number>();
      for (const m of both.modsecurity(simpleRequest({ headers: chunk.map((v, k) => [`h${k}`, v] as const) }))) {
        const mm = /^REQUEST_HEADERS:h(\d+)(?:=(.*))?$/s.exec(m.data);
        if (!mm) continue;
        if (m.id === 1) sqli.set(Number(mm[1]), mm[2] ?? '');
        else xss.add(Number(mm[1]));
      }
      for (const [k, s] of chunk.entries()) cases.push([s, sqli.get(k) ?? null, xss.has(k)]);
    }
  } finally {
    both.close();
  }
  return { ...source, cases };
}
