/**
 * The WAF engine an edge worker runs (TPS_WAF_ENGINE): ours (`compiled`, @tps/waf, the default)
 * or ModSecurity (`modsecurity`), whose package @tps/waf-modsecurity is optional: it is loaded
 * here, and only when named, so the product installs and runs without it (and without the native
 * addon it builds).
 */
import { createCompiledEngine } from '@tps/waf';
import type { PoolSchedulingOptions, RuleSetOptions, WafEngine } from '@tps/waf';

export type WafEngineName = 'compiled' | 'modsecurity';

/** The optional package of the ModSecurity engine. */
export const MODSECURITY_PACKAGE = '@tps/waf-modsecurity';

/** An engine that keeps a transaction from the request to its response (both engines do). */
export type ExchangingEngine = WafEngine & Required<Pick<WafEngine, 'beginExchange'>>;

export interface WafEngineStart extends RuleSetOptions, PoolSchedulingOptions {
  /** Worker threads of the engine's pool. */
  readonly workers: number;
  /** Each inspection's budget (the compiled engine ends a transaction past it; ModSecurity has only the watchdog, runawayMs). */
  readonly requestBudgetMs?: number;
}

/** How the ModSecurity package is loaded (a test gives one that fails). */
export type ModSecurityLoader = () => Promise<typeof import('@tps/waf-modsecurity')>;

const importModSecurity: ModSecurityLoader = () => import('@tps/waf-modsecurity');

/** Starts engine `name`; rejects with what to install when it is ModSecurity and its package is absent. */
export async function startWafEngine(
  name: WafEngineName,
  options: WafEngineStart,
  loadModSecurity: ModSecurityLoader = importModSecurity,
): Promise<ExchangingEngine> {
  if (name === 'compiled') return createCompiledEngine(options);
  const { requestBudgetMs: _cooperativeOnly, ...modsecurityOptions } = options;
  let modsecurity: Awaited<ReturnType<ModSecurityLoader>>;
  try {
    modsecurity = await loadModSecurity();
  } catch (error) {
    throw new Error(
      `TPS_WAF_ENGINE=modsecurity needs the optional package ${MODSECURITY_PACKAGE} and its addon (bash scripts/setup.sh --modsecurity): ${(error as Error).message}`,
      { cause: error },
    );
  }
  return modsecurity.createModSecurityEngine(modsecurityOptions);
}
