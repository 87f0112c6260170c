/**
 * Response phase, WAF (the response side of the hook: `deps.waf.inspectResponse`). When the hook
 * inspects responses, the upstream exchange holds the origin's response back: its head, and up to
 * `responseBodyLimit` bytes of a text-like body (text/*, JSON, XML, JavaScript, form data; never
 * the body of a HEAD). The hook sees them before anything goes to the client, so a block can still
 * replace the response with a clean page; `continue` sends the held part on and lets the rest
 * stream. Without a response side this phase holds nothing and costs one check per response.
 * A compressed body (Content-Encoding gzip, deflate, br, zstd) is decoded for the hook, up to the
 * same limit of decoded bytes (response-decoding.ts); the client gets the origin's bytes unchanged.
 * One the proxy cannot decode is a response it cannot inspect (failMode decides).
 *
 * A hook that throws or rejects, its transaction expired or lost with its thread included, follows
 * the proxy's `waf.failMode`, as on the request side (`cannotInspect`): CLOSED replaces the
 * response with 503 and the page, OPEN lets it through uninspected; counted either way. A request
 * the request side already let through uninspected (OPEN) has no transaction: its response is
 * not held (it was counted once, with the request).
 */
import type { RequestCtx } from '../ctx.ts';
import { headerValue } from '../headers.ts';
import type { Answer } from './answer.ts';
import type { WafVerdict } from '../waf/types.ts';
import type { HeldResponse, ResponsePhase, ResponseRelay } from './phase.ts';
import { contentCodings, decodeForInspection } from './response-decoding.ts';
import { applyVerdict, cannotInspect, wafRequestHead } from './waf-request.ts';

export const wafResponsePhase: ResponsePhase = {
  name: 'waf-response',

  onResponseHead(ctx: RequestCtx, method: string, status: number, headers: readonly string[]): HeldResponse | undefined {
    const waf = ctx.proxy.deps.waf;
    if (waf?.inspectResponse === undefined || ctx.wafUninspected) return undefined;
    const limit = waf.responseBodyLimit ?? 0;
    const wantsBody = limit > 0 && method !== 'HEAD' && isTextLike(headerValue(headers, 'content-type'));
    return { status, headers, chunks: [], length: 0, wantsBody, ended: false };
  },

  onResponseBody(ctx: RequestCtx, held: HeldResponse): boolean {
    if (!held.wantsBody || held.length < (ctx.proxy.deps.waf?.responseBodyLimit ?? 0)) return false;
    held.wantsBody = false;
    return true;
  },

  onResponseEnd(_ctx: RequestCtx, held: HeldResponse): boolean {
    if (!held.wantsBody) return false;
    held.wantsBody = false;
    return true;
  },

  decide(ctx: RequestCtx, held: HeldResponse, relay: ResponseRelay): void {
    const limit = ctx.proxy.deps.waf!.responseBodyLimit ?? 0;
    const body = held.chunks.length === 0 || limit === 0 ? null : Buffer.concat(held.chunks, held.length);
    if (body === null) return inspect(ctx, held, relay, null, false);
    const codings = contentCodings(headerValue(held.headers, 'content-encoding'));
    if (codings === undefined) {
      const err = new Error(`response content-encoding ${headerValue(held.headers, 'content-encoding')} cannot be decoded for inspection`);
      // Answer after undici has taken our "pause" from the callback that is still running.
      queueMicrotask(() => noVerdict(ctx, relay, err));
      return;
    }
    if (codings.length === 0) return inspect(ctx, held, relay, body.subarray(0, limit), !held.ended || body.length > limit);
    // The rules read what the client will read: the body decoded (bounded), while the client gets the origin's bytes.
    decodeForInspection(body, codings, limit).then(
      (decoded) => {
        if (!relay.clientGone) inspect(ctx, held, relay, decoded.body, decoded.truncated || !held.ended);
      },
      (err: unknown) => noVerdict(ctx, relay, err),
    );
  },
};

function inspect(ctx: RequestCtx, held: HeldResponse, relay: ResponseRelay, body: Buffer | null, bodyTruncated: boolean): void {
  const waf = ctx.proxy.deps.waf!;
  let verdict: WafVerdict | Promise<WafVerdict>;
  try {
    verdict = waf.inspectResponse!({ request: wafRequestHead(ctx), statusCode: held.status, headers: held.headers, body, bodyTruncated });
  } catch (err) {
    // Answer after undici has taken our "pause" from the callback that is still running.
    queueMicrotask(() => noVerdict(ctx, relay, err));
    return;
  }
  if (verdict instanceof Promise) {
    verdict.then(
      (v) => afterVerdict(ctx, relay, v),
      (err: unknown) => noVerdict(ctx, relay, err),
    );
  } else {
    // Answer after undici has taken our "pause" from the callback that is still running.
    queueMicrotask(() => afterVerdict(ctx, relay, verdict));
  }
}

function afterVerdict(ctx: RequestCtx, relay: ResponseRelay, verdict: WafVerdict): void {
  if (relay.clientGone) return;
  settle(relay, applyVerdict(ctx, verdict, 'waf-response'));
}

/** The response side gave no verdict: the proxy's failMode says whether the response goes out. */
function noVerdict(ctx: RequestCtx, relay: ResponseRelay, err: unknown): void {
  if (relay.clientGone) return;
  settle(relay, cannotInspect(ctx, err, 'waf-response'));
}

function settle(relay: ResponseRelay, answer: Answer | undefined): void {
  if (answer === undefined) relay.releaseHeld();
  else relay.replaceResponse(answer);
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
