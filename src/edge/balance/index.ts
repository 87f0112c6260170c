/**
 * Delivery methods and passive health for a set of origin hosts, shared by the layer 4 and the HTTP
 * proxies. A `HostPool` answers one question, "which host gets the next connection (or request)?",
 * and keeps the two facts that answer depends on: how many connections each host has open now, and
 * which hosts recently refused a connect (passive health: no probes, only what real traffic saw).
 *
 * `pick` runs once per connection, so it allocates nothing and scans the host array in place
 * (at most 64 hosts per the schema).
 */

export type DeliveryMethod = 'LEAST_CONNECTIONS' | 'ROUND_ROBIN' | 'SOURCE_IP_HASH';

export interface BackendHost {
  address: string;
  port: number;
}

export interface PooledHost {
  /** Position in `HostPool.hosts`; what `pick(…, tried)` skips. */
  readonly index: number;
  readonly address: string;
  readonly port: number;
  /** Connections (or requests) begun and not yet ended. */
  active: number;
  /** Time (of the pool's clock, ms) until which the host is skipped; 0 = up. */
  downUntil: number;
}

export interface HostPoolOptions {
  /** How long a host that failed a connect is skipped. Default 10 s. */
  downForMs?: number;
  /** Clock in ms; tests pass a fake one. Default `Date.now`. */
  now?: () => number;
  /**
   * The pool this one replaces (a changed host list or method): every host (address and port) in
   * both keeps its open-connection count and its down mark, and connections begun on the old pool
   * and ended there later still move the counts this pool balances on.
   */
  carryStateFrom?: HostPool;
}

export const DEFAULT_DOWN_FOR_MS = 10_000;

/**
 * The mutable facts about one origin, kept apart from its position so that a reconfigured pool
 * (`HostPool.withHosts`) can share them with the pool it replaces: connections begun on the old pool
 * and ended later still move the counts the new pool balances on.
 */
interface HostState {
  active: number;
  downUntil: number;
}

class PoolEntry implements PooledHost {
  readonly index: number;
  readonly address: string;
  readonly port: number;
  readonly key: string;
  readonly state: HostState;
  /** Rendezvous-hash seed of this host, derived from address and port, so it survives reordering. */
  readonly seed: number;

  constructor(index: number, host: BackendHost, state: HostState) {
    this.index = index;
    this.address = host.address;
    this.port = host.port;
    this.key = hostKey(host);
    this.state = state;
    this.seed = mix32(hashString(this.key, 0x9e3779b9));
  }

  get active(): number {
    return this.state.active;
  }
  set active(value: number) {
    this.state.active = value;
  }
  get downUntil(): number {
    return this.state.downUntil;
  }
  set downUntil(value: number) {
    this.state.downUntil = value;
  }
}

export class HostPool {
  readonly hosts: readonly PooledHost[];
  readonly method: DeliveryMethod;
  readonly downForMs: number;
  private readonly entries: readonly PoolEntry[];
  private readonly now: () => number;
  /** Where ROUND_ROBIN continues, and where LEAST_CONNECTIONS starts breaking ties. */
  private cursor = 0;

  constructor(hosts: readonly BackendHost[], method: DeliveryMethod, options: HostPoolOptions = {}) {
    this.method = method;
    this.downForMs = options.downForMs ?? DEFAULT_DOWN_FOR_MS;
    this.now = options.now ?? Date.now;
    const states = new Map<string, HostState>();
    for (const entry of options.carryStateFrom?.entries ?? []) states.set(entry.key, entry.state);
    const entries: PoolEntry[] = [];
    for (const host of hosts) {
      const key = hostKey(host);
      let state = states.get(key);
      if (state === undefined) {
        state = { active: 0, downUntil: 0 };
        // The same origin listed twice shares one state: its load is one load.
        states.set(key, state);
      }
      entries.push(new PoolEntry(entries.length, host, state));
    }
    this.entries = entries;
    this.hosts = entries;
  }

  /** A pool for a changed host list or method that carries this pool's state over (see `carryStateFrom`). */
  withHosts(hosts: readonly BackendHost[], method: DeliveryMethod): HostPool {
    return new HostPool(hosts, method, { downForMs: this.downForMs, now: this.now, carryStateFrom: this });
  }

