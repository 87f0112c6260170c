/**
 * The WAF engines' worker pool: an engine's inspector (its compiled rule set) runs in worker
 * threads, off the proxies' event loops. Both engines use it: each thread loads its own copy of
 * the rule set (compiled-engine.ts: closures cannot cross isolates; ModSecurity: a rule set is not
 * safe to evaluate from several threads at once), so memory is threads x one rule set whatever the
 * number of proxies. The thread side is inspector-worker.ts.
 *
 * Scheduling: requests are admitted fairly by what they cost (fair-admission.ts): `inFlightPerWorker`
 * per thread at once, `queueLength` more waiting, shed per tenant and client with
 * WafOverloadedError past that or after `maxQueueWaitMs` (the proxy applies its `waf.failMode`)
 * rather than queueing without bound. Each thread reports the CPU time of each request, charged
 * to its client and its tenant (`WafRequest.tenant`); a request that ran past its budget is
 * charged at least the budget. The expensive clients of a tenant together have at most half the
 * threads' worth of requests in flight. An admitted request goes to the thread with the least
 * work queued, reckoned in what its requests' clients usually cost (so that a cheap request does
 * not queue behind an expensive one when another thread is free); an exchange's response goes to
 * the thread that holds its transaction, without a second admission. Messages to a thread
 * go batched per turn of the event loop (batched-messages.ts). Only `limit + 1` bytes of a body
 * are posted (the one byte over tells the engine that the limit was passed). A request's settings
 * go to a thread once per settings object (a proxy hands the same object with each request until
 * its configuration changes); later requests name them by id (protocol.ts).
 *
 * Budget: `requestBudgetMs` goes to the threads, whose engine ends a transaction past it by itself
 * (cooperatively, between rules and values: compiled engine) and fails that one request with
 * WafBudgetExceededError; the thread and its other requests go on.
 *
 * Failures: a thread that dies fails its requests with WafUnavailableError and is replaced (unless
 * it never got ready: rules that do not load would only fail again). With `runawayMs`, a request
 * that runs past that much wall time (its own run, `RunWatch`, not its wait behind others) has its
 * thread terminated and replaced, failing every request the thread held: the backstop for a step
 * no engine can interrupt from inside (ModSecurity has no cooperative budget: this is its only
 * bound). Each replacement is reported (`onThreadRestart`) with its cause.
 */
import { Worker } from 'node:worker_threads';
import type { WafEngineSettings, WafEngineVerdict, WafExchange, WafRequest, WafResponse } from '../engine.ts';
import { flatHeaders, WafBudgetExceededError, WafSettingsError, WafUnavailableError } from '../engine.ts';
import { batchedMessages } from './batched-messages.ts';
import { clock } from './clock.ts';
import { isBudgetOverrun } from '../budget-overrun.ts';
import {
  type AdmissionTicket,
  DEFAULT_IN_FLIGHT_PER_WORKER,
  DEFAULT_MAX_QUEUE_WAIT_MS,
  DEFAULT_QUEUE_PER_WORKER,
  FairAdmission,
} from './fair-admission.ts';
import {
  bodyText,
  END,
  FORGET_SETTINGS,
  REQUEST,
  RESPONSE,
  RESULT,
  unpackVerdict,
  type FromPoolWorker,
  type PoolReply,
  type PoolWorkerData,
  type RequestMessage,
  type ResponseMessage,
  type ToPoolWorker,
} from './protocol.ts';
import { RunWatch } from './run-watch.ts';

/** The scheduling options an engine passes on from its own (the defaults are the pool's). */
export interface PoolSchedulingOptions {
  /** Requests handed to each thread at once; default 32 (DEFAULT_IN_FLIGHT_PER_WORKER says why). */
  readonly inFlightPerWorker?: number;
  /** Requests waiting for a thread, all clients together, before they are shed per client; default 64 per thread. */
  readonly queueLength?: number;
  /** Longest wait for a thread before a request is shed; default 1000 ms. */
  readonly maxQueueWaitMs?: number;
  /** Share of the threads' time one expensive client may use; default 0.02 (DEFAULT_EXPENSIVE_CLIENT_SHARE says why). */
  readonly expensiveClientShare?: number;
  /** An exchange whose response never comes is ended after this long (and up to a quarter of it, at most a second, more); default 120 s. */
  readonly exchangeTimeoutMs?: number;
  /**
   * Backstop: a request still running after this much of its own run (queueing excluded) has its
   * thread terminated and replaced, failing every request that thread held; absent: never.
   */
  readonly runawayMs?: number | undefined;
  /** Called when a thread is replaced, with why: `runaway` (terminated past runawayMs) or `crash` (it died). */
  readonly onThreadRestart?: ((cause: WafThreadRestartCause) => void) | undefined;
}

