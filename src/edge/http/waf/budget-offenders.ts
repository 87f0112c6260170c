/**
 * Clients that keep making the WAF run past its inspection budget. A request that cost its whole
 * budget got its proxy's `waf.failMode` (503 or through uninspected), but the engine time is spent:
 * a client sending such requests on purpose spends it again with each one. After `overruns`
 * overruns within `windowSeconds`, the client (its address, an IPv6 client by prefix) is refused by that
 * proxy for `blockSeconds` before its body is read and without being inspected: 429 with Retry-After
 * and the page, whose support id is the one of the episode's event (one WAF_EVENT per episode,
 * recorded with its first refused request), as the rate limit does.
 *
 * Kept per proxy in each edge worker's memory, at most `maxClients` (the oldest forgotten first):
 * an attacker spread over the edge's workers is refused by each after its own `overruns`.
 */

/** Operator settings of the early refusal of WAF budget offenders. */
export interface BudgetOffenderSettings {
  /** Overruns of the WAF's inspection budget within the window that start a block; 0: never refused early. */
  readonly overruns: number;
  readonly windowSeconds: number;
  readonly blockSeconds: number;
}

/**
 * Three overruns within 10 s, refused for 60 s. One overrun can be bad luck (a large legitimate
 * form on a busy node); three within seconds are a pattern, and each cost a whole budget (250 ms of
 * a WAF thread by default). 60 s is the rate limit's usual block: long enough that a client
 * sending one such request a second costs the WAF three budgets a minute instead of sixty, short
 * enough that a real user behind a shared address is not shut out for long.
 */
export const DEFAULT_BUDGET_OFFENDERS: BudgetOffenderSettings = { overruns: 3, windowSeconds: 10, blockSeconds: 60 };

/** Clients remembered per proxy (those with a recent overrun or a block). */
const MAX_CLIENTS = 10_000;

/** A block in force. `supportId`: the episode's, set by its first refused request. */
export interface OffenderBlock {
  readonly until: number;
  supportId: string | undefined;
  /** Requests refused in this episode. */
  refused: number;
}

interface Offender {
  /** When the recent overruns happened (ms), oldest first. */
  overruns: number[];
  block: OffenderBlock | undefined;
}

export class BudgetOffenders {
  readonly settings: BudgetOffenderSettings;
  private readonly clients = new Map<string, Offender>();
  private readonly now: () => number;
  private readonly maxClients: number;

  constructor(settings: Partial<BudgetOffenderSettings> = {}, options: { now?: () => number; maxClients?: number } = {}) {
    this.settings = { ...DEFAULT_BUDGET_OFFENDERS, ...settings };
    this.now = options.now ?? Date.now;
    this.maxClients = options.maxClients ?? MAX_CLIENTS;
  }

  /** Clients remembered now. */
  get size(): number {
    return this.clients.size;
  }

  /** One more overrun by the client `key`: true when it starts a block. */
  overrun(key: string): boolean {
    const { overruns, windowSeconds, blockSeconds } = this.settings;
    if (overruns <= 0) return false;
    const now = this.now();
    let offender = this.clients.get(key);
    if (offender === undefined) {
      if (this.clients.size >= this.maxClients) this.forgetOne(now);
      offender = { overruns: [], block: undefined };
      this.clients.set(key, offender);
    }
    if (offender.block !== undefined && offender.block.until > now) return false;
    const since = now - windowSeconds * 1000;
    const recent = offender.overruns.filter((at) => at > since);
    recent.push(now);
    if (recent.length < overruns) {
      offender.overruns = recent;
      offender.block = undefined;
      return false;
    }
    offender.overruns = [];
    offender.block = { until: now + blockSeconds * 1000, supportId: undefined, refused: 0 };
    return true;
  }

  /** The block of client `key` in force now, if any. */
  blocked(key: string): OffenderBlock | undefined {
    if (this.clients.size === 0) return undefined;
    const offender = this.clients.get(key);
    const block = offender?.block;
    if (block === undefined) return undefined;
    if (block.until > this.now()) return block;
    offender!.block = undefined;
    return undefined;
  }

  /** Makes room: a client with neither a block nor an overrun in the window, else the oldest. */
  private forgetOne(now: number): void {
    const since = now - this.settings.windowSeconds * 1000;
    for (const [key, offender] of this.clients) {
      const blocking = offender.block !== undefined && offender.block.until > now;
      if (!blocking && (offender.overruns.at(-1) ?? 0) <= since) {
        this.clients.delete(key);
        return;
      }
    }
    const oldest = this.clients.keys().next();
    if (!oldest.done) this.clients.delete(oldest.value);
  }
}
