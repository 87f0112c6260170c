/**
 * Who gets a WAF engine thread when there are more requests than threads can take (both engines'
 * pools). A request takes one of `slots` (requests handed to the threads at once) or, when all are
 * taken, waits in a bounded queue in this thread; a request that cannot wait is shed, and the
 * caller rejects with WafOverloadedError so that the proxy applies the proxy's `waf.failMode`.
 *
 * - Fair shedding: with the queue full, the client with the most requests waiting loses its newest
 *   one; an arriving request whose client already has as many waiting as the biggest is refused
 *   itself. A flooding source fills and loses its own share first: a client with fewer requests
 *   waiting than the biggest always gets a place.
 * - Fair order: waiting requests get free slots round robin across clients, each client's own in
 *   arrival order, so a flood queued first does not delay the others by its length.
 * - In time: a request that waited `maxWaitMs` without a slot is shed as well.
 *
 * A client is its IPv4 address, or the /64 prefix of its IPv6 address (what one subscriber gets:
 * rotating addresses inside it is no way around the share).
 *
 * Without overload a request costs a comparison and two counter updates; clients are only looked
 * at while requests wait.
 */
import { WafOverloadedError } from '../engine.ts';

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

export interface FairAdmissionOptions {
  /** Requests handed to the engine's threads at once. */
  readonly slots: number;
  /** Requests waiting for a slot, all clients together. 0: none waits, a request without a slot is shed. */
  readonly queueLength: number;
  /** Longest wait for a slot before the request is shed. */
  readonly maxWaitMs: number;
  /** Clock in ms (tests). Default performance.now. */
  readonly now?: () => number;
}

interface Waiter {
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
  readonly since: number;
}

interface ClientQueue {
  readonly key: string;
  readonly waiters: Waiter[];
}

export class FairAdmission {
  readonly slots: number;
  readonly queueLength: number;
  readonly maxWaitMs: number;
  private readonly now: () => number;
  private running = 0;
  private waitingCount = 0;
  private readonly clients = new Map<string, ClientQueue>();
  /** Clients with requests waiting, in the order they get the next free slots. */
  private ring: ClientQueue[] = [];
  private sweeper: NodeJS.Timeout | undefined = undefined;

  constructor(options: FairAdmissionOptions) {
    for (const [name, value, min] of [
      ['slots', options.slots, 1],
      ['queueLength', options.queueLength, 0],
      ['maxWaitMs', options.maxWaitMs, 1],
    ] as const) {
      if (!Number.isInteger(value) || value < min) throw new RangeError(`${name} must be an integer >= ${min}, got ${String(value)}`);
    }
    this.slots = options.slots;
    this.queueLength = options.queueLength;
    this.maxWaitMs = options.maxWaitMs;
    this.now = options.now ?? (() => performance.now());
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
   * Takes a slot for a request of `clientIp`: undefined when one was free (taken now), else a
   * promise that resolves once the request holds one, or rejects with WafOverloadedError when it is
   * shed. Every slot taken must be given back with `leave`.
   */
  enter(clientIp: string): Promise<void> | undefined {
    // While requests wait every slot is taken (leave hands a freed slot straight to a waiter).
    if (this.running < this.slots) {
      this.running++;
      return undefined;
    }
    return this.wait(clientIp);
  }

  /** Gives a slot back: to the next waiting request (round robin across clients), else free. */
  leave(): void {
    while (this.waitingCount > 0) {
      const queue = this.ring.shift()!;
      const waiter = queue.waiters.shift()!;
      this.waitingCount--;
      if (queue.waiters.length > 0) this.ring.push(queue);
      else this.clients.delete(queue.key);
      if (this.now() - waiter.since > this.maxWaitMs) {
        waiter.reject(new WafOverloadedError(`WAF engine overloaded: no thread free within ${this.maxWaitMs} ms`));
        continue;
      }
      waiter.resolve();
      return;
    }
    this.running--;
    this.stopSweeping();
  }

  private wait(clientIp: string): Promise<void> {
    const key = clientKey(clientIp);
    let queue = this.clients.get(key);
    if (this.waitingCount >= this.queueLength) {
      const biggest = this.biggest();
      if (biggest === undefined || (queue?.waiters.length ?? 0) >= biggest.waiters.length) {
        return Promise.reject(
          new WafOverloadedError(`WAF engine overloaded: ${this.waitingCount} requests waiting, this client's share is taken`),
        );
      }
      const newest = biggest.waiters.pop()!;
      this.waitingCount--;
      if (biggest.waiters.length === 0) this.forget(biggest);
      newest.reject(new WafOverloadedError('WAF engine overloaded: shed for a client with fewer requests waiting'));
    }
    if (queue === undefined) {
      queue = { key, waiters: [] };
      this.clients.set(key, queue);
      this.ring.push(queue);
    }
    const waiters = queue.waiters;
    const since = this.now();
    this.waitingCount++;
    this.startSweeping();
    return new Promise<void>((resolve, reject) => {
      waiters.push({ resolve, reject, since });
    });
  }

  /** The client with the most requests waiting (the first of them in ring order). */
  private biggest(): ClientQueue | undefined {
    let best: ClientQueue | undefined;
    for (const queue of this.ring) if (best === undefined || queue.waiters.length > best.waiters.length) best = queue;
    return best;
  }

  private forget(queue: ClientQueue): void {
    this.clients.delete(queue.key);
    const index = this.ring.indexOf(queue);
    if (index >= 0) this.ring.splice(index, 1);
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
    for (const queue of this.ring) {
      const waiters = queue.waiters;
      let n = 0;
      while (n < waiters.length && now - waiters[n]!.since > this.maxWaitMs) n++;
      if (n > 0) expired.push(...waiters.splice(0, n));
    }
    if (expired.length === 0) return;
    this.waitingCount -= expired.length;
    this.ring = this.ring.filter((queue) => {
      if (queue.waiters.length > 0) return true;
      this.clients.delete(queue.key);
      return false;
    });
    this.stopSweeping();
    for (const waiter of expired)
      waiter.reject(new WafOverloadedError(`WAF engine overloaded: no thread free within ${this.maxWaitMs} ms`));
  }

  /** Sheds every waiting request (the engine is closing). */
  close(error: Error): void {
    const all = this.ring.flatMap((queue) => queue.waiters);
    this.ring = [];
    this.clients.clear();
    this.waitingCount = 0;
    this.stopSweeping();
    for (const waiter of all) waiter.reject(error);
  }
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
