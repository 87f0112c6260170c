/**
 * How the worker pool (worker-pool.ts) and its threads (inspector-worker.ts) talk, whatever engine
 * the threads run. All messages are plain objects:
 *   pool -> worker  { type: 'request', id, request, settingsId, settings?, keepOpen }
 *                   { type: 'response', id, exchange, response }
 *                   { type: 'end', exchange }
 *                   { type: 'forgetSettings', settingsId }
 *                   { type: 'batch', messages }                      (batched-messages.ts)
 *   worker -> pool  { type: 'ready', ruleCount } | { type: 'loadError', message }
 *                   { type: 'result', id, verdict, exchange?, cpuMs } | { type: 'failure', id, message, name, code?, cpuMs? }
 *                   { type: 'batch', messages: (result | failure)[] }
 */
import type { WafEngineSettings, WafEngineVerdict, WafRequest, WafResponse } from '../engine.ts';

/**
 * What a pool thread runs: an engine's synchronous inspector, one compiled rule set per thread.
 * `Open` is the engine's transaction held between a request and its response.
 */
export interface PoolInspector<Open> {
  readonly ruleCount: number;
  /**
   * Request phases; with `keepOpen` the transaction is returned (`open`) for the response phases.
   * `cpuAtStartMicros` (both sides): the thread's CPU time just before, for an engine that keeps a
   * budget in CPU time (one reading serves the budget and the request's charge).
   */
  inspectRequest(
    request: WafRequest,
    settings: WafEngineSettings,
    keepOpen: boolean,
    cpuAtStartMicros?: number,
  ): { verdict: WafEngineVerdict; open?: Open | undefined };
  /** Response phases and logging of an open transaction, which is then freed. */
  inspectResponse(open: Open, response: WafResponse, cpuAtStartMicros?: number): WafEngineVerdict;
  /** Ends an open transaction without a response (logging phase), and frees it. */
  endTransaction(open: Open): void;
}

export type ToPoolWorker =
  | {
      type: 'request';
      id: number;
      request: WafRequest;
      /**
       * The request's settings by the pool's id for them: a proxy's settings go to a thread once,
       * with the first request that has them (`settings`), and stay there until the pool says
       * `forgetSettings` (no request has them any more), so that a thread checks them once.
       */
      settingsId: number;
      settings?: WafEngineSettings | undefined;
      keepOpen: boolean;
    }
  | { type: 'response'; id: number; exchange: number; response: WafResponse }
  | { type: 'end'; exchange: number }
  | { type: 'forgetSettings'; settingsId: number };

/** What the pool posts: one message, or those of one turn of its event loop together. */
export type ToPoolWorkerPost = ToPoolWorker | { type: 'batch'; messages: ToPoolWorker[] };

/**
 * A thread's answer to one request or response. `cpuMs`: the thread's CPU time for it (user and
 * system, `process.threadCpuUsage`), what fair admission charges to its client and tenant.
 */
export type PoolReply =
  | { type: 'result'; id: number; verdict: WafEngineVerdict; exchange?: number | undefined; cpuMs?: number | undefined }
  | { type: 'failure'; id: number; message: string; name: string; code?: string | undefined; cpuMs?: number | undefined };

export type FromPoolWorker =
  | { type: 'ready'; ruleCount: number }
  | { type: 'loadError'; message: string }
  | PoolReply
  | { type: 'batch'; messages: PoolReply[] };

/** A pool thread's workerData. */
export interface PoolWorkerData<Options> {
  /** The engine's rule-set options (what its inspector loads). */
  readonly options: Options;
  /** An exchange whose response never comes is ended after this long. */
  readonly exchangeTimeoutMs: number;
  /** The thread's RunWatch slots (run-watch.ts). */
  readonly watch: SharedArrayBuffer;
  /** Each inspection's budget in ms, for engines that end a transaction by themselves (0: none). */
  readonly budgetMs: number;
}
