/**
 * Insight under a flood: bounded by design. WAF events are grouped by (window, tenant, proxy,
 * action, source IP, matched rule set); the first `wholePerWindow` events of a group in each window
 * (one minute, aligned to the minute rollups) are kept whole, the rest are counted into one sampled
 * event of the group: one of those requests, chosen uniformly (reservoir sampling, weighted by the
 * requests each input stands for), carrying how many requests it stands for (`requestCount`).
 *
 * Every request is kept or counted exactly once, so the dashboards' rollups (which add
 * `requestCount`) stay equal to the requests seen, and the export's `requestCount`s add up to them.
 * Samples are taken out periodically (`takeSamples`), not only when their window ends, so the
 * numbers lag by one period, not by a minute.
 *
 * Memory is bounded: at most `maxGroups` groups at once; past it, a group per (window, tenant,
 * proxy, action) takes the requests of every new source and rule set ("overflow": its sample then
 * stands for several sources), and past `maxGroups` overflow groups too, requests are dropped
 * (counted by the caller: the outcome says so). APP_DDOS_ATTACK events (one per client and
 * episode already) are always kept whole.
 */
import type { InsightEvent, WafEvent } from '@tps/model';

export interface InsightSamplerOptions {
  /** Events of one group kept whole per window. */
  wholePerWindow: number;
  /** Groups tracked at once (and as many overflow groups). */
  maxGroups: number;
  /** Window length; the minute rollups need it to divide a minute. Default 60 s. */
  windowMs?: number;
  /** [0, 1) source of randomness for the reservoir (tests pass their own). */
  random?: () => number;
}

/**
 * What became of an offered event: kept `whole` (the caller passes it on), `counted` into its
 * group's sample, counted into an `overflow` group, or `dropped` (no room at all).
 */
export type SamplerOutcome = 'whole' | 'counted' | 'overflow' | 'dropped';

interface Group {
  windowStart: number;
  overflow: boolean;
  /** Events of this group passed on whole in this window. */
  whole: number;
  /** Requests counted since the last sample was taken. */
  counted: number;
  sample: WafEvent | undefined;
}

export const INSIGHT_WINDOW_MS = 60_000;

/** How many requests an event stands for (1 unless it is a sample). */
export function requestsOf(event: InsightEvent): number {
  return event.type === 'WAF_EVENT' && event.requestCount !== undefined ? event.requestCount : 1;
}

export class InsightSampler {
  readonly #wholePerWindow: number;
  readonly #maxGroups: number;
  readonly #windowMs: number;
  readonly #random: () => number;
  readonly #groups = new Map<string, Group>();
  #overflowGroups = 0;

  constructor(options: InsightSamplerOptions) {
    this.#wholePerWindow = options.wholePerWindow;
    this.#maxGroups = options.maxGroups;
    this.#windowMs = options.windowMs ?? INSIGHT_WINDOW_MS;
    this.#random = options.random ?? Math.random;
  }

  /** Groups held (overflow groups included). */
  get size(): number {
    return this.#groups.size;
  }

  /**
   * Offers an event as it arrives. `whole`: pass it on as it is. A sample from an earlier stage
   * (requestCount set) is never passed on whole: it is merged into this stage's sample.
   */
  admit(event: InsightEvent, now = Date.now()): SamplerOutcome {
    if (event.type !== 'WAF_EVENT') return 'whole';
    return this.#place(event, now, event.requestCount === undefined);
  }

  /** Counts an event into its group's sample without keeping it whole (the caller has no room for it). */
  count(event: WafEvent, now = Date.now()): SamplerOutcome {
    return this.#place(event, now, false);
  }

  /**
   * The samples of requests counted since the last call (each with its requestCount), at most
   * `max` of them; groups whose window has ended are forgotten once their sample is out.
   */
  takeSamples(now = Date.now(), max = Number.POSITIVE_INFINITY): WafEvent[] {
    const samples: WafEvent[] = [];
    for (const [key, group] of this.#groups) {
      if (group.counted > 0 && group.sample !== undefined) {
        if (samples.length >= max) continue;
        samples.push({ ...group.sample, requestCount: group.counted });
        group.counted = 0;
        group.sample = undefined;
      }
      if (group.counted === 0 && group.windowStart + this.#windowMs <= now) {
        this.#groups.delete(key);
        if (group.overflow) this.#overflowGroups--;
      }
    }
    return samples;
  }

  #place(event: WafEvent, now: number, mayKeepWhole: boolean): SamplerOutcome {
    const at = Date.parse(event.timestamp);
    const windowStart = Math.floor((Number.isFinite(at) ? at : now) / this.#windowMs) * this.#windowMs;
    const proxyKey = `${windowStart}|${event.tenantId}|${event.trafficConfigId}|${event.action}`;
    const key = `${proxyKey}|${event.source?.ip ?? ''}|${ruleSetKey(event)}`;
    let group = this.#groups.get(key);
    let outcome: SamplerOutcome = 'counted';
    if (group === undefined) {
      if (this.#groups.size - this.#overflowGroups < this.#maxGroups) {
        group = { windowStart, overflow: false, whole: 0, counted: 0, sample: undefined };
        this.#groups.set(key, group);
      } else {
        const overflowKey = `${proxyKey}|*`;
        group = this.#groups.get(overflowKey);
        if (group === undefined) {
          if (this.#overflowGroups >= this.#maxGroups) return 'dropped';
          group = { windowStart, overflow: true, whole: 0, counted: 0, sample: undefined };
          this.#groups.set(overflowKey, group);
          this.#overflowGroups++;
        }
        outcome = 'overflow';
      }
    }
    if (mayKeepWhole && !group.overflow && group.whole < this.#wholePerWindow) {
      group.whole++;
      return 'whole';
    }
    const weight = event.requestCount ?? 1;
    group.counted += weight;
    // Weighted reservoir of one: each request counted so far is the sample with the same chance.
    if (group.sample === undefined || this.#random() * group.counted < weight) group.sample = event;
    return outcome;
  }
}

/** The matched rule set as a key: the rule ids, sorted, once each. */
function ruleSetKey(event: WafEvent): string {
  const ids = [...new Set((event.rules ?? []).map((rule) => rule.modSecId))].sort((a, b) => a - b);
  return ids.join(',');
}
