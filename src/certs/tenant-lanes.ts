/**
 * Background work on tenants' behalf, fair between tenants: each tenant has a lane of its own that
 * runs at most `perTenant` jobs at once, and all lanes together at most `total`. A free slot goes to
 * the tenant with work waiting that runs the fewest jobs (round robin among equals), so one tenant's
 * slow jobs (a CRL server that never answers) hold only its own lane's slots: another tenant's job
 * starts as soon as a slot is free, not after the slow tenant's queue.
 *
 * A job named by a key that is already waiting is not added twice: its caller waits for the one
 * there. One whose key is running runs again after it (once, however often it is asked meanwhile):
 * what it works on may have changed since that run began.
 */

export interface LaneJob {
  /** Who the work is for: the lane it runs in. */
  tenantId: string;
  /** Identifies the work: a second job with this key while one waits or runs is the same job. */
  key: string;
  run: () => Promise<void>;
}

interface Queued {
  job: LaneJob;
  done: Promise<void>;
  resolve: () => void;
  /** Asked for again while it ran: waits for it, then joins its lane. */
  again?: Queued;
}

function queued(job: LaneJob): Queued {
  let resolve!: () => void;
  const done = new Promise<void>((settle) => (resolve = settle));
  return { job, done, resolve };
}

export class TenantLanes {
  readonly #total: number;
  readonly #perTenant: number;
  readonly #onError: (error: unknown, job: LaneJob) => void;
  /** Waiting jobs per tenant, first in first out; the Map's order is the round robin's. */
  readonly #waiting = new Map<string, Queued[]>();
  readonly #waitingByKey = new Map<string, Queued>();
  readonly #runningByKey = new Map<string, Queued>();
  readonly #runningPerTenant = new Map<string, number>();
  readonly #running = new Set<Promise<void>>();
  #stopped = false;

  constructor(options: { total: number; perTenant: number; onError: (error: unknown, job: LaneJob) => void }) {
    this.#total = Math.max(1, options.total);
    this.#perTenant = Math.max(1, Math.min(options.perTenant, this.#total));
    this.#onError = options.onError;
  }

  /** Jobs running now, all tenants. */
  get running(): number {
    return this.#running.size;
  }

  /** Adds the job (see the module comment for a key already there); resolves when it has run (or was dropped by `stop`). */
  add(job: LaneJob): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    const waiting = this.#waitingByKey.get(job.key);
    if (waiting !== undefined) return waiting.done;
    const running = this.#runningByKey.get(job.key);
    if (running !== undefined) {
      running.again ??= queued(job);
      return running.again.done;
    }
    const entry = queued(job);
    this.#enqueue(entry);
    this.#dispatch();
    return entry.done;
  }

  #enqueue(entry: Queued): void {
    this.#waitingByKey.set(entry.job.key, entry);
    const lane = this.#waiting.get(entry.job.tenantId);
    if (lane === undefined) this.#waiting.set(entry.job.tenantId, [entry]);
    else lane.push(entry);
  }

  /** Drops the waiting jobs and waits for the running ones. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const lane of this.#waiting.values()) for (const entry of lane) entry.resolve();
    this.#waiting.clear();
    this.#waitingByKey.clear();
    for (const entry of this.#runningByKey.values()) entry.again?.resolve();
    await Promise.allSettled([...this.#running]);
  }

  #dispatch(): void {
    while (!this.#stopped && this.#running.size < this.#total) {
      const next = this.#next();
      if (next === undefined) return;
      this.#start(next);
    }
  }

  /**
   * The first job of the tenant with the fewest jobs running (and room in its lane), the one whose
   * turn came first among equals; that tenant goes to the back of the turn.
   */
  #next(): Queued | undefined {
    let chosen: string | undefined;
    let fewest = this.#perTenant;
    for (const tenantId of this.#waiting.keys()) {
      const running = this.#runningPerTenant.get(tenantId) ?? 0;
      if (running < fewest) {
        chosen = tenantId;
        fewest = running;
        if (running === 0) break;
      }
    }
    if (chosen === undefined) return undefined;
    const lane = this.#waiting.get(chosen)!;
    const queued = lane.shift()!;
    this.#waiting.delete(chosen);
    if (lane.length > 0) this.#waiting.set(chosen, lane);
    return queued;
  }

  #start(entry: Queued): void {
    const { tenantId, key } = entry.job;
    this.#waitingByKey.delete(key);
    this.#runningByKey.set(key, entry);
    this.#runningPerTenant.set(tenantId, (this.#runningPerTenant.get(tenantId) ?? 0) + 1);
    const running: Promise<void> = entry.job
      .run()
      .catch((error: unknown) => this.#onError(error, entry.job))
      .finally(() => {
        this.#running.delete(running);
        this.#runningByKey.delete(key);
        const left = (this.#runningPerTenant.get(tenantId) ?? 1) - 1;
        if (left === 0) this.#runningPerTenant.delete(tenantId);
        else this.#runningPerTenant.set(tenantId, left);
        entry.resolve();
        if (entry.again !== undefined && !this.#stopped) this.#enqueue(entry.again);
        this.#dispatch();
      });
    this.#running.add(running);
  }
}
