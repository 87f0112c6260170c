/**
 * Network-flood caps of one layer 4 proxy (`connectionLimits`): per source IP, the connections open
 * at once and the new connections per second; for the whole proxy, the connections open at once.
 * A UDP session counts as a connection.
 *
 * The new-connection rate is the edge's sliding-window estimate over one second
 * (src/edge/limits/sliding-window.ts, Pingora's rate.rs). Only admitted connections
 * count, so the cap reads "at most N new connections per second from one source reach the origin",
 * and a source that stops flooding is admitted again within a second.
 *
 * Memory stays bounded under millions of distinct sources: a source with open connections is kept
 * (there are at most `maxConnections` of those), a source with none is kept only for its rate window,
 * at most `maxIdleSources` of them in least-recently-released order, the oldest forgotten first.
 * An evicted source loses only its rate history, which after a second of silence is zero anyway.
 */
import { sourceKey } from '../../net/source-key.ts';
import { WINDOW_PAIR_WORDS, countEvent, estimate } from './sliding-window.ts';

export interface FloodLimitSettings {
  maxConnectionsPerSource: number;
  maxNewConnectionsPerSecondPerSource: number;
  maxConnections: number;
}

export type FloodRefusal = 'SOURCE_CONNECTIONS' | 'SOURCE_RATE' | 'GLOBAL_CONNECTIONS';

/**
 * What a proxy needs of a flood limiter. `FloodLimiter` (below) counts in this thread's memory;
 * `SharedFloodLimiter` (src/edge/shared-counters) counts in memory shared by all workers of the
 * edge node, so the caps hold the same with several workers as with one.
 */
export interface FloodAdmission<Ticket extends object = object> {
  /**
   * A ticket to `release` exactly once when the connection ends, or the cap that refuses it.
   * `source` undefined: the connection counts towards the proxy's total only (a trusted load
   * balancer's connection that names no client: per-source caps on it would cap all its clients).
   */
  acquire(source: string | undefined): Ticket | FloodRefusal;
  release(ticket: Ticket): void;
  /** New caps apply to the next `acquire`; open connections are not cut. */
  configure(settings: FloodLimitSettings): void;
  readonly limits: Readonly<FloodLimitSettings>;
  readonly refused: Record<FloodRefusal, number>;
}

export interface FloodLimiterOptions {
  /** Sources without open connections remembered for their rate window. Default 65,536. */
  maxIdleSources?: number;
  /** Clock in ms; tests pass a fake one. Default `performance.now`-based. */
  now?: () => number;
}

/** One source's counters; handed out by `acquire` so that `release` needs no map lookup. */
export class SourceSlot {
  readonly source: string;
  /** Its connections open now. */
  openConnections = 0;
  /** New connections: the window pair of the sliding-window estimate. */
  readonly window: Float64Array;
  /** Neighbours in the list of idle sources (no open connection), oldest first. */
  olderIdle: SourceSlot | undefined;
  newerIdle: SourceSlot | undefined;

  constructor(source: string, window: Float64Array = new Float64Array(WINDOW_PAIR_WORDS)) {
    this.source = source;
    this.window = window;
  }
}

const WINDOW_MS = 1000;
/** The source of a ticket that counts towards the total only (not an address, so no source has it). */
const TOTAL_ONLY = '*';
/** Tickets that count towards the total only have no rate to keep. */
const NO_WINDOW = new Float64Array(0);
export const DEFAULT_MAX_IDLE_SOURCES = 65_536;

export class FloodLimiter implements FloodAdmission<SourceSlot> {
  private settings: FloodLimitSettings;
  private readonly maxIdleSources: number;
  private readonly now: () => number;
  private readonly sources = new Map<string, SourceSlot>();
  /** Sources without open connections, in an intrusive list: O(1) to move and to evict the oldest. */
  private oldestIdle: SourceSlot | undefined;
  private newestIdle: SourceSlot | undefined;
  private idleCount = 0;
  private openConnections = 0;
  readonly refused: Record<FloodRefusal, number> = { SOURCE_CONNECTIONS: 0, SOURCE_RATE: 0, GLOBAL_CONNECTIONS: 0 };

