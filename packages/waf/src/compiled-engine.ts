/**
 * Our SecLang engine behind the WafEngine interface: the CRS compiled once into JavaScript
 * closures (seclang/compiler.ts) and run per request by a transaction (transaction/), with the
 * ModSecurity engine's settings semantics (paranoia, threshold, exclusions, mode; see
 * inspector.ts).
 *
 * The compiled rule set is immutable and cached per process by its options: every proxy (and
 * every engine instance created with the same options) shares one copy. Per-proxy settings are
 * per-transaction data.
 *
 * Two ways to run:
 * - in process (`workers: 0`, the default): inspectRequest runs synchronously on the caller's
 *   thread. Regular expressions that V8's linear engine can take fall back to it on excessive
 *   backtracking (regex/runtime.ts).
 * - in the worker pool (`workers: N`, pool/worker-pool.ts, as the ModSecurity engine): each
 *   worker holds its own compiled copy (closures cannot cross isolates). Requests reach the
 *   workers through fair admission (pool/fair-admission.ts).
 *
 * Budget, both ways: an inspection (request side or response side) that runs past
 * `requestBudgetMs` of its own run (never its wait in a queue) is ended by the transaction itself,
 * which looks at the clock between rules and between values (transaction/rule-loop.ts), and fails
 * with WafBudgetExceededError: the proxy applies its `waf.failMode` to that request alone, and the
 * thread goes on with the others. The input limits (input-limits.ts) bound how long one step can
 * be. In the pool, a request still running after `runawayMs` (a step that could not be
 * interrupted) has its thread replaced: the backstop, reported through `onThreadRestart`.
 */
import type { WafEngine, WafExchange, WafRequest, WafResponse, WafEngineSettings, WafEngineVerdict } from './engine.ts';
import { WafUnavailableError } from './engine.ts';
import { CompiledInspector, compileCrs } from './inspector.ts';
import type { CompiledRulesOptions } from './inspector.ts';
import { POOL_OPTION_NAMES, WorkerPool } from './pool/worker-pool.ts';
import type { PoolSchedulingOptions } from './pool/worker-pool.ts';
import { resolvedLimits } from './rule-set.ts';
import type { CompiledRuleSet } from './seclang/program.ts';
import { checkSettings } from './settings.ts';

export interface CompiledEngineOptions extends CompiledRulesOptions, PoolSchedulingOptions {
  /** 0 (default): run in the calling thread. N > 0: a pool of N worker threads. */
  readonly workers?: number;
  /** Wall-clock budget of one inspection's run (queueing excluded) before its transaction ends; default 250 ms, 0: none. */
  readonly requestBudgetMs?: number;
}

export const DEFAULT_REQUEST_BUDGET_MS = 250;

/** The watchdog's bound for a budget: well past it, so that only a step that cannot be interrupted reaches it. */
export function defaultRunawayMs(budgetMs: number): number {
  return Math.max(1000, 4 * budgetMs);
}

const shared = new Map<string, CompiledRuleSet>();

/** The process-wide compiled rule set for these options (compiled on first use). */
export function sharedRuleSet(options: CompiledRulesOptions = {}): CompiledRuleSet {
  const key = JSON.stringify(options, Object.keys(options).sort());
  let rs = shared.get(key);
  if (!rs) {
    rs = compileCrs(options);
    shared.set(key, rs);
  }
  return rs;
}

function rulesOptions(options: CompiledEngineOptions): CompiledRulesOptions {
  const rules: Record<string, unknown> = { ...options };
  for (const name of [...POOL_OPTION_NAMES, 'workers', 'requestBudgetMs']) delete rules[name];
  return rules as CompiledRulesOptions;
}

export class CompiledEngine implements WafEngine {
  readonly name = 'compiled';
  private readonly inspector: CompiledInspector | undefined;
  private readonly pool: WorkerPool<CompiledRulesOptions> | undefined;
  private closed = false;

