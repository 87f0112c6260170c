/**
 * The layer 4 flood caps (`connectionLimits`) counted in the edge node's shared table, so that
 * "at most N connections from one source" means N across all proxy workers, not N per worker.
 *
 * The same semantics as FloodLimiter (src/edge/l4/flood-limits.ts): open connections per source,
 * new connections per second per source (two one-second windows, Pingora's estimate), and open
 * connections of the whole proxy.
 */
import { SharedTable } from './shared-table.ts';
import type { FloodAdmission, FloodLimitSettings, FloodRefusal } from '../l4/flood-limits.ts';
import { unmapIpv4 } from '../../net/ip.ts';

/** Payload of a slot: open connections, window start (ms), previous window count, current window count. */
export const FLOOD_SLOT_WORDS = 4;
const OPEN = 0;
const WINDOW_START = 1;
const PREVIOUS = 2;
const CURRENT = 3;
const WINDOW_MS = 1000;

export function createFloodTable(slots: number): SharedTable {
  return SharedTable.create(slots, FLOOD_SLOT_WORDS);
}

interface SharedTicket {
  sourceKey: string;
}

export class SharedFloodLimiter implements FloodAdmission<SharedTicket> {
  readonly #table: SharedTable;
  readonly #scope: string;
  readonly #globalKey: string;
  readonly #now: () => number;
  #settings: FloodLimitSettings;
  readonly refused: Record<FloodRefusal, number> = { SOURCE_CONNECTIONS: 0, SOURCE_RATE: 0, GLOBAL_CONNECTIONS: 0 };

  constructor(table: SharedTable, proxyId: string, settings: FloodLimitSettings, now: () => number = Date.now) {
    this.#table = table;
    this.#scope = `${proxyId}|src|`;
    this.#globalKey = `${proxyId}|all`;
    this.#settings = { ...settings };
    this.#now = now;
  }

  configure(settings: FloodLimitSettings): void {
    this.#settings = { ...settings };
  }

  get limits(): Readonly<FloodLimitSettings> {
    return this.#settings;
  }

  acquire(source: string): SharedTicket | FloodRefusal {
    const settings = this.#settings;
    const now = this.#now();
    const seconds = now / 1000;
    const admittedGlobally = this.#table.update(this.#globalKey, seconds, (words, offset) => {
      if (words[offset + OPEN]! >= settings.maxConnections) return false;
      words[offset + OPEN]! += 1;
      return true;
    });
    if (!admittedGlobally) {
      this.refused.GLOBAL_CONNECTIONS++;
      return 'GLOBAL_CONNECTIONS';
    }
    const sourceKey = this.#scope + unmapIpv4(source);
    const refusal = this.#table.update(sourceKey, seconds, (words, offset): FloodRefusal | undefined => {
      if (words[offset + OPEN]! >= settings.maxConnectionsPerSource) return 'SOURCE_CONNECTIONS';
      const start = words[offset + WINDOW_START]!;
      const elapsed = now - start;
      if (start === 0 || elapsed >= 2 * WINDOW_MS) {
        words[offset + WINDOW_START] = now;
        words[offset + PREVIOUS] = 0;
        words[offset + CURRENT] = 0;
      } else if (elapsed >= WINDOW_MS) {
        words[offset + WINDOW_START] = start + WINDOW_MS;
        words[offset + PREVIOUS] = words[offset + CURRENT]!;
        words[offset + CURRENT] = 0;
      }
      const fraction = (now - words[offset + WINDOW_START]!) / WINDOW_MS;
      const rate = words[offset + PREVIOUS]! * (1 - fraction) + words[offset + CURRENT]!;
      if (rate + 1 > settings.maxNewConnectionsPerSecondPerSource) return 'SOURCE_RATE';
      words[offset + CURRENT]! += 1;
      words[offset + OPEN]! += 1;
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
    this.#table.update(ticket.sourceKey, seconds, (words, offset) => {
      if (words[offset + OPEN]! > 0) words[offset + OPEN]! -= 1;
    });
    this.#releaseGlobal(seconds);
  }

  #releaseGlobal(seconds: number): void {
    this.#table.update(this.#globalKey, seconds, (words, offset) => {
      if (words[offset + OPEN]! > 0) words[offset + OPEN]! -= 1;
    });
  }
}
