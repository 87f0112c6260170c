/**
 * The ModSecurity engine: ModSecurity v3 + the OWASP CRS behind the WafEngine interface, run off
 * the event loop in a pool of worker threads. ModSecurity costs about 1.3 ms of CPU for a benign
 * GET and 5 ms for a 1 KB form POST at paranoia 1; on the proxy's thread that would stall every
 * other proxy of the process.
 *
 * Rules: each worker compiles the rule set once at start (about 50 ms and 18 MB for the CRS) and
 * every proxy shares it: paranoia level, anomaly threshold and exclusions are per-transaction data
 * (modsecurity-inspect.ts, exclusions.ts). The copy is per worker, not per proxy, because a
 * ModSecurity rule set is not safe to evaluate from several threads at once (lazily built @pm
 * automata, the non-locked collection reads), so memory is workers x one CRS whatever the number of
 * proxies.
 *
 * Scheduling: requests are admitted fairly (fair-admission.ts): `inFlightPerWorker` per worker at
 * once, `queueLength` more waiting, shed per client with WafOverloadedError past that or after
 * `maxQueueWaitMs` (the proxy applies its `waf.failMode`) rather than queueing without bound. An
 * admitted request goes to the worker with the fewest requests in flight; an exchange's response
 * goes to the worker that holds its transaction, without a second admission. A worker that dies
 * fails its requests with WafUnavailableError and is replaced.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { WafEngine, WafExchange, WafRequest, WafResponse, WafSettings, WafVerdict } from './engine.ts';
import { WafSettingsError, WafUnavailableError } from './engine.ts';
import { DEFAULT_IN_FLIGHT_PER_WORKER, DEFAULT_MAX_QUEUE_WAIT_MS, DEFAULT_QUEUE_PER_WORKER, FairAdmission } from './fair-admission.ts';
import type { ModSecurityRulesOptions } from './modsecurity-config.ts';
import { resolvedLimits } from './modsecurity-config.ts';
import { checkSettings } from './modsecurity-inspect.ts';
import type { ToWorker, WorkerData } from './modsecurity-worker.ts';

export interface ModSecurityEngineOptions extends ModSecurityRulesOptions {
  /** Worker threads; default min(available CPUs, 4). */
  readonly workers?: number;
  /** Requests handed to each worker at once; default 8. */
  readonly inFlightPerWorker?: number;
  /** Requests waiting for a worker, all clients together, before they are shed per client; default 64 per worker. */
  readonly queueLength?: number;
  /** Longest wait for a worker before a request is shed; default 1000 ms. */
  readonly maxQueueWaitMs?: number;
  /** An exchange whose response never comes is closed after this long; default 120 s. */
  readonly exchangeTimeoutMs?: number;
}

type Reply = { type: 'result'; id: number; verdict: WafVerdict; exchange?: number } | { type: 'failure'; id: number; message: string; name: string; code?: string };
type FromWorker = { type: 'ready'; ruleCount: number } | { type: 'loadError'; message: string } | Reply | { type: 'batch'; messages: Reply[] };

/** A message to the worker without its id (the pool numbers them). */
type Call = Extract<ToWorker, { id: number }> extends infer T ? (T extends unknown ? Omit<T, 'id'> : never) : never;

interface Pending {
  resolve(value: { verdict: WafVerdict; exchange?: number | undefined }): void;
  reject(error: Error): void;
}

class PoolWorker {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();
  readonly ready: Promise<number>;
  generation: number;
  wasReady = false;
  private nextId = 1;
  private onExit: ((worker: PoolWorker) => void) | undefined;

