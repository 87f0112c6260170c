/**
 * How the worker pool (worker-pool.ts) and its threads (inspector-worker.ts) talk, whatever engine
 * the threads run. What crosses for each request goes as arrays (see REQUEST below for why):
 *   pool -> worker  [REQUEST, id, settingsId, keepOpen, ...the request, settings?]
 *                   [RESPONSE, id, exchange, status, httpVersion, headers, body?]
 *                   [END, exchange]
 *                   [FORGET_SETTINGS, settingsId]
 *                   { type: 'batch', messages }                      (batched-messages.ts)
 *   worker -> pool  { type: 'ready', ruleCount } | { type: 'loadError', message }
 *                   [RESULT, id, cpuMs, exchange, verdict] | [FAILURE, id, cpuMs?, message, name, code?]
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

/**
 * The pool's messages to a thread, as arrays (their first element says which): the structured
 * clone writes and reads an object's property names with every message, an array's elements
 * only, and bodies go as latin1 strings (one character per byte), which the clone copies into the
 * other thread's heap, where a Uint8Array costs an ArrayBuffer of its own on both sides, each
 * allocated outside the heap and swept by the garbage collector's helper threads.
 */
export const REQUEST = 0;
export const RESPONSE = 1;
export const END = 2;
export const FORGET_SETTINGS = 3;

/**
 * A request. `settings`: the request's settings by the pool's id for them: a proxy's settings go
 * to a thread once, with the first request that has them, and stay there until the pool says
 * FORGET_SETTINGS (no request has them any more), so that a thread checks them once.
 * `headers`: `[name, value, name, value...]`; `body`: at most the engine's limit + 1 bytes.
 */
export type RequestMessage = [
  kind: typeof REQUEST,
  id: number,
  settingsId: number,
  keepOpen: boolean,
  clientIp: string,
  clientPort: number,
  serverIp: string,
  serverPort: number,
  method: string,
  uri: string,
  path: string | undefined,
  httpVersion: string,
  headers: readonly string[],
  body: string | undefined,
  transactionId: string | undefined,
  settings: WafEngineSettings | undefined,
];

/** The response of an exchange (`exchange`: the thread's id for its open transaction). */
export type ResponseMessage = [
  kind: typeof RESPONSE,
  id: number,
  exchange: number,
  status: number,
  httpVersion: string,
  headers: readonly string[],
  body: string | undefined,
];

export type ToPoolWorker =
  | RequestMessage
  | ResponseMessage
  | [kind: typeof END, exchange: number]
  | [kind: typeof FORGET_SETTINGS, settingsId: number];

/** What the pool posts: one message, or those of one turn of its event loop together (batched-messages.ts). */
export type ToPoolWorkerPost = ToPoolWorker | { type: 'batch'; messages: ToPoolWorker[] };

export const RESULT = 0;
export const FAILURE = 1;

/**
 * A thread's answer to one request or response, as an array too. `cpuMs`: the thread's CPU time
 * for it (user and system, `process.threadCpuUsage`), what fair admission charges to its client
 * and tenant. `exchange`: the open transaction of a request (0: none). `verdict`: a verdict that
 * matched nothing (most of them) goes as its anomaly score alone (a number, or undefined when it
 * has none).
 */
export type ResultReply = [
  kind: typeof RESULT,
  id: number,
  cpuMs: number,
  exchange: number,
  verdict: WafEngineVerdict | number | undefined,
];
export type FailureReply = [
  kind: typeof FAILURE,
  id: number,
  cpuMs: number | undefined,
  message: string,
  name: string,
  code: string | undefined,
];
export type PoolReply = ResultReply | FailureReply;

export type FromPoolWorker =
  | { type: 'ready'; ruleCount: number }
  | { type: 'loadError'; message: string }
  | PoolReply
  | { type: 'batch'; messages: PoolReply[] };

/** A verdict as a reply carries it: one that matched nothing as its anomaly score alone. */
export function packVerdict(verdict: WafEngineVerdict): WafEngineVerdict | number | undefined {
  if (verdict.matchedRules.length !== 0 || verdict.interrupt !== undefined || verdict.bodyTruncated !== undefined) return verdict;
  return verdict.anomalyScore;
}

export function unpackVerdict(packed: WafEngineVerdict | number | undefined): WafEngineVerdict {
  if (packed === undefined) return { matchedRules: [] };
  if (typeof packed === 'number') return { matchedRules: [], anomalyScore: packed };
  return packed;
}

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

/**
 * At most `max` bytes of a body as the threads get it: a latin1 string of exactly those bytes (a
 * body is often a small view into a big buffer, an origin response chunk a slice of a 64 KiB
 * socket read: only its own bytes are copied).
 */
export function bodyText(body: Uint8Array, max: number): string {
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  return bytes.toString('latin1', 0, Math.min(body.length, max));
}

/** A body sent as bodyText(), as bytes again. */
export function bodyBytes(text: string): Buffer {
  return Buffer.from(text, 'latin1');
}
