/**
 * The origin policy at the API (src/net/origin-policy.ts): a literal address a tenant gives as
 * an origin or in a crlUrl is refused when it is stored, 422 ORIGIN_NOT_ALLOWED pointing at it. Names
 * are not resolved here (an answer now says nothing about the answer at connect time, and resolving
 * would tell a tenant what internal names resolve to): the edge and the CRL fetcher check the
 * addresses of a name at every connect.
 *
 * Every refused address gets the same words, whatever its class: were an address of the service
 * itself (its database's or Redis's host, a listener) worded apart from a private one, a tenant
 * could map the service's internal hosts by trying addresses. The class goes to the operator's log.
 */
import type { FastifyBaseLogger } from 'fastify';
import { ApiError, errorObject, type JsonApiErrorObject } from './jsonapi.ts';
import { literalAddress, type OriginPolicy, type OriginVerdict } from '../net/origin-policy.ts';

/** What a tenant is told about any refused origin address (the pointer says which one). */
export const ORIGIN_REFUSED_DETAIL =
  'the origin policy refuses this address: origins must be public addresses or in networks the operator allows';
/** What a tenant is told about any refused crlUrl host. */
export const CRL_ORIGIN_REFUSED_DETAIL =
  'the origin policy refuses the host of this crlUrl: CRLs are fetched from public addresses or from networks the operator allows';

/** The policy, or 503 while the service is still binding its listeners (they are part of it). */
export function originPolicyOf(deps: { readonly originPolicy: OriginPolicy | undefined }): OriginPolicy {
  const policy = deps.originPolicy;
  if (policy === undefined) throw new ApiError('STARTING', 'the service is starting; try again in a moment');
  return policy;
}

function logRefusal(log: FastifyBaseLogger, verdict: OriginVerdict, scope: 'origin' | 'crl', address: string, port: number): void {
  if (verdict.allowed) return;
  log.info({ scope, address, port, reason: verdict.reason }, 'address refused by the origin policy at the API');
}

/** The error for `address:port` at `pointer`, or undefined when it is allowed or a name. */
export function originError(
  policy: OriginPolicy,
  address: string,
  port: number,
  pointer: string,
  log: FastifyBaseLogger,
): JsonApiErrorObject | undefined {
  const literal = literalAddress(address);
  if (literal === undefined) return undefined;
  const verdict = policy.check(literal, port);
  if (verdict.allowed) return undefined;
  logRefusal(log, verdict, 'origin', literal, port);
  return errorObject('ORIGIN_NOT_ALLOWED', ORIGIN_REFUSED_DETAIL, { pointer });
}

/** The error for a crlUrl whose host is a literal address the policy refuses. */
export function crlUrlError(policy: OriginPolicy, crlUrl: string, pointer: string, log: FastifyBaseLogger): JsonApiErrorObject | undefined {
  let url: URL;
  try {
    url = new URL(crlUrl);
  } catch {
    return undefined; // the schema refuses it already
  }
  const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
  const literal = literalAddress(url.hostname);
  if (literal === undefined) return undefined;
  const verdict = policy.check(literal, port);
  if (verdict.allowed) return undefined;
  logRefusal(log, verdict, 'crl', literal, port);
  return errorObject('ORIGIN_NOT_ALLOWED', CRL_ORIGIN_REFUSED_DETAIL, { pointer });
}
