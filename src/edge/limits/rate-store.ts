/**
 * Where rate-limit counters live. The limiter's policy (thresholds, blocks, episodes) is kept apart
 * from the counters so that a shared store (Redis, for several edge nodes) can replace the in-memory
 * one without touching the policy: a store only counts, estimates and remembers blocks.
 *
 * Every store counts with the same sliding-window estimate (src/edge/limits/sliding-window.ts):
 * two numbers per period and client, no per-request timestamps.
 */
import { WINDOW_PAIR_WORDS, countAndEstimate } from './sliding-window.ts';

export interface RateHit {
  /** > now: the client is blocked until then and this request was not counted. */
  blockedUntil: number;
  /** Sliding estimates of requests in each period (same order as the store's periods), this request included. */
  estimates: ArrayLike<number>;
}

export interface RateLimitStore {
  /**
   * Counts one request of `key` at `now` (ms) in every period and returns the estimates; when the
   * key is blocked, returns its block deadline without counting. The in-memory store returns the
   * same object every time: read it before the next call.
   */
  hit(key: string, now: number): RateHit | Promise<RateHit>;
  /** Blocks `key` until `until` (ms) and clears its counters: after the block the client starts afresh. */
  block(key: string, until: number): void | Promise<void>;
  /** Clients currently held (for tests and metrics). */
  readonly size: number;
}

/**
 * Counters in process memory, bounded: at most `maxEntries` clients are held whatever the number of
 * distinct sources (a flood from millions of addresses, IPv6 ranges...). Two generations of maps
 * approximate an LRU at O(1) cost: new clients go into `young`; when it holds `maxEntries / 2`,
 * `young` becomes `old` and the previous `old` is dropped whole. A client seen again while in `old`
 * moves back to `young`, so clients that keep sending (the ones a limit is about) stay, and one-off
 * sources fall out. A dropped client only loses counts that were too small to matter or a block it
 * stopped testing.
 */
export class MemoryRateLimitStore implements RateLimitStore {
  private readonly periodsMs: readonly number[];
  private readonly generationSize: number;
  private young = new Map<string, Counters>();
  private old = new Map<string, Counters>();
  private readonly result: { blockedUntil: number; estimates: Float64Array };

  constructor(periodsMs: readonly number[], maxEntries = 100_000) {
    if (periodsMs.length === 0) throw new Error('at least one period');
    this.periodsMs = periodsMs;
    this.generationSize = Math.max(1, Math.floor(maxEntries / 2));
    this.result = { blockedUntil: 0, estimates: new Float64Array(periodsMs.length) };
  }

  get size(): number {
    return this.young.size + this.old.size;
  }

  hit(key: string, now: number): RateHit {
    const counters = this.counters(key);
    const result = this.result;
    result.blockedUntil = counters.blockedUntil;
    if (counters.blockedUntil > now) return result;
    const windows = counters.windows;
    const periods = this.periodsMs;
    for (let i = 0; i < periods.length; i++) result.estimates[i] = countAndEstimate(windows, i * WINDOW_PAIR_WORDS, periods[i]!, now);
    return result;
  }

  block(key: string, until: number): void {
    const counters = this.counters(key);
    counters.blockedUntil = until;
    counters.windows.fill(0);
  }

  private counters(key: string): Counters {
    let counters = this.young.get(key);
    if (counters !== undefined) return counters;
    counters = this.old.get(key);
    if (counters !== undefined) {
      this.old.delete(key);
    } else {
      counters = { blockedUntil: 0, windows: new Float64Array(this.periodsMs.length * WINDOW_PAIR_WORDS) };
    }
    if (this.young.size >= this.generationSize) {
      this.old = this.young;
      this.young = new Map();
    }
    this.young.set(key, counters);
    return counters;
  }
}

interface Counters {
  blockedUntil: number;
  /** Per period, a window pair (sliding-window.ts). */
  windows: Float64Array;
}
