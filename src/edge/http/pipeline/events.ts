/**
 * Last phase: what a finished request leaves behind. The end of its WAF exchange (if the response
 * side did not end it), one access-log entry per request (when an access log is wired), metrics,
 * and the insight events: WAF_EVENT (recorded here, once the final
 * status is known) and APP_DDOS_ATTACK (recorded when a rate-limit episode starts, then updated by
 * the limiter while it lasts: one event per client and episode, never one per request).
 */
import { randomUUID } from 'node:crypto';
import { unmapIpv4 } from '../../../net/ip.ts';
import type { AppDdosAttackEvent, RequestSummary, WafEvent } from '@tps/model';
import type { RequestCtx } from '../ctx.ts';
import type { HttpProxyDeps } from '../http-proxy.ts';
import type { RateEpisode } from '../rate-limit/limiter.ts';
import type { PhaseName } from './phase.ts';
import type { WafEventDraft, WafFailureReason } from './waf.ts';

/**
 * Who answered a request: the origin, or the proxy itself because of one of its protections (the
 * WAF: a block, a body over the limit, a request it could not inspect; the rate limit; geo
 * fencing), an ACME challenge, or an `error` (the origin unreachable or too slow, a request refused
 * as malformed or too large or without a valid client certificate, an internal error). `none`: the
 * client left before any response head.
 */
export type AnsweredBy = 'origin' | 'waf' | 'rate-limit' | 'geo' | 'acme' | 'error' | 'none';

/** The WAF's word on a request: absent when the WAF never saw it (answered before, or no WAF). */
export type WafOutcome = 'PASSED' | 'BLOCKED' | 'LOGGED' | 'UNINSPECTED';

/** One line of the access log (the caller writes it, typically as one JSON object per line). */
export interface AccessLogEntry {
  type: 'http';
  /** ISO 8601 UTC, when the request arrived. */
  time: string;
  proxyId: string;
  tenantId: string;
  revision: number;
  supportId: string;
  requestId: string;
  clientIp: string;
  clientPort: number;
  /** Where the client address came from, when not from the socket: then `peerIp` is the load balancer. */
  clientIpSource?: 'proxy-protocol' | 'x-forwarded-for';
  peerIp?: string;
  serverIp: string;
  serverPort: number;
  country: string;
  protocol: 'HTTP/1.0' | 'HTTP/1.1' | 'HTTP/2';
  tls: boolean;
  /** X-Client-Cert-Verified value when the proxy asks for client certificates. */
  clientCertificate?: string;
  method: string;
  host: string;
  /** Request target as received (path and query). */
  url: string;
  /** Status sent to the client; 0 when the client went away before any response head. */
  status: number;
  answeredBy: AnsweredBy;
  /** What the WAF said; absent when it did not see the request. */
  waf?: WafOutcome;
  /** Rule ids of the WAF's event (BLOCKED, LOGGED). */
  wafRules?: number[];
  /** Request body bytes received from the client. */
  bytesIn: number;
  /** Response body bytes sent to the client. */
  bytesOut: number;
  /** `address:port` of the origin that answered (or was tried last). */
  upstream?: string;
  upstreamAttempts: number;
  upstreamError?: string;
  /** From the request head to the end of the response. */
  durationMs: number;
  /** From the first connection attempt to the origin's response head (or its last failure); absent when no origin was asked. */
  originMs?: number;
  /** Set on a line sampled out of many (TPS_ACCESS_LOG_SAMPLE): the requests like it it stands for. */
  sample?: number;
}

/** One access-log line: the entry as a JSON object (no newline). */
export function formatAccessLogLine(entry: AccessLogEntry): string {
  return JSON.stringify(entry);
}

export interface HttpProxyMetrics {
  /**
   * A request ended (answered, proxied or abandoned): how long it took, and how long the origin
   * took to its response head (undefined when no origin was asked).
   */
  requestCompleted?(proxyId: string, status: number, answeredBy: AnsweredBy, durationSeconds: number, originSeconds: number | undefined): void;
  /** One attempt to an origin failed (`reason`: error code such as ECONNREFUSED or UND_ERR_HEADERS_TIMEOUT). */
  upstreamFailed?(proxyId: string, host: string, reason: string): void;
  /**
   * A connection refused by a cap (SOURCE_CONNECTIONS, SOURCE_RATE, GLOBAL_CONNECTIONS), a request
   * past its deadline (HEADERS_TIMEOUT, REQUEST_TIMEOUT), or an HTTP/2 session ended (RAPID_RESET).
   */
  connectionRefused?(proxyId: string, protocol: 'HTTP' | 'HTTP/2', reason: string): void;
  /**
   * The WAF gave no verdict on a request or response (`reason`: its engine overloaded, its thread
   * gone, an error); `outcome` is what the proxy's `waf.failMode` did: refused (503) or passed uninspected.
   */
  wafUninspected?(proxyId: string, side: 'request' | 'response', reason: WafFailureReason, outcome: 'refused' | 'passed'): void;
  /** A request body longer than the WAF inspects: refused (REJECT) or inspected in part (PROCESS_PARTIAL, or LOGGING mode). */
  wafBodyOverLimit?(proxyId: string, action: 'REJECT' | 'PROCESS_PARTIAL'): void;
}

