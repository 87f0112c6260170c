/**
 * Phase 5, WAF (the request side of the hook the WAF engine plugs into: `deps.waf`); without a hook
 * it does nothing and the request body is streamed to the origin untouched.
 *
 * Request side: the hook sees the request head and the body, read here up to the proxy's body
 * limit (`waf.requestBodyLimit`; a multipart/form-data upload up to the hook's
 * `multipartBodyLimit`). It answers `continue` (optionally with an event to log, LOGGING mode) or
 * `block` (403 page with the support id).
 * A body longer than the limit is never passed on uninspected unless the proxy says so: with
 * `waf.bodyLimitAction` REJECT (the default) it is refused with 413 and a WAF_EVENT naming the body
 * limit, without reading more of it; with PROCESS_PARTIAL (or in LOGGING mode, which refuses
 * nothing) the hook sees its first `limit` bytes, the rest streams to the origin after the verdict,
 * and a WAF_EVENT says `bodyTruncated` (LOGGED when the rules had nothing to say).
 * The response side is a phase of its own (waf-response.ts); both take `applyVerdict`,
 * `cannotInspect` and `wafRequestHead` from here.
 *
 * A hook that throws or rejects (its engine overloaded, the request past its inspection budget, its
 * thread dead, a bug) follows the proxy's `waf.failMode`: CLOSED (default) answers 503 with the
 * page and the support id, OPEN lets the request through uninspected. Either way it is counted
 * (`wafUninspected`) and logged (rate-limited).
 *
 * A client whose requests keep running past the inspection budget is refused early
 * (waf/budget-offenders.ts): first thing in this phase, before its body is read, 429 with
 * Retry-After and the page, uninspected; its first refused request of an episode carries the
 * episode's WAF_EVENT (rule BUDGET_OFFENDER_RULE_ID), the others point at it by support id.
 */
import type { MatchedRule } from '@tps/model';
import { isBudgetOverrun } from '@tps/waf';
import { sourceKey } from '../../../net/source-key.ts';
import type { RequestCtx } from '../ctx.ts';
import { bodyUnread, pageAnswer } from './respond.ts';
import type { Answer, PhaseName, PhaseOutcome } from './answer.ts';
import type { WafFailureReason, WafHook, WafRequestHead, WafRequestInput, WafVerdict } from '../waf/types.ts';
import type { RequestPhase } from './phase.ts';
import { refuse as refuseMalformed } from './request-target.ts';

/**
 * The rule id a WAF_EVENT names for a request body longer than the WAF inspects (no engine rule
 * matches it: the proxy decides). In tps's own range, beside the engine settings' 2000xx rules.
 */
export const BODY_LIMIT_RULE_ID = 200100;

/** The rule id a WAF_EVENT names for a client refused early for running past the inspection budget again and again. */
export const BUDGET_OFFENDER_RULE_ID = 200101;

export const wafRequestPhase: RequestPhase = {
  name: 'waf',
  run(ctx: RequestCtx): PhaseOutcome | Promise<PhaseOutcome> {
    const waf = ctx.proxy.deps.waf;
    if (waf === undefined) return undefined;
    const refused = refuseOffender(ctx);
    if (refused !== undefined) return refused;
    if (ctx.body === 'stream') return inspectWithBody(ctx, waf);
    return inspect(ctx, waf, null, -1);
  },
};

async function inspectWithBody(ctx: RequestCtx, waf: WafHook): Promise<PhaseOutcome> {
  const policy = ctx.proxy.wafBody;
  const limit = isMultipart(ctx) ? policy.multipartLimit : policy.limit;
  const refuse = policy.reject && ctx.proxy.waf.mode !== 'LOGGING';
  // A declared length says it all: refused before a byte of the body is read.
  if (refuse && ctx.declaredLength > limit) return refuseBody(ctx, limit);
  const iterator = (ctx.req as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  const chunks: Buffer[] = [];
  let length = 0;
  let rest: AsyncIterator<Buffer> | null = iterator;
  try {
    // One byte past the limit is enough to know the body is longer.
    while (length <= limit) {
      const next = await iterator.next();
      if (next.done) {
        rest = null;
        break;
      }
      chunks.push(next.value);
      length += next.value.length;
      if (length > ctx.proxy.limits.maxBodySize) return pageAnswer(ctx, 'waf', 'body-too-large', { close: true });
    }
  } catch {
    // The client went away while sending its body: nothing to inspect, nobody to answer.
    return { phase: 'waf', status: 400, headers: [], body: '', close: true };
  }
  ctx.bytesIn = length;
  // HTTP/2: DATA frames that add up to another length than content-length (RFC 9113 8.1.1). Node
  // ends the stream before nghttp2 resets it, so the body read whole is checked here.
  if (ctx.http2 && ctx.declaredLength >= 0 && (rest === null ? length !== ctx.declaredLength : length > ctx.declaredLength))
    return refuseMalformed(ctx, 'CONTENT_LENGTH_MISMATCH');
  const over = length > limit;
  if (over && refuse) return refuseBody(ctx, limit);
  ctx.body = { chunks, length, rest };
  const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length);
  if (over) ctx.proxy.deps.metrics?.wafBodyOverLimit?.(ctx.proxy.id, 'PROCESS_PARTIAL');
  return inspect(ctx, waf, over ? body.subarray(0, limit) : body, over ? limit : -1);
}