  constructor(data: WorkerData, generation: number, onExit: (worker: PoolWorker) => void) {
    this.generation = generation;
    this.onExit = onExit;
    this.worker = new Worker(new URL('./modsecurity-worker.ts', import.meta.url), { workerData: data, name: 'waf-modsecurity' });
    this.worker.unref();
    let startup: { resolve(n: number): void; reject(e: Error): void } | undefined;
    this.ready = new Promise<number>((resolve, reject) => {
      startup = { resolve, reject };
    });
    this.ready.catch(() => {});
    this.worker.on('message', (message: FromWorker) => {
      switch (message.type) {
        case 'ready':
          this.wasReady = true;
          startup?.resolve(message.ruleCount);
          break;
        case 'loadError':
          startup?.reject(new Error(message.message));
          break;
        case 'batch':
          for (const reply of message.messages) this.settle(reply);
          break;
        default:
          this.settle(message);
      }
    });
    this.worker.on('error', (error) => {
      startup?.reject(error);
      this.failAll(new WafUnavailableError(`ModSecurity worker failed: ${error.message}`));
    });
    this.worker.on('exit', (code) => {
      startup?.reject(new Error(`ModSecurity worker exited (code ${code}) before it was ready`));
      this.failAll(new WafUnavailableError(`ModSecurity worker exited (code ${code})`));
      const cb = this.onExit;
      this.onExit = undefined;
      cb?.(this);
    });
  }

  /** A reply to its caller (the wrappers `call` puts in `pending` forget the call and unref the worker). */
  private settle(reply: Reply): void {
    const p = this.pending.get(reply.id);
    if (!p) return;
    if (reply.type === 'result') return p.resolve({ verdict: reply.verdict, exchange: reply.exchange });
    const error = reply.code === 'ERR_WAF_SETTINGS' ? new WafSettingsError(reply.message) : new Error(reply.message);
    if (reply.code && !(error instanceof WafSettingsError)) (error as Error & { code?: string }).code = reply.code;
    p.reject(error);
  }

  call(message: Call): Promise<{ verdict: WafVerdict; exchange?: number | undefined }> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      // A worker keeps the process alive only while it has work, like a socket with a request.
      if (this.pending.size === 0) this.worker.ref();
      const done = (): void => {
        this.pending.delete(id);
        if (this.pending.size === 0) this.worker.unref();
      };
      this.pending.set(id, {
        resolve: (value) => {
          done();
          resolve(value);
        },
        reject: (error) => {
          done();
          reject(error);
        },
      });
      try {
        this.worker.postMessage({ ...message, id });
      } catch (error) {
        done();
        reject(error as Error);
      }
    });
  }

  send(message: ToWorker): void {
    try {
      this.worker.postMessage(message);
    } catch {
      // worker gone: its transactions went with it
    }
  }

  failAll(error: Error): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) p.reject(error);
  }

  async terminate(): Promise<void> {
    this.onExit = undefined;
    await this.worker.terminate();
  }
}

export class ModSecurityEngine implements WafEngine {
  readonly name = 'modsecurity';
  /** Number of worker threads. */
  readonly workerCount: number;
  private readonly workers: PoolWorker[] = [];
  private readonly data: WorkerData;
  private readonly admission: FairAdmission;
  private readonly limits: { request: number; response: number };
  private inFlight = 0;
  private closed = false;
  private generation = 0;

  /** Use createModSecurityEngine(), which waits until the rules are compiled. */
  constructor(options: ModSecurityEngineOptions = {}) {
    this.limits = resolvedLimits(options); // validate now, not in the workers
    const workers = options.workers ?? Math.min(availableParallelism(), 4);
    if (!Number.isInteger(workers) || workers < 1 || workers > 64) throw new RangeError('workers must be 1-64');
    this.workerCount = workers;
    this.admission = new FairAdmission({
      slots: (options.inFlightPerWorker ?? DEFAULT_IN_FLIGHT_PER_WORKER) * workers,
      queueLength: options.queueLength ?? DEFAULT_QUEUE_PER_WORKER * workers,
      maxWaitMs: options.maxQueueWaitMs ?? DEFAULT_MAX_QUEUE_WAIT_MS,
    });
    const { workers: _w, inFlightPerWorker: _i, queueLength: _q, maxQueueWaitMs: _m, exchangeTimeoutMs, ...rules } = options;
    this.data = { options: rules, exchangeTimeoutMs: exchangeTimeoutMs ?? 120_000 };
    for (let i = 0; i < workers; i++) this.workers.push(this.spawn());
  }