  pick(clientIp: string, tried?: ReadonlySet<number>): PooledHost | undefined {
    const now = this.now();
    let chosen: PoolEntry | undefined;
    switch (this.method) {
      case 'LEAST_CONNECTIONS':
        chosen = this.pickLeastConnections(now, tried);
        break;
      case 'ROUND_ROBIN':
        chosen = this.pickRoundRobin(now, tried);
        break;
      case 'SOURCE_IP_HASH':
        chosen = this.pickSourceHash(now, tried, clientIp);
        break;
    }
    return chosen ?? this.pickSoonestUp(tried);
  }

  begin(host: PooledHost): void {
    host.active++;
  }

  end(host: PooledHost): void {
    if (host.active > 0) host.active--;
  }

  markDown(host: PooledHost): void {
    host.downUntil = this.now() + this.downForMs;
  }

  markUp(host: PooledHost): void {
    host.downUntil = 0;
  }

  /** True while `host` is skipped by `pick` (unless every host is down). */
  isDown(host: PooledHost): boolean {
    return host.downUntil > this.now();
  }

  private pickLeastConnections(now: number, tried: ReadonlySet<number> | undefined): PoolEntry | undefined {
    const entries = this.entries;
    const count = entries.length;
    let best: PoolEntry | undefined;
    // Scanning from a rotating start makes equal loads take turns instead of piling onto host 0.
    for (let step = 0; step < count; step++) {
      const entry = entries[(this.cursor + step) % count]!;
      if (!isEligible(entry, now, tried)) continue;
      if (best === undefined || entry.state.active < best.state.active) best = entry;
    }
    if (best !== undefined) this.cursor = (best.index + 1) % count;
    return best;
  }

  private pickRoundRobin(now: number, tried: ReadonlySet<number> | undefined): PoolEntry | undefined {
    const entries = this.entries;
    const count = entries.length;
    for (let step = 0; step < count; step++) {
      const entry = entries[(this.cursor + step) % count]!;
      if (isEligible(entry, now, tried)) {
        this.cursor = (entry.index + 1) % count;
        return entry;
      }
    }
    return undefined;
  }

  /**
   * Rendezvous (highest random weight) hashing: every host scores the client, the best score wins.
   * A host that goes down or leaves moves only the clients it had; the others keep their host.
   */
  private pickSourceHash(now: number, tried: ReadonlySet<number> | undefined, clientIp: string): PoolEntry | undefined {
    const clientHash = hashString(clientIp, 0x811c9dc5, mappedIpv4Offset(clientIp));
    let best: PoolEntry | undefined;
    let bestScore = -1;
    for (const entry of this.entries) {
      if (!isEligible(entry, now, tried)) continue;
      const score = mix32((clientHash ^ entry.seed) >>> 0);
      if (score > bestScore) {
        best = entry;
        bestScore = score;
      }
    }
    return best;
  }

  /** Passive health alone never causes a total outage: the host that comes back first is offered. */
  private pickSoonestUp(tried: ReadonlySet<number> | undefined): PoolEntry | undefined {
    let soonest: PoolEntry | undefined;
    for (const entry of this.entries) {
      if (tried?.has(entry.index)) continue;
      if (soonest === undefined || entry.state.downUntil < soonest.state.downUntil) soonest = entry;
    }
    return soonest;
  }
}

function isEligible(entry: PoolEntry, now: number, tried: ReadonlySet<number> | undefined): boolean {
  return entry.state.downUntil <= now && (tried === undefined || !tried.has(entry.index));
}

function hostKey(host: BackendHost): string {
  return `${host.address.toLowerCase()}|${host.port}`;
}

/** `::ffff:1.2.3.4` and `1.2.3.4` are one client (a dual-stack listener reports the former). */
function mappedIpv4Offset(ip: string): number {
  return ip.length > 7 && ip.charCodeAt(0) === 58 /* : */ && ip.startsWith('::ffff:') && ip.includes('.', 7) ? 7 : 0;
}

/** FNV-1a over the UTF-16 code units from `start`; allocation-free. */
function hashString(text: string, seed: number, start = 0): number {
  let hash = seed >>> 0;
  for (let i = start; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** MurmurHash3's finalizer: every input bit flips about half the output bits, so XOR-ed seeds rank fairly. */
function mix32(value: number): number {
  let h = value >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
