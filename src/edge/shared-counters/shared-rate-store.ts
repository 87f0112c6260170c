/**
 * Rate-limit counters in shared memory: every worker thread of the edge node counts a client's
 * requests in the same place, so a threshold of N requests means N whichever worker serves them.
 *
 * Each rate-limited proxy has a table of its own (`ProxyCounterTables`, made by the supervisor), so
 * a flood of sources on one proxy recycles only that proxy's slots: another proxy's counters and
 * the clients it is blocking stay where they are.
 */
import type { RateHit, RateLimitStore } from '../limits/rate-store.ts';
import { SharedTable } from './shared-table.ts';
import { WINDOW_PAIR_WORDS, countAndEstimate } from '../limits/sliding-window.ts';

/** Thresholds per proxy that the shared table has room for (the API allows at most 10). */
export const MAX_PERIODS = 10;
/** Payload of a slot: block deadline, then a window pair per period (src/edge/limits/sliding-window.ts). */
export const rateSlotWords = (periods: number): number => 1 + WINDOW_PAIR_WORDS * periods;

/** A table for a proxy with `periods` thresholds (one table per proxy and set of periods). */
export function createRateTable(slots: number, periods: number): SharedTable {
  if (periods < 1 || periods > MAX_PERIODS) throw new Error(`1 to ${MAX_PERIODS} periods`);
  return SharedTable.create(slots, rateSlotWords(periods));
}

export class SharedRateLimitStore implements RateLimitStore {
  readonly #table: SharedTable;
  readonly #periodsMs: readonly number[];
  readonly #result: { blockedUntil: number; estimates: Float64Array };

  /** `table`: the proxy's own, made by `createRateTable` for as many periods. */
  constructor(table: SharedTable, periodsMs: readonly number[]) {
    if (periodsMs.length === 0 || periodsMs.length > MAX_PERIODS) throw new Error(`1 to ${MAX_PERIODS} periods`);
    if (table.payloadWords < rateSlotWords(periodsMs.length)) throw new Error(`a table for ${periodsMs.length} periods is needed`);
    this.#table = table;
    this.#periodsMs = periodsMs;
    this.#result = { blockedUntil: 0, estimates: new Float64Array(periodsMs.length) };
  }

  hit(key: string, now: number): RateHit {
    const result = this.#result;
    const periods = this.#periodsMs;
    this.#table.update(key, now / 1000, (words, offset) => {
      result.blockedUntil = words[offset]!;
      if (result.blockedUntil > now) return;
      for (let i = 0; i < periods.length; i++)
        result.estimates[i] = countAndEstimate(words, offset + 1 + i * WINDOW_PAIR_WORDS, periods[i]!, now);
    });
    return result;
  }

  block(key: string, until: number): void {
    const words = rateSlotWords(this.#periodsMs.length);
    this.#table.update(key, until / 1000, (payload, offset) => {
      payload.fill(0, offset, offset + words);
      payload[offset] = until;
    });
  }

  get size(): number {
    return this.#table.used;
  }
}
