/**
 * Network-flood caps of one layer 4 proxy (`connectionLimits`): per source IP, the connections open
 * at once and the new connections per second; for the whole proxy, the connections open at once.
 * A UDP session counts as a connection.
 *
 * The new-connection rate is a sliding window estimated from two fixed one-second windows, as
 * Pingora's `pingora-limits/src/rate.rs` does: `previous * (1 - elapsedFraction) + current`. Only
 * admitted connections count, so the cap reads "at most N new connections per second from one
 * source reach the origin", and a source that stops flooding is admitted again within a second.
 *
 * Memory stays bounded under millions of distinct sources: a source with open connections is kept
 * (there are at most `maxConnections` of those), a source with none is kept only for its rate window,
 * at most `maxIdleSources` of them in least-recently-released order, the oldest forgotten first.
 * An evicted source loses only its rate history, which after a second of silence is zero anyway.
 */
import { sourceKey } from '../net/source-key.ts';

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
  open = 0;
  /** Start (ms) of the current one-second window. */
  windowStart = 0;
  currentWindow = 0;
  previousWindow = 0;
  /** Neighbours in the list of idle sources (no open connection), oldest first. */
  olderIdle: SourceSlot | undefined;
  newerIdle: SourceSlot | undefined;

  constructor(source: string) {
    this.source = source;
  }
}

const WINDOW_MS = 1000;
/** The source of a ticket that counts towards the total only (not an address, so no source has it). */
const TOTAL_ONLY = '*';
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
  private open = 0;
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
    return this.open;
  }

  /** Sources remembered now (with open connections, and idle ones within the bound). */
  get trackedSources(): number {
    return this.sources.size;
  }

  /**
   * Admits a new connection from `source` (a client IP; IPv4-mapped IPv6 counts as its IPv4, other
   * IPv6 by its /64: src/edge/net/source-key.ts), or says which cap refuses it. An
   * admitted connection must be `release`d exactly once.
   */
  acquire(source: string | undefined): SourceSlot | FloodRefusal {
    const settings = this.settings;
    if (this.open >= settings.maxConnections) {
      this.refused.GLOBAL_CONNECTIONS++;
      return 'GLOBAL_CONNECTIONS';
    }
    if (source === undefined) {
      this.open++;
      return new SourceSlot(TOTAL_ONLY);
    }
    const key = sourceKey(source);
    let slot = this.sources.get(key);
    const now = this.now();
    if (slot !== undefined) {
      if (slot.open >= settings.maxConnectionsPerSource) {
        this.refused.SOURCE_CONNECTIONS++;
        return 'SOURCE_CONNECTIONS';
      }
      advanceWindow(slot, now);
      const elapsed = (now - slot.windowStart) / WINDOW_MS;
      const rate = slot.previousWindow * (1 - elapsed) + slot.currentWindow;
      if (rate + 1 > settings.maxNewConnectionsPerSecondPerSource) {
        this.refused.SOURCE_RATE++;
        return 'SOURCE_RATE';
      }
      if (slot.open === 0) this.unlinkIdle(slot);
    } else {
      slot = new SourceSlot(key);
      slot.windowStart = now;
      this.sources.set(key, slot);
    }
    slot.currentWindow++;
    slot.open++;
    this.open++;
    return slot;
  }

  release(slot: SourceSlot): void {
    if (slot.source === TOTAL_ONLY) {
      if (slot.windowStart === 0) this.open--;
      slot.windowStart = 1; // released: a second release changes nothing
      return;
    }
    if (slot.open <= 0) return;
    this.open--;
    if (--slot.open > 0) return;
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

/** Rolls the two fixed windows forward to the one containing `now`. */
function advanceWindow(slot: SourceSlot, now: number): void {
  const elapsed = now - slot.windowStart;
  if (elapsed < WINDOW_MS) return;
  if (elapsed < 2 * WINDOW_MS) {
    slot.previousWindow = slot.currentWindow;
    slot.windowStart += WINDOW_MS;
  } else {
    slot.previousWindow = 0;
    slot.windowStart = now;
  }
  slot.currentWindow = 0;
}