  /** Resolves when every worker has compiled the rule set (rejects with ModSecurity's load error). */
  async ready(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.ready));
  }

  /** Requests currently in flight across the pool. */
  get pending(): number {
    return this.inFlight;
  }

  async inspectRequest(request: WafRequest, settings: WafSettings): Promise<WafVerdict> {
    checkSettings(settings);
    const { verdict } = await this.admitted(request, settings, false);
    return verdict;
  }

  async beginExchange(request: WafRequest, settings: WafSettings): Promise<WafExchange> {
    checkSettings(settings);
    const { verdict, exchange, worker } = await this.admitted(request, settings, true);
    let done = exchange === undefined;
    const generation = worker.generation;
    return {
      requestVerdict: verdict,
      inspectResponse: async (response: WafResponse): Promise<WafVerdict> => {
        if (done || exchange === undefined) {
          done = true;
          return { matchedRules: [] };
        }
        done = true;
        if (this.closed || worker.generation !== generation || !this.workers.includes(worker)) {
          throw new WafUnavailableError('the ModSecurity worker of this exchange is gone');
        }
        const body = response.body;
        const sent = body && compactBody(body, this.limits.response + 1);
        const result = await this.run(worker, { type: 'response', exchange, response: sent === body ? response : { ...response, body: sent } });
        return result.verdict;
      },
      end: (): void => {
        if (done || exchange === undefined) return;
        done = true;
        if (!this.closed && this.workers.includes(worker)) worker.send({ type: 'end', exchange });
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.admission.close(new WafUnavailableError('WAF engine closed'));
    const workers = this.workers.splice(0);
    for (const w of workers) w.failAll(new WafUnavailableError('WAF engine closed'));
    await Promise.all(workers.map((w) => w.terminate()));
  }

  /** Only limit + 1 bytes of a body go to the worker (the +1 tells ModSecurity the limit was passed): never copy more. */
  private clipRequest(request: WafRequest): WafRequest {
    const body = request.body;
    const sent = body && compactBody(body, this.limits.request + 1);
    return sent === body ? request : { ...request, body: sent };
  }

  private spawn(): PoolWorker {
    return new PoolWorker(this.data, ++this.generation, (dead) => {
      // Replace a worker that died while serving; one that never got ready (rules do not load)
      // would only die again.
      const index = this.workers.indexOf(dead);
      if (index >= 0 && !this.closed && dead.wasReady) this.workers[index] = this.spawn();
    });
  }

  private pick(): PoolWorker {
    if (this.closed) throw new WafUnavailableError('WAF engine closed');
    let best = this.workers[0];
    for (const w of this.workers) if (best === undefined || w.pending.size < best.pending.size) best = w;
    if (!best) throw new WafUnavailableError('no WAF worker');
    return best;
  }

  /** A request's run once fair admission gave it a place (see the module comment). */
  private async admitted(
    request: WafRequest,
    settings: WafSettings,
    keepOpen: boolean,
  ): Promise<{ verdict: WafVerdict; exchange?: number | undefined; worker: PoolWorker }> {
    if (this.closed) throw new WafUnavailableError('WAF engine closed');
    const waiting = this.admission.enter(request.clientIp);
    if (waiting !== undefined) await waiting;
    try {
      const worker = this.pick();
      const result = await this.run(worker, { type: 'request', request: this.clipRequest(request), settings, keepOpen });
      return { ...result, worker };
    } finally {
      this.admission.leave();
    }
  }

  private async run(
    worker: PoolWorker,
    message: Call,
  ): Promise<{ verdict: WafVerdict; exchange?: number | undefined }> {
    if (this.closed) throw new WafUnavailableError('WAF engine closed');
    this.inFlight++;
    try {
      return await worker.call(message);
    } finally {
      this.inFlight--;
    }
  }
}

/**
 * The bytes of a body that go to a worker: at most `max`, in a buffer of their own. postMessage
 * copies a typed array's whole backing ArrayBuffer, and a body is often a small view into a big one
 * (an origin response chunk is a slice of a 64 KiB socket read buffer): sent as is, a 57-byte body
 * would cost a 64 KiB copy and allocation on both threads.
 */
function compactBody(body: Uint8Array, max: number): Uint8Array {
  const length = Math.min(body.length, max);
  if (body.byteOffset === 0 && length === body.buffer.byteLength) return body;
  return new Uint8Array(body.buffer, body.byteOffset, length).slice();
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
