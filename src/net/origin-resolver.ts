/**
 * How origin names become addresses: the system resolver (getaddrinfo through `dns.lookup`, what
 * `net.connect` would have used) or the DNS servers the operator names (TPS_ORIGIN_RESOLVER, like
 * nginx's `resolver`), asked directly through c-ares. Either way the answer goes through the origin
 * policy before a connection is made to one of its addresses (origin-guard.ts).
 */
import dns from 'node:dns';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export interface OriginResolver {
  /** Every address of `name` of that family (0: both); rejects when it has none or cannot be resolved. */
  resolve(name: string, family: 0 | 4 | 6): Promise<ResolvedAddress[]>;
}

/** How long one question to an operator's DNS server may take, and how often it is asked. */
const DNS_TIMEOUT_MS = 2_000;
const DNS_TRIES = 2;

/** `servers`: `ip` or `ip:port` or `[ipv6]:port` entries (TPS_ORIGIN_RESOLVER); empty = the system resolver. */
export function createOriginResolver(servers: readonly string[]): OriginResolver {
  return servers.length === 0 ? systemResolver : dnsServerResolver(servers);
}

export const systemResolver: OriginResolver = {
  async resolve(name, family) {
    const found = await dns.promises.lookup(name, { all: true, family, order: 'verbatim' });
    return found.map(({ address, family: f }) => ({ address, family: f === 6 ? 6 : 4 }));
  },
};

function dnsServerResolver(servers: readonly string[]): OriginResolver {
  const resolver = new dns.promises.Resolver({ timeout: DNS_TIMEOUT_MS, tries: DNS_TRIES });
  resolver.setServers([...servers]);
  return {
    async resolve(name, family) {
      const asks: Promise<ResolvedAddress[]>[] = [];
      if (family !== 6) asks.push(resolver.resolve4(name).then((list) => list.map((address) => ({ address, family: 4 as const }))));
      if (family !== 4) asks.push(resolver.resolve6(name).then((list) => list.map((address) => ({ address, family: 6 as const }))));
      const answers = await Promise.allSettled(asks);
      const found = answers.flatMap((answer) => (answer.status === 'fulfilled' ? answer.value : []));
      if (found.length > 0) return found;
      const failure = answers.find((answer): answer is PromiseRejectedResult => answer.status === 'rejected');
      throw failure?.reason ?? Object.assign(new Error(`${name} has no address`), { code: dns.NODATA });
    },
  };
}

/** The entries of a TPS_ORIGIN_RESOLVER list that are not `ip`, `ip:port` or `[ipv6]:port`. */
export function invalidResolverServers(servers: readonly string[]): string[] {
  return servers.filter((server) => {
    try {
      new dns.Resolver().setServers([server]);
      return false;
    } catch {
      return true;
    }
  });
}
