/**
 * What `/healthz` says about the edge: every configuration this node should serve, served by every
 * worker (one reporting an error, or not applied past a grace, makes the node unhealthy), and the
 * warnings of what works but not as configured (threat feeds, kernel blocking). A function of what
 * the supervisor knows; the supervisor calls it.
 */
import { sourceLabel, type ThreatFeedReport } from '../l4/threat-feed.ts';
import type { ConfigEntry } from './messages.ts';
import type { RateLimitStoreFailureMode } from '../limits/types.ts';

/** A configuration its workers have not all applied for this long makes the node unhealthy (/healthz). */
const APPLY_GRACE_MS = 10_000;
/** Configurations named in a health report at most (the count is always whole). */
const HEALTH_LIST_LIMIT = 50;

/** What `/healthz` says about the edge (EdgeSupervisor.health). */
export interface EdgeHealth {
  /** false: some configuration this node should serve is not served by every worker. */
  ok: boolean;
  /** Configurations this node serves (handed to its workers). */
  configurations: number;
  /** Those not served: a worker reports an error, or has not applied them within the grace. */
  notServed: { id: string; state: 'ERROR' | 'APPLYING'; detail: string }[];
  /** How many are not served (the list stops at HEALTH_LIST_LIMIT). */
  notServedCount: number;
  /** What works but not as configured: a threat feed enabled without a source, feeds failing. */
  warnings: { code: string; detail: string; configurations?: string[] }[];
}

/** What a worker reported last for a configuration. */
export interface WorkerReport {
  version: string;
  state: 'ACTIVE' | 'ERROR';
  detail: string | null;
}

export interface HealthInput {
  /** The configurations the node should serve, at their current versions. */
  entries: readonly ConfigEntry[];
  /** Each worker's last reports by configuration id; undefined for a worker not running. */
  workerReports: readonly (ReadonlyMap<string, WorkerReport> | undefined)[];
  /** Since when a configuration's current version has been applying (its change, or a worker's restart). */
  applyingSince: (id: string) => number;
  /** l4 proxies whose threat intelligence is on while the node has no feed. */
  withoutFeed: readonly string[];
  /** The node's threat feed, when it has sources: its last report (undefined: not read yet). */
  threatFeed: { report: ThreatFeedReport | undefined } | undefined;
  kernelWarning: { code: string; detail: string } | undefined;
  /** The node's failure mode, and why each worker whose rate-limit counters in Redis do not answer says so. */
  rateLimitStore?: { failureMode: RateLimitStoreFailureMode; failing: readonly string[] };
}

const FAILURE_MODE_EFFECT: Record<RateLimitStoreFailureMode, string> = {
  local: 'rate limits count on this node only',
  closed: 'rate-limited proxies answer 503',
  open: 'rate limits are not applied',
};

export function edgeHealth(input: HealthInput, now: number): EdgeHealth {
  const notServed: EdgeHealth['notServed'] = [];
  let notServedCount = 0;
  for (const entry of input.entries) {
    const id = entry.config.id;
    const reports = input.workerReports.map((reportsOf) => reportsOf?.get(id));
    const failure = reports.find((report) => report?.version === entry.version && report.state === 'ERROR');
    let problem: EdgeHealth['notServed'][number] | undefined;
    if (failure !== undefined) problem = { id, state: 'ERROR', detail: failure.detail ?? 'cannot be served' };
    else if (!reports.every((report) => report?.version === entry.version && report.state === 'ACTIVE')) {
      const since = input.applyingSince(id);
      if (now - since > APPLY_GRACE_MS) {
        const serving = reports.filter((report) => report?.version === entry.version).length;
        problem = {
          id,
          state: 'APPLYING',
          detail: `served by ${serving} of ${reports.length} workers for ${Math.round((now - since) / 1000)} s`,
        };
      }
    }
    if (problem === undefined) continue;
    notServedCount++;
    if (notServed.length < HEALTH_LIST_LIMIT) notServed.push(problem);
  }
  const warnings: EdgeHealth['warnings'] = [];
  if (input.withoutFeed.length > 0) {
    warnings.push({
      code: 'NO_THREAT_FEED',
      detail: `${input.withoutFeed.length} layer 4 proxies have threatIntelligence enabled, but TPS_THREAT_FEEDS is empty on this node: no source is refused`,
      configurations: input.withoutFeed.slice(0, HEALTH_LIST_LIMIT),
    });
  }
  if (input.threatFeed !== undefined) {
    const report = input.threatFeed.report;
    const failing = (report?.sources ?? []).filter((source) => !source.ok).map((source) => sourceLabel(source.source));
    if (report === undefined) warnings.push({ code: 'THREAT_FEED_NOT_LOADED', detail: 'the threat feeds have not been read yet' });
    else if (failing.length > 0)
      warnings.push({
        code: 'THREAT_FEED_SOURCE_FAILING',
        detail: `threat-feed sources failing (their last good entries stay in use): ${failing.join(', ')}`,
      });
  }
  if (input.kernelWarning !== undefined) warnings.push(input.kernelWarning);
  const store = input.rateLimitStore;
  if (store !== undefined && store.failing.length > 0)
    warnings.push({
      code: 'RATE_LIMIT_STORE_FAILING',
      detail: `the rate-limit counters in Redis (TPS_REDIS_URL) do not answer in ${store.failing.length} of ${input.workerReports.length} workers (${store.failing[0]}): ${FAILURE_MODE_EFFECT[store.failureMode]} (TPS_RATE_LIMIT_STORE_FAILURE_MODE=${store.failureMode})`,
    });
  return { ok: notServedCount === 0, configurations: input.entries.length, notServed, notServedCount, warnings };
}
