/**
 * When a blocked source is handed to the kernel: escalation, not surprise.
 *
 * - Rate limit: the first refusals of a block stay HTTP 429 with Retry-After (a client that reads
 *   them backs off and loses nothing). A source whose refusals during the block exceed `factor`
 *   times a threshold's `requests` within that threshold's period (the node's workers added up)
 *   is still sending at several times its limit while told to stop: its packets to that proxy's
 *   front end are dropped by the kernel until its block ends.
 * - Threat feed (layer 4 proxies): a listed source is refused at accept whatever it does; one
 *   that keeps connecting (more than THREAT_FEED_REFUSALS refused connections or datagrams within
 *   THREAT_FEED_WINDOW_MS on one proxy) is dropped by the kernel for THREAT_FEED_BLOCK_MS, then
 *   judged again from scratch: a source taken off the feed is served again within that time.
 *
 * Memory is bounded: at most MAX_TRACKED (proxy, source) pairs; the oldest is forgotten first.
 */
import type { SourceRefusals } from './types.ts';

export const THREAT_FEED_REFUSALS = 20;
export const THREAT_FEED_WINDOW_MS = 10_000;
export const THREAT_FEED_BLOCK_MS = 10 * 60_000;
const MAX_TRACKED = 100_000;
/** How often pairs whose block (or window) is over are forgotten. */
const SWEEP_MS = 10_000;

export interface Threshold {
  requests: number;
  periodSeconds: number;
}

interface Tracked {
  /** The block these counts belong to (rate limit), or the window's end (threat feed). */
  until: number;
  /** Per threshold: the window's start and the refusals in it. */
  windows: { start: number; count: number }[];
  escalated: boolean;
}

export class EscalationPolicy {
  readonly #factor: number;
  readonly #now: () => number;
  readonly #tracked = new Map<string, Tracked>();
  #sweptAt = 0;

  constructor(options: { factor: number; now?: () => number }) {
    this.#factor = options.factor;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Adds a worker's report; returns until when the source must be dropped by the kernel when this
   * report takes it over the bar (once per block), else undefined. `thresholds`: the proxy's rate
   * limit (rate-limit reports; ignored for the threat feed).
   */
  note(report: SourceRefusals, thresholds: readonly Threshold[]): number | undefined {
    const now = this.#now();
    if (now - this.#sweptAt > SWEEP_MS) {
      this.#sweptAt = now;
      this.#forgetEnded(now);
    }
    if (report.reason === 'threat-feed') {
      const until = now + THREAT_FEED_BLOCK_MS;
      const bar = [{ requests: THREAT_FEED_REFUSALS, periodSeconds: THREAT_FEED_WINDOW_MS / 1000 }];
      return this.#count(`${report.proxyId}|${report.source}|tf`, now, now + THREAT_FEED_WINDOW_MS, report.count, bar, until)
        ? until
        : undefined;
    }
    if (report.blockedUntil <= now || thresholds.length === 0) return undefined;
    const bars = thresholds.map((threshold) => ({ requests: threshold.requests * this.#factor, periodSeconds: threshold.periodSeconds }));
    const key = `${report.proxyId}|${report.source}|${report.blockedUntil}`;
    return this.#count(key, now, report.blockedUntil, report.count, bars, report.blockedUntil) ? report.blockedUntil : undefined;
  }

  /** Pairs tracked now (for tests). */
  get size(): number {
    return this.#tracked.size;
  }

  /** `until`: when the counts may be forgotten unless escalated; `escalateUntil`: the kernel block's end. */
  #count(key: string, now: number, until: number, count: number, bars: readonly Threshold[], escalateUntil: number): boolean {
    let tracked = this.#tracked.get(key);
    if (tracked !== undefined && tracked.until <= now && !tracked.escalated) {
      this.#tracked.delete(key);
      tracked = undefined;
    }
    if (tracked === undefined) {
      if (this.#tracked.size >= MAX_TRACKED) this.#forgetEnded(now);
      tracked = { until, windows: bars.map(() => ({ start: now, count: 0 })), escalated: false };
      this.#tracked.set(key, tracked);
    }
    if (tracked.escalated) {
      // A threat-feed escalation is judged again once its kernel block is over.
      if (tracked.until > now) return false;
      this.#tracked.delete(key);
      return this.#count(key, now, until, count, bars, escalateUntil);
    }
    for (let i = 0; i < bars.length; i++) {
      const bar = bars[i]!;
      const window = tracked.windows[i]!;
      if (now - window.start >= bar.periodSeconds * 1000) {
        window.start = now;
        window.count = 0;
      }
      window.count += count;
      if (window.count > bar.requests) {
        tracked.escalated = true;
        tracked.until = escalateUntil;
        return true;
      }
    }
    return false;
  }

  #forgetEnded(now: number): void {
    for (const [key, tracked] of this.#tracked) if (tracked.until <= now) this.#tracked.delete(key);
    while (this.#tracked.size >= MAX_TRACKED) {
      const oldest = this.#tracked.keys().next().value;
      if (oldest === undefined) break;
      this.#tracked.delete(oldest);
    }
  }
}
