/**
 * What the edge supervisor (one per process, beside the store) and its proxy workers (one thread
 * per core) say to each other. Workers never touch the store: the supervisor resolves every
 * configuration (keys decrypted, CA certificates gathered) and sends whole snapshots.
 */
import type { L4ProxyAttributes } from '@tps/model';
import type { ResolvedHttpProxy } from '../http/types.ts';
import type { InsightEvent } from '@tps/model';
import type { SharedIpSet } from '../../net/ip-set.ts';
import type { ProxyCounterTables } from '../shared-counters/proxy-tables.ts';
import type { HistogramIncrement } from './histograms.ts';
import type { EdgeCounterName } from './metric-catalogue.ts';
import type { SourceRefusals } from '../kernel-blocking/types.ts';

export type ResolvedConfig =
  | { type: 'l4Proxy'; id: string; tenantId: string; revision: number; attributes: L4ProxyAttributes }
  | ({ type: 'httpProxy' } & ResolvedHttpProxy);

export interface ConfigEntry {
  config: ResolvedConfig;
  /**
   * Changes whenever what the worker must serve changes: the configuration's revision, and for
   * HTTP proxies the revisions of the certificates and CA certificates it uses (a renewed
   * certificate keeps its id but must reach new connections).
   */
  version: string;
  /**
   * Set while the configuration's own attributes cannot be served yet (their front-end
   * certificate is not issued) and its previous ones are served meanwhile: the status to report
   * once the workers serve them.
   */
  interim?: { state: 'PROVISIONING' | 'ERROR'; detail: string };
  /** This proxy's share of the node's shared counters (connection caps, rate limits), the same for every worker. */
  counters: ProxyCounterTables;
  /**
   * Set when the proxy is served but part of it fails closed until something outside it changes
   * (client certificates refused while no CRL of a CA has been fetched): the proxy's status detail.
   */
  degraded?: string;
}

export type ToWorker =
  | { kind: 'apply'; entries: ConfigEntry[] }
  | { kind: 'acme-answer'; requestId: number; keyAuthorization: string | undefined }
  | { kind: 'acme-alpn-answer'; requestId: number; certificate: { certPem: string; keyPem: string } | undefined }
  /** The node's threat-feed set was rebuilt: swap in a view over its shared memory (threat-feed-host.ts). */
  | { kind: 'threat-feed'; set: SharedIpSet; generation: number }
  /** The kernel now drops this source's packets to that proxy: its open connections there are closed. */
  | { kind: 'kernel-blocked'; proxyId: string; source: string }
  | { kind: 'stop' };

export type FromWorker =
  | { kind: 'ready' }
  | { kind: 'status'; id: string; version: string; state: 'ACTIVE' | 'ERROR'; detail: string | null }
  | { kind: 'removed'; id: string }
  | { kind: 'insight'; event: InsightEvent }
  | { kind: 'insight-update'; eventId: string; update: { lastBlockedAt: string; blockedRequests: number; blockedUntil: string } }
  /** Challenge look-ups carry the tenant of the proxy that received the validation request. */
  | { kind: 'acme-lookup'; requestId: number; token: string; host: string; tenantId: string }
  | { kind: 'acme-alpn-lookup'; requestId: number; servername: string; tenantId: string }
  /** What the worker counted and observed since its last report (once a second). */
  | { kind: 'counters'; counters: CounterIncrement[]; histograms: HistogramIncrement[] }
  /** This worker's proxies now look up in that generation of the threat-feed set. */
  | { kind: 'threat-feed-applied'; generation: number }
  /** Refusals of blocked sources since the last report (only while kernel blocking is on): the escalation's input. */
  | { kind: 'refusals'; refusals: SourceRefusals[] }
  /** This worker's rate-limit counters in Redis stopped answering (`failing`) or answer again. */
  | { kind: 'rate-limit-store'; failing: boolean; cause: string }
  | { kind: 'stopped' };

export interface CounterIncrement {
  name: EdgeCounterName;
  labels: Record<string, string>;
  value: number;
}

/** Body bytes the WAF inspects (operator settings): the proxies' defaults, multipart/form-data uploads, responses. */
export interface WafBodyLimits {
  /** Default of `waf.requestBodyLimit` (TPS_WAF_REQUEST_BODY_LIMIT). */
  request: number;
  /** A multipart/form-data body, inspected whole up to this (TPS_WAF_MULTIPART_BODY_LIMIT). */
  multipart: number;
  /** Text-like response bodies (TPS_WAF_RESPONSE_BODY_LIMIT). */
  response: number;
  /** Default of `waf.bodyLimitAction` (TPS_WAF_BODY_LIMIT_ACTION). */
  action: 'PROCESS_PARTIAL' | 'REJECT';
}
