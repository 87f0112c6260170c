/**
 * The insight events of the HTTP proxy: WAF_EVENT (recorded by the logging phase once the final
 * status is known) and APP_DDOS_ATTACK (recorded when a rate-limit episode starts, then updated by
 * the limiter while it lasts: one event per client and episode, never one per request). A sink
 * that fails loses the event, never the request: it is logged instead.
 */
import { randomUUID } from 'node:crypto';
import type { AppDdosAttackEvent, RequestSummary, WafEvent } from '@tps/model';
import type { RequestCtx } from './ctx.ts';
import type { RateEpisode } from './rate-limit/limiter.ts';
import type { HttpProxyDeps } from './types.ts';
import type { WafEventDraft } from './waf/types.ts';

/** Header values an event must not carry unless the proxy opted in (`waf.logMatchedData`): credentials. */
const SECRET_HEADERS = new Set(['authorization', 'proxy-authorization', 'cookie']);

/**
 * The request as insight events show it. `path` is the canonical path the origin is sent and
 * exclusions' `pathPrefix` match (request-target.ts), without the query; `messageHeader` has the
 * request line as received. Credentials (Authorization, Proxy-Authorization, Cookie)
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
    // Answered before the target was read (accept refused it): the path as received.
    path: ctx.path !== '' ? ctx.path : query === -1 ? url : url.slice(0, query),
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

export function recordWafEvent(ctx: RequestCtx, draft: WafEventDraft): void {
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
