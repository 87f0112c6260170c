/**
 * The ModSecurity engine: ModSecurity v3 + the OWASP CRS behind the WafEngine interface, run off
 * the event loop in a pool of worker threads. ModSecurity costs about 1.3 ms of CPU for a benign
 * GET and 5 ms for a 1 KB form POST at paranoia 1; on the proxy's thread that would stall every
 * other proxy of the process.
 *
 * Rules: each worker compiles the rule set once at start (about 50 ms and 18 MB for the CRS) and
 * every proxy shares it: paranoia level, anomaly threshold and exclusions are per-transaction data
 * (inspector.ts). The copy is per worker, not per proxy, because a ModSecurity rule set is not safe
 * to evaluate from several threads at once (lazily built @pm automata, the non-locked collection
 * reads), so memory is workers x one CRS whatever the number of proxies.
 *
 * The pool is the compiled engine's (@tps/waf's WorkerPool: fair admission, shedding, replacement
 * of a worker that dies), without a time budget: a worker cannot be stopped inside ModSecurity's
 * native code.
 */
import { availableParallelism } from 'node:os';
import { checkSettings, resolvedLimits, WorkerPool } from '@tps/waf';
import type {
  PoolSchedulingOptions,
  RuleSetOptions,
  WafEngine,
  WafEngineSettings,
  WafEngineVerdict,
  WafExchange,
  WafRequest,
} from '@tps/waf';

export interface ModSecurityEngineOptions extends RuleSetOptions, PoolSchedulingOptions {
  /** Worker threads; default min(available CPUs, 4). */
  readonly workers?: number;
}

export class ModSecurityEngine implements WafEngine {
  readonly name = 'modsecurity';
  /** Number of worker threads. */
  readonly workerCount: number;
  private readonly pool: WorkerPool<RuleSetOptions>;

  /** Use createModSecurityEngine(), which waits until the rules are compiled. */
  constructor(options: ModSecurityEngineOptions = {}) {
    const limits = resolvedLimits(options); // validate now, not in the workers
    const {
      workers = Math.min(availableParallelism(), 4),
      inFlightPerWorker,
      queueLength,
      maxQueueWaitMs,
      expensiveClientShare,
      exchangeTimeoutMs,
      runawayMs,
      onThreadRestart,
      ...rules
    } = options;
    this.pool = new WorkerPool({
      script: new URL('./worker.ts', import.meta.url),
      threadName: 'waf-modsecurity',
      engineName: 'ModSecurity',
      workers,
      rules,
      limits,
      ...(inFlightPerWorker !== undefined && { inFlightPerWorker }),
      ...(queueLength !== undefined && { queueLength }),
      ...(maxQueueWaitMs !== undefined && { maxQueueWaitMs }),
      ...(expensiveClientShare !== undefined && { expensiveClientShare }),
      ...(exchangeTimeoutMs !== undefined && { exchangeTimeoutMs }),
      // ModSecurity cannot be interrupted from inside: the watchdog is its only bound.
      ...(runawayMs !== undefined && { runawayMs }),
      ...(onThreadRestart !== undefined && { onThreadRestart }),
    });
    this.workerCount = this.pool.workerCount;
  }

  /** Resolves when every worker has compiled the rule set (rejects with ModSecurity's load error). */
  ready(): Promise<void> {
    return this.pool.ready();
  }

  /** Requests currently in flight across the pool. */
  get pending(): number {
    return this.pool.pending;
  }

  // (not async: the pool's promise is returned as it is, without another one around it)
  inspectRequest(request: WafRequest, settings: WafEngineSettings): Promise<WafEngineVerdict> {
    try {
      checkSettings(settings);
      return this.pool.inspectRequest(request, settings);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  beginExchange(request: WafRequest, settings: WafEngineSettings): Promise<WafExchange> {
    try {
      checkSettings(settings);
      return this.pool.beginExchange(request, settings);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

/** Starts the worker pool and waits until every worker has compiled the rules. */
export async function createModSecurityEngine(options: ModSecurityEngineOptions = {}): Promise<ModSecurityEngine> {
  const engine = new ModSecurityEngine(options);
  try {
    await engine.ready();
  } catch (error) {
    await engine.close();
    throw error;
  }
  return engine;
}
