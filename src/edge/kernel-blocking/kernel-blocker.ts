/**
 * The service's nftables table `inet tps`, owned by the edge supervisor (never by the worker
 * threads): created at start, removed at stop, and filled with blocked sources in batches.
 *
 * Batching: `block` only notes the element; at most every `flushIntervalMs` (100 ms) the pending
 * elements go to the kernel in one `nft -f -` (one process, one transaction), whatever the number
 * of sources. An element already in the kernel with a later end is replaced (delete, then add, in
 * the same transaction: `add` does not move the timeout of an existing element on every kernel).
 * When a batch fails (an element timed out in the kernel between our look and the delete), the
 * sets are rebuilt from what this side holds, in one transaction again.
 *
 * Watchdog: every `checkIntervalMs` (10 s) the table is looked up; gone (an operator's `nft flush ruleset`, a
 * firewall service restarted), it is created again with the elements this side holds.
 */
import type { EdgeLogger } from '../runtime/types.ts';
import type { NftRunner } from './nft.ts';
import {
  addElementLine,
  createTableScript,
  deleteElementLine,
  deleteTableScript,
  elementText,
  flushSetsScript,
  parseCounters,
} from './ruleset.ts';
import type { KernelBlockElement, KernelBlockReason } from './types.ts';

export interface KernelBlockerOptions {
  nft: NftRunner;
  logger: EdgeLogger;
  /** Most one batch per this many ms. Default 100. */
  flushIntervalMs?: number;
  /** Elements held at once; past it new sources stay with the proxies' own refusals. Default 65,536. */
  maxElements?: number;
  /** How often the table is looked up (and created again when gone). Default 10,000 ms. */
  checkIntervalMs?: number;
  now?: () => number;
}

interface Held {
  element: KernelBlockElement;
  untilMs: number;
  reason: KernelBlockReason;
}

/** An element this close to its end is left to expire rather than replaced (the delete could miss it). */
const REPLACE_MARGIN_MS = 500;
/** A new end this much later than the one held is worth a replacement; less is noise between workers. */
const EXTEND_MIN_MS = 1_000;

export class KernelBlocker {
  readonly #nft: NftRunner;
  readonly #logger: EdgeLogger;
  readonly #flushIntervalMs: number;
  readonly #maxElements: number;
  readonly #checkIntervalMs: number;
  readonly #now: () => number;
  /** What the kernel holds once the pending batch is applied, by element text. */
  readonly #held = new Map<string, Held>();
  /** Lines of the next batch, by element text: replace = delete the kernel's element first. */
  #pending = new Map<string, { held: Held; replace: boolean }>();
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> | undefined;
  #lastFlushAt = 0;
  #stopped = false;
  /** Callers of `settled`, resolved when the last pending batch is through. */
  #waiters: (() => void)[] = [];
  /** Batches applied and failed, elements refused because the sets were full, tables recreated (for /metrics). */
  readonly counts = { applied: 0, failed: 0, full: 0, recreated: 0 };
  /** Why the kernel does not hold what it should, while that lasts (a /healthz warning). */
  failure: string | undefined;
  #watchdog: NodeJS.Timeout | undefined;

  constructor(options: KernelBlockerOptions) {
    this.#nft = options.nft;
    this.#logger = options.logger;
    this.#flushIntervalMs = options.flushIntervalMs ?? 100;
    this.#maxElements = options.maxElements ?? 65_536;
    this.#checkIntervalMs = options.checkIntervalMs ?? 10_000;
    this.#now = options.now ?? Date.now;
  }

  /** Creates the table (replacing one left over from a crash). Rejects with nft's error. */
  async start(): Promise<void> {
    await this.#nft.apply(createTableScript());
    this.#watchdog = setInterval(() => {
      if (this.#flushing !== undefined || this.#stopped) return;
      this.#flushing = this.#check().finally(() => this.#done());
    }, this.#checkIntervalMs);
    this.#watchdog.unref();
  }