/** Why a pool thread was replaced. */
export type WafThreadRestartCause = 'runaway' | 'crash';

/** The pool options that are not the engine's rule-set options (engines strip them from what their threads load). */
export const POOL_OPTION_NAMES = [
  'inFlightPerWorker',
  'queueLength',
  'maxQueueWaitMs',
  'expensiveClientShare',
  'exchangeTimeoutMs',
  'runawayMs',
  'onThreadRestart',
] as const satisfies readonly (keyof PoolSchedulingOptions)[];

export interface WorkerPoolOptions<Options> extends PoolSchedulingOptions {
  /** The engine's thread module: it calls serveInspector() (inspector-worker.ts). */
  readonly script: URL;
  /** The threads' name (CPU profiles, bench/waf's per-thread figures): waf-compiled, waf-modsecurity. */
  readonly threadName: string;
  /** The engine as error messages name it: "compiled", "ModSecurity". */
  readonly engineName: string;
  readonly workers: number;
  /** What each thread's inspector loads (posted as is). */
  readonly rules: Options;
  /** Body bytes the engine inspects (rule-set.ts resolvedLimits()): only limit + 1 are posted. */
  readonly limits: { readonly request: number; readonly response: number };
  /** Each request's inspection budget, passed to the threads' engine (it ends the transaction past it); absent: none. */
  readonly requestBudgetMs?: number | undefined;
}

/** A message that gets an answer: its id (element 1) is set when it is sent. */
type Call = RequestMessage | ResponseMessage;
/** `exchange`: the thread's open transaction of a request, 0 when it kept none. */
type Result = { verdict: WafEngineVerdict; exchange: number };
/** What a request's promise resolves with, made from its result and the thread that answered it. */
type Outcome<T> = (result: Result, worker: PoolWorker) => T;

/** How a call's answer is taken: one of the two is called, once. */
interface Answer {
  resolve(value: Result): void;
  reject(error: Error): void;
}

interface Pending extends Answer {
  /** The thread's CPU time for this call, when it said. */
  cost: ((cpuMs: number) => void) | undefined;
  /** What the call was reckoned to cost, in this thread's `queuedMs` until it is settled. */
  readonly estimateMs: number;
}

class PoolWorker {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();
  /** What the calls pending on this thread are reckoned to cost together (ms). */
  queuedMs = 0;
  /** The pool's settings ids this thread was sent (protocol.ts `settingsId`). */
  readonly settingsSent = new Set<number>();
  readonly ready: Promise<void>;
  /** Got ready once (a thread that never did is not replaced). */
  wasReady = false;
  dead = false;
  /** Posts with the other messages of this turn of the event loop (batched-messages.ts). */
  readonly post: (message: ToPoolWorker) => void;
  private nextId = 1;
  private readonly engineName: string;
  private readonly watch: RunWatch;
  private readonly runawayMs: number | undefined;
  /** Set when the watchdog terminated the thread (its exit is then a `runaway` restart, not a crash). */
  terminatedAsRunaway = false;
  /**
   * Checks the running request while any is pending (with a budget). Once started it stays until
   * a check finds the thread idle: a thread that is idle between two turns' batches (most are,
   * under load) does not make and clear a timer each time.
   */
  private watchdog: NodeJS.Timeout | undefined;
  /** The request seen running at the last check, and since when (this thread's clock). */
  private seen = { request: -1, since: 0 };

  constructor(options: WorkerPoolOptions<unknown>, onExit: (worker: PoolWorker) => void) {
    const watch = new SharedArrayBuffer(RunWatch.BYTES);
    this.watch = new RunWatch(watch);
    this.runawayMs = options.runawayMs;
    this.engineName = options.engineName;
    const data: PoolWorkerData<unknown> = {
      options: options.rules,
      exchangeTimeoutMs: options.exchangeTimeoutMs ?? 120_000,
      watch,
      budgetMs: options.requestBudgetMs ?? 0,
    };
    this.worker = new Worker(options.script, { workerData: data, name: options.threadName });
    // (a thread that has exited ignores what is posted to it: its callers were failed on exit)
    this.post = batchedMessages<ToPoolWorker>(this.worker);
    this.worker.unref();
    let startup: { resolve(): void; reject(e: Error): void } | undefined;
    this.ready = new Promise<void>((resolve, reject) => {
      startup = { resolve, reject };
    });
    this.ready.catch(() => {});
    this.worker.on('message', (m: FromPoolWorker) => {
      if (Array.isArray(m)) return this.settle(m);
      switch (m.type) {
        case 'ready':
          this.wasReady = true;
          startup?.resolve();
          return;
        case 'loadError':
          startup?.reject(new Error(m.message));
          return;
        case 'batch':
          for (const reply of m.messages) this.settle(reply);
          return;
      }
    });
    this.worker.on('error', (error) => {
      startup?.reject(error);
      this.failAll(new WafUnavailableError(`${this.engineName} WAF worker failed: ${error.message}`));
    });
    this.worker.on('exit', (code) => {
      this.dead = true;
      startup?.reject(new Error(`${this.engineName} WAF worker exited (code ${code}) before it was ready`));
      this.failAll(new WafUnavailableError(`${this.engineName} WAF worker exited (code ${code})`));
      onExit(this);
    });
  }