function offenderKey(ctx: RequestCtx): string {
  return sourceKey(ctx.clientIp, ctx.proxy.deps.rateLimit?.ipv6Prefix);
}

/** 429 for a client blocked for its budget overruns; the episode's first refusal carries its WAF_EVENT. */
function refuseOffender(ctx: RequestCtx): Answer | undefined {
  const offenders = ctx.proxy.wafOffenders;
  const block = offenders.blocked(offenderKey(ctx));
  if (block === undefined) return undefined;
  block.refused++;
  if (block.supportId === undefined) {
    block.supportId = ctx.supportId;
    const { overruns, windowSeconds, blockSeconds } = offenders.settings;
    const rule: MatchedRule = {
      modSecId: BUDGET_OFFENDER_RULE_ID,
      name: `Client refused for ${blockSeconds} s: ${overruns} requests within ${windowSeconds} s ran past the WAF's inspection budget`,
      matchedData: ctx.proxy.waf.logMatchedData
        ? { status: 'ENABLED', value: `${overruns} budget overruns in ${windowSeconds} s` }
        : { status: 'DISABLED', value: null },
      matchedVariable: null,
    };
    (ctx.wafEvents ??= []).push({ action: 'BLOCKED', rules: [rule] });
  } else {
    ctx.supportId = block.supportId;
  }
  ctx.proxy.deps.metrics?.wafBudgetOffenderRefused?.(ctx.proxy.id);
  const retryAfter = Math.max(1, Math.ceil((block.until - Date.now()) / 1000));
  return pageAnswer(ctx, 'waf', 'rate-limit', { headers: ['retry-after', String(retryAfter)], close: bodyUnread(ctx) });
}

function isMultipart(ctx: RequestCtx): boolean {
  const type = ctx.req.headers['content-type'];
  return type !== undefined && /^\s*multipart\/form-data\s*;/i.test(type);
}

/** 413 with the page and a WAF_EVENT naming the limit; the rest of the body is never read. */
function refuseBody(ctx: RequestCtx, limit: number): Answer {
  ctx.proxy.deps.metrics?.wafBodyOverLimit?.(ctx.proxy.id, 'REJECT');
  (ctx.wafEvents ??= []).push({ action: 'BLOCKED', rules: [bodyLimitRule(ctx, limit, true)] });
  return pageAnswer(ctx, 'waf', 'body-too-large', { close: true });
}

function bodyLimitRule(ctx: RequestCtx, limit: number, refused: boolean): MatchedRule {
  return {
    modSecId: BODY_LIMIT_RULE_ID,
    name: refused
      ? 'Request body larger than the WAF inspects: refused'
      : 'Request body larger than the WAF inspects: only its first part inspected',
    matchedData: ctx.proxy.waf.logMatchedData ? { status: 'ENABLED', value: `limit ${limit} bytes` } : { status: 'DISABLED', value: null },
    matchedVariable: 'REQUEST_BODY',
  };
}

/** `truncatedAt`: the body limit the body was cut at, -1 when the hook sees it whole. */
function inspect(ctx: RequestCtx, waf: WafHook, body: Buffer | null, truncatedAt: number): PhaseOutcome | Promise<PhaseOutcome> {
  let verdict: WafVerdict | Promise<WafVerdict>;
  try {
    verdict = waf.inspectRequest(wafRequestInput(ctx, body, truncatedAt >= 0));
  } catch (err) {
    return cannotInspect(ctx, err, 'waf');
  }
  if (verdict instanceof Promise) {
    return verdict.then(
      (v) => afterRequestVerdict(ctx, waf, v, truncatedAt),
      (err: unknown) => cannotInspect(ctx, err, 'waf'),
    );
  }
  return afterRequestVerdict(ctx, waf, verdict, truncatedAt);
}

function afterRequestVerdict(ctx: RequestCtx, waf: WafHook, verdict: WafVerdict, truncatedAt: number): PhaseOutcome {
  ctx.wafInspected = true;
  // The client left while the WAF was at work: the logging phase has run, the exchange ends here.
  if (ctx.finished) waf.endExchange?.(ctx.supportId);
  if (truncatedAt >= 0) {
    if (verdict.event !== undefined) verdict.event.bodyTruncated = true;
    else (ctx.wafEvents ??= []).push({ action: 'LOGGED', rules: [bodyLimitRule(ctx, truncatedAt, false)], bodyTruncated: true });
  }
  return applyVerdict(ctx, verdict, 'waf');
}

