/**
 * The values of a transaction and what is computed from them once: every value is a "box" that
 * keeps its transformation results by chain node (transformations/trie.ts), computed on first use
 * and shared by every rule asking for the same chain, the kinds of bytes it holds, and where its
 * literal scan is (literal-cache.ts).
 */
import { charMask } from '../transformations/byte-kinds.ts';
import type { TransformationNode } from '../transformations/trie.ts';

export interface ValueBox {
  readonly v: string;
  /**
   * Transformation results that differ from `v`, as (trie node, result) pairs: a value has a few
   * (a slot per trie node cost 400 bytes per value, kept as long as the transaction is open).
   */
  c: (number | string)[] | undefined;
  /** charMask(v) once a transformation asked for it, else -1. */
  m: number;
  /**
   * Chain nodes 1-31 (bit n) and 32-63 (`same2`, bit n - 32) known to leave `v` as it is: most
   * of them, for a benign value, which then needs no cache array (`c`) at all.
   */
  same: number;
  same2: number;
  /**
   * Where the prefilter scan of `v` is in its transaction's scannedBits (literalBits()), valid
   * while `scanEpoch` is that transaction's: a value read under many sources is looked up once,
   * not once per source by string.
   */
  scanAt: number;
  scanEpoch: number;
}

export interface Entry {
  /** Key within its collection (as stored), or the variable name for single variables. */
  readonly key: string;
  /** The key upper-cased (filled on first lookup). */
  readonly uk?: string;
  /** ModSecurity's getKeyWithCollection(): "ARGS:q", "REQUEST_URI", "TX:score". */
  readonly full: string;
  readonly box: ValueBox;
}

/** A value with nothing computed yet. */
export function newBox(value: string): ValueBox {
  return { v: value, c: undefined, m: -1, same: 0, same2: 0, scanAt: 0, scanEpoch: 0 };
}

export function newEntry(key: string, full: string, value: string): Entry {
  return { key, full, box: newBox(value), uk: undefined };
}

/** Whether chain node `node` is known to leave `box.v` as it is (ValueBox.same, same2). */
function knownUnchanged(box: ValueBox, node: number): boolean {
  return node < 32 ? (box.same & (1 << node)) !== 0 : node < 64 && (box.same2 & (1 << (node - 32))) !== 0;
}

/** charMask(box.v), computed once. */
export function byteKinds(box: ValueBox): number {
  if (box.m < 0) box.m = charMask(box.v);
  return box.m;
}

/** Records that chain node `node` leaves `box.v` as it is (nodes 64 and up have no bit). */
function markUnchanged(box: ValueBox, node: number): void {
  if (node < 32) box.same |= 1 << node;
  else if (node < 64) box.same2 |= 1 << (node - 32);
}

/** The value of `box` after the chain ending at trie node `node` of `nodes` (cached in the box). */
export function transformed(nodes: readonly TransformationNode[], box: ValueBox, node: number): string {
  if (node === 0 || knownUnchanged(box, node)) return box.v;
  const t = nodes[node]!;
  const chain = t.chainChangesOn;
  if (chain >= 0) {
    // none of the value's bytes would make any step of the chain change it: no step to run or look up
    if ((byteKinds(box) & chain) === 0) {
      markUnchanged(box, node);
      return box.v;
    }
  }
  const c = box.c;
  if (c !== undefined) {
    for (let k = 0; k < c.length; k += 2) if (c[k] === node) return c[k + 1] as string;
  }
  const input = t.parent === 0 ? box.v : transformed(nodes, box, t.parent);
  let out: string;
  if (input === box.v && t.changesOn >= 0) {
    // the value as it came (most chains leave it so): none of its bytes would change it
    out = (byteKinds(box) & t.changesOn) === 0 ? input : t.fn(input);
  } else out = t.fn(input);
  // a bit, not a cache array: a benign value (or an open transaction's) then needs none
  if (out === box.v && node < 64) markUnchanged(box, node);
  else if (box.c === undefined) box.c = [node, out];
  else box.c.push(node, out); // (the parent's results may have created it since `c` was read)
  return out;
}