  constructor(settings: FloodLimitSettings, options: FloodLimiterOptions = {}) {
    this.settings = { ...settings };
    this.maxIdleSources = options.maxIdleSources ?? DEFAULT_MAX_IDLE_SOURCES;
    this.now = options.now ?? (() => performance.now());
  }

  /** New caps apply to the next `acquire`; open connections are not cut. */
  configure(settings: FloodLimitSettings): void {
    this.settings = { ...settings };
  }

  get limits(): Readonly<FloodLimitSettings> {
    return this.settings;
  }

  /** Connections (and UDP sessions) open now. */
  get connections(): number {
    return this.openConnections;
  }

  /** Sources remembered now (with open connections, and idle ones within the bound). */
  get trackedSources(): number {
    return this.sources.size;
  }

  /**
   * Admits a new connection from `source` (a client IP; IPv4-mapped IPv6 counts as its IPv4, other
   * IPv6 by its /64: src/net/source-key.ts), or says which cap refuses it. An
   * admitted connection must be `release`d exactly once.
   */
  acquire(source: string | undefined): SourceSlot | FloodRefusal {
    const settings = this.settings;
    if (this.openConnections >= settings.maxConnections) {
      this.refused.GLOBAL_CONNECTIONS++;
      return 'GLOBAL_CONNECTIONS';
    }
    if (source === undefined) {
      this.openConnections++;
      const ticket = new SourceSlot(TOTAL_ONLY, NO_WINDOW);
      ticket.openConnections = 1;
      return ticket;
    }
    const key = sourceKey(source);
    let slot = this.sources.get(key);
    const now = this.now();
    if (slot !== undefined) {
      if (slot.openConnections >= settings.maxConnectionsPerSource) {
        this.refused.SOURCE_CONNECTIONS++;
        return 'SOURCE_CONNECTIONS';
      }
      if (estimate(slot.window, 0, WINDOW_MS, now) + 1 > settings.maxNewConnectionsPerSecondPerSource) {
        this.refused.SOURCE_RATE++;
        return 'SOURCE_RATE';
      }
      if (slot.openConnections === 0) this.unlinkIdle(slot);
    } else {
      slot = new SourceSlot(key);
      // A new source has no rate yet: this only moves its empty window pair to now's window.
      estimate(slot.window, 0, WINDOW_MS, now);
      this.sources.set(key, slot);
    }
    countEvent(slot.window, 0);
    slot.openConnections++;
    this.openConnections++;
    return slot;
  }

  release(slot: SourceSlot): void {
    if (slot.source === TOTAL_ONLY) {
      // A second release of the same ticket changes nothing.
      if (slot.openConnections > 0) {
        slot.openConnections = 0;
        this.openConnections--;
      }
      return;
    }
    if (slot.openConnections <= 0) return;
    this.openConnections--;
    if (--slot.openConnections > 0) return;
    this.appendIdle(slot);
    if (this.idleCount > this.maxIdleSources) {
      const oldest = this.oldestIdle!;
      this.unlinkIdle(oldest);
      this.sources.delete(oldest.source);
    }
  }

  private appendIdle(slot: SourceSlot): void {
    slot.olderIdle = this.newestIdle;
    slot.newerIdle = undefined;
    if (this.newestIdle !== undefined) this.newestIdle.newerIdle = slot;
    else this.oldestIdle = slot;
    this.newestIdle = slot;
    this.idleCount++;
  }

  private unlinkIdle(slot: SourceSlot): void {
    if (slot.olderIdle !== undefined) slot.olderIdle.newerIdle = slot.newerIdle;
    else this.oldestIdle = slot.newerIdle;
    if (slot.newerIdle !== undefined) slot.newerIdle.olderIdle = slot.olderIdle;
    else this.newestIdle = slot.olderIdle;
    slot.olderIdle = undefined;
    slot.newerIdle = undefined;
    this.idleCount--;
  }
}