/** Records the verdict's event and turns a block into the page (used by both WAF sides). */
export function applyVerdict(ctx: RequestCtx, verdict: WafVerdict, phase: 'waf' | 'waf-response'): Answer | undefined {
  if (verdict.event !== undefined) (ctx.wafEvents ??= []).push(verdict.event);
  if (verdict.action !== 'block') return undefined;
  if (verdict.supportId !== undefined) ctx.supportId = verdict.supportId;
  return pageAnswer(ctx, phase, 'waf', { ...(verdict.status !== undefined ? { status: verdict.status } : {}), close: bodyUnread(ctx) });
}

/**
 * The hook gave no verdict (`err`): the proxy's `waf.failMode` decides. CLOSED: 503 with the page
 * and the support id. OPEN: through uninspected. Counted and logged either way.
 */
export function cannotInspect(ctx: RequestCtx, err: unknown, phase: Extract<PhaseName, 'waf' | 'waf-response'>): Answer | undefined {
  const reason = failureReason(err);
  const open = ctx.proxy.waf.failMode === 'OPEN';
  const side = phase === 'waf' ? 'request' : 'response';
  const deps = ctx.proxy.deps;
  ctx.wafUninspected = true;
  deps.metrics?.wafUninspected?.(ctx.proxy.id, side, reason, open ? 'passed' : 'refused');
  if (reason === 'budget' && side === 'request' && ctx.proxy.wafOffenders.overrun(offenderKey(ctx))) {
    const { overruns, windowSeconds, blockSeconds } = ctx.proxy.wafOffenders.settings;
    deps.logger?.warn(
      { proxyId: ctx.proxy.id, clientIp: ctx.clientIp, overruns, windowSeconds, blockSeconds },
      "client refused early: its requests keep running past the WAF's inspection budget",
    );
  }
  const details = {
    proxyId: ctx.proxy.id,
    supportId: ctx.supportId,
    clientIp: ctx.clientIp,
    side,
    reason,
    ...(reason === 'error' ? { err } : { detail: err instanceof Error ? err.message : String(err) }),
  };
  if (open) {
    deps.logger?.warn(details, 'WAF could not inspect: let through uninspected (waf.failMode OPEN)');
    return undefined;
  }
  deps.logger?.warn(details, 'WAF could not inspect: refused with 503 (waf.failMode CLOSED)');
  return pageAnswer(ctx, phase, 'waf-unavailable', { headers: ['retry-after', '5'], close: bodyUnread(ctx) });
}

function failureReason(err: unknown): WafFailureReason {
  if (isBudgetOverrun(err)) return 'budget';
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'ERR_WAF_OVERLOADED') return 'overloaded';
  if (code === 'ERR_WAF_COST_SHARE') return 'cost-share';
  if (code === 'ERR_WAF_UNAVAILABLE') return 'unavailable';
  // its inspection ran past the budget and was ended (the engine's thread goes on)
  if (code === 'ERR_WAF_BUDGET') return 'budget';
  return 'error';
}

/** The request as the hook sees it, without its body (the response side's). */
export function wafRequestHead(ctx: RequestCtx): WafRequestHead {
  return wafRequestInput(ctx, null, false);
}

/** The head and the body in one object (a spread of the head would copy it property by property). */
function wafRequestInput(ctx: RequestCtx, body: Buffer | null, bodyTruncated: boolean): WafRequestInput {
  const req = ctx.req;
  return {
    proxyId: ctx.proxy.id,
    tenantId: ctx.proxy.tenantId,
    settings: ctx.proxy.waf,
    supportId: ctx.supportId,
    client: { ip: ctx.clientIp, port: ctx.clientPort },
    server: { ip: ctx.serverIp, port: ctx.serverPort },
    method: req.method ?? '',
    url: req.url ?? '',
    path: ctx.path,
    httpVersion: ctx.http2 ? '2.0' : req.httpVersion === '1.0' ? '1.0' : '1.1',
    headers: ctx.http2 ? withoutPseudoHeaders(req.rawHeaders, ctx.host) : req.rawHeaders,
    body,
    bodyTruncated,
  };
}

function withoutPseudoHeaders(raw: readonly string[], host: string): string[] {
  const headers = ['host', host];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    // Pseudo-headers are not headers; a host field is the one Host above (request-target refused a differing one).
    if (name.charCodeAt(0) !== 58 /* ':' */ && !(name.length === 4 && name.toLowerCase() === 'host')) headers.push(name, raw[i + 1]!);
  }
  return headers;
}
