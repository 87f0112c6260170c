/**
 * Who gets a WAF engine thread when there are more requests than threads can take (both engines'
 * pools), accounted in what the requests cost: the engine CPU time each client and each tenant
 * made the threads spend recently (`charge`, a sum decaying with time constant `costWindowMs`),
 * not only their number. A request takes one of `slots` (requests handed to the threads at once)
 * or waits in a bounded queue in this thread; a request that cannot wait is shed, and the caller
 * rejects with WafOverloadedError so that the proxy applies the proxy's `waf.failMode`.
 *
 * - Expensive clients fill their own share first: a client whose recent requests cost
 *   `expensiveRequestMs` or more each on average (a client not charged yet: a request with a body
 *   is reckoned at what its tenant's bodies cost per byte lately, so a botnet's fresh addresses
 *   are known by their bodies) has at most `expensiveInFlight` requests handed
 *   to the threads at once, and so have all the expensive clients of one tenant together (by
 *   default half the threads): the rest of its requests wait, and are shed after `maxWaitMs`.
 *   One tenant's expensive traffic cannot take the threads the others' requests need.
 * - Expensive clients have a share of the threads' time when others need them: each client has an
 *   allowance of engine time (a token bucket filled at `expensiveClientShare` of the threads'
 *   time, holding at most that share of the cost window) from which what its expensive requests
 *   cost is taken; an expensive client whose allowance is spent is refused (WafCostShareError)
 *   until it is positive again, while another client has a request in flight or waiting or the
 *   others cost the threads as much lately. Its requests, slow to inspect, then cost only its own
 *   answers; alone, it uses what nobody else wants; a client of cheap requests is never refused
 *   for cost, however many it sends.
 * - Fair shedding: with the queue full, the tenant that costs the most (recent cost plus what it
 *   has waiting) loses a request, from its client that costs the most, the newest one; an
 *   arriving request that would make its own tenant and client the most costly is refused itself.
 *   A flooding or expensive source loses its own share first.
 * - Fair order: a free slot goes to the waiting client that cost the least recently (round robin
 *   among equals), each client's own requests in arrival order, so cheap requests overtake
 *   expensive ones and a flood queued first does not delay the others by its length.
 * - In time: a request that waited `maxWaitMs` without a slot is shed as well.
 *
 * A client is its IPv4 address, or the /64 prefix of its IPv6 address (what one subscriber gets:
 * rotating addresses inside it is no way around the share), counted within its tenant.
 *
 * Without overload a request costs a map look-up, a few counter updates and an exponential; the
 * waiting clients are only looked at while requests wait.
 */
import { WafCostShareError, WafOverloadedError } from '../engine.ts';
import { clock } from './clock.ts';

/**
 * The engines' pool defaults: requests handed to each thread at once, waiting per thread, longest
 * wait. A thread answers the requests it holds in batches (batched-messages.ts), so the number it
 * holds is also the largest batch: fewer than a proxy's usual concurrency makes every batch small
 * and every request pay for more messages and wake-ups (docs/benchmarks.md, bench/waf's blocked
 * attack). Requests past it wait here, where shedding and order are fair per client; the thread's
 * own queue is first come, first served.
 */
export const DEFAULT_IN_FLIGHT_PER_WORKER = 32;
export const DEFAULT_QUEUE_PER_WORKER = 64;
export const DEFAULT_MAX_QUEUE_WAIT_MS = 1000;
/**
 * Time constant of the recent cost: a client's cost is what it cost, decayed by e every 5 s. Long
 * enough that a client sending one expensive request every few seconds stays known as expensive,
 * short enough that a client whose requests became cheap is treated as such within seconds.
 */
export const DEFAULT_COST_WINDOW_MS = 5000;
/**
 * A client whose requests cost this much engine CPU time each on average is expensive. A benign
 * request costs the CRS 0.1 to 2 ms (docs/benchmarks.md, bench/waf); 20 ms is ten times the
 * costliest of them and a twelfth of the compiled engine's 250 ms budget.
 */
export const DEFAULT_EXPENSIVE_REQUEST_MS = 20;
/**
 * The share of the threads' time an expensive client may use: 2 %, an allowance filled at 20 ms a
 * second per thread, holding at most 100 ms (the share of the 5 s cost window). A 1 MiB multipart
 * upload, the largest body a proxy may ask to inspect, costs about 120 ms (docs/benchmarks.md):
 * one at once, then one every 6 s; a client whose bodies take the whole 250 ms budget, one every
 * 5 to 6 s (its debt is bounded at 100 ms). Expensive clients' throughput behind the WAF is the
 * price of no client's inspections taking more than a few hundredths of the threads: on a small
 * machine, a thread busy with one expensive body is half the CPU the benign clients need.
 */
