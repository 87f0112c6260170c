/**
 * Each proxy's share of the node's shared counters: one table per proxy for its connection caps,
 * and one for its rate limits, made by the supervisor and handed to every worker with the
 * configuration (a SharedArrayBuffer travels by reference, so every worker counts in the same place).
 *
 * A table per proxy rather than one table for all: a table's slots are recycled least recently used
 * first when it is full, so in one shared table a flood of sources on one proxy evicted the counters
 * of every other proxy, and the clients those were blocking walked free. Now a flood recycles only
 * the slots of the proxy it floods. Memory is bounded per proxy (`rateSlots`, `floodSlots`), and the
 * kernel commits a table's pages only as its slots are first used.
 */
import type { SharedTable, SharedTableInit } from './shared-table.ts';
import { createRateTable } from './shared-rate-store.ts';
import { createFloodTable } from './shared-flood-limiter.ts';
import type { AppDdosTablesInit } from '../http/app-ddos/types.ts';
import { createAppDdosTables } from '../http/app-ddos/detector.ts';

/** What a worker receives for one proxy. */
export interface ProxyCounterTables {
  /** Connection caps (layer 4 `connectionLimits`, HTTP connection caps): the proxy's sources and its total. */
  flood: SharedTableInit;
  /** Rate-limit counters of an HTTP proxy with `rateLimiting`, sized for its thresholds. */
  rate?: SharedTableInit;
  /** Attack detection, challenges and blocks of an HTTP proxy whose `appDdos` is not OFF. */
  appDdos?: AppDdosTablesInit;
}

export interface ProxyTableSizes {
  /** Clients a rate-limited proxy keeps counters for (TPS_RATE_LIMIT_CLIENTS_PER_PROXY). */
  rateSlots: number;
  /** Sources a proxy tracks for its connection caps. */
  floodSlots: number;
}

export const DEFAULT_PROXY_TABLE_SIZES: Readonly<ProxyTableSizes> = Object.freeze({ rateSlots: 16_384, floodSlots: 8_192 });

/** The supervisor's side: tables by proxy id, kept while the proxy exists. */
export class ProxyCounterTableSet {
  readonly #sizes: ProxyTableSizes;
  readonly #flood = new Map<string, SharedTable>();
  /** Keyed by the thresholds' periods too: changed periods start from a fresh table. */
  readonly #rate = new Map<string, { periods: string; table: SharedTable }>();
  readonly #appDdos = new Map<string, AppDdosTablesInit>();

  constructor(sizes: Partial<ProxyTableSizes> = {}) {
    this.#sizes = { ...DEFAULT_PROXY_TABLE_SIZES, ...sizes };
  }

  /** The tables of proxy `id`; `ratePeriodsMs` when it rate-limits (its thresholds' periods, in order). */
  tablesFor(id: string, ratePeriodsMs: readonly number[] | undefined, appDdos = false): ProxyCounterTables {
    let flood = this.#flood.get(id);
    if (flood === undefined) {
      flood = createFloodTable(this.#sizes.floodSlots);
      this.#flood.set(id, flood);
    }
    let appDdosTables: AppDdosTablesInit | undefined;
    if (appDdos) {
      appDdosTables = this.#appDdos.get(id) ?? createAppDdosTables();
      this.#appDdos.set(id, appDdosTables);
    } else {
      this.#appDdos.delete(id);
    }
    const extra = appDdosTables === undefined ? {} : { appDdos: appDdosTables };
    if (ratePeriodsMs === undefined || ratePeriodsMs.length === 0) {
      this.#rate.delete(id);
      return { flood: flood.init, ...extra };
    }
    const periods = ratePeriodsMs.join(',');
    let rate = this.#rate.get(id);
    if (rate === undefined || rate.periods !== periods) {
      rate = { periods, table: createRateTable(this.#sizes.rateSlots, ratePeriodsMs.length) };
      this.#rate.set(id, rate);
    }
    return { flood: flood.init, rate: rate.table.init, ...extra };
  }

  /** Drops the tables of proxies that are gone (workers drop their views with the proxy). */
  retainOnly(ids: ReadonlySet<string>): void {
    for (const id of this.#flood.keys()) if (!ids.has(id)) this.#flood.delete(id);
    for (const id of this.#rate.keys()) if (!ids.has(id)) this.#rate.delete(id);
    for (const id of this.#appDdos.keys()) if (!ids.has(id)) this.#appDdos.delete(id);
  }

  /** Proxies holding tables (for tests). */
  get size(): number {
    return this.#flood.size;
  }
}
