/**
 * The TX collection of a transaction. The keys a rule set names as constants (setvar names,
 * TX:key variables and macros, &TX:key, the TxChecks') get a slot when the rule set compiles
 * (txSlot()), and their variables live in an array by slot: the CRS sets and reads ~60 of them
 * per request, which as a Map cost a hash of the key on every read and the Map's growth (a few KB
 * of garbage a transaction). Keys made at run time (`tx.header_name_%{tx.0}`, `tx.%{rule.id}-...`)
 * that no rule names as a constant go to a Map of their own. Iteration follows insertion order
 * over both, as a Map's does (a variable deleted and set again comes last).
 */
import type { DynVar } from './dyn-var.ts';

/** Slots of the TX keys (lower-cased) rule sets name as constants, process-wide. */
const TX_SLOTS = new Map<string, number>();
/**
 * Constant keys given a slot, at most: every transaction's TX has an array of that many at most
 * (8 KB). The CRS names ~80; a process compiling rule set after rule set with other names stops
 * giving slots there, and the keys past it live in the Map of keys made at run time.
 */
const MAX_TX_SLOTS = 1024;

/**
 * The slot of a constant TX key (lower-cased), given on first use, or -1 past MAX_TX_SLOTS: for
 * the compiler only. Keys made at run time must not come here (knownTxSlot()): a client could
 * make the table grow.
 */
export function txSlot(lowerKey: string): number {
  let slot = TX_SLOTS.get(lowerKey);
  if (slot === undefined) {
    if (TX_SLOTS.size >= MAX_TX_SLOTS) return -1;
    slot = TX_SLOTS.size;
    TX_SLOTS.set(lowerKey, slot);
  }
  return slot;
}

/** The slot of a TX key (lower-cased) if a rule set named it as a constant, else -1. */
export function knownTxSlot(lowerKey: string): number {
  return TX_SLOTS.get(lowerKey) ?? -1;
}

/** How many constant keys have a slot (it grows when a rule set compiles). */
export function txSlotCount(): number {
  return TX_SLOTS.size;
}

/** Whether some constant key (lower-cased) passes `test`. */
export function someTxSlotKey(test: (lowerKey: string) => boolean): boolean {
  for (const key of TX_SLOTS.keys()) if (test(key)) return true;
  return false;
}

/** TX keys of the first captures ('0' ... '99'). */
const CAPTURE_KEYS: readonly string[] = Array.from({ length: 100 }, (_, g) => String(g));

export class TxStore {
  /** Variables of constant keys, by slot. */
  private readonly slots: (DynVar | undefined)[];
  /** Variables of the other keys, by lower-cased key (made when the first one is set). */
  private other: Map<string, DynVar> | undefined;
  /** Every variable, in the order they were set. */
  private readonly order: DynVar[];

  /** `frozen`: a store that throws when written (a disposed transaction's). */
  constructor(frozen = false) {
    this.slots = frozen ? (Object.freeze([]) as unknown as DynVar[]) : new Array(TX_SLOTS.size);
    this.order = frozen ? (Object.freeze([]) as unknown as DynVar[]) : [];
  }

  get size(): number {
    return this.order.length;
  }

  get(lowerKey: string): DynVar | undefined {
    const slot = TX_SLOTS.get(lowerKey);
    return slot !== undefined ? this.slots[slot] : this.other?.get(lowerKey);
  }

  has(lowerKey: string): boolean {
    return this.get(lowerKey) !== undefined;
  }

  /** The variables of keys without a slot, in the order they were set (undefined: none yet). */
  dynamicValues(): MapIterator<DynVar> | undefined {
    return this.other?.values();
  }

  /** The variables in the order they were set (a live view: not to be kept across a change). */
  values(): readonly DynVar[] {
    return this.order;
  }

  /**
   * storeOrUpdateFirst: sets `lowerKey` (slot `slot`, or -1 for a key without one) to `value`,
   * naming a new variable `key`.
   */
  store(slot: number, key: string, lowerKey: string, value: string): void {
    const v = slot >= 0 ? this.slots[slot] : this.other?.get(lowerKey);
    if (v !== undefined) updateVar(v, value);
    else this.insert(slot, { key, lowerKey, value, box: undefined, entry: undefined });
  }

  /** Adds a variable known to be absent (the caller looked it up by the same slot or key). */
  insert(slot: number, v: DynVar): void {
    if (slot >= 0) this.slots[slot] = v;
    else (this.other ??= new Map()).set(v.lowerKey, v);
    this.order.push(v);
  }

  /** The variable of `lowerKey`, by its slot (txSlot(), knownTxSlot(); -1: none, then by the key). */
  find(slot: number, lowerKey: string): DynVar | undefined {
    return slot >= 0 ? this.slots[slot] : this.other?.get(lowerKey);
  }

  delete(slot: number, lowerKey: string): boolean {
    const v = this.find(slot, lowerKey);
    if (v === undefined) return false;
    if (slot >= 0) this.slots[slot] = undefined;
    else this.other!.delete(lowerKey);
    this.order.splice(this.order.indexOf(v), 1);
    return true;
  }

  /** TX.n of a capture (operators with `capture`). */
  setCapture(group: number, value: string): void {
    // (digits: no case to fold; the slot only when a rule names the capture, %{tx.1} ...)
    const key = group < CAPTURE_KEYS.length ? CAPTURE_KEYS[group]! : String(group);
    this.store(knownTxSlot(key), key, key, value);
  }
}

/**
 * A disposed transaction's TX, shared: frozen, it and its arrays, so that writing to it throws
 * before anything of it changes (its Map of run-time keys is never made).
 */
export const DISPOSED_TX = new TxStore(true);
Object.freeze(DISPOSED_TX);

/** A variable set again: its value, and what was made from the old one dropped. */
export function updateVar(v: DynVar, value: string): void {
  v.value = value;
  v.box = undefined;
  v.entry = undefined;
}
