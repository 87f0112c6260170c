/**
 * Attack detection for one proxy, counted in memory shared by every worker of the edge node.
 *
 * The proxy's requests are counted per second in one slot of shared memory. Each second that
 * closes updates the learned normal rate (an exponentially weighted mean, half-life
 * `baselineHalfLifeSeconds`), unless an attack is under way: an attack must not become normal. An
 * attack starts at the request that takes a second's count over the trigger, the lower of the
 * tenant's absolute `threshold` and the learned rate times `factor` (never below the operator's
 * `minRate`), and ends after `quietSeconds` seconds under the trigger it started with. While it lasts, the slot keeps
 * its figures (peak rate, requests, sources, challenged, solved, passed, blocked, shed).
 *
 * With several edge nodes (Redis, `ClusterRateExchange`), the worker that closes a second adds the
 * node's count to the cluster's and reads back all nodes' total of the second before (every node has
 * closed it by then); a second's rate is then the larger of the node's own count and the latest
 * cluster total, so the trigger and the learned rate are the proxy's, with a lag of two seconds.
 *
 * Seconds close on the first request of a later second, or on the one-second tick every worker
 * runs (so that an attack ends when the flood stops). The worker that starts an episode owns its
 * event: when the episode ends its figures are copied aside and that worker records the one
 * APP_DDOS_ATTACK event (another worker does after a few seconds if the owner is gone).
 *
 * A second table holds one slot per source (bounded, least recently used recycled): the
 * challenges it was served without a solution in this episode, and its block.
 */
import { threadId } from 'node:worker_threads';
import { SharedTable } from '../../shared-counters/shared-table.ts';
import type { AppDdosTablesInit, AttackFigures } from './types.ts';

const STATE_KEY = 'app-ddos';
const W = {
  SECOND: 0,
  COUNT: 1,
  BASELINE: 2,
  LAST_RATE: 3,
  ATTACK_START: 4,
  QUIET: 5,
  PEAK: 6,
  REQUESTS: 7,
  CHALLENGED: 8,
  SOLVED: 9,
  PASSED: 10,
  BLOCKED: 11,
  SOURCES: 12,
  SHED: 13,
  ORIGIN_SECOND: 14,
  ORIGIN_COUNT: 15,
  OWNER: 16,
  TRIGGER: 17,
  BASELINE_AT_START: 18,
  REPORT_PENDING: 19,
  REPORT: 20, // 14 words: see takeReport
  REPORT_SINCE: 34,
  CLUSTER_SECOND: 35,
  CLUSTER_RATE: 36,
} as const;
const STATE_WORDS = 37;
/** A cluster total older than this many seconds before the second being closed is not used. */
const CLUSTER_STALE_SECONDS = 3;
const REPORT_WORDS = 14;
/** A pending report whose owner has not taken it by then is taken by any worker. */
const ORPHAN_REPORT_MS = 3_000;

const S = { EPISODE: 0, UNSOLVED: 1, BLOCKED_UNTIL: 2 } as const;
const SOURCE_WORDS = 3;

/** Sources a proxy tracks at once (its challenges and blocks). */
export const APP_DDOS_SOURCE_SLOTS = 16_384;

export function createAppDdosTables(sourceSlots = APP_DDOS_SOURCE_SLOTS): AppDdosTablesInit {
  // One slot of its own for the proxy-wide state: a flood of sources can never recycle it.
  return { state: SharedTable.create(1, STATE_WORDS).init, sources: SharedTable.create(sourceSlots, SOURCE_WORDS).init };
}

export interface DetectorPolicy {
  /** Absolute trigger (requests/s), the tenant's; undefined: the learned rate only. */
  threshold: number | undefined;
  factor: number;
  minRate: number;
  baselineHalfLifeSeconds: number;
  quietSeconds: number;
}

/** What the request path reads after counting a request. */
export interface RequestState {
  /** Start (ms) of the attack under way; 0: none. */
  attackStart: number;
  /** The last complete second's count, and the trigger in force. */
  lastRate: number;
  trigger: number;
}