  /**
   * Drops `element`'s packets until `untilMs`. True when that is new to the kernel (or a later end);
   * false when it holds it already, the block is about to end, or the sets are full.
   */
  block(element: KernelBlockElement, untilMs: number, reason: KernelBlockReason): boolean {
    if (this.#stopped) return false;
    const now = this.#now();
    if (untilMs - now < REPLACE_MARGIN_MS) return false;
    let key: string;
    try {
      key = elementText(element);
    } catch (error) {
      this.#logger.error({ err: error, element }, 'kernel blocking: element refused');
      return false;
    }
    const existing = this.#held.get(key);
    const present = existing !== undefined && existing.untilMs - now > REPLACE_MARGIN_MS;
    if (present && untilMs - existing.untilMs < EXTEND_MIN_MS) return false;
    if (!present && this.#held.size >= this.#maxElements) {
      this.#prune(now);
      if (this.#held.size >= this.#maxElements) {
        this.counts.full++;
        return false;
      }
    }
    const held = { element, untilMs, reason };
    this.#held.set(key, held);
    const queued = this.#pending.get(key);
    // Queued already: the kernel holds what it held before that (its `replace` says whether anything).
    this.#pending.set(key, { held, replace: queued !== undefined ? queued.replace : present });
    this.#schedule();
    return true;
  }

  /** Elements held now, by reason. */
  sizes(): Record<KernelBlockReason, number> {
    const now = this.#now();
    this.#prune(now);
    const sizes: Record<KernelBlockReason, number> = { 'rate-limit': 0, 'threat-feed': 0 };
    for (const held of this.#held.values()) sizes[held.reason]++;
    return sizes;
  }

  /** Packets the kernel dropped for the sets since the table was created, by IP family. */
  async droppedPackets(): Promise<{ 4: number; 6: number }> {
    return parseCounters(await this.#nft.run(['-j', 'list', 'counters', 'table', 'inet', 'tps']));
  }

  /** Resolves once nothing is pending: the batches so far have been applied (or have failed). */
  settled(): Promise<void> {
    if (this.#timer === undefined && this.#flushing === undefined) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** Removes the table: every element with it. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#watchdog);
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#flushing;
    for (const resolve of this.#waiters.splice(0)) resolve();
    this.#pending.clear();
    this.#held.clear();
    await this.#nft.apply(deleteTableScript());
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#flushing !== undefined) return;
    const wait = Math.max(0, this.#lastFlushAt + this.#flushIntervalMs - this.#now());
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#flushing = this.#flush();
    }, wait);
    this.#timer.unref();
  }

  async #flush(): Promise<void> {
    try {
      const pending = this.#pending;
      this.#pending = new Map();
      this.#lastFlushAt = this.#now();
      if (pending.size === 0 || this.#stopped) return;
      const now = this.#now();
      const lines: string[] = [];
      for (const { held, replace } of pending.values()) {
        if (replace) lines.push(deleteElementLine(held.element));
        lines.push(addElementLine(held.element, held.untilMs - now));
      }
      try {
        await this.#nft.apply(`${lines.join('\n')}\n`);
        this.counts.applied++;
        this.failure = undefined;
      } catch (error) {
        this.counts.failed++;
        this.#logger.warn({ err: error, elements: pending.size }, 'kernel blocking: a batch failed; rebuilding the sets');
        await this.#rebuild(false);
      }
    } finally {
      this.#done();
    }
  }

  /** A batch or a check is over: the next batch is scheduled, or those waiting for it all are told. */
  #done(): void {
    this.#flushing = undefined;
    if (this.#pending.size > 0) this.#schedule();
    else for (const resolve of this.#waiters.splice(0)) resolve();
  }

  /** The table is still there; else it is created again with what this side holds. */
  async #check(): Promise<void> {
    try {
      await this.#nft.run(['list', 'table', 'inet', 'tps']);
    } catch (error) {
      this.#logger.warn({ err: error }, 'kernel blocking: the table inet tps is gone (a ruleset flush?); creating it again');
      this.counts.recreated++;
      await this.#rebuild(true);
    }
  }

  /** Both sets emptied (or the whole table created again) and refilled with what this side holds, in one transaction. */
  async #rebuild(recreate: boolean): Promise<void> {
    if (this.#stopped) return;
    const now = this.#now();
    this.#prune(now);
    const lines = [recreate ? createTableScript() : flushSetsScript()];
    for (const held of this.#held.values()) lines.push(addElementLine(held.element, held.untilMs - now));
    try {
      await this.#nft.apply(`${lines.join('\n')}\n`);
      this.counts.applied++;
      this.failure = undefined;
    } catch (error) {
      this.counts.failed++;
      this.failure = (error as Error).message;
      this.#logger.error({ err: error }, 'kernel blocking: the sets could not be rebuilt; blocked sources stay with the proxies');
    }
  }

  #prune(now: number): void {
    for (const [key, held] of this.#held) if (held.untilMs <= now) this.#held.delete(key);
  }
}
