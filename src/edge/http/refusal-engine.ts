/**
 * The native early refusal engine (native/refusal-engine/engine.cc), as the early refusal path uses
 * it: a refused connection whose requests repeat one head is served there, one libuv event for every
 * ready connection and no call into JavaScript per request, instead of through Node's stream layer
 * (the hot path of a flood from sources already blocked: docs/benchmarks.md "Refusing a blocked
 * source"). early-refusal.ts decides everything: which connections, which head, which answer; the
 * engine only repeats the answer while the head repeats, and hands the connection back for anything
 * else. This module keeps the engine's answers current (the 429's Date and Retry-After change every
 * second, the block's end), gathers the refusals it counted (every 100 ms: the episode's count, the
 * kernel-blocking escalation, the proxy's metrics), and routes hand-backs to their connections.
 *
 * Optional: `TPS_EARLY_REFUSAL_ENGINE` = `auto` (the engine when it is built and loads, else the
 * JavaScript path, said once in the log) or `javascript`. One engine per thread (an edge worker).
 */
import { createRequire } from 'node:module';

/** What the addon exports (engine.cc). */
interface NativeRefusalEngine {
  start(onHandBack: () => void): void;
  setAnswer(index: number, bytes: Buffer, headLength: number, blockedForMs: number): void;
  adopt(fd: number, answerIndex: number, head: Buffer, headOnly: boolean): number;
  /** The requests it refused there since the last `collect`. */
  release(id: number): number;
  collect(pairs: Uint32Array): number;
  /** [id, kind, refused, input | null, output | null, ...]. */
  takeHandBacks(): (number | Buffer | null)[];
  stats(): [number, number];
}

export type RefusalEngineMode = 'auto' | 'javascript';

/** How a connection came back from the engine. */
export type HandBackKind = 'bytes' | 'end' | 'error';
const HAND_BACK_KINDS: readonly HandBackKind[] = ['bytes', 'end', 'error'];

/** A connection served by the engine, as its owner (early-refusal.ts) sees it. */
export interface EngineConnection {
  /** The engine refused `count` more requests on it. */
  onEngineRefused(count: number): void;
  /** The engine gave it back: `input` not consumed yet, `output` answers not written yet. */
  onHandBack(kind: HandBackKind, input: Buffer | null, output: Buffer | null): void;
}

/** The answer the connections of one block get: rebuilt by its owner when asked. */
export interface EngineAnswerSource {
  /** The keep-alive 429 now, and how many ms the block has left. */
  current(now: number): { bytes: Buffer; headLength: number; blockedForMs: number };
}

interface AnswerSlot {
  readonly index: number;
  readonly source: EngineAnswerSource;
  users: number;
  /** The second (epoch) of the bytes the engine has; -1 to rebuild. */
  second: number;
}

/** How often refusals are gathered from the engine and its answers renewed. */
const TICK_MS = 100;
const MAX_PAIRS = 4096;

export class RefusalEngine {
  private readonly native: NativeRefusalEngine;
  private readonly connections = new Map<number, { connection: EngineConnection; slot: AnswerSlot }>();
  private readonly slots = new Map<EngineAnswerSource, AnswerSlot>();
  private readonly freeIndexes: number[] = [];
  private nextIndex = 0;
  private readonly pairs = new Uint32Array(MAX_PAIRS * 2);
  private ticker: NodeJS.Timeout | undefined;

  constructor(native: NativeRefusalEngine) {
    this.native = native;
    native.start(() => this.deliverHandBacks());
  }

  /** Connections the engine serves now, and the requests it has refused since it started. */
  stats(): { connections: number; refused: number } {
    const [connections, refused] = this.native.stats();
    return { connections, refused };
  }

  /**
   * Serves `fd` from now on with `source`'s answer while each request is a copy of `head` (a head
   * the caller scanned and answered, not asking to close). The caller has stopped reading the
   * socket. The engine's id, or undefined: not adopted (the caller reads on).
   */
  adopt(fd: number, source: EngineAnswerSource, head: Buffer, headOnly: boolean, connection: EngineConnection): number | undefined {
    const slot = this.slotOf(source);
    const id = this.native.adopt(fd, slot.index, head, headOnly);
    if (id < 0) {
      this.unuse(slot);
      return undefined;
    }
    this.connections.set(id, { connection, slot });
    this.ticker ??= setInterval(this.tick, TICK_MS).unref();
    return id;
  }

