/**
 * Clients a proxy's `appDdos.exemptions` names: never challenged (they still count, and stay under
 * the rate limit and `originRateLimit`).
 *
 * A path prefix is matched on the path with its dot segments resolved, so `/api/../admin` is not
 * under `/api/`. A path holding an encoded slash, backslash or dot is never exempted: an origin may
 * decode it into a path outside the prefix after we matched.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import type { AppDdosSettings } from '@tps/model';

const ENCODED_SEPARATOR = /%2f|%5c|%2e|\\/i;

export class Exemptions {
  readonly #prefixes: readonly string[];
  readonly #userAgents: readonly string[];
  readonly #networks: BlockList | undefined;

  constructor(exemptions: AppDdosSettings['exemptions'] | undefined) {
    this.#prefixes = exemptions?.pathPrefixes ?? [];
    this.#userAgents = (exemptions?.userAgents ?? []).map((agent) => agent.toLowerCase());
    const networks = exemptions?.sourceNetworks ?? [];
    if (networks.length === 0) {
      this.#networks = undefined;
    } else {
      this.#networks = new BlockList();
      for (const network of networks) addNetwork(this.#networks, network);
    }
  }

  get empty(): boolean {
    return this.#prefixes.length === 0 && this.#userAgents.length === 0 && this.#networks === undefined;
  }

  matches(clientIp: string, url: string, userAgent: string | undefined): boolean {
    if (this.#networks !== undefined && matchesNetwork(this.#networks, clientIp)) return true;
    if (userAgent !== undefined && this.#userAgents.length > 0) {
      const agent = userAgent.toLowerCase();
      if (this.#userAgents.some((exempt) => agent.includes(exempt))) return true;
    }
    if (this.#prefixes.length > 0) {
      const path = resolvedPath(url);
      if (path !== undefined && this.#prefixes.some((prefix) => path.startsWith(prefix))) return true;
    }
    return false;
  }
}

/** The path of a request target with dot segments resolved; undefined when it may decode elsewhere. */
export function resolvedPath(url: string): string | undefined {
  const end = url.search(/[?#]/);
  const raw = end === -1 ? url : url.slice(0, end);
  if (ENCODED_SEPARATOR.test(raw)) return undefined;
  try {
    return new URL(raw, 'http://exempt.invalid').pathname;
  } catch {
    return undefined;
  }
}

function addNetwork(list: BlockList, cidr: string): void {
  const slash = cidr.indexOf('/');
  const address = slash === -1 ? cidr : cidr.slice(0, slash);
  const type = isIPv4(address) ? 'ipv4' : isIPv6(address) ? 'ipv6' : undefined;
  // The API validated the shape; an address Node does not take is skipped (nobody exempted by it).
  if (type === undefined) return;
  const prefix = slash === -1 ? (type === 'ipv4' ? 32 : 128) : Number(cidr.slice(slash + 1));
  list.addSubnet(address, prefix, type);
}

function matchesNetwork(list: BlockList, ip: string): boolean {
  if (isIPv4(ip)) return list.check(ip, 'ipv4');
  if (!isIPv6(ip)) return false;
  const mapped = ip.toLowerCase().startsWith('::ffff:') ? ip.slice(7) : undefined;
  if (mapped !== undefined && isIPv4(mapped)) return list.check(mapped, 'ipv4');
  return list.check(ip, 'ipv6');
}