export const DEFAULT_EXPENSIVE_CLIENT_SHARE = 0.02;
/** What a request is reckoned to cost when neither its client nor its tenant was charged yet (a benign request, rounded up). */
const UNKNOWN_REQUEST_MS = 1;
/** A client or tenant state below this recent cost, with nothing in flight or waiting, is forgotten. */
const NEGLIGIBLE_MS = 0.01;
/** Clients remembered at most; past it the idle ones are forgotten, oldest first. */
const MAX_CLIENTS = 100_000;

export interface FairAdmissionOptions {
  /** Requests handed to the engine's threads at once. */
  readonly slots: number;
  /** Requests waiting for a slot, all clients together. 0: none waits, a request without a slot is shed. */
  readonly queueLength: number;
  /** Longest wait for a slot before the request is shed. */
  readonly maxWaitMs: number;
  /** Requests of expensive clients handed to the threads at once, per client and per tenant. Default 1. */
  readonly expensiveInFlight?: number;
  /** Average engine time per request from which a client is expensive; default DEFAULT_EXPENSIVE_REQUEST_MS. */
  readonly expensiveRequestMs?: number;
  /** Time constant of the recent cost; default DEFAULT_COST_WINDOW_MS. */
  readonly costWindowMs?: number;
  /** Share of the threads' time one expensive client may use (0 < share ≤ 1; 1: no cap); default DEFAULT_EXPENSIVE_CLIENT_SHARE. */
  readonly expensiveClientShare?: number;
  /** Engine threads behind the slots (what the share is of); default 1. */
  readonly threads?: number;
  /** Clock in ms (tests). Default performance.now. */
  readonly now?: () => number;
}

/** What a request holding a slot gives back (`leave`) and is charged to (`charge`). */
export interface AdmissionTicket {
  readonly client: ClientShare;
  /** Body bytes of the request (what its cost per byte is learnt from). */
  readonly bytes: number;
  /** What the request was reckoned to cost when admitted. */
  readonly estimateMs: number;
  /** Counted in its tenant's expensive requests in flight. */
  readonly expensive: boolean;
}

interface Waiter {
  readonly resolve: (ticket: AdmissionTicket) => void;
  readonly reject: (error: Error) => void;
  readonly since: number;
  readonly bytes: number;
}

/**
 * Recent cost and number of requests, and the cost and bytes of those with a body, all decayed to
 * the time `at`.
 */
interface RecentCost {
  cost: number;
  count: number;
  bodyCost: number;
  bodyBytes: number;
  at: number;
}

interface TenantShare extends RecentCost {
  readonly key: string;
  clients: number;
  /** Its clients by their key (clientKey): a request's client found without building a key for it. */
  readonly members: Map<string, ClientShare>;
  expensiveInFlight: number;
  waiting: number;
}

interface ClientShare extends RecentCost {
  /** Tenant and client key together (shareKey): the client among all tenants'. */
  readonly key: string;
  /** The client key within its tenant (clientKey). */
  readonly address: string;
  readonly tenant: TenantShare;
  inFlight: number;
  readonly waiters: Waiter[];
  /** Engine time (ms) the client may still use, as of `allowanceAt`: a token bucket, negative when in debt. */
  allowance: number;
  allowanceAt: number;
}

export class FairAdmission {
  readonly slots: number;
  readonly queueLength: number;
  readonly maxWaitMs: number;
  readonly expensiveInFlight: number;
  readonly expensiveRequestMs: number;
  readonly costWindowMs: number;
  /** A client's allowance of engine time: filled at this many ms per ms (its share of the threads)... */
  readonly allowanceRate: number;
  /** ... up to this many ms (the share of the cost window); Infinity: no cap. */
  readonly allowanceMs: number;
  private readonly now: () => number;
  private running = 0;
  private waitingCount = 0;
  private readonly clients = new Map<string, ClientShare>();
  private readonly tenants = new Map<string, TenantShare>();
  /** Every client's recent cost together (what tells whether others use the threads too). */
  private readonly all: RecentCost = { cost: 0, count: 0, bodyCost: 0, bodyBytes: 0, at: 0 };
  /** Clients with requests waiting, in round-robin order (the next among equals first). */
  private ring: ClientShare[] = [];
  private sweeper: NodeJS.Timeout | undefined = undefined;
  private nextPrune = 1024;

