/**
 * The service's own addresses, which the origin policy refuses whatever TPS_ORIGIN_ALLOWED_NETWORKS
 * says (src/net/origin-policy.ts): a tenant must never make the edge or the CRL fetcher connect
 * to the service itself or to its store.
 *
 * - Front-end IPs, at any port: other tenants' proxies listen there.
 * - The hosts of TPS_DATABASE_URL and TPS_REDIS_URL, at any port: a database host usually runs more
 *   than the database (a pooler, exporters, ssh). A name is resolved once, at start, with the system
 *   resolver (what the PostgreSQL and Redis clients use); a name that does not resolve stops the
 *   start, as the policy could not refuse its addresses.
 * - The API and metrics listeners, at their address and port as bound (the start refuses wildcard
 *   addresses for them, settings.ts). On `tps edge`, TPS_API_LISTEN names the API's listener.
 */
import dns from 'node:dns';
import net from 'node:net';
import { SettingsError, SETTINGS_ENV, type Settings } from '../config/settings.ts';
import type { OriginPolicySettings } from '../net/origin-policy.ts';

/** The hosts PostgreSQL is reached at, as node-postgres reads the URL (PGHOST, then localhost, when none is given). */
export function databaseHosts(databaseUrl: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const url = new URL(databaseUrl);
  const hosts = [url.hostname.replace(/^\[(.*)\]$/, '$1'), url.searchParams.get('host') ?? ''].filter((host) => host !== '');
  if (hosts.length === 0) hosts.push(env.PGHOST || 'localhost');
  // A path is a Unix socket: no address to refuse.
  return hosts.filter((host) => !host.startsWith('/'));
}

/** The host Redis is reached at (ioredis: localhost when none is given). */
export function redisHost(redisUrl: string): string {
  return new URL(redisUrl).hostname.replace(/^\[(.*)\]$/, '$1') || 'localhost';
}

async function addressesOf(host: string, variable: string): Promise<string[]> {
  if (net.isIP(host) !== 0) return [host];
  try {
    return (await dns.promises.lookup(host, { all: true })).map((found) => found.address);
  } catch (error) {
    throw new SettingsError(
      `${variable}: host "${host}" does not resolve (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); ` +
        'the origin policy refuses its addresses as origins, so it must know them at start',
    );
  }
}

/** Front-end IPs and the resolved database and Redis hosts: refused as origins at any port. */
export async function ownHosts(settings: Pick<Settings, 'frontendIps' | 'databaseUrl' | 'redisUrl'>): Promise<string[]> {
  const hosts = [...settings.frontendIps];
  if (settings.databaseUrl !== undefined) {
    for (const host of databaseHosts(settings.databaseUrl)) hosts.push(...(await addressesOf(host, SETTINGS_ENV.databaseUrl)));
  }
  if (settings.redisUrl !== undefined) hosts.push(...(await addressesOf(redisHost(settings.redisUrl), SETTINGS_ENV.redisUrl)));
  return [...new Set(hosts)];
}

/** The whole policy of this node: the operator's allowed networks, and its own hosts and listeners. */
export function originPolicySettings(
  settings: Pick<Settings, 'originAllowedNetworks'>,
  hosts: readonly string[],
  listeners: readonly { host: string; port: number }[],
): OriginPolicySettings {
  return {
    allowedNetworks: settings.originAllowedNetworks,
    ownHosts: hosts,
    ownListeners: listeners.map(({ host, port }) => ({ address: host, port })),
  };
}
