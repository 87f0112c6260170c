/**
 * The rate-limit policy of one proxy: `rateLimiting.thresholds` counted per client source address,
 * a block of `blockSeconds` once any threshold is exceeded, and attack episodes for insight events.
 *
 * Key: the client address of the accept phase: the socket peer, never a header the client sets (it
 * could otherwise spoof X-Forwarded-For to get fresh counters, or to lock out somebody else). Only
 * behind load balancers the operator trusts is it what they say (src/net/client-address.ts).
 *
 * Episode: what one APP_DDOS_ATTACK event describes. It starts with the request that crosses a
 * threshold, lasts while the client stays blocked, and also absorbs a new block that starts within
 * `episodeGapMs` of the previous one's end: a flood that comes straight back after each short block is
 * one attack, not one event per block. While it lasts, its counters (last blocked request, blocked
 * requests, blocked until) are sent to `onEpisodeUpdate` at most once per `updateIntervalMs`.
 */
import { createHash, randomUUID } from 'node:crypto';
import { MemoryRateLimitStore, type RateHit, type RateLimitStore } from '../../limits/rate-store.ts';

export interface RateLimitPolicy {
  thresholds: readonly { requests: number; periodSeconds: number }[];
  blockSeconds: number;
}

export interface RateEpisode {
  /** The insight event's id (UUID). */
  readonly eventId: string;
  /** 32 hex: on every 429 page of the episode and in the event. */
  readonly supportId: string;
  readonly clientIp: string;
  readonly threshold: { requests: number; periodSeconds: number };
  /** The client's request count over the threshold's period when it was crossed (rounded up). */
  readonly observedRequests: number;
  readonly firstBlockedAt: number;
  lastBlockedAt: number;
  blockedRequests: number;
  blockedUntil: number;
  /** Counters changed since the last `onEpisodeUpdate`. */
  dirty: boolean;
  /** In its limiter's table: false once it ended there (over, dropped under pressure, or the limiter disposed). */
  held: boolean;
}

export type RateDecision =
  | { readonly allowed: true }
  | {
      readonly allowed: false;
      readonly retryAfterSeconds: number;
      readonly episode: RateEpisode;
      /** This request started the episode: its event must be recorded now. */
      readonly started: boolean;
    };

export interface RateLimiterOptions {
  /** Counter store; default an in-memory one bounded to `maxEntries` clients. */
  store?: RateLimitStore;
  maxEntries?: number;
  /** Most episodes held at once (blocked clients); the oldest is flushed and dropped beyond it. Default 10,000. */
  maxEpisodes?: number;
  now?: () => number;
  onEpisodeUpdate?: (episode: RateEpisode) => void;
  /** Default 1,000 ms. */
  updateIntervalMs?: number;
  /** Default 60,000 ms. */
  episodeGapMs?: number;
  /**
   * Set when several limiters (one per edge worker) share one store: an episode's event id and
   * support id are then derived from the shared block (client and block deadline, under this scope,
   * e.g. the proxy id), so every worker names the same episode, and only the worker whose request
   * crossed the threshold records the event. The others only send counter updates.
   */
  sharedEpisodeScope?: string;
}

const ALLOWED: RateDecision = Object.freeze({ allowed: true });

export class RateLimiter {
  readonly policy: RateLimitPolicy;
  readonly store: RateLimitStore;
  private readonly blockMs: number;
  private readonly now: () => number;
  private readonly onEpisodeUpdate: ((episode: RateEpisode) => void) | undefined;
  private readonly updateIntervalMs: number;
  private readonly episodeGapMs: number;
  private readonly maxEpisodes: number;
  private readonly sharedEpisodeScope: string | undefined;
  /** Insertion order = episode start order, which is what eviction wants. */
  private readonly episodes = new Map<string, RateEpisode>();
  private timer: NodeJS.Timeout | undefined;

  constructor(policy: RateLimitPolicy, options: RateLimiterOptions = {}) {
    if (policy.thresholds.length === 0) throw new Error('a rate limit needs at least one threshold');
    this.policy = policy;
    this.store =
      options.store ??
      new MemoryRateLimitStore(
        policy.thresholds.map((t) => t.periodSeconds * 1000),
        options.maxEntries,
      );
    this.blockMs = policy.blockSeconds * 1000;
    this.now = options.now ?? Date.now;
    this.onEpisodeUpdate = options.onEpisodeUpdate;
    this.updateIntervalMs = options.updateIntervalMs ?? 1000;
    this.episodeGapMs = options.episodeGapMs ?? 60_000;
    this.maxEpisodes = options.maxEpisodes ?? 10_000;
    this.sharedEpisodeScope = options.sharedEpisodeScope;
  }

  /** Counts one request of `clientIp` and says whether it may pass. */
  check(clientIp: string): RateDecision | Promise<RateDecision> {
    const now = this.now();
    const hit = this.store.hit(clientIp, now);
    if (hit instanceof Promise) return hit.then((h) => this.decide(clientIp, now, h));
    return this.decide(clientIp, now, hit);
  }

  /**
   * The episode of `clientIp` while its block is in force, with `requests` more refusals counted in
   * it (as `check` counts one); undefined when this limiter knows of no block of it in force. One
   * map lookup: the early refusal path (src/edge/http/early-refusal.ts) asks this for the requests of
   * a source it already refuses, before any per-request object exists. A block this limiter has not
   * seen yet (started by another worker on a shared store) is found by `check` first. `known`: the
   * episode of `clientIp` this limiter gave the caller before; while it still holds it, no lookup
   * (a flood from many sources costs a miss in a large table per request otherwise).
   */
  refuseBlocked(clientIp: string, requests: number, known?: RateEpisode): RateEpisode | undefined {
    const episode = known?.held === true && known.clientIp === clientIp ? known : this.episodes.get(clientIp);
    if (episode === undefined) return undefined;
    const now = this.now();
    if (episode.blockedUntil <= now) return undefined;
    this.countRefusals(episode, now, requests);
    return episode;
  }

