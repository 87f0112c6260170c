/**
 * What a proxy's rate limit counts with when the shared counter store (Redis, several edge nodes)
 * does not answer: a refused connection, an error, or no answer within the client's command timeout
 * (TPS_RATE_LIMIT_STORE_TIMEOUT_MS). An attacker who can make Redis slow must not thereby remove
 * every tenant's rate limit, so the node-wide failure mode (TPS_RATE_LIMIT_STORE_FAILURE_MODE)
 * decides every such request, and each one is reported (`onDecided`: a counter):
 *
 * - `local` (default): the request is counted in the node's own counters (the shared-memory store
 *   the single-node mode uses), so each node still holds the limit on what it serves: degraded
 *   (a client spread over N nodes gets up to N times the limit), never gone.
 * - `closed`: the store's answer is an `RateLimitStoreUnavailableError` (the phase answers 503).
 * - `open`: the request counts nowhere and passes.
 *
 * After a failure the shared store is not asked again for `retryMs` but by one probe request at a
 * time (the circuit, shared by every proxy of the thread): during an outage requests are decided at
 * once rather than each waiting out the timeout, and commands cannot pile up behind a stalled Redis.
 */
import type { RateHit, RateLimitStore } from './rate-store.ts';
import type { RateLimitStoreFailureMode } from './types.ts';

export type { RateLimitStoreFailureMode };

/** The shared store did not answer and the failure mode is `closed`. */
export class RateLimitStoreUnavailableError extends Error {
  constructor(cause: string) {
    super(`the shared rate-limit store did not answer: ${cause}`);
    this.name = 'RateLimitStoreUnavailableError';
  }
}

export interface StoreCircuitOptions {
  /** How long after a failure the next probe goes to the shared store. Default 1,000 ms. */
  retryMs?: number;
  now?: () => number;
  /** The store started failing (`failing`, with the first error) or answers again. */
  onChange?: (failing: boolean, cause: string) => void;
}

/** Whether a thread's shared store answers, as its last answers say; one for every proxy of the thread. */
export class StoreCircuit {
  readonly #retryMs: number;
  readonly #now: () => number;
  readonly #onChange: ((failing: boolean, cause: string) => void) | undefined;
  #failing = false;
  #nextProbeAt = 0;
  #cause = '';

  constructor(options: StoreCircuitOptions = {}) {
    this.#retryMs = options.retryMs ?? 1000;
    this.#now = options.now ?? Date.now;
    this.#onChange = options.onChange;
  }

  get failing(): boolean {
    return this.#failing;
  }

  /** Why the store failed last. */
  get cause(): string {
    return this.#cause;
  }

  /** Whether this request may ask the shared store: always while it answers; else one probe per `retryMs`. */
  mayAsk(): boolean {
    if (!this.#failing) return true;
    const now = this.#now();
    if (now < this.#nextProbeAt) return false;
    // One probe: the next waits for its answer's outcome or another `retryMs`.
    this.#nextProbeAt = now + this.#retryMs;
    return true;
  }

  answered(): void {
    if (!this.#failing) return;
    this.#failing = false;
    this.#onChange?.(false, this.#cause);
  }

  failed(error: unknown): void {
    this.#cause = error instanceof Error ? error.message : String(error);
    this.#nextProbeAt = this.#now() + this.#retryMs;
    if (this.#failing) return;
    this.#failing = true;
    this.#onChange?.(true, this.#cause);
  }
}

/** One log line's worth of requests the failure mode decided. */
export interface StoreFailureSummary {
  mode: RateLimitStoreFailureMode;
  /** Requests decided since the previous line (this one included). */
  requests: number;
  cause: string;
}

export interface FailoverRateLimitStoreOptions {
  mode: RateLimitStoreFailureMode;
  /** Periods the stores count (the proxy's thresholds). */
  periods: number;
  circuit: StoreCircuit;
  /** Every request the failure mode decided (a counter). */
  onDecided: (mode: RateLimitStoreFailureMode) => void;
  /** At most once per `logIntervalMs`: a log line, never one per request under a flood. */
  onLog: (summary: StoreFailureSummary) => void;
  /** Default 10,000 ms. */
  logIntervalMs?: number;
  now?: () => number;
}

export class FailoverRateLimitStore implements RateLimitStore {
  readonly #shared: RateLimitStore;
  readonly #local: RateLimitStore;
  readonly #options: FailoverRateLimitStoreOptions;
  readonly #logIntervalMs: number;
  readonly #now: () => number;
  readonly #uncounted: RateHit;
  #loggedAt = Number.NEGATIVE_INFINITY;
  #unlogged = 0;

  /** `local`: the node's own counters for the same periods, used in `local` mode only. */
  constructor(shared: RateLimitStore, local: RateLimitStore, options: FailoverRateLimitStoreOptions) {
    this.#shared = shared;
    this.#local = local;
    this.#options = options;
    this.#logIntervalMs = options.logIntervalMs ?? 10_000;
    this.#now = options.now ?? Date.now;
    this.#uncounted = Object.freeze({ blockedUntil: 0, estimates: new Float64Array(options.periods) });
  }

  hit(key: string, now: number): RateHit | Promise<RateHit> {
    const circuit = this.#options.circuit;
    if (!circuit.mayAsk()) return this.#decide(key, now);
    let answer: RateHit | Promise<RateHit>;
    try {
      answer = this.#shared.hit(key, now);
    } catch (error) {
      circuit.failed(error);
      return this.#decide(key, now);
    }
    if (!(answer instanceof Promise)) {
      circuit.answered();
      return answer;
    }
    return answer.then(
      (hit) => {
        circuit.answered();
        return hit;
      },
      (error: unknown) => {
        circuit.failed(error);
        return this.#decide(key, now);
      },
    );
  }

  /**
   * A block that cannot be written to the shared store is written to the node's own counters: the
   * request that crossed the threshold is refused either way, and in `local` mode the block holds on
   * this node. Never rejects: a failed write must not turn a refusal into a pass.
   */
  block(key: string, until: number): void | Promise<void> {
    const circuit = this.#options.circuit;
    // While the store fails, a block follows a request counted here: it belongs here too.
    if (circuit.failing) return this.#local.block(key, until);
    let written: void | Promise<void>;
    try {
      written = this.#shared.block(key, until);
    } catch (error) {
      circuit.failed(error);
      return this.#local.block(key, until);
    }
    if (!(written instanceof Promise)) return;
    return written.then(
      () => circuit.answered(),
      (error: unknown) => {
        circuit.failed(error);
        return this.#local.block(key, until);
      },
    );
  }

  get size(): number {
    return this.#local.size;
  }

  #decide(key: string, now: number): RateHit | Promise<RateHit> {
    const { mode, onDecided } = this.#options;
    onDecided(mode);
    this.#log(mode);
    if (mode === 'local') return this.#local.hit(key, now);
    if (mode === 'open') return this.#uncounted;
    return Promise.reject(new RateLimitStoreUnavailableError(this.#options.circuit.cause));
  }

  #log(mode: RateLimitStoreFailureMode): void {
    this.#unlogged++;
    const now = this.#now();
    if (now - this.#loggedAt < this.#logIntervalMs) return;
    this.#loggedAt = now;
    const requests = this.#unlogged;
    this.#unlogged = 0;
    this.#options.onLog({ mode, requests, cause: this.#options.circuit.cause });
  }
}
