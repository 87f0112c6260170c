/**
 * Whether an engine's rejection means "this request ran past its inspection budget": the engine
 * ended that transaction (WafBudgetExceededError, code ERR_WAF_BUDGET), or the pool's watchdog
 * ended the thread running it (WafUnavailableError saying so: that request ran away; the others
 * the thread held are lost with it, not overruns). Either way the request cost the
 * WAF its whole budget, and its client is charged and counted for it.
 */
import { WafBudgetExceededError } from './engine.ts';

export function isBudgetOverrun(err: unknown): boolean {
  if (err instanceof WafBudgetExceededError) return true;
  if (typeof err !== 'object' || err === null) return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  if (code === 'ERR_WAF_BUDGET') return true;
  return code === 'ERR_WAF_UNAVAILABLE' && typeof message === 'string' && /exceeded its .*budget|^WAF request ran away/.test(message);
}
