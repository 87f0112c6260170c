/**
 * Connection caps (`connectionLimits` of layer 4 and HTTP proxies) counted in shared memory, so that
 * "at most N connections from one source" means N across all proxy workers, not N per worker.
 *
 * The same semantics as FloodLimiter (src/edge/limits/flood-limits.ts): open connections per source,
 * new connections per second per source (the sliding-window estimate, src/edge/limits/sliding-window.ts), and open
 * connections of the whole proxy. Each proxy counts in a table of its own (`ProxyCounterTables`):
 * a flood of sources on one proxy cannot push another proxy's counts out.
 */
import { SharedTable } from './shared-table.ts';
import type { FloodAdmission, FloodLimitSettings, FloodRefusal } from '../limits/flood-limits.ts';
import { sourceKey as defaultSourceKey } from '../../net/source-key.ts';
import { WINDOW_PAIR_WORDS, countEvent, estimate } from '../limits/sliding-window.ts';

/** Payload of a slot: open connections, then the new connections' window pair. */
export const FLOOD_SLOT_WORDS = 1 + WINDOW_PAIR_WORDS;
const OPEN_CONNECTIONS = 0;
const WINDOW = 1;
const WINDOW_MS = 1000;

export function createFloodTable(slots: number): SharedTable {
  return SharedTable.create(slots, FLOOD_SLOT_WORDS);
}

/** Key of the proxy's total in its table: not an address, so no source can share it. */
const GLOBAL_KEY = '*';

export interface SharedTicket {
  /** Undefined when the connection counts towards the proxy's total only (see `acquire`). */
  sourceKey: string | undefined;
}

export interface SharedFloodLimiterOptions {
  /** Clock in ms; tests pass a fake one. */
  now?: () => number;
  /** The counting key of a source address (IPv6 by prefix); default `sourceKey` with a /64. */
  sourceKey?: (address: string) => string;
}

export class SharedFloodLimiter implements FloodAdmission<SharedTicket> {
  readonly #table: SharedTable;
  readonly #now: () => number;
  readonly #sourceKey: (address: string) => string;
  #settings: FloodLimitSettings;
  readonly refused: Record<FloodRefusal, number> = { SOURCE_CONNECTIONS: 0, SOURCE_RATE: 0, GLOBAL_CONNECTIONS: 0 };

  /** `table`: the proxy's own (`createFloodTable`), the same in every worker. */
  constructor(table: SharedTable, settings: FloodLimitSettings, options: SharedFloodLimiterOptions = {}) {
    this.#table = table;
    this.#settings = { ...settings };
    this.#now = options.now ?? Date.now;
    this.#sourceKey = options.sourceKey ?? ((address) => defaultSourceKey(address));
  }

  configure(settings: FloodLimitSettings): void {
    this.#settings = { ...settings };
  }

  get limits(): Readonly<FloodLimitSettings> {
    return this.#settings;
  }

  /**
   * Admits a connection from `source`, or says which cap refuses it. `source` undefined: a
   * connection that names no client of its own (a trusted load balancer's, without a PROXY header)
   * counts towards the proxy's total only, since per-source caps on it would cap every client behind it.
   */
  acquire(source: string | undefined): SharedTicket | FloodRefusal {
    const settings = this.#settings;
    const now = this.#now();
    const seconds = now / 1000;
    const admittedGlobally = this.#table.update(GLOBAL_KEY, seconds, (words, offset) => {
      if (words[offset + OPEN_CONNECTIONS]! >= settings.maxConnections) return false;
      words[offset + OPEN_CONNECTIONS]! += 1;
      return true;
    });
    if (!admittedGlobally) {
      this.refused.GLOBAL_CONNECTIONS++;
      return 'GLOBAL_CONNECTIONS';
    }
    if (source === undefined) return { sourceKey: undefined };
    const sourceKey = this.#sourceKey(source);
    const refusal = this.#table.update(sourceKey, seconds, (words, offset): FloodRefusal | undefined => {
      if (words[offset + OPEN_CONNECTIONS]! >= settings.maxConnectionsPerSource) return 'SOURCE_CONNECTIONS';
      if (estimate(words, offset + WINDOW, WINDOW_MS, now) + 1 > settings.maxNewConnectionsPerSecondPerSource) return 'SOURCE_RATE';
      countEvent(words, offset + WINDOW);
      words[offset + OPEN_CONNECTIONS]! += 1;
      return undefined;
    });
    if (refusal !== undefined) {
      this.#releaseGlobal(seconds);
      this.refused[refusal]++;
      return refusal;
    }
    return { sourceKey };
  }

  release(ticket: SharedTicket): void {
    const seconds = this.#now() / 1000;
    if (ticket.sourceKey !== undefined) {
      this.#table.update(ticket.sourceKey, seconds, (words, offset) => {
        if (words[offset + OPEN_CONNECTIONS]! > 0) words[offset + OPEN_CONNECTIONS]! -= 1;
      });
    }
    this.#releaseGlobal(seconds);
  }

  #releaseGlobal(seconds: number): void {
    this.#table.update(GLOBAL_KEY, seconds, (words, offset) => {
      if (words[offset + OPEN_CONNECTIONS]! > 0) words[offset + OPEN_CONNECTIONS]! -= 1;
    });
  }
}
