/**
 * A thread of the compiled engine's worker pool (compiled-engine.ts, pool/worker-pool.ts): compiles
 * the rule set once, then serves the pool (pool/inspector-worker.ts).
 */
import { sharedRuleSet } from './compiled-engine.ts';
import { CompiledInspector } from './inspector.ts';
import type { CompiledRulesOptions } from './inspector.ts';
import { serveInspector } from './pool/inspector-worker.ts';
import { resolvedLimits } from './rule-set.ts';

serveInspector((options: CompiledRulesOptions, budgetMs: number) => {
  const inspector = new CompiledInspector(sharedRuleSet(options), resolvedLimits(options), budgetMs);
  inspector.warmUp();
  return inspector;
});