  /** The episode of `clientIp` while its block is in force, counting nothing (a new connection's check). */
  blockedEpisode(clientIp: string): RateEpisode | undefined {
    if (this.episodes.size === 0) return undefined;
    const episode = this.episodes.get(clientIp);
    return episode !== undefined && episode.blockedUntil > this.now() ? episode : undefined;
  }

  /** Some client is blocked or was lately: the early refusal path has nothing to look up otherwise. */
  get hasEpisodes(): boolean {
    return this.episodes.size > 0;
  }

  /** Number of episodes held (for tests and metrics). */
  get episodeCount(): number {
    return this.episodes.size;
  }

  /** Sends pending episode updates and stops the timer; the limiter must not be used afterwards. */
  dispose(): void {
    this.flush(Infinity);
    for (const episode of this.episodes.values()) episode.held = false;
    this.episodes.clear();
    this.stopTimer();
  }

  private decide(clientIp: string, now: number, hit: RateHit): RateDecision | Promise<RateDecision> {
    if (hit.blockedUntil > now) return this.refuse(clientIp, now, hit.blockedUntil, undefined);
    const thresholds = this.policy.thresholds;
    for (let i = 0; i < thresholds.length; i++) {
      const threshold = thresholds[i]!;
      const estimate = hit.estimates[i]!;
      if (estimate > threshold.requests) {
        const until = now + this.blockMs;
        const blocked = this.store.block(clientIp, until);
        const crossing = { threshold, observedRequests: Math.ceil(estimate) };
        if (blocked instanceof Promise) return blocked.then(() => this.refuse(clientIp, now, until, crossing));
        return this.refuse(clientIp, now, until, crossing);
      }
    }
    return ALLOWED;
  }

  private refuse(
    clientIp: string,
    now: number,
    blockedUntil: number,
    crossing: { threshold: { requests: number; periodSeconds: number }; observedRequests: number } | undefined,
  ): RateDecision {
    let episode = this.episodes.get(clientIp);
    let started = false;
    if (episode !== undefined && now - episode.blockedUntil > this.episodeGapMs) {
      this.endEpisode(clientIp, episode);
      episode = undefined;
    }
    if (episode === undefined) {
      // With a store of its own, a block this limiter did not start (an episode dropped under
      // pressure) still gets its one event here: the threshold is then the first one, the count
      // unknown (0). With a shared store, the worker that started the block records the event.
      const ids = this.episodeIds(clientIp, blockedUntil);
      episode = {
        eventId: ids.eventId,
        supportId: ids.supportId,
        clientIp,
        threshold: crossing?.threshold ?? this.policy.thresholds[0]!,
        observedRequests: crossing?.observedRequests ?? 0,
        firstBlockedAt: now,
        lastBlockedAt: now,
        blockedRequests: 1,
        blockedUntil,
        dirty: false,
        held: true,
      };
      if (this.episodes.size >= this.maxEpisodes) {
        const oldest = this.episodes.entries().next().value;
        if (oldest !== undefined) this.endEpisode(oldest[0], oldest[1]);
      }
      this.episodes.set(clientIp, episode);
      started = this.sharedEpisodeScope === undefined || crossing !== undefined;
      this.startTimer();
    } else {
      if (blockedUntil > episode.blockedUntil) episode.blockedUntil = blockedUntil;
      this.countRefusals(episode, now, 1);
    }
    return {
      allowed: false,
      retryAfterSeconds: Math.max(1, Math.ceil((blockedUntil - now) / 1000)),
      episode,
      started,
    };
  }

  /** Every refused request of a block is counted here, whichever path refused it. */
  private countRefusals(episode: RateEpisode, now: number, requests: number): void {
    episode.lastBlockedAt = now;
    episode.blockedRequests += requests;
    episode.dirty = true;
  }

  private episodeIds(clientIp: string, blockedUntil: number): { eventId: string; supportId: string } {
    if (this.sharedEpisodeScope === undefined) return { eventId: randomUUID(), supportId: randomUUID().replaceAll('-', '') };
    const hex = createHash('sha256').update(`${this.sharedEpisodeScope}|${clientIp}|${blockedUntil}`).digest('hex');
    // UUID layout (version 8: "custom") from the first half, the support id from the second.
    const eventId = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
    return { eventId, supportId: hex.slice(32, 64) };
  }

  private endEpisode(clientIp: string, episode: RateEpisode): void {
    if (episode.dirty) this.send(episode);
    episode.held = false;
    this.episodes.delete(clientIp);
  }

  private send(episode: RateEpisode): void {
    episode.dirty = false;
    try {
      this.onEpisodeUpdate?.(episode);
    } catch {
      // A failing sink must not break request handling; the next update carries the totals again.
    }
  }

  /** Sends dirty episodes and forgets those that ended more than `episodeGapMs` before `now`. */
  private flush(now: number): void {
    for (const [clientIp, episode] of this.episodes) {
      if (episode.dirty) this.send(episode);
      if (now - episode.blockedUntil > this.episodeGapMs) {
        episode.held = false;
        this.episodes.delete(clientIp);
      }
    }
    if (this.episodes.size === 0) this.stopTimer();
  }

  private startTimer(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => this.flush(this.now()), this.updateIntervalMs);
    this.timer.unref();
  }

  private stopTimer(): void {
    if (this.timer === undefined) return;
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
