/**
 * The compiled engine behind the WafEngine interface: the CRS compiled once into JavaScript
 * closures (compiler.ts) and run per request by transaction.ts, with the ModSecurity engine's
 * settings semantics (paranoia, threshold, exclusions, mode; see inspector.ts).
 *
 * The compiled rule set is immutable and cached per process by its options: every proxy (and
 * every engine instance created with the same options) shares one copy. Per-proxy settings are
 * per-transaction data.
 *
 * Two ways to run:
 * - in process (`workers: 0`, the default): inspectRequest runs synchronously on the caller's
 *   thread. Regular expressions that V8's linear engine can take fall back to it on excessive
 *   backtracking (regex/runtime.ts).
 * - in a worker pool (`workers: N`): each worker holds its own compiled copy (closures cannot
 *   cross isolates) and a request that runs past `requestBudgetMs` of wall time has its worker
 *   terminated and replaced; the request fails with WafUnavailableError (the proxy applies its
 *   `waf.failMode`). That budget is what bounds patterns the linear engine cannot take.
 *   It counts a request's own run (`RunWatch`), not its wait behind other requests: under load a
 *   queue of slow-but-sound requests is no reason to kill a worker.
 *   Requests reach the workers through fair admission (fair-admission.ts): `inFlightPerWorker`
 *   each at once, `queueLength` more waiting, shed per client (WafOverloadedError) past that or
 *   after `maxQueueWaitMs`. An exchange's response is not admitted again: its request was.
 */
import { Worker } from 'node:worker_threads';
import type { WafEngine, WafExchange, WafRequest, WafResponse, WafSettings, WafVerdict } from '../engine.ts';
import { WafUnavailableError } from '../engine.ts';
import { DEFAULT_IN_FLIGHT_PER_WORKER, DEFAULT_MAX_QUEUE_WAIT_MS, DEFAULT_QUEUE_PER_WORKER, FairAdmission } from '../fair-admission.ts';
import { checkSettings } from '../modsecurity-inspect.ts';
import { resolvedLimits } from '../modsecurity-config.ts';
import { batchedMessages } from '../batched-messages.ts';
import { CompiledInspector, compileCrs } from './inspector.ts';
import type { CompiledRulesOptions } from './inspector.ts';
import type { CompiledRuleSet } from './program.ts';

export interface CompiledEngineOptions extends CompiledRulesOptions {
  /** 0 (default): run in the calling thread. N > 0: a pool of N worker threads. */
  readonly workers?: number;
  /** Worker mode: requests handed to each worker at once; default 8. */
  readonly inFlightPerWorker?: number;
  /** Worker mode: requests waiting for a worker, all clients together, before they are shed per client; default 64 per worker. */
  readonly queueLength?: number;
  /** Worker mode: longest wait for a worker before a request is shed; default 1000 ms. */
  readonly maxQueueWaitMs?: number;
  /** Worker mode: wall-clock budget of one request's run (queueing excluded) before its worker is replaced; default 250 ms. */
  readonly requestBudgetMs?: number;
  /** An exchange whose response never comes is dropped after this long; default 120 s. */
  readonly exchangeTimeoutMs?: number;
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
  const { workers: _w, inFlightPerWorker: _i, queueLength: _q, maxQueueWaitMs: _m, requestBudgetMs: _b, exchangeTimeoutMs: _e, ...rules } = options;
  return rules;
}

export class CompiledEngine implements WafEngine {
  readonly name = 'compiled';
  private readonly inspector: CompiledInspector | undefined;
  private readonly pool: WorkerPool | undefined;
  private closed = false;

  /** Use createCompiledEngine(). */
  constructor(options: CompiledEngineOptions = {}) {
    const limits = resolvedLimits(options);
    const workers = options.workers ?? 0;
    if (!Number.isInteger(workers) || workers < 0 || workers > 64) throw new RangeError('workers must be 0-64');
    if (workers === 0) {
      this.inspector = new CompiledInspector(sharedRuleSet(rulesOptions(options)), limits);
    } else {
      this.pool = new WorkerPool(options, workers);
    }
  }

  get ruleCount(): number | undefined {
    return this.inspector?.ruleCount;
  }

  async ready(): Promise<void> {
    if (this.pool) await this.pool.ready();
  }

  async inspectRequest(request: WafRequest, settings: WafSettings): Promise<WafVerdict> {
    if (this.closed) throw new WafUnavailableError('WAF engine closed');
    checkSettings(settings);
    if (this.inspector) return this.inspector.inspectRequest(request, settings, false).verdict;
    return (await this.pool!.request({ type: 'request', request, settings, keepOpen: false })).verdict;
  }

  /** Synchronous inspection (in-process mode only): for benchmarks and tests. */
  inspectRequestSync(request: WafRequest, settings: WafSettings): WafVerdict {
    if (!this.inspector) throw new Error('inspectRequestSync needs the in-process mode (workers: 0)');
    return this.inspector.inspectRequest(request, settings, false).verdict;
  }

