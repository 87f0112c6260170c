/**
 * Where rate-limit counters live. The limiter's policy (thresholds, blocks, episodes) is kept apart
 * from the counters so that a shared store (Redis, for several edge nodes) can replace the in-memory
 * one without touching the policy: a store only counts, estimates and remembers blocks.
 *
 * Counting is Cloudflare's and Pingora's sliding-window estimate (pingora-limits/src/rate.rs,
 * https://blog.cloudflare.com/counting-things-a-lot-of-different-things/): per period `p`, two
 * fixed windows aligned on multiples of `p`; the rate over the last `p` is estimated as
 *     previous * (1 - elapsed / p) + current
 * where `elapsed` is the time since the current window began. Two numbers per period and client,
 * within a few percent of an exact sliding log, and no per-request timestamps.
 */

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
    for (let i = 0; i < periods.length; i++) {
      const period = periods[i]!;
      const base = i * 3;
      const index = Math.floor(now / period);
      const seen = windows[base]!;
      if (index !== seen) {
        // The window rolled over: the current one becomes the previous one, unless a whole window passed.
        windows[base + 1] = index === seen + 1 ? windows[base + 2]! : 0;
        windows[base + 2] = 0;
        windows[base] = index;
      }
      const current = windows[base + 2]! + 1;
      windows[base + 2] = current;
      const elapsed = (now - index * period) / period;
      result.estimates[i] = windows[base + 1]! * (1 - elapsed) + current;
    }
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
      counters = { blockedUntil: 0, windows: new Float64Array(this.periodsMs.length * 3) };
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
  /** Per period: [window index, previous window's count, current window's count]. */
  windows: Float64Array;
}
