/**
 * Phase 5, WAF (request side), and the response-side hook the upstream phase calls. This module is
 * the slot the WAF engine plugs into (`deps.waf`); without a hook both sides do nothing and the
 * request body is streamed to the origin untouched.
 *
 * Request side: the hook sees the request head and up to `requestBodyLimit` bytes of body (buffered
 * here; the rest, if any, still streams to the origin after the verdict). It answers `continue`
 * (optionally with an event to log, LOGGING mode) or `block` (403 page with the support id).
 * Response side (optional `inspectResponse`): the hook sees the origin's status and headers, and up to
 * `responseBodyLimit` bytes of a text-like body, before anything is sent to the client, so a block can
 * still replace the response with a clean page.
 *
 * A hook that throws or rejects lets the request through (fail open) and is logged: a broken rule
 * engine must not take every site behind the proxy down with it.
 */
import type { MatchedRule } from '../../../insight/event.ts';
import type { RequestCtx } from '../ctx.ts';
import type { WafSettings } from '../snapshot.ts';
import { pageAnswer } from './respond.ts';
import type { Answer, PhaseOutcome, RequestPhase } from './phase.ts';

export interface WafRequestHead {
  proxyId: string;
  tenantId: string;
  /** The proxy's `waf` attributes (mode, paranoia level, exclusions...), defaults applied. */
  settings: WafSettings;
  /** The request's support id: put it in the event and it is the one on the block page. */
  supportId: string;
  client: { ip: string; port: number };
  server: { ip: string; port: number };
  method: string;
  /** Request target as received (path and query). */
  url: string;
  httpVersion: '1.0' | '1.1' | '2.0';
  /** `[name, value, ...]` as received; HTTP/2 pseudo-headers left out and `host` added. */
  headers: readonly string[];
}

export interface WafRequestInput extends WafRequestHead {
  /** Up to `requestBodyLimit` bytes of the body; null when the request has none or the limit is 0. */
  body: Buffer | null;
  /** The body goes on beyond `body`. */
  bodyTruncated: boolean;
}

export interface WafResponseInput {
  request: WafRequestHead;
  statusCode: number;
  /** `[name, value, ...]` of the origin's response, lower-case names. */
  headers: readonly string[];
  /** Up to `responseBodyLimit` bytes of a text-like body (text/*, JSON, XML, JavaScript); else null. */
  body: Buffer | null;
  bodyTruncated: boolean;
}

/** What the events phase turns into a WAF_EVENT (with the final status). */
export interface WafEventDraft {
  action: 'BLOCKED' | 'LOGGED';
  rules: MatchedRule[];
}

export type WafVerdict =
  | { action: 'continue'; event?: WafEventDraft }
  | {
      action: 'block';
      /** Default 403. */
      status?: number;
      /** Default: the request's support id (`WafRequestHead.supportId`). */
      supportId?: string;
      event?: WafEventDraft;
    };

export interface WafHook {
  /** Body bytes the request side wants; 0 = head only. */
  readonly requestBodyLimit: number;
  inspectRequest(input: WafRequestInput): WafVerdict | Promise<WafVerdict>;
  /** Body bytes the response side wants; 0 or absent = head only. */
  readonly responseBodyLimit?: number;
  inspectResponse?(input: WafResponseInput): WafVerdict | Promise<WafVerdict>;
}

export class BodyTooLargeError extends Error {
  readonly code = 'TPS_BODY_TOO_LARGE';
  constructor() {
    super('request body over the size limit');
  }
}

export const wafPhase: RequestPhase = {
  name: 'waf',
  run(ctx: RequestCtx): PhaseOutcome | Promise<PhaseOutcome> {
    const waf = ctx.proxy.deps.waf;
    if (waf === undefined) return undefined;
    if (ctx.body === 'stream' && waf.requestBodyLimit > 0) return inspectWithBody(ctx, waf);
    return inspect(ctx, waf, null, ctx.body === 'stream');
  },
};

async function inspectWithBody(ctx: RequestCtx, waf: WafHook): Promise<PhaseOutcome> {
  const iterator = (ctx.req as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  const chunks: Buffer[] = [];
  let length = 0;
  let rest: AsyncIterator<Buffer> | null = iterator;
  try {
    while (length < waf.requestBodyLimit) {
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
  ctx.body = { chunks, length, rest };
  const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length);
  return inspect(ctx, waf, body.subarray(0, waf.requestBodyLimit), rest !== null || length > waf.requestBodyLimit);
}

function inspect(ctx: RequestCtx, waf: WafHook, body: Buffer | null, truncated: boolean): PhaseOutcome | Promise<PhaseOutcome> {
  let verdict: WafVerdict | Promise<WafVerdict>;
  try {
    verdict = waf.inspectRequest({ ...wafRequestHead(ctx), body, bodyTruncated: truncated });
  } catch (err) {
    return failOpen(ctx, err);
  }
  if (verdict instanceof Promise) return verdict.then((v) => applyVerdict(ctx, v, 'waf'), (err) => failOpen(ctx, err));
  return applyVerdict(ctx, verdict, 'waf');
}

/** Records the verdict's event and turns a block into the page (used by both WAF sides). */
export function applyVerdict(ctx: RequestCtx, verdict: WafVerdict, phase: 'waf' | 'waf-response'): Answer | undefined {
  if (verdict.event !== undefined) (ctx.wafEvents ??= []).push(verdict.event);
  if (verdict.action !== 'block') return undefined;
  if (verdict.supportId !== undefined) ctx.supportId = verdict.supportId;
  return pageAnswer(ctx, phase, 'waf', { ...(verdict.status !== undefined ? { status: verdict.status } : {}), close: ctx.body === 'stream' });
}

export function failOpen(ctx: RequestCtx, err: unknown): undefined {
  ctx.proxy.deps.logger?.error({ err, proxyId: ctx.proxy.id, supportId: ctx.supportId }, 'WAF hook failed; request let through');
  return undefined;
}

export function wafRequestHead(ctx: RequestCtx): WafRequestHead {
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
    httpVersion: ctx.http2 ? '2.0' : req.httpVersion === '1.0' ? '1.0' : '1.1',
    headers: ctx.http2 ? withoutPseudoHeaders(req.rawHeaders, ctx.host) : req.rawHeaders,
  };
}

function withoutPseudoHeaders(raw: readonly string[], host: string): string[] {
  const headers = ['host', host];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i]!.charCodeAt(0) !== 58 /* ':' */) headers.push(raw[i]!, raw[i + 1]!);
  }
  return headers;
}

/** Response bodies worth a WAF's time: text a browser renders or a script reads. */
export function isTextLike(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const type = contentType.toLowerCase();
  return (
    type.startsWith('text/') ||
    type.includes('json') ||
    type.includes('xml') ||
    type.includes('javascript') ||
    type.startsWith('application/x-www-form-urlencoded')
  );
}
