/**
 * The origin policy at the API (src/edge/net/origin-policy.ts): a literal address a tenant gives as
 * an origin or in a crlUrl is refused when it is stored, 422 ORIGIN_NOT_ALLOWED pointing at it. Names
 * are not resolved here (an answer now says nothing about the answer at connect time, and resolving
 * would tell a tenant what internal names resolve to): the edge and the CRL fetcher check the
 * addresses of a name at every connect.
 */
import { ApiError, errorObject, type JsonApiErrorObject } from './jsonapi.ts';
import { describeRefusal, literalAddress, type OriginPolicy } from '../edge/net/origin-policy.ts';

/** The policy, or 503 while the service is still binding its listeners (they are part of it). */
export function originPolicyOf(deps: { readonly originPolicy: OriginPolicy | undefined }): OriginPolicy {
  const policy = deps.originPolicy;
  if (policy === undefined) throw new ApiError('STARTING', 'the service is starting; try again in a moment');
  return policy;
}

/** The error for `address:port` at `pointer`, or undefined when it is allowed or a name. */
export function originError(policy: OriginPolicy, address: string, port: number, pointer: string): JsonApiErrorObject | undefined {
  const literal = literalAddress(address);
  if (literal === undefined) return undefined;
  const verdict = policy.check(literal, port);
  if (verdict.allowed) return undefined;
  const spelled = literal === address ? '' : ` (${literal})`;
  return errorObject('ORIGIN_NOT_ALLOWED', `${address}${spelled} may not be an origin: it is ${describeRefusal(verdict.reason)}`, {
    pointer,
  });
}

/** The error for a crlUrl whose host is a literal address the policy refuses. */
export function crlUrlError(policy: OriginPolicy, crlUrl: string, pointer: string): JsonApiErrorObject | undefined {
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
  return errorObject('ORIGIN_NOT_ALLOWED', `the CRL may not be fetched from ${url.host}: it is ${describeRefusal(verdict.reason)}`, {
    pointer,
  });
}
