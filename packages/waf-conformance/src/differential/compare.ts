/**
 * The differential check itself: the same request and settings through the ModSecurity addon
 * (ModSecurityInspector, in process) and the compiled engine; the verdicts agree when the sets
 * of matched rule ids are equal.
 */
import { CompiledInspector } from '@tps/waf';
import type { RuleSetOptions, WafEngineVerdict } from '@tps/waf';
import { ModSecurityInspector } from '@tps/waf-modsecurity';
import type { CorpusCase } from './corpus.ts';

export interface Difference {
  readonly name: string;
  /** Rule ids only the compiled engine matched. */
  readonly onlyCompiled: readonly number[];
  /** Rule ids only ModSecurity matched. */
  readonly onlyModSecurity: readonly number[];
  readonly settings: CorpusCase['settings'];
  readonly method: string;
  readonly uri: string;
}

export interface DifferentialReport {
  readonly total: number;
  readonly agreeing: number;
  readonly differences: readonly Difference[];
  /** Requests whose interrupt decision (blocked or not) differs. */
  readonly verdictMismatches: number;
}

export interface Engines {
  readonly modsecurity: ModSecurityInspector;
  readonly compiled: CompiledInspector;
  close(): void;
}

export function loadEngines(options: RuleSetOptions = {}): Engines {
  const modsecurity = ModSecurityInspector.load(options);
  const compiled = CompiledInspector.load(options);
  return { modsecurity, compiled, close: () => modsecurity.close() };
}

function ids(v: WafEngineVerdict): Set<number> {
  return new Set(v.matchedRules.map((m) => m.id));
}

export function compareCase(engines: Engines, c: CorpusCase): Difference | undefined {
  const a = engines.compiled.inspectRequest(c.request, c.settings, false).verdict;
  const b = engines.modsecurity.inspectRequest(c.request, c.settings, false).verdict;
  const ia = ids(a);
  const ib = ids(b);
  const onlyCompiled = [...ia].filter((x) => !ib.has(x)).sort();
  const onlyModSecurity = [...ib].filter((x) => !ia.has(x)).sort();
  if (onlyCompiled.length === 0 && onlyModSecurity.length === 0) return undefined;
  return { name: c.name, onlyCompiled, onlyModSecurity, settings: c.settings, method: c.request.method, uri: c.request.uri };
}

export function runDifferential(engines: Engines, cases: readonly CorpusCase[]): DifferentialReport {
  const differences: Difference[] = [];
  let verdictMismatches = 0;
  for (const c of cases) {
    const a = engines.compiled.inspectRequest(c.request, c.settings, false).verdict;
    const b = engines.modsecurity.inspectRequest(c.request, c.settings, false).verdict;
    if (Boolean(a.interrupt) !== Boolean(b.interrupt)) verdictMismatches++;
    const ia = ids(a);
    const ib = ids(b);
    const onlyCompiled = [...ia].filter((x) => !ib.has(x)).sort();
    const onlyModSecurity = [...ib].filter((x) => !ia.has(x)).sort();
    if (onlyCompiled.length > 0 || onlyModSecurity.length > 0) {
      differences.push({ name: c.name, onlyCompiled, onlyModSecurity, settings: c.settings, method: c.request.method, uri: c.request.uri });
    }
  }
  return { total: cases.length, agreeing: cases.length - differences.length, differences, verdictMismatches };
}

export function formatReport(title: string, r: DifferentialReport, limit = 50): string {
  const pct = r.total === 0 ? 100 : (100 * r.agreeing) / r.total;
  const lines = [
    `${title}: ${r.agreeing} of ${r.total} requests with the same rule ids (${pct.toFixed(2)} %), ${r.verdictMismatches} with a different block decision`,
  ];
  for (const d of r.differences.slice(0, limit)) {
    lines.push(
      `  ${d.name} PL${d.settings.paranoiaLevel} ${d.method} ${JSON.stringify(d.uri.slice(0, 80))}: only compiled [${d.onlyCompiled.join(',')}] only ModSecurity [${d.onlyModSecurity.join(',')}]`,
    );
  }
  if (r.differences.length > limit) lines.push(`  ... ${r.differences.length - limit} more`);
  return lines.join('\n');
}