  constructor(options: FairAdmissionOptions) {
    for (const [name, value, min] of [
      ['slots', options.slots, 1],
      ['queueLength', options.queueLength, 0],
      ['maxWaitMs', options.maxWaitMs, 1],
      ['expensiveInFlight', options.expensiveInFlight ?? 1, 1],
      ['costWindowMs', options.costWindowMs ?? DEFAULT_COST_WINDOW_MS, 1],
    ] as const) {
      if (!Number.isInteger(value) || value < min) throw new RangeError(`${name} must be an integer >= ${min}, got ${String(value)}`);
    }
    const expensiveRequestMs = options.expensiveRequestMs ?? DEFAULT_EXPENSIVE_REQUEST_MS;
    const share = options.expensiveClientShare ?? DEFAULT_EXPENSIVE_CLIENT_SHARE;
    if (!(share > 0 && share <= 1)) throw new RangeError(`expensiveClientShare must be > 0 and <= 1, got ${String(share)}`);
    const threads = options.threads ?? 1;
    if (!Number.isInteger(threads) || threads < 1) throw new RangeError(`threads must be an integer >= 1, got ${String(threads)}`);
    if (!(expensiveRequestMs > 0)) throw new RangeError(`expensiveRequestMs must be > 0, got ${String(expensiveRequestMs)}`);
    this.slots = options.slots;
    this.queueLength = options.queueLength;
    this.maxWaitMs = options.maxWaitMs;
    this.expensiveInFlight = options.expensiveInFlight ?? 1;
    this.expensiveRequestMs = expensiveRequestMs;
    this.costWindowMs = options.costWindowMs ?? DEFAULT_COST_WINDOW_MS;
    this.allowanceRate = share * threads;
    // A share of 1 is every thread's whole time: never reached, no cap.
    this.allowanceMs = share >= 1 ? Infinity : this.allowanceRate * this.costWindowMs;
    this.now = options.now ?? (() => clock.now());
  }

  /** Requests holding a slot. */
  get active(): number {
    return this.running;
  }

  /** Requests waiting for a slot. */
  get waiting(): number {
    return this.waitingCount;
  }

  /**
   * Takes a slot for a request of `clientIp` (of `tenant`, when the caller knows it): the ticket
   * when one was free (taken now), else a promise of it once the request holds one, which rejects
   * with WafOverloadedError when the request is shed, or WafCostShareError when its client is past
   * its share. Every ticket must be given back with `leave`.
   */
  enter(clientIp: string, tenant = '', bodyBytes = 0): AdmissionTicket | Promise<AdmissionTicket> {
    const now = this.now();
    const client = this.share(clientKey(clientIp), tenant, now);
    if (this.pastShare(client, now, bodyBytes)) {
      return Promise.reject(
        new WafCostShareError(
          `this client's inspections used more than its share of the WAF threads (${Math.round(client.cost)} ms in the last ${this.costWindowMs / 1000} s)`,
        ),
      );
    }
    // With a slot free, whoever waits is capped (dispatch hands a freed slot to any other waiter).
    if (this.running < this.slots && !this.capped(client, now, bodyBytes)) return this.admit(client, now, bodyBytes);
    return this.wait(client, now, bodyBytes);
  }

  /** Charges `costMs` of engine time to the ticket's client and tenant (one request). */
  charge(ticket: AdmissionTicket, costMs: number): void {
    if (!(costMs >= 0)) return;
    const now = this.now();
    // Only expensive requests draw on the allowance: a busy client of cheap ones runs up no debt.
    // The debt is bounded (a full allowance's worth below zero): a client that was expensive is
    // served again at most two windows after it stops, whatever it spent before.
    if (ticket.expensive || costMs >= this.expensiveRequestMs)
      ticket.client.allowance = Math.max(-this.allowanceMs, ticket.client.allowance - costMs);
    this.chargeTo(ticket.client, now, costMs, ticket.bytes);
    this.chargeTo(ticket.client.tenant, now, costMs, ticket.bytes);
    this.chargeTo(this.all, now, costMs, ticket.bytes);
  }

