/**
 * Operator settings: flags override TPS_* environment variables, which override defaults.
 * Read and validated once at start; a bad value stops the process with a message naming the variable.
 */
import path from 'node:path';
import net from 'node:net';

export interface Settings {
  /** Folder of the SQLite file and of generated files (master key). */
  dataDir: string;
  /** postgres://... when several nodes share one control plane; absent = SQLite in dataDir. */
  databaseUrl: string | undefined;
  apiListen: { host: string; port: number };
  /** The service's base address: tokens' audience. Default: the API's own URL. */
  baseUrl: string | undefined;
  /** Address of the token issuer (this process). Default: the API's own URL. */
  authUrl: string | undefined;
  /** Pool of front-end IPs offered to tenants. */
  frontendIps: string[];
  /** Three-letter code of this edge location (the `tpc` of insight events). */
  location: string;
  /** base64 of 32 bytes; encrypts private keys at rest. Absent: generated once into dataDir/master.key. */
  masterKey: string | undefined;
  tokenTtlSeconds: number;
  /** A token request within this many seconds of the last issued token answers that same token. */
  tokenReuseSeconds: number;
  /** API calls per minute per service account before 429. */
  apiRateLimitPerMinute: number;
  logLevel: string;
  /** Run the edge (data plane) inside `tps serve`. */
  edge: boolean;
  /** Identifies this edge node in status reports. */
  nodeId: string;
}

export type SettingsInput = Partial<Record<keyof Settings, string | boolean | undefined>>;

export class SettingsError extends Error {}

const ENV: Record<keyof Settings, string> = {
  dataDir: 'TPS_DATA_DIR',
  databaseUrl: 'TPS_DATABASE_URL',
  apiListen: 'TPS_API_LISTEN',
  baseUrl: 'TPS_BASE_URL',
  authUrl: 'TPS_AUTH_URL',
  frontendIps: 'TPS_FRONTEND_IPS',
  location: 'TPS_LOCATION',
  masterKey: 'TPS_MASTER_KEY',
  tokenTtlSeconds: 'TPS_TOKEN_TTL_SECONDS',
  tokenReuseSeconds: 'TPS_TOKEN_REUSE_SECONDS',
  apiRateLimitPerMinute: 'TPS_API_RATE_LIMIT_PER_MINUTE',
  logLevel: 'TPS_LOG_LEVEL',
  edge: 'TPS_EDGE',
  nodeId: 'TPS_NODE_ID',
};

export function loadSettings(flags: SettingsInput = {}, env: NodeJS.ProcessEnv = process.env): Settings {
  const raw = (key: keyof Settings): string | undefined => {
    const flag = flags[key];
    if (flag !== undefined) return String(flag);
    const value = env[ENV[key]];
    return value === undefined || value === '' ? undefined : value;
  };
  const fail = (key: keyof Settings, why: string): never => {
    throw new SettingsError(`${ENV[key]} (--${kebab(key)}): ${why}`);
  };
  const integer = (key: keyof Settings, fallback: number, min: number, max: number): number => {
    const value = raw(key);
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) fail(key, `must be an integer from ${min} to ${max}, got "${value}"`);
    return n;
  };
  const url = (key: keyof Settings): string | undefined => {
    const value = raw(key);
    if (value === undefined) return undefined;
    try {
      const parsed = new URL(value);
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error();
    } catch {
      fail(key, `must be an http(s) URL, got "${value}"`);
    }
    return value.replace(/\/+$/, '');
  };

  const databaseUrl = raw('databaseUrl');
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    fail('databaseUrl', 'must start with postgres:// (leave it unset for the embedded SQLite store)');
  }

  const listen = raw('apiListen') ?? '127.0.0.1:8080';
  const listenMatch = /^\[?([^\]]*?)\]?:(\d+)$/.exec(listen);
  const listenPort = Number(listenMatch?.[2]);
  if (!listenMatch || !net.isIP(listenMatch[1] ?? '') || !Number.isInteger(listenPort) || listenPort > 65535) {
    fail('apiListen', `must be ip:port, got "${listen}"`);
  }

  const frontendIps = (raw('frontendIps') ?? '127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5')
    .split(',')
    .map((ip) => ip.trim())
    .filter((ip) => ip !== '');
  for (const ip of frontendIps) if (!net.isIP(ip)) fail('frontendIps', `"${ip}" is not an IP address`);

  const location = raw('location') ?? 'LOC';
  if (!/^[A-Z]{3}$/.test(location)) fail('location', `must be three upper-case letters, got "${location}"`);

  const masterKey = raw('masterKey');
  if (masterKey !== undefined && Buffer.from(masterKey, 'base64').length !== 32) {
    fail('masterKey', 'must be the base64 of 32 random bytes (openssl rand -base64 32)');
  }

  const edge = raw('edge') ?? 'true';
  if (!/^(true|false|1|0|on|off)$/.test(edge)) fail('edge', `must be true or false, got "${edge}"`);

  return {
    dataDir: path.resolve(raw('dataDir') ?? 'data'),
    databaseUrl,
    apiListen: { host: listenMatch![1]!, port: listenPort },
    baseUrl: url('baseUrl'),
    authUrl: url('authUrl'),
    frontendIps: [...new Set(frontendIps)],
    location,
    masterKey,
    tokenTtlSeconds: integer('tokenTtlSeconds', 24 * 3600, 1, 30 * 24 * 3600),
    tokenReuseSeconds: integer('tokenReuseSeconds', 12 * 3600, 0, 30 * 24 * 3600),
    apiRateLimitPerMinute: integer('apiRateLimitPerMinute', 1200, 1, 1_000_000),
    logLevel: raw('logLevel') ?? 'info',
    edge: /^(true|1|on)$/.test(edge),
    nodeId: raw('nodeId') ?? `${process.env.HOSTNAME ?? 'node'}-${process.pid}`,
  };
}

const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** The environment variable behind each setting, for --help texts and docs. */
export const SETTINGS_ENV = ENV;
