/**
 * Rate-limit counters in shared memory: every worker thread of the edge node counts a client's
 * requests in the same place, so a threshold of N requests means N whichever worker serves them.
 *
 * Each rate-limited proxy has a table of its own (`ProxyCounterTables`, made by the supervisor), so
 * a flood of sources on one proxy recycles only that proxy's slots: another proxy's counters and
 * the clients it is blocking stay where they are.
 */
import type { RateHit, RateLimitStore } from '../http/rate-limit/store.ts';
import { SharedTable } from './shared-table.ts';

/** Thresholds per proxy that the shared table has room for (the API allows at most 10). */
export const MAX_PERIODS = 10;
/** Payload of a slot: block deadline, then per period [window index, previous count, current count]. */
export const rateSlotWords = (periods: number): number => 1 + 3 * periods;

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