  private chargeTo(recent: RecentCost, now: number, costMs: number, bytes: number): void {
    this.decay(recent, now);
    recent.cost += costMs;
    recent.count += 1;
    if (bytes > 0) {
      recent.bodyCost += costMs;
      recent.bodyBytes += bytes;
    }
  }

  /** What the ticket's request was reckoned to cost. */
  estimatedCostMs(ticket: AdmissionTicket): number {
    return ticket.estimateMs;
  }

  /**
   * What a request of `client` with `bytes` of body is reckoned to cost: the client's recent
   * average; for a client not charged yet, a request with a body at what its tenant's bodies cost
   * per byte lately (a botnet's fresh addresses are known by their bodies), else a cheap request.
   */
  private estimate(client: ClientShare, now: number, bytes: number): number {
    this.decay(client, now);
    if (client.count >= 0.5) return client.cost / client.count;
    const tenant = client.tenant;
    this.decay(tenant, now);
    if (bytes > 0 && tenant.bodyBytes >= 1) return Math.max(UNKNOWN_REQUEST_MS, (bytes * tenant.bodyCost) / tenant.bodyBytes);
    return UNKNOWN_REQUEST_MS;
  }

  /** Gives a slot back: to the waiting request that should have it next, else free. */
  leave(ticket: AdmissionTicket): void {
    const client = ticket.client;
    this.running--;
    client.inFlight--;
    if (ticket.expensive) client.tenant.expensiveInFlight--;
    this.dispatch();
    this.stopSweeping();
  }

  /** Recent cost of a client (by its address) in a tenant, for tests and metrics. */
  recentCostMs(clientIp: string, tenant = ''): number {
    const client = this.tenants.get(tenant)?.members.get(clientKey(clientIp));
    if (client === undefined) return 0;
    this.decay(client, this.now());
    return client.cost;
  }

  private admit(client: ClientShare, now: number, bytes: number): AdmissionTicket {
    this.running++;
    client.inFlight++;
    const estimateMs = this.estimate(client, now, bytes);
    const expensive = estimateMs >= this.expensiveRequestMs;
    if (expensive) client.tenant.expensiveInFlight++;
    return { client, bytes, estimateMs, expensive };
  }

  private share(key: string, tenantKey: string, now: number): ClientShare {
    // (two look-ups of strings the request already has, rather than one of a key built per request)
    let tenant = this.tenants.get(tenantKey);
    let client = tenant?.members.get(key);
    if (client !== undefined) return client;
    if (this.clients.size >= this.nextPrune) {
      this.prune(now);
      tenant = this.tenants.get(tenantKey);
    }
    if (tenant === undefined) {
      tenant = {
        key: tenantKey,
        cost: 0,
        count: 0,
        bodyCost: 0,
        bodyBytes: 0,
        at: now,
        clients: 0,
        members: new Map(),
        expensiveInFlight: 0,
        waiting: 0,
      };
      this.tenants.set(tenantKey, tenant);
    }
    tenant.clients++;
    const id = shareKey(tenantKey, key);
    client = {
      key: id,
      address: key,
      tenant,
      cost: 0,
      count: 0,
      bodyCost: 0,
      bodyBytes: 0,
      at: now,
      inFlight: 0,
      waiters: [],
      allowance: this.allowanceMs,
      allowanceAt: now,
    };
    this.clients.set(id, client);
    tenant.members.set(key, client);
    return client;
  }

  private decay(recent: RecentCost, now: number): void {
    if (now <= recent.at) return;
    const factor = Math.exp((recent.at - now) / this.costWindowMs);
    recent.cost *= factor;
    recent.count *= factor;
    recent.bodyCost *= factor;
    recent.bodyBytes *= factor;
    recent.at = now;
  }

  /**
   * An expensive client whose allowance is spent, while others need the threads: another client
   * has a request in flight or waiting, or the others' requests cost the threads at least the
   * allowance lately. Alone, a client uses what nobody else wants (a cheap request is never
   * refused for cost either).
   */
  private pastShare(client: ClientShare, now: number, bytes: number): boolean {
    if (now > client.allowanceAt) {
      client.allowance = Math.min(this.allowanceMs, client.allowance + (now - client.allowanceAt) * this.allowanceRate);
      client.allowanceAt = now;
    }
    if (client.allowance > 0 || this.estimate(client, now, bytes) < this.expensiveRequestMs) return false;
    if (this.running > client.inFlight || this.waitingCount > client.waiters.length) return true;
    this.decay(this.all, now);
    return this.all.cost - client.cost >= this.allowanceMs;
  }