  async beginExchange(request: WafRequest, settings: WafSettings): Promise<WafExchange> {
    if (this.closed) throw new WafUnavailableError('WAF engine closed');
    checkSettings(settings);
    if (this.inspector) {
      const inspector = this.inspector;
      const { verdict, open } = inspector.inspectRequest(request, settings, true);
      let done = open === undefined;
      return {
        requestVerdict: verdict,
        inspectResponse: async (response: WafResponse): Promise<WafVerdict> => {
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
    const pool = this.pool!;
    const { verdict, exchange, worker } = await pool.request({ type: 'request', request, settings, keepOpen: true });
    let done = exchange === undefined;
    return {
      requestVerdict: verdict,
      inspectResponse: async (response: WafResponse): Promise<WafVerdict> => {
        if (done || exchange === undefined) return { matchedRules: [] };
        done = true;
        return (await pool.response({ type: 'response', exchange, response }, worker)).verdict;
      },
      end: (): void => {
        if (done || exchange === undefined) return;
        done = true;
        pool.send(worker, { type: 'end', exchange });
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

// ---------------------------------------------------------------------------- worker pool

export type ToCompiledWorker =
  | { type: 'request'; id: number; request: WafRequest; settings: WafSettings; keepOpen: boolean }
  | { type: 'response'; id: number; exchange: number; response: WafResponse }
  | { type: 'end'; exchange: number };

/** What the main thread posts: one message, or those of one turn of its event loop together. */
export type ToCompiledWorkerPost = ToCompiledWorker | { type: 'batch'; messages: ToCompiledWorker[] };

export type CompiledReply =
  | { type: 'result'; id: number; verdict: WafVerdict; exchange?: number | undefined }
  | { type: 'failure'; id: number; message: string; code?: string | undefined };

type FromCompiledWorker = { type: 'ready'; ruleCount: number } | { type: 'loadError'; message: string } | CompiledReply | { type: 'batch'; messages: CompiledReply[] };

/**
 * What a worker is running, shared with the main thread (two Int32 slots in a SharedArrayBuffer):
 * how many requests it has started, and whether one is running now. The main thread's watchdog
 * sees a request as running away when the same one has been running for longer than the budget;
 * time spent queued behind other requests does not count.
 */
export class RunWatch {
  static readonly BYTES = 8;
  private readonly slots: Int32Array;
  constructor(buffer: SharedArrayBuffer) {
    this.slots = new Int32Array(buffer);
  }
  begin(): void {
    Atomics.add(this.slots, 0, 1);
    Atomics.store(this.slots, 1, 1);
  }
  end(): void {
    Atomics.store(this.slots, 1, 0);
  }
  /** The number of the request running now, or -1 when none is. */
  running(): number {
    return Atomics.load(this.slots, 1) === 1 ? Atomics.load(this.slots, 0) : -1;
  }
}

type Call = Extract<ToCompiledWorker, { id: number }> extends infer T ? (T extends unknown ? Omit<T, 'id'> : never) : never;

interface Pending {
  resolve(v: { verdict: WafVerdict; exchange?: number | undefined }): void;
  reject(e: Error): void;
}

class PoolWorker {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();
  readonly ready: Promise<void>;
  private nextId = 1;
  dead = false;
  private readonly watch: RunWatch;
  private readonly budgetMs: number;
  /** Checks the running request while any is pending. */
  private watchdog: NodeJS.Timeout | undefined;
  /** The request seen running at the last check, and since when (this thread's clock). */
  private seen = { request: -1, since: 0 };
  /** Posts to the worker with the other messages of this turn of the event loop (batched-messages.ts). */
  readonly post: (message: ToCompiledWorker) => void;

  constructor(data: object, budgetMs: number, onExit: (w: PoolWorker) => void) {
    const watch = new SharedArrayBuffer(RunWatch.BYTES);
    this.watch = new RunWatch(watch);
    this.budgetMs = budgetMs;
    this.worker = new Worker(new URL('./compiled-worker.ts', import.meta.url), { workerData: { ...data, watch }, name: 'waf-compiled' });
    // (a worker that has exited ignores what is posted to it: its callers were failed on exit)
    this.post = batchedMessages<ToCompiledWorker>(this.worker);
    this.worker.unref();
    let startup: { resolve(): void; reject(e: Error): void } | undefined;
    this.ready = new Promise<void>((resolve, reject) => {
      startup = { resolve, reject };
    });
    this.ready.catch(() => {});
    this.worker.on('message', (m: FromCompiledWorker) => {
      if (m.type === 'ready') startup?.resolve();
      else if (m.type === 'loadError') startup?.reject(new Error(m.message));
      else if (m.type === 'batch') for (const reply of m.messages) this.settle(reply);
      else this.settle(m);
    });
    this.worker.on('error', (error) => {
      startup?.reject(error);
      this.failAll(new WafUnavailableError(`compiled WAF worker failed: ${error.message}`));
    });
    this.worker.on('exit', () => {
      this.dead = true;
      startup?.reject(new Error('compiled WAF worker exited before it was ready'));
      this.failAll(new WafUnavailableError('compiled WAF worker exited'));
      onExit(this);
    });
  }

  call(message: Call): Promise<{ verdict: WafVerdict; exchange?: number | undefined }> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) this.startWatching();
      this.pending.set(id, { resolve, reject });
      this.post({ ...message, id } as ToCompiledWorker);
    });
  }

  failAll(error: Error): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    this.stopWatching();
    for (const p of all) p.reject(error);
  }

  private settle(reply: CompiledReply): void {
    const p = this.pending.get(reply.id);
    if (!p) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.stopWatching();
    if (reply.type === 'result') return p.resolve({ verdict: reply.verdict, exchange: reply.exchange });
    const e = new Error(reply.message) as Error & { code?: string };
    if (reply.code) e.code = reply.code;
    p.reject(e);
  }

  private startWatching(): void {
    this.worker.ref();
    this.seen = { request: -1, since: 0 };
    // A quarter of the budget between checks: a runaway is caught within 1.25 budgets.
    this.watchdog = setInterval(() => this.check(), Math.max(10, this.budgetMs / 4));
    this.watchdog.unref();
  }

  private stopWatching(): void {
    clearInterval(this.watchdog);
    this.watchdog = undefined;
    this.worker.unref();
  }

  private check(): void {
    const request = this.watch.running();
    const now = performance.now();
    if (request !== this.seen.request) {
      this.seen = { request, since: now };
      return;
    }
    if (request === -1 || now - this.seen.since <= this.budgetMs) return;
    // One request has run past its budget: a runaway regular expression cannot be interrupted
    // inside the worker, so the worker goes (and is replaced).
    this.failAll(new WafUnavailableError(`WAF request exceeded its ${this.budgetMs} ms budget`));
    void this.worker.terminate();
  }
}

class WorkerPool {
  private readonly workers: PoolWorker[] = [];
  private readonly data: object;
  private readonly budgetMs: number;
  private readonly admission: FairAdmission;
  private closed = false;

  constructor(options: CompiledEngineOptions, count: number) {
    this.admission = new FairAdmission({
      slots: (options.inFlightPerWorker ?? DEFAULT_IN_FLIGHT_PER_WORKER) * count,
      queueLength: options.queueLength ?? DEFAULT_QUEUE_PER_WORKER * count,
      maxWaitMs: options.maxQueueWaitMs ?? DEFAULT_MAX_QUEUE_WAIT_MS,
    });
    this.budgetMs = options.requestBudgetMs ?? 250;
    this.data = { options: rulesOptions(options), exchangeTimeoutMs: options.exchangeTimeoutMs ?? 120_000 };
    for (let i = 0; i < count; i++) this.workers.push(this.spawn());
  }

  private spawn(): PoolWorker {
    return new PoolWorker(this.data, this.budgetMs, (dead) => {
      const index = this.workers.indexOf(dead);
      if (index >= 0 && !this.closed) this.workers[index] = this.spawn();
    });
  }

  async ready(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.ready));
  }

