/**
 * Last phase, logging (Pingora's `logging`): runs once per request when its response is over, sent,
 * failed or abandoned, whoever answered (the origin, a phase, an error; an upgrade when its tunnel
 * closes). What a finished request leaves behind: the end of its WAF exchange (if the response side
 * did not end it), its WAF_EVENTs (recorded now that the final status is known: insight-events.ts),
 * one access-log entry (when an access log is wired), and its metrics.
 */
// Imported: on globalThis, Buffer, performance and process are accessors, a slow lookup on every use in the hot path.
import { performance } from 'node:perf_hooks';
import { unmapIpv4 } from '../../../net/ip.ts';
import type { RequestCtx } from '../ctx.ts';
import { recordWafEvent } from '../insight-events.ts';
import type { AccessLogEntry, AnsweredBy, WafOutcome } from '../../access-log/types.ts';
import type { PhaseName } from './answer.ts';
import type { EndPhase } from './phase.ts';

export const loggingPhase: EndPhase = {
  name: 'logging',
  /** Runs once per request, when its response is over (sent, failed or abandoned); a second call does nothing. */
  run(ctx: RequestCtx): void {
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
    deps.metrics?.requestCompleted?.(
      ctx.proxy.id,
      ctx.statusCode,
      answeredByOf(ctx),
      (now - ctx.startedAt) / 1000,
      originMs === undefined ? undefined : originMs / 1000,
    );
  },
};

/** The origin's time to its response head (ms), or undefined when no origin was asked. */
function originMsOf(ctx: RequestCtx, now: number): number | undefined {
  if (ctx.upstreamStartedAt < 0) return undefined;
  return (ctx.upstreamAnsweredAt >= 0 ? ctx.upstreamAnsweredAt : now) - ctx.upstreamStartedAt;
}

const ANSWERED_BY: Record<PhaseName, AnsweredBy> = {
  accept: 'error',
  'request-target': 'error',
  'acme-challenge': 'acme',
  'geo-fence': 'geo',
  'rate-limit': 'rate-limit',
  'app-ddos': 'app-ddos',
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

/** The last millisecond formatted, and its text: under load most requests share their millisecond with another. */
let lastTime = { ms: Number.NaN, iso: '' };

/** `new Date(ms).toISOString()` (to the millisecond), formatted once per millisecond. */
function isoTime(epochMs: number): string {
  const ms = Math.floor(epochMs);
  if (ms !== lastTime.ms) lastTime = { ms, iso: new Date(ms).toISOString() };
  return lastTime.iso;
}

export function accessLogEntry(ctx: RequestCtx, now = performance.now()): AccessLogEntry {
  const req = ctx.req;
  const entry: AccessLogEntry = {
    type: 'http',
    time: isoTime(performance.timeOrigin + ctx.startedAt),
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
    url: ctx.target !== '' ? ctx.target : (req.url ?? ''),
    status: ctx.statusCode,
    answeredBy: answeredByOf(ctx),
    bytesIn: ctx.bytesIn,
    bytesOut: ctx.bytesOut,
    upstreamAttempts: ctx.upstreamAttempts,
    durationMs: Math.round((now - ctx.startedAt) * 1000) / 1000,
  };
  if (ctx.target !== '' && ctx.target !== req.url) entry.rawUrl = req.url ?? '';
  if (ctx.clientAddressSource !== 'socket') {
    entry.clientIpSource = ctx.clientAddressSource;
    entry.peerIp = unmapIpv4(req.socket?.remoteAddress ?? '');
  }
  if (ctx.clientCertificate !== undefined) entry.clientCertificate = ctx.clientCertificate.verified;
  const waf = wafOutcomeOf(ctx);
  if (waf !== undefined) entry.waf = waf;
  if (ctx.wafEvents !== undefined && ctx.wafEvents.length > 0)
    entry.wafRules = [...new Set(ctx.wafEvents.flatMap((event) => event.rules.map((rule) => rule.modSecId)))];
  if (ctx.upstreamHost !== undefined) entry.upstream = `${ctx.upstreamHost.address}:${ctx.upstreamHost.port}`;
  if (ctx.upstreamError !== undefined) entry.upstreamError = ctx.upstreamError;
  const originMs = originMsOf(ctx, now);
  if (originMs !== undefined) entry.originMs = Math.round(originMs * 1000) / 1000;
  return entry;
}