  /** An expensive request at its client's cap or its tenant's: it waits even with a slot free. */
  private capped(client: ClientShare, now: number, bytes: number): boolean {
    if (client.inFlight < this.expensiveInFlight && client.tenant.expensiveInFlight < this.expensiveInFlight) return false;
    return this.estimate(client, now, bytes) >= this.expensiveRequestMs;
  }

  /** Recent cost plus what its waiting requests are reckoned to cost. */
  private clientWeight(client: ClientShare, now: number, extra = 0): number {
    const each = this.estimate(client, now, client.waiters[0]?.bytes ?? 0);
    return client.cost + (client.waiters.length + extra) * Math.max(each, UNKNOWN_REQUEST_MS);
  }

  private tenantWeight(tenant: TenantShare, now: number, extra: number): number {
    this.decay(tenant, now);
    let pending = 0;
    for (const client of this.ring) if (client.tenant === tenant) pending += this.clientWeight(client, now) - client.cost;
    return tenant.cost + pending + extra;
  }

  private wait(client: ClientShare, now: number, bytes: number): Promise<AdmissionTicket> {
    if (this.waitingCount >= this.queueLength) {
      const victim = this.victim(now);
      const mine = this.clientWeight(client, now, 1);
      const refuseArriving =
        victim === undefined ||
        (victim.tenant === client.tenant
          ? mine > this.clientWeight(victim, now)
          : this.tenantWeight(client.tenant, now, mine - this.clientWeight(client, now)) > this.tenantWeight(victim.tenant, now, 0));
      if (refuseArriving) {
        return Promise.reject(
          new WafOverloadedError(`WAF engine overloaded: ${this.waitingCount} requests waiting, this client's share is taken`),
        );
      }
      const newest = victim.waiters.pop()!;
      this.waitingCount--;
      victim.tenant.waiting--;
      if (victim.waiters.length === 0) this.unring(victim);
      newest.reject(new WafOverloadedError('WAF engine overloaded: shed for a client that costs less'));
    }
    if (client.waiters.length === 0) this.ring.push(client);
    const waiters = client.waiters;
    this.waitingCount++;
    client.tenant.waiting++;
    this.startSweeping();
    return new Promise<AdmissionTicket>((resolve, reject) => {
      waiters.push({ resolve, reject, since: now, bytes });
    });
  }

  /** The waiting client to shed from: of the tenant that costs the most, the client that costs the most. */
  private victim(now: number): ClientShare | undefined {
    let tenant: TenantShare | undefined;
    let tenantWeight = -1;
    for (const client of this.ring) {
      if (client.tenant === tenant) continue;
      const weight = this.tenantWeight(client.tenant, now, 0);
      if (weight > tenantWeight) {
        tenant = client.tenant;
        tenantWeight = weight;
      }
    }
    let best: ClientShare | undefined;
    let bestWeight = -1;
    for (const client of this.ring) {
      if (client.tenant !== tenant) continue;
      const weight = this.clientWeight(client, now);
      if (weight > bestWeight) {
        best = client;
        bestWeight = weight;
      }
    }
    return best;
  }

  /** Hands free slots to waiting requests: the least costly client first, none that is capped. */
  private dispatch(): void {
    while (this.running < this.slots && this.waitingCount > 0) {
      const now = this.now();
      let next: ClientShare | undefined;
      let nextCost = Infinity;
      for (const client of this.ring) {
        if (this.capped(client, now, client.waiters[0]!.bytes)) continue;
        this.decay(client, now);
        if (client.cost < nextCost) {
          next = client;
          nextCost = client.cost;
        }
      }
      if (next === undefined) return;
      const waiter = next.waiters.shift()!;
      this.waitingCount--;
      next.tenant.waiting--;
      // To the end of the round: among equals, the others go first next time.
      this.unring(next);
      if (next.waiters.length > 0) this.ring.push(next);
      if (now - waiter.since > this.maxWaitMs) {
        waiter.reject(new WafOverloadedError(`WAF engine overloaded: no thread free within ${this.maxWaitMs} ms`));
        continue;
      }
      waiter.resolve(this.admit(next, now, waiter.bytes));
    }
  }

  private unring(client: ClientShare): void {
    const index = this.ring.indexOf(client);
    if (index >= 0) this.ring.splice(index, 1);
  }