  /**
   * What a request sent now waits for, reckoned in ms: the work queued, and a thread that is still
   * loading its rule set (a replacement) as if it had a second of work.
   */
  workAhead(): number {
    return this.wasReady ? this.queuedMs : this.queuedMs + 1000;
  }

  /** Sends `message`; `answer` gets the thread's answer, or the error that means there is none. */
  call(message: Call, answer: Answer, estimateMs = 0, cost?: (cpuMs: number) => void): void {
    const id = this.nextId++;
    // A thread keeps the process alive only while it has work, like a socket with a request.
    if (this.pending.size === 0) this.busy();
    this.pending.set(id, { resolve: answer.resolve, reject: answer.reject, cost, estimateMs });
    this.queuedMs += estimateMs;
    message[1] = id;
    this.post(message);
  }

  failAll(error: Error): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    this.queuedMs = 0;
    this.idle();
    this.stopWatchdog();
    for (const p of all) p.reject(error);
  }

  private settle(reply: PoolReply): void {
    const id = reply[1];
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    this.queuedMs = this.pending.size === 0 ? 0 : this.queuedMs - p.estimateMs;
    if (this.pending.size === 0) this.idle();
    const cpuMs = reply[2];
    if (cpuMs !== undefined) p.cost?.(cpuMs);
    if (reply[0] === RESULT) return p.resolve({ verdict: unpackVerdict(reply[4]), exchange: reply[3] });
    const [, , , message, , code] = reply;
    if (code === 'ERR_WAF_SETTINGS') return p.reject(new WafSettingsError(message));
    if (code === 'ERR_WAF_BUDGET') return p.reject(new WafBudgetExceededError(message));
    const error = new Error(message) as Error & { code?: string };
    if (code) error.code = code;
    p.reject(error);
  }

  private busy(): void {
    this.worker.ref();
    const runawayMs = this.runawayMs;
    if (runawayMs === undefined) return;
    this.seen.request = -1;
    this.seen.since = 0;
    if (this.watchdog !== undefined) return;
    // A quarter of the bound between checks: a runaway is caught within 1.25 bounds.
    this.watchdog = setInterval(() => this.check(runawayMs), Math.max(10, runawayMs / 4));
    this.watchdog.unref();
  }

  private idle(): void {
    this.worker.unref();
  }

  private stopWatchdog(): void {
    clearInterval(this.watchdog);
    this.watchdog = undefined;
  }

  private check(runawayMs: number): void {
    if (this.pending.size === 0) return this.stopWatchdog();
    const request = this.watch.running();
    const now = clock.now();
    if (request !== this.seen.request) {
      this.seen = { request, since: now };
      return;
    }
    if (request === -1 || now - this.seen.since <= runawayMs) return;
    // One request has run far past any budget: a step the engine cannot interrupt (a runaway
    // expression, a stuck native call), so the thread goes (and is replaced). Only that request
    // is a budget overrun (charged to its client, counted against it); the others are lost with it.
    this.terminatedAsRunaway = true;
    const runaway = this.pending.get(request);
    this.pending.delete(request);
    this.failAll(new WafUnavailableError(`the ${this.engineName} WAF thread was replaced: another request on it could not be interrupted`));
    runaway?.reject(new WafUnavailableError(`WAF request ran away (over ${runawayMs} ms): its thread was replaced`));
    void this.worker.terminate();
  }
}

export class WorkerPool<Options> {
  readonly workerCount: number;
  private readonly workers: PoolWorker[] = [];
  private readonly options: WorkerPoolOptions<Options>;
  private readonly admission: FairAdmission;
  private inFlight = 0;
  private closed = false;
  /** Settings objects' ids (protocol.ts `settingsId`); an id is dropped from the threads once its object is collected. */
  private readonly settingsIds = new WeakMap<WafEngineSettings, number>();
  private nextSettingsId = 1;
  private readonly settingsGone = new FinalizationRegistry<number>((id) => this.forgetSettings(id));

