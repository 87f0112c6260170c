/**
 * Rate-limit counters in the edge node's shared table: every worker thread counts a client's
 * requests in the same place, so a threshold of N requests means N whichever worker serves them.
 */
import type { RateHit, RateLimitStore } from '../http/rate-limit/store.ts';
import { SharedTable } from './shared-table.ts';

/** Thresholds per proxy that the shared table has room for (the API allows at most 10). */
export const MAX_PERIODS = 10;
/** Payload of a slot: block deadline, then per period [window index, previous count, current count]. */
export const RATE_SLOT_WORDS = 1 + 3 * MAX_PERIODS;

export function createRateTable(slots: number): SharedTable {
  return SharedTable.create(slots, RATE_SLOT_WORDS);
}

export class SharedRateLimitStore implements RateLimitStore {
  readonly #table: SharedTable;
  readonly #periodsMs: readonly number[];
  /** Keys are scoped by proxy: one table serves every proxy of the node. */
  readonly #scope: string;
  readonly #result: { blockedUntil: number; estimates: Float64Array };

  constructor(table: SharedTable, scope: string, periodsMs: readonly number[]) {
    if (periodsMs.length === 0 || periodsMs.length > MAX_PERIODS) throw new Error(`1 to ${MAX_PERIODS} periods`);
    this.#table = table;
    this.#scope = scope;
    this.#periodsMs = periodsMs;
    this.#result = { blockedUntil: 0, estimates: new Float64Array(periodsMs.length) };
  }

  hit(key: string, now: number): RateHit {
    const result = this.#result;
    const periods = this.#periodsMs;
    this.#table.update(`${this.#scope}|${key}`, now / 1000, (words, offset) => {
      result.blockedUntil = words[offset]!;
      if (result.blockedUntil > now) return;
      for (let i = 0; i < periods.length; i++) {
        const period = periods[i]!;
        const base = offset + 1 + i * 3;
        const index = Math.floor(now / period);
        const seen = words[base]!;
        if (index !== seen) {
          // The window rolled over: the current one becomes the previous one, unless a whole window passed.
          words[base + 1] = index === seen + 1 ? words[base + 2]! : 0;
          words[base + 2] = 0;
          words[base] = index;
        }
        const current = words[base + 2]! + 1;
        words[base + 2] = current;
        result.estimates[i] = words[base + 1]! * (1 - (now - index * period) / period) + current;
      }
    });
    return result;
  }

  block(key: string, until: number): void {
    this.#table.update(`${this.#scope}|${key}`, until / 1000, (words, offset) => {
      words.fill(0, offset, offset + RATE_SLOT_WORDS);
      words[offset] = until;
    });
  }

  get size(): number {
    return this.#table.used;
  }
}