/** Runs once per request, when its response is over (sent, failed or abandoned). */
export function finishRequest(ctx: RequestCtx): void {
  if (ctx.finished) return;
  ctx.finished = true;
  const deps = ctx.proxy.deps;
  // Whatever ended the request (response sent, client gone, origin failed, upgrade closed), the
  // WAF keeps nothing of it past this point.
  if (ctx.wafInspected) deps.waf?.endExchange?.(ctx.supportId);
  if (ctx.wafEvents !== undefined) {
    for (const draft of ctx.wafEvents) recordWafEvent(ctx, draft);
  }
  const now = performance.now();
  if (ctx.bodyStreamedWhole && ctx.req.complete) ctx.bytesIn = Math.max(0, ctx.declaredLength);
  if (deps.accessLog !== undefined) {
    try {
      deps.accessLog(accessLogEntry(ctx, now));
    } catch (err) {
      deps.logger?.error({ err, proxyId: ctx.proxy.id }, 'access log failed');
    }
  }
  const originMs = originMsOf(ctx, now);
  deps.metrics?.requestCompleted?.(ctx.proxy.id, ctx.statusCode, answeredByOf(ctx), (now - ctx.startedAt) / 1000, originMs === undefined ? undefined : originMs / 1000);
}

/** The origin's time to its response head (ms), or undefined when no origin was asked. */
function originMsOf(ctx: RequestCtx, now: number): number | undefined {
  if (ctx.upstreamStartedAt < 0) return undefined;
  return (ctx.upstreamAnsweredAt >= 0 ? ctx.upstreamAnsweredAt : now) - ctx.upstreamStartedAt;
}

const ANSWERED_BY: Record<PhaseName, AnsweredBy> = {
  accept: 'error',
  'acme-challenge': 'acme',
  'geo-fence': 'geo',
  'rate-limit': 'rate-limit',
  waf: 'waf',
  'waf-response': 'waf',
  upstream: 'error',
  internal: 'error',
};

export function answeredByOf(ctx: RequestCtx): AnsweredBy {
  if (ctx.originAnswered) return 'origin';
  return ctx.answeredBy === undefined ? 'none' : ANSWERED_BY[ctx.answeredBy];
}

function wafOutcomeOf(ctx: RequestCtx): WafOutcome | undefined {
  if (ctx.wafUninspected) return 'UNINSPECTED';
  const events = ctx.wafEvents;
  if (events !== undefined && events.length > 0) return events.some((event) => event.action === 'BLOCKED') ? 'BLOCKED' : 'LOGGED';
  return ctx.wafInspected ? 'PASSED' : undefined;
}

export function accessLogEntry(ctx: RequestCtx, now = performance.now()): AccessLogEntry {
  const req = ctx.req;
  const entry: AccessLogEntry = {
    type: 'http',
    time: new Date(performance.timeOrigin + ctx.startedAt).toISOString(),
    proxyId: ctx.proxy.id,
    tenantId: ctx.proxy.tenantId,
    revision: ctx.proxy.revision,
    supportId: ctx.supportId,
    requestId: ctx.requestId,
    clientIp: ctx.clientIp,
    clientPort: ctx.clientPort,
    serverIp: ctx.serverIp,
    serverPort: ctx.serverPort,
    country: ctx.country,
    protocol: ctx.http2 ? 'HTTP/2' : req.httpVersion === '1.0' ? 'HTTP/1.0' : 'HTTP/1.1',
    tls: ctx.secure,
    method: req.method ?? '',
    host: ctx.host,
    url: req.url ?? '',
    status: ctx.statusCode,
    answeredBy: answeredByOf(ctx),
    bytesIn: ctx.bytesIn,
    bytesOut: ctx.bytesOut,
    upstreamAttempts: ctx.upstreamAttempts,
    durationMs: Math.round((now - ctx.startedAt) * 1000) / 1000,
  };
  if (ctx.clientAddressSource !== 'socket') {
    entry.clientIpSource = ctx.clientAddressSource;
    entry.peerIp = unmapIpv4(req.socket?.remoteAddress ?? '');
  }
  if (ctx.clientCertificate !== undefined) entry.clientCertificate = ctx.clientCertificate.verified;
  const waf = wafOutcomeOf(ctx);
  if (waf !== undefined) entry.waf = waf;
  if (ctx.wafEvents !== undefined && ctx.wafEvents.length > 0) entry.wafRules = [...new Set(ctx.wafEvents.flatMap((event) => event.rules.map((rule) => rule.modSecId)))];
  if (ctx.upstreamHost !== undefined) entry.upstream = `${ctx.upstreamHost.address}:${ctx.upstreamHost.port}`;
  if (ctx.upstreamError !== undefined) entry.upstreamError = ctx.upstreamError;
  const originMs = originMsOf(ctx, now);
  if (originMs !== undefined) entry.originMs = Math.round(originMs * 1000) / 1000;
  return entry;
}