  /** Use createCompiledEngine(). */
  constructor(options: CompiledEngineOptions = {}) {
    const limits = resolvedLimits(options);
    const workers = options.workers ?? 0;
    if (!Number.isInteger(workers) || workers < 0 || workers > 64) throw new RangeError('workers must be 0-64');
    const budgetMs = options.requestBudgetMs ?? DEFAULT_REQUEST_BUDGET_MS;
    if (!Number.isFinite(budgetMs) || budgetMs < 0) throw new RangeError('requestBudgetMs must be a finite number >= 0');
    if (workers === 0) {
      this.inspector = new CompiledInspector(sharedRuleSet(rulesOptions(options)), limits, budgetMs);
      if (budgetMs > 0) this.inspector.warmUp();
    } else {
      this.pool = new WorkerPool({
        script: new URL('./compiled-worker.ts', import.meta.url),
        threadName: 'waf-compiled',
        engineName: 'compiled',
        workers,
        rules: rulesOptions(options),
        limits,
        requestBudgetMs: budgetMs,
        runawayMs: options.runawayMs ?? defaultRunawayMs(budgetMs),
        ...(options.onThreadRestart !== undefined && { onThreadRestart: options.onThreadRestart }),
        ...(options.inFlightPerWorker !== undefined && { inFlightPerWorker: options.inFlightPerWorker }),
        ...(options.queueLength !== undefined && { queueLength: options.queueLength }),
        ...(options.maxQueueWaitMs !== undefined && { maxQueueWaitMs: options.maxQueueWaitMs }),
        ...(options.expensiveClientShare !== undefined && { expensiveClientShare: options.expensiveClientShare }),
        ...(options.exchangeTimeoutMs !== undefined && { exchangeTimeoutMs: options.exchangeTimeoutMs }),
      });
    }
  }

  get ruleCount(): number | undefined {
    return this.inspector?.ruleCount;
  }

  /** Requests in flight in the worker pool (0 in process). */
  get pending(): number {
    return this.pool?.pending ?? 0;
  }

  async ready(): Promise<void> {
    if (this.pool) await this.pool.ready();
  }

  // (not async: the pool's promise is returned as it is, without another one around it)
  inspectRequest(request: WafRequest, settings: WafEngineSettings): Promise<WafEngineVerdict> {
    try {
      if (this.closed) throw new WafUnavailableError('WAF engine closed');
      checkSettings(settings);
      if (this.inspector) return Promise.resolve(this.inspector.inspectRequest(request, settings, false).verdict);
      return this.pool!.inspectRequest(request, settings);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Synchronous inspection (in-process mode only): for benchmarks and tests. */
  inspectRequestSync(request: WafRequest, settings: WafEngineSettings): WafEngineVerdict {
    if (!this.inspector) throw new Error('inspectRequestSync needs the in-process mode (workers: 0)');
    return this.inspector.inspectRequest(request, settings, false).verdict;
  }

  beginExchange(request: WafRequest, settings: WafEngineSettings): Promise<WafExchange> {
    try {
      if (this.closed) throw new WafUnavailableError('WAF engine closed');
      checkSettings(settings);
      if (!this.inspector) return this.pool!.beginExchange(request, settings);
      return Promise.resolve(this.inProcessExchange(this.inspector, request, settings));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  private inProcessExchange(inspector: CompiledInspector, request: WafRequest, settings: WafEngineSettings): WafExchange {
    const { verdict, open } = inspector.inspectRequest(request, settings, true);
    let done = open === undefined;
    return {
      requestVerdict: verdict,
      inspectResponse: async (response: WafResponse): Promise<WafEngineVerdict> => {
        if (done || !open) return { matchedRules: [] };
        done = true;
        return inspector.inspectResponse(open, response);
      },
      end: (): void => {
        if (done || !open) return;
        done = true;
        inspector.endTransaction(open);
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pool) await this.pool.close();
  }
}

export async function createCompiledEngine(options: CompiledEngineOptions = {}): Promise<CompiledEngine> {
  const engine = new CompiledEngine(options);
  try {
    await engine.ready();
  } catch (error) {
    await engine.close();
    throw error;
  }
  return engine;
}