  /** The engine forgets `id` (its socket is closing, or goes back to JavaScript); what it refused there is counted. */
  release(id: number): void {
    const held = this.connections.get(id);
    if (held === undefined) return;
    const refused = this.native.release(id);
    this.connections.delete(id);
    this.unuse(held.slot);
    if (refused > 0) held.connection.onEngineRefused(refused);
  }

  private slotOf(source: EngineAnswerSource): AnswerSlot {
    let slot = this.slots.get(source);
    if (slot === undefined) {
      slot = { index: this.freeIndexes.pop() ?? this.nextIndex++, source, users: 0, second: -1 };
      this.slots.set(source, slot);
    }
    slot.users++;
    this.renew(slot, Date.now());
    return slot;
  }

  private unuse(slot: AnswerSlot): void {
    if (--slot.users > 0) return;
    this.slots.delete(slot.source);
    this.freeIndexes.push(slot.index);
  }

  private renew(slot: AnswerSlot, now: number): void {
    const second = Math.floor(now / 1000);
    if (slot.second === second) return;
    const answer = slot.source.current(now);
    this.native.setAnswer(slot.index, answer.bytes, answer.headLength, answer.blockedForMs);
    slot.second = second;
  }

  private gather(): void {
    const pairs = this.pairs;
    for (;;) {
      const count = this.native.collect(pairs);
      for (let i = 0; i < count; i++) this.connections.get(pairs[2 * i]!)?.connection.onEngineRefused(pairs[2 * i + 1]!);
      if (count < MAX_PAIRS) return;
    }
  }

  private readonly tick = (): void => {
    this.gather();
    const now = Date.now();
    for (const slot of this.slots.values()) this.renew(slot, now);
    if (this.connections.size === 0) {
      clearInterval(this.ticker);
      this.ticker = undefined;
    }
  };

  private deliverHandBacks(): void {
    const list = this.native.takeHandBacks();
    for (let i = 0; i + 4 < list.length; i += 5) {
      const id = list[i] as number;
      const held = this.connections.get(id);
      if (held === undefined) continue;
      this.connections.delete(id);
      this.unuse(held.slot);
      try {
        const refused = list[i + 2] as number;
        if (refused > 0) held.connection.onEngineRefused(refused);
        held.connection.onHandBack(
          HAND_BACK_KINDS[list[i + 1] as number] ?? 'error',
          list[i + 3] as Buffer | null,
          list[i + 4] as Buffer | null,
        );
      } catch (error) {
        // One connection's failure must not leave the others of this batch unanswered.
        process.nextTick(() => {
          throw error;
        });
      }
    }
  }
}

let engine: RefusalEngine | undefined;
let loaded = false;
let mode: RefusalEngineMode = 'auto';
let loadError: string | undefined;

/** Sets the mode (TPS_EARLY_REFUSAL_ENGINE): from now on, connections are offered to the engine or not (those it serves stay). */
export function configureRefusalEngine(value: RefusalEngineMode): void {
  mode = value;
}

/** Why the engine is not in use on this thread, when it is not (for the log and /healthz). */
export function refusalEngineUnavailable(): string | undefined {
  if (mode === 'javascript') return 'TPS_EARLY_REFUSAL_ENGINE=javascript';
  return refusalEngine() === undefined ? loadError : undefined;
}

/** This thread's engine, or undefined: the JavaScript path (not built, not loadable, or turned off). */
export function refusalEngine(): RefusalEngine | undefined {
  if (mode === 'javascript') return undefined;
  if (loaded) return engine;
  loaded = true;
  try {
    const require = createRequire(import.meta.url);
    const native = require('../../../native/refusal-engine/build/refusal-engine.node') as NativeRefusalEngine;
    engine = new RefusalEngine(native);
  } catch (error) {
    loadError = `the native refusal engine is not available (${error instanceof Error ? error.message.split('\n')[0] : String(error)}); bash native/refusal-engine/build.sh builds it`;
  }
  return engine;
}