  /** Forgets the clients and tenants with nothing in flight or waiting and a negligible recent cost. */
  private prune(now: number): void {
    for (const client of this.clients.values()) {
      if (client.inFlight > 0 || client.waiters.length > 0) continue;
      this.decay(client, now);
      if (client.cost < NEGLIGIBLE_MS || this.clients.size >= MAX_CLIENTS) this.forget(client, now);
    }
    this.nextPrune = Math.max(1024, this.clients.size * 2);
  }

  private forget(client: ClientShare, now: number): void {
    this.clients.delete(client.key);
    const tenant = client.tenant;
    tenant.members.delete(client.address);
    tenant.clients--;
    this.decay(tenant, now);
    if (tenant.clients === 0 && tenant.cost < NEGLIGIBLE_MS) this.tenants.delete(tenant.key);
  }

  private startSweeping(): void {
    if (this.sweeper !== undefined) return;
    this.sweeper = setInterval(() => this.sweep(), Math.max(10, Math.floor(this.maxWaitMs / 2)));
    this.sweeper.unref();
  }

  private stopSweeping(): void {
    if (this.sweeper === undefined || this.waitingCount > 0) return;
    clearInterval(this.sweeper);
    this.sweeper = undefined;
  }

  /** Sheds the requests that waited too long (each client's oldest are first in its queue). */
  sweep(): void {
    const now = this.now();
    const expired: Waiter[] = [];
    for (const client of this.ring) {
      const waiters = client.waiters;
      let n = 0;
      while (n < waiters.length && now - waiters[n]!.since > this.maxWaitMs) n++;
      if (n > 0) {
        expired.push(...waiters.splice(0, n));
        client.tenant.waiting -= n;
      }
    }
    if (expired.length === 0) return;
    this.waitingCount -= expired.length;
    this.ring = this.ring.filter((client) => client.waiters.length > 0);
    this.stopSweeping();
    for (const waiter of expired)
      waiter.reject(new WafOverloadedError(`WAF engine overloaded: no thread free within ${this.maxWaitMs} ms`));
  }

  /** Sheds every waiting request (the engine is closing). */
  close(error: Error): void {
    const all = this.ring.flatMap((client) => client.waiters.splice(0));
    for (const tenant of this.tenants.values()) tenant.waiting = 0;
    this.ring = [];
    this.waitingCount = 0;
    this.stopSweeping();
    for (const waiter of all) waiter.reject(error);
  }
}

function shareKey(tenant: string, client: string): string {
  return tenant === '' ? client : `${tenant} ${client}`;
}

/**
 * The share a client address counts in: an IPv4 address (also IPv4-mapped IPv6) as is, an IPv6
 * address by its /64 prefix (`2001:db8:0:1::/64`). Anything else (not an address) as is.
 */
export function clientKey(ip: string): string {
  if (!ip.includes(':')) return ip;
  if (ip.includes('.')) {
    const v4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(ip);
    if (v4 !== null) return v4[1]!;
  }
  const groups = ipv6Groups(ip);
  if (groups === undefined) return ip;
  return `${groups
    .slice(0, 4)
    .map((group) => group.toString(16))
    .join(':')}::/64`;
}

/** The eight 16-bit groups of an IPv6 address (compressed or not, a dotted IPv4 tail allowed); undefined when it is not one. */
export function ipv6Groups(ip: string): number[] | undefined {
  const zone = ip.indexOf('%');
  const address = zone >= 0 ? ip.slice(0, zone) : ip;
  const halves = address.split('::');
  if (halves.length > 2) return undefined;
  const parse = (part: string): number[] | undefined => {
    if (part === '') return [];
    const out: number[] = [];
    const pieces = part.split(':');
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i]!;
      if (i === pieces.length - 1 && piece.includes('.')) {
        const octets = piece.split('.');
        if (octets.length !== 4 || !octets.every((o) => /^\d{1,3}$/.test(o) && Number(o) <= 255)) return undefined;
        const [a, b, c, d] = octets.map(Number) as [number, number, number, number];
        out.push((a << 8) | b, (c << 8) | d);
        continue;
      }
      if (!/^[0-9a-fA-F]{1,4}$/.test(piece)) return undefined;
      out.push(parseInt(piece, 16));
    }
    return out;
  };
  const head = parse(halves[0]!);
  if (head === undefined) return undefined;
  if (halves.length === 1) return head.length === 8 ? head : undefined;
  const tail = parse(halves[1]!);
  if (tail === undefined || head.length + tail.length > 7) return undefined;
  return [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
}