export type PassVerdict = 'passed' | 'shed';
export type SourceVerdict = 'challenge' | 'blocked' | 'just-blocked';

export interface AttackReport extends AttackFigures {
  /** Worker that owned the episode (+1; 0 unknown). */
  owner: number;
}

export class AttackDetector {
  readonly #state: SharedTable;
  readonly #sources: SharedTable;
  #policy: DetectorPolicy;
  readonly #me = threadId + 1;
  readonly #result: RequestState = { attackStart: 0, lastRate: 0, trigger: 0 };
  /** The second this thread closed last and its count, until taken (for the cluster exchange). */
  #closed: { second: number; count: number } | undefined;

  constructor(tables: AppDdosTablesInit, policy: DetectorPolicy) {
    this.#state = new SharedTable(tables.state);
    this.#sources = new SharedTable(tables.sources);
    this.#policy = policy;
  }

  set policy(policy: DetectorPolicy) {
    this.#policy = policy;
  }

  /** Counts one request. The returned object is reused: read it before the next call. */
  count(nowMs: number): RequestState {
    const result = this.#result;
    this.#state.update(STATE_KEY, nowMs / 1000, (w, o) => {
      this.#roll(w, o, nowMs);
      const count = ++w[o + W.COUNT]!;
      if (w[o + W.ATTACK_START]! > 0) w[o + W.REQUESTS]!++;
      else {
        // Within the second: the flood is stopped at the trigger's count, not a second later.
        const trigger = this.#trigger(w[o + W.BASELINE]!);
        if (count > trigger) this.#startEpisode(w, o, nowMs, trigger, count);
      }
      result.attackStart = w[o + W.ATTACK_START]!;
      result.lastRate = w[o + W.LAST_RATE]!;
      result.trigger = w[o + W.ATTACK_START]! > 0 ? w[o + W.TRIGGER]! : this.#trigger(w[o + W.BASELINE]!);
    });
    return result;
  }

  /** Closes the seconds past (the one-second tick), and hands back an ended episode's report when it is this worker's to record. */
  tick(nowMs: number): AttackReport | undefined {
    return this.#state.update(STATE_KEY, nowMs / 1000, (w, o) => {
      this.#roll(w, o, nowMs);
      if (w[o + W.REPORT_PENDING] !== 1) return undefined;
      const mine = w[o + W.REPORT + 13] === this.#me;
      if (!mine && nowMs - w[o + W.REPORT_SINCE]! < ORPHAN_REPORT_MS) return undefined;
      w[o + W.REPORT_PENDING] = 0;
      const r = o + W.REPORT;
      return {
        startedAt: w[r]!,
        endedAt: w[r + 1]!,
        baselineRate: w[r + 2]!,
        triggerRate: w[r + 3]!,
        peakRate: w[r + 4]!,
        requests: w[r + 5]!,
        sources: w[r + 6]!,
        challenged: w[r + 7]!,
        solved: w[r + 8]!,
        passed: w[r + 9]!,
        blocked: w[r + 10]!,
        shed: w[r + 11]!,
        owner: w[r + 13]!,
      };
    });
  }

  /** A second this thread closed since the last call, and the node's count of it (to add to the cluster's). */
  takeClosed(): { second: number; count: number } | undefined {
    const closed = this.#closed;
    this.#closed = undefined;
    return closed;
  }

  /** All nodes' total of `second`, from the cluster exchange. */
  setClusterRate(second: number, total: number): void {
    this.#state.update(STATE_KEY, Date.now() / 1000, (w, o) => {
      if (second < w[o + W.CLUSTER_SECOND]!) return;
      w[o + W.CLUSTER_SECOND] = second;
      w[o + W.CLUSTER_RATE] = total;
    });
  }

  /** The episode under way is this worker's (it records its event). */
  owns(attackStart: number): boolean {
    return this.#state.update(STATE_KEY, Date.now() / 1000, (w, o) => w[o + W.ATTACK_START] === attackStart && w[o + W.OWNER] === this.#me);
  }

  /**
   * A request is to go to the origin (cleared or exempted): within `originRateLimit` per second
   * during an attack it passes, beyond it it is shed.
   */
  pass(nowMs: number, originRateLimit: number | undefined, newSource: boolean): PassVerdict {
    const second = Math.floor(nowMs / 1000);
    return this.#state.update(STATE_KEY, nowMs / 1000, (w, o) => {
      const attacking = w[o + W.ATTACK_START]! > 0;
      if (attacking && newSource) w[o + W.SOURCES]!++;
      if (originRateLimit !== undefined && attacking) {
        if (w[o + W.ORIGIN_SECOND] !== second) {
          w[o + W.ORIGIN_SECOND] = second;
          w[o + W.ORIGIN_COUNT] = 0;
        }
        if (w[o + W.ORIGIN_COUNT]! >= originRateLimit) {
          w[o + W.SHED]!++;
          return 'shed';
        }
        w[o + W.ORIGIN_COUNT]!++;
      }
      if (attacking) w[o + W.PASSED]!++;
      return 'passed';
    });
  }

  /** Adds to the episode's figures (challenged, solved, blocked) and its sources. */
  add(nowMs: number, figure: 'challenged' | 'solved' | 'blocked', newSource: boolean): void {
    const word = figure === 'challenged' ? W.CHALLENGED : figure === 'solved' ? W.SOLVED : W.BLOCKED;
    this.#state.update(STATE_KEY, nowMs / 1000, (w, o) => {
      if (w[o + W.ATTACK_START]! <= 0) return;
      w[o + word]!++;
      if (newSource) w[o + W.SOURCES]!++;
    });
  }

  /**
   * A source seen in `episode` (its first request of the episode: `isNew`). With `challenged`, one
   * more challenge without a solution: past `maxUnsolved` the source is blocked for `blockMs`.
   */
  source(
    key: string,
    episode: number,
    nowMs: number,
    challenged: boolean,
    maxUnsolved: number,
    blockMs: number,
  ): { verdict: SourceVerdict | 'go'; isNew: boolean; blockedUntil: number } {
    return this.#sources.update(key, nowMs / 1000, (w, o) => {
      if (w[o + S.BLOCKED_UNTIL]! > nowMs) return { verdict: 'blocked', isNew: false, blockedUntil: w[o + S.BLOCKED_UNTIL]! };
      let isNew = false;
      if (w[o + S.EPISODE] !== episode) {
        w[o + S.EPISODE] = episode;
        w[o + S.UNSOLVED] = 0;
        isNew = true;
      }
      if (!challenged) return { verdict: 'go', isNew, blockedUntil: 0 };
      w[o + S.UNSOLVED]!++;
      if (w[o + S.UNSOLVED]! > maxUnsolved) {
        w[o + S.BLOCKED_UNTIL] = nowMs + blockMs;
        w[o + S.UNSOLVED] = 0;
        return { verdict: 'just-blocked', isNew, blockedUntil: nowMs + blockMs };
      }
      return { verdict: 'challenge', isNew, blockedUntil: 0 };
    });
  }

  /** The source solved a challenge: its unsolved count starts again. */
  solved(key: string, nowMs: number): void {
    this.#sources.update(key, nowMs / 1000, (w, o) => {
      w[o + S.UNSOLVED] = 0;
    });
  }

  #trigger(baseline: number): number {
    const p = this.#policy;
    const learned = Math.max(p.minRate, p.factor * baseline);
    return p.threshold === undefined ? learned : Math.min(p.threshold, learned);
  }

  /** Closes the seconds between the slot's second and now (called under the slot's lock). */
  #roll(w: Float64Array, o: number, nowMs: number): void {
    const second = Math.floor(nowMs / 1000);
    const current = w[o + W.SECOND]!;
    if (current === 0) {
      w[o + W.SECOND] = second;
      return;
    }
    if (second <= current) return;
    this.#closed = { second: current, count: w[o + W.COUNT]! };
    this.#closeSecond(w, o, w[o + W.COUNT]!, (current + 1) * 1000);
    // Seconds without any request: as many as matter for the attack's end, then the decay at once.
    const empty = second - current - 1;
    const stepped = Math.min(empty, this.#policy.quietSeconds + 1);
    for (let i = 0; i < stepped; i++) this.#closeSecond(w, o, 0, (current + 2 + i) * 1000);
    if (empty > stepped && w[o + W.ATTACK_START] === 0) {
      w[o + W.BASELINE] = w[o + W.BASELINE]! * (1 - this.#alpha()) ** (empty - stepped);
    }
    w[o + W.SECOND] = second;
    w[o + W.COUNT] = 0;
  }

  #alpha(): number {
    return 1 - 2 ** (-1 / Math.max(1, this.#policy.baselineHalfLifeSeconds));
  }

  #closeSecond(w: Float64Array, o: number, ownRate: number, endMs: number): void {
    const closing = endMs / 1000 - 1;
    const clusterSecond = w[o + W.CLUSTER_SECOND]!;
    const cluster = clusterSecond > 0 && closing - clusterSecond <= CLUSTER_STALE_SECONDS ? w[o + W.CLUSTER_RATE]! : 0;
    const rate = Math.max(ownRate, cluster);
    w[o + W.LAST_RATE] = rate;
    if (w[o + W.ATTACK_START]! > 0) {
      if (rate > w[o + W.PEAK]!) w[o + W.PEAK] = rate;
      if (rate > w[o + W.TRIGGER]!) {
        w[o + W.QUIET] = 0;
        return;
      }
      w[o + W.QUIET]!++;
      if (w[o + W.QUIET]! >= this.#policy.quietSeconds) this.#endEpisode(w, o, endMs);
      return;
    }
    const baseline = w[o + W.BASELINE]!;
    const trigger = this.#trigger(baseline);
    if (rate > trigger) {
      this.#startEpisode(w, o, endMs - 1000, trigger, rate);
      w[o + W.PEAK] = rate;
      return;
    }
    w[o + W.BASELINE] = baseline + (rate - baseline) * this.#alpha();
  }

  /** An attack starts at `startMs` (under the slot's lock); `requests` of it were counted already. */
  #startEpisode(w: Float64Array, o: number, startMs: number, trigger: number, requests: number): void {
    w[o + W.ATTACK_START] = startMs;
    w[o + W.TRIGGER] = trigger;
    w[o + W.BASELINE_AT_START] = w[o + W.BASELINE]!;
    w[o + W.PEAK] = 0;
    w[o + W.REQUESTS] = requests;
    w[o + W.QUIET] = 0;
    for (const word of [W.CHALLENGED, W.SOLVED, W.PASSED, W.BLOCKED, W.SOURCES, W.SHED]) w[o + word] = 0;
    w[o + W.OWNER] = this.#me;
  }

  #endEpisode(w: Float64Array, o: number, endMs: number): void {
    const r = o + W.REPORT;
    // The quiet seconds are not part of the attack: it ended when they began.
    const figures = [
      w[o + W.ATTACK_START]!,
      Math.max(w[o + W.ATTACK_START]! + 1000, endMs - this.#policy.quietSeconds * 1000),
      w[o + W.BASELINE_AT_START]!,
      w[o + W.TRIGGER]!,
      w[o + W.PEAK]!,
      w[o + W.REQUESTS]!,
      w[o + W.SOURCES]!,
      w[o + W.CHALLENGED]!,
      w[o + W.SOLVED]!,
      w[o + W.PASSED]!,
      w[o + W.BLOCKED]!,
      w[o + W.SHED]!,
      0,
      w[o + W.OWNER]!,
    ];
    for (let i = 0; i < REPORT_WORDS; i++) w[r + i] = figures[i]!;
    w[o + W.REPORT_PENDING] = 1;
    w[o + W.REPORT_SINCE] = endMs;
    w[o + W.ATTACK_START] = 0;
    w[o + W.OWNER] = 0;
    w[o + W.QUIET] = 0;
  }
}