/** Header values an event must not carry unless the proxy opted in (`waf.logMatchedData`): credentials. */
const SECRET_HEADERS = new Set(['authorization', 'proxy-authorization', 'cookie']);

/**
 * The request as insight events show it. `path` is the path without the query (the query is in
 * `messageHeader`, the raw request line). Credentials (Authorization, Proxy-Authorization, Cookie)
 * are replaced by "[redacted]" unless `waf.logMatchedData` is on: events leave the edge and are read
 * by people who must not get a session from them.
 */
export function requestSummary(ctx: RequestCtx, statusCode: number): RequestSummary {
  const req = ctx.req;
  const revealSecrets = ctx.proxy.waf.logMatchedData === true;
  const url = req.url ?? '';
  const query = url.indexOf('?');
  const headers: string[] = [];
  const raw = req.rawHeaders;
  if (ctx.http2) headers.push(`host: ${ctx.host}`);
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.charCodeAt(0) === 58 /* ':' pseudo-header */) continue;
    const value = !revealSecrets && SECRET_HEADERS.has(name.toLowerCase()) ? '[redacted]' : raw[i + 1]!;
    headers.push(`${name}: ${value}`);
  }
  const version = ctx.http2 ? 'HTTP/2' : `HTTP/${req.httpVersion}`;
  return {
    method: req.method ?? '',
    path: query === -1 ? url : url.slice(0, query),
    headers,
    messageHeader: [`${req.method} ${url} ${version}`, ...headers].join('\n'),
    statusCode,
  };
}

function eventBase(ctx: RequestCtx, statusCode: number) {
  return {
    id: randomUUID(),
    tenantId: ctx.proxy.tenantId,
    trafficConfigId: ctx.proxy.id,
    timestamp: new Date().toISOString(),
    supportId: ctx.supportId,
    tpc: ctx.proxy.location,
    destinationIp: ctx.serverIp,
    source: { countryCode: ctx.country, ip: ctx.clientIp, port: ctx.clientPort },
    request: requestSummary(ctx, statusCode),
  };
}

function recordWafEvent(ctx: RequestCtx, draft: WafEventDraft): void {
  const event: WafEvent = {
    ...eventBase(ctx, ctx.statusCode || 499),
    type: 'WAF_EVENT',
    action: draft.action,
    rules: draft.rules,
    ...(draft.bodyTruncated === true && { bodyTruncated: true }),
  };
  record(ctx.proxy.deps, event);
}

/** The APP_DDOS_ATTACK event of an episode that `ctx`'s request just started. */
export function recordEpisodeStart(ctx: RequestCtx, episode: RateEpisode): void {
  const event: AppDdosAttackEvent = {
    ...eventBase(ctx, 429),
    id: episode.eventId,
    supportId: episode.supportId,
    type: 'APP_DDOS_ATTACK',
    action: 'BLOCKED',
    rules: [],
    rateLimit: {
      threshold: { requests: episode.threshold.requests, periodSeconds: episode.threshold.periodSeconds },
      observedRequests: episode.observedRequests,
      blockSeconds: ctx.proxy.config.attributes.rateLimiting?.blockSeconds ?? 0,
      firstBlockedAt: new Date(episode.firstBlockedAt).toISOString(),
      lastBlockedAt: new Date(episode.lastBlockedAt).toISOString(),
      blockedRequests: episode.blockedRequests,
      blockedUntil: new Date(episode.blockedUntil).toISOString(),
    },
  };
  record(ctx.proxy.deps, event);
}

export function recordEpisodeUpdate(deps: HttpProxyDeps, episode: RateEpisode): void {
  try {
    deps.insight.updateRateLimitEpisode(episode.eventId, {
      lastBlockedAt: new Date(episode.lastBlockedAt).toISOString(),
      blockedRequests: episode.blockedRequests,
      blockedUntil: new Date(episode.blockedUntil).toISOString(),
    });
  } catch (err) {
    deps.logger?.error({ err, eventId: episode.eventId }, 'insight sink failed to update a rate-limit episode');
  }
}

function record(deps: HttpProxyDeps, event: WafEvent | AppDdosAttackEvent): void {
  try {
    deps.insight.record(event);
  } catch (err) {
    // The sink belongs to the store; losing one event must not fail the request that caused it.
    deps.logger?.error({ err, eventId: event.id, type: event.type }, 'insight sink failed to record an event');
  }
}
