/**
 * For in-process tests, tools and benchmarks whose origins run on loopback: an origin guard that
 * allows every address. The product has no such default; whoever uses this says so explicitly.
 */
import { OriginGuard, type OriginRefusal } from '../../src/net/origin-guard.ts';
import { OriginPolicy, type OriginPolicySettings } from '../../src/net/origin-policy.ts';
import { createOriginResolver, type OriginResolver } from '../../src/net/origin-resolver.ts';

/** Every IPv4 and IPv6 network: nothing is refused unless listed as the service's own. */
export const EVERY_NETWORK: readonly string[] = ['0.0.0.0/0', '::/0'];

/** A policy that refuses nothing. */
export const PERMISSIVE_ORIGIN_POLICY: OriginPolicySettings = { allowedNetworks: EVERY_NETWORK, ownHosts: [], ownListeners: [] };

/** A guard that refuses nothing, resolving names with the system resolver. */
export function permissiveOriginGuard(): OriginGuard {
  return new OriginGuard(new OriginPolicy(PERMISSIVE_ORIGIN_POLICY), createOriginResolver([]));
}

/** A guard with the given policy that keeps the refusals it reports (for assertions). */
export function recordingOriginGuard(
  policy: Partial<OriginPolicySettings>,
  resolver: OriginResolver = createOriginResolver([]),
): { guard: OriginGuard; refusals: OriginRefusal[] } {
  const refusals: OriginRefusal[] = [];
  const settings: OriginPolicySettings = { allowedNetworks: [], ownHosts: [], ownListeners: [], ...policy };
  return { guard: new OriginGuard(new OriginPolicy(settings), resolver, (refusal) => refusals.push(refusal)), refusals };
}