  /** A request: admitted fairly, then run by the least busy worker. */
  async request(message: Extract<Call, { type: 'request' }>): Promise<{ verdict: WafVerdict; exchange?: number | undefined; worker: PoolWorker }> {
    if (this.closed) throw new WafUnavailableError('WAF engine closed');
    const admitted = this.admission.enter(message.request.clientIp);
    if (admitted !== undefined) await admitted;
    try {
      let w: PoolWorker | undefined;
      for (const c of this.workers) if (!c.dead && (w === undefined || c.pending.size < w.pending.size)) w = c;
      if (this.closed || w === undefined) throw new WafUnavailableError('WAF engine closed');
      const r = await w.call(message);
      return { ...r, worker: w };
    } finally {
      this.admission.leave();
    }
  }

  /** An exchange's response: on the worker that holds its transaction. */
  async response(message: Extract<Call, { type: 'response' }>, worker: PoolWorker): Promise<{ verdict: WafVerdict }> {
    if (this.closed) throw new WafUnavailableError('WAF engine closed');
    if (worker.dead) throw new WafUnavailableError('the compiled WAF worker of this exchange is gone');
    return worker.call(message);
  }

  send(worker: PoolWorker, message: ToCompiledWorker): void {
    if (!worker.dead) worker.post(message);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.admission.close(new WafUnavailableError('WAF engine closed'));
    const all = this.workers.splice(0);
    for (const w of all) w.failAll(new WafUnavailableError('WAF engine closed'));
    await Promise.all(all.map((w) => w.worker.terminate()));
  }
}
