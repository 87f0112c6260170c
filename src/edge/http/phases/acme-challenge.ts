/**
 * Phase 2, ACME HTTP-01: answers `GET /.well-known/acme-challenge/<token>` from the certificate
 * service's pending challenges, before geo fencing, rate limiting and the WAF (a CA's validation
 * servers come from anywhere and must never be refused). Only challenges of orders placed by this
 * proxy's tenant are answered: another tenant's proxy never proves control of a name for it. The
 * whole path prefix belongs to this phase once a lookup is wired: an unknown token (or another
 * tenant's) is 404 here, not a request to the origin.
 * Without a lookup (`deps.acmeChallenge` absent) the phase does nothing.
 */
import type { RequestCtx } from '../ctx.ts';
import type { Answer, PhaseOutcome } from './answer.ts';
import type { RequestPhase } from './phase.ts';

export const ACME_CHALLENGE_PREFIX = '/.well-known/acme-challenge/';
const TOKEN = /^[A-Za-z0-9_-]{1,256}$/;

export const acmeChallengePhase: RequestPhase = {
  name: 'acme-challenge',
  run(ctx: RequestCtx): PhaseOutcome | Promise<PhaseOutcome> {
    const lookup = ctx.proxy.deps.acmeChallenge;
    // The canonical path (request-target phase): the one the origin would be sent.
    const path = ctx.path;
    if (lookup === undefined || !path.startsWith(ACME_CHALLENGE_PREFIX)) return undefined;
    const method = ctx.req.method;
    if (method !== 'GET' && method !== 'HEAD') return answer(405, 'method not allowed\n', ['allow', 'GET, HEAD']);
    const token = path.slice(ACME_CHALLENGE_PREFIX.length);
    if (!TOKEN.test(token)) return answer(404, 'not found\n');
    const host = hostName(ctx.host);
    let keyAuthorization: string | undefined | Promise<string | undefined>;
    try {
      keyAuthorization = lookup(token, host, ctx.proxy.tenantId);
    } catch {
      return answer(404, 'not found\n');
    }
    if (keyAuthorization instanceof Promise) {
      return keyAuthorization.then(found, () => answer(404, 'not found\n'));
    }
    return found(keyAuthorization);
  },
};

function found(keyAuthorization: string | undefined): Answer {
  return keyAuthorization === undefined ? answer(404, 'not found\n') : answer(200, keyAuthorization);
}

function answer(status: number, body: string, extra: string[] = []): Answer {
  return {
    phase: 'acme-challenge',
    status,
    headers: ['content-type', 'text/plain; charset=utf-8', 'cache-control', 'no-store', ...extra],
    body,
  };
}

/** Host header without port; an IPv6 literal keeps no brackets. */
function hostName(host: string): string {
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    return end === -1 ? host : host.slice(1, end);
  }
  const colon = host.lastIndexOf(':');
  return (colon === -1 ? host : host.slice(0, colon)).toLowerCase();
}