  constructor(options: WorkerPoolOptions<Options>) {
    const count = options.workers;
    if (!Number.isInteger(count) || count < 1 || count > 64) throw new RangeError('workers must be 1-64');
    this.options = options;
    this.workerCount = count;
    this.admission = new FairAdmission({
      slots: (options.inFlightPerWorker ?? DEFAULT_IN_FLIGHT_PER_WORKER) * count,
      queueLength: options.queueLength ?? DEFAULT_QUEUE_PER_WORKER * count,
      maxWaitMs: options.maxQueueWaitMs ?? DEFAULT_MAX_QUEUE_WAIT_MS,
      // Half the threads: the other half stays for everyone else, one thread at least.
      expensiveInFlight: Math.max(1, Math.floor(count / 2)),
      ...(options.expensiveClientShare === undefined ? {} : { expensiveClientShare: options.expensiveClientShare }),
      threads: count,
    });
    for (let i = 0; i < count; i++) this.workers.push(this.spawn());
  }

  /** Resolves when every thread has loaded the rule set (rejects with the engine's load error). */
  async ready(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.ready));
  }

  /** Requests (and responses) being inspected or waiting for a thread's answer. */
  get pending(): number {
    return this.inFlight;
  }

  inspectRequest(request: WafRequest, settings: WafEngineSettings): Promise<WafEngineVerdict> {
    return this.admitted(request, settings, false, verdictOf);
  }

  beginExchange(request: WafRequest, settings: WafEngineSettings): Promise<WafExchange> {
    return this.admitted(request, settings, true, this.exchangeOf);
  }

  /** The exchange of a request the thread answered: its response goes to the thread that holds its transaction. */
  private readonly exchangeOf: Outcome<WafExchange> = (result, worker) =>
    new PoolExchange(this as WorkerPool<unknown>, result.verdict, result.exchange, worker);

  /** Sends an exchange's response to the thread that holds its transaction. */
  inspectResponseOn(worker: PoolWorker, exchange: number, response: WafResponse): Promise<WafEngineVerdict> {
    if (this.closed) return Promise.reject(new WafUnavailableError('WAF engine closed'));
    if (worker.dead) return Promise.reject(new WafUnavailableError(`the ${this.options.engineName} WAF worker of this exchange is gone`));
    const body = response.body;
    const message: ResponseMessage = [
      RESPONSE,
      0,
      exchange,
      response.status,
      response.httpVersion,
      flatHeaders(response.headers),
      body && bodyText(body, this.options.limits.response + 1),
    ];
    return new Promise((resolve, reject) => {
      this.inFlight++;
      worker.call(message, {
        resolve: (result) => {
          this.inFlight--;
          resolve(result.verdict);
        },
        reject: (error) => {
          this.inFlight--;
          reject(error);
        },
      });
    });
  }

  /** Ends an exchange's transaction on its thread without a response. */
  endOn(worker: PoolWorker, exchange: number): void {
    if (!this.closed && !worker.dead) worker.post([END, exchange]);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.admission.close(new WafUnavailableError('WAF engine closed'));
    const all = this.workers.splice(0);
    for (const w of all) w.failAll(new WafUnavailableError('WAF engine closed'));
    await Promise.all(all.map((w) => w.worker.terminate()));
  }

  /** The id a settings object goes by to the threads (protocol.ts), made on its first request. */
  private settingsId(settings: WafEngineSettings): number {
    let id = this.settingsIds.get(settings);
    if (id === undefined) {
      id = this.nextSettingsId++;
      this.settingsIds.set(settings, id);
      this.settingsGone.register(settings, id);
    }
    return id;
  }

  /** A settings object no request can have any more: the threads that have it drop it. */
  private forgetSettings(id: number): void {
    for (const worker of this.workers) {
      if (worker.settingsSent.delete(id) && !worker.dead) worker.post([FORGET_SETTINGS, id]);
    }
  }

  private spawn(): PoolWorker {
    return new PoolWorker(this.options as WorkerPoolOptions<unknown>, (dead) => {
      const index = this.workers.indexOf(dead);
      if (index < 0 || this.closed || !dead.wasReady) return;
      this.workers[index] = this.spawn();
      this.options.onThreadRestart?.(dead.terminatedAsRunaway ? 'runaway' : 'crash');
    });
  }

  /**
   * A request's run once fair admission gave it a place, on the least busy thread. One promise per
   * request, resolved with what the caller wants of the thread's answer (`outcome`): the rest is
   * callbacks (each promise and each await on the loop is a microtask or more).
   */
  private admitted<T>(request: WafRequest, settings: WafEngineSettings, keepOpen: boolean, outcome: Outcome<T>): Promise<T> {
    try {
      if (this.closed) throw new WafUnavailableError('WAF engine closed');
      const entered = this.admission.enter(request.clientIp, request.tenant, request.body?.length ?? 0);
      if (entered instanceof Promise) return entered.then((ticket) => this.dispatch(ticket, request, settings, keepOpen, outcome));
      return this.dispatch(entered, request, settings, keepOpen, outcome);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Sends an admitted request to the thread with the least work ahead; its ticket is left when the answer (or failure) comes. */
  private dispatch<T>(
    ticket: AdmissionTicket,
    request: WafRequest,
    settings: WafEngineSettings,
    keepOpen: boolean,
    outcome: Outcome<T>,
  ): Promise<T> {
    let charged = false;
    const charge = (cpuMs: number): void => {
      charged = true;
      this.admission.charge(ticket, cpuMs);
    };
    const failed = (error: Error): void => {
      // A thread ended by the watchdog reports nothing: the request ran at least that long.
      if (!charged && isBudgetOverrun(error)) charge(this.options.runawayMs ?? this.options.requestBudgetMs ?? 0);
      this.admission.leave(ticket);
    };
    return new Promise<T>((resolve, reject) => {
      let worker: PoolWorker | undefined;
      try {
        const estimateMs = this.admission.estimatedCostMs(ticket);
        for (const w of this.workers) {
          if (w.dead) continue;
          if (
            worker === undefined ||
            w.workAhead() < worker.workAhead() ||
            (w.workAhead() === worker.workAhead() && w.pending.size < worker.pending.size)
          )
            worker = w;
        }
        if (this.closed || worker === undefined) throw new WafUnavailableError('WAF engine closed');
        const body = request.body;
        const settingsId = this.settingsId(settings);
        // A thread gets a settings object once; later requests name it.
        const first = !worker.settingsSent.has(settingsId);
        if (first) worker.settingsSent.add(settingsId);
        const message: RequestMessage = [
          REQUEST,
          0,
          settingsId,
          keepOpen,
          request.clientIp,
          request.clientPort,
          request.serverIp,
          request.serverPort,
          request.method,
          request.uri,
          request.path,
          request.httpVersion,
          flatHeaders(request.headers),
          body && bodyText(body, this.options.limits.request + 1),
          request.id,
          first ? settings : undefined,
        ];
        const chosen = worker;
        this.inFlight++;
        chosen.call(
          message,
          {
            resolve: (result) => {
              this.inFlight--;
              this.admission.leave(ticket);
              resolve(outcome(result, chosen));
            },
            reject: (error) => {
              this.inFlight--;
              failed(error);
              reject(error);
            },
          },
          estimateMs,
          charge,
        );
      } catch (error) {
        failed(error as Error);
        reject(error);
      }
    });
  }
}

const verdictOf: Outcome<WafEngineVerdict> = (result) => result.verdict;

/**
 * A request whose thread keeps its transaction for the response (`exchange`, 0 when it kept
 * none). One object per request, its methods on the prototype: no closures made per request.
 */
class PoolExchange implements WafExchange {
  readonly requestVerdict: WafEngineVerdict;
  private readonly pool: WorkerPool<unknown>;
  private readonly exchange: number;
  private readonly worker: PoolWorker;
  private done: boolean;

  constructor(pool: WorkerPool<unknown>, requestVerdict: WafEngineVerdict, exchange: number, worker: PoolWorker) {
    this.pool = pool;
    this.requestVerdict = requestVerdict;
    this.exchange = exchange;
    this.worker = worker;
    this.done = exchange === 0;
  }

  inspectResponse(response: WafResponse): Promise<WafEngineVerdict> {
    // A request the rules interrupted has no response to inspect. Otherwise an exchange has one
    // response: a second call, or one for a transaction the thread did not keep, has nothing to
    // inspect it with, and says so (the proxy applies its failMode).
    if (this.exchange === 0 && this.requestVerdict.interrupt !== undefined) return Promise.resolve({ matchedRules: [] });
    if (this.done) return Promise.reject(new WafUnavailableError('this WAF exchange has no open transaction'));
    this.done = true;
    return this.pool.inspectResponseOn(this.worker, this.exchange, response);
  }

  end(): void {
    if (this.done) return;
    this.done = true;
    this.pool.endOn(this.worker, this.exchange);
  }
}
