/**
 * What a transaction keeps of its values so that rules that cannot match are passed over (the
 * literal prefilter, prefilter/): per distinct string, the bits of the rules with a literal in it
 * (scanned once), and per source (a variable read through a transformation chain) the union of
 * its values' bits, extended as a list grows. Also the lists a filtered variable read gave
 * (REQUEST_HEADERS:User-Agent ...), kept while their list does not grow.
 *
 * The base of the rule loop (rule-loop.ts): it holds the rule set.
 */
import { READ_LIST, READ_NAMES, READ_SINGLE } from '../seclang/program.ts';
import type { CompiledRule, CompiledRuleSet, VarRef } from '../seclang/program.ts';
import type { TransformationNode } from '../transformations/trie.ts';
import { TransactionCollections } from './collections.ts';
import { byteKinds, transformed } from './value-cache.ts';
import type { Entry, ValueBox } from './value-cache.ts';

/** Cells before a prefilter union's bits: the number of values it holds, the phaseRun it is up to date for. */
const UNION_HEADER = 2;

/**
 * Prefilter buffers (unions, scannedBits) of finished transactions, by length, for the next
 * ones: typed arrays of a few KB live outside the V8 heap, and allocating two per request cost
 * more than filling them. Their content is stale: users zero what they take.
 */
const FREE_BUFFERS = new Map<number, Int32Array[]>();
const FREE_BUFFERS_PER_LENGTH = 16;
/** Distinct strings a transaction's first scan buffer holds (it grows past that, doubling). */
const SCANNED_STRINGS = 128;
/**
 * Scan buffers grown up to this many strings are kept for reuse too (a 1 KB form scans ~150
 * strings: its grown buffer was garbage in every request); past it (32 KB a buffer) not.
 */
const POOLED_SCANNED_STRINGS = 8 * SCANNED_STRINGS;

function takeBuffer(length: number): Int32Array {
  let free = FREE_BUFFERS.get(length);
  if (free === undefined && FREE_BUFFERS.size < 8) FREE_BUFFERS.set(length, (free = []));
  return free?.pop() ?? new Int32Array(length);
}

/** Keeps a buffer for reuse if its length is one transactions ask for (not one grown past the pooled lengths). */
function giveBuffer(buffer: Int32Array): void {
  const free = FREE_BUFFERS.get(buffer.length);
  if (free !== undefined && free.length < FREE_BUFFERS_PER_LENGTH) free.push(buffer);
}

/** unionSources before the first union (and after finish()): nothing computed. */
const NO_SOURCES: (object | undefined)[] = Object.freeze([]) as unknown as (object | undefined)[];

/** Last scanEpoch given out. */
let scanEpochs = 0;

export class TransactionLiteralCache extends TransactionCollections {
  readonly rs: CompiledRuleSet;
  /** The rule set's transformation chains (rs.transformations). */
  protected readonly nodes: readonly TransformationNode[];
  /**
   * Per prefilter source (RulePrefilter.sources): the union of the bits of its first `length`
   * values, in `UNION_HEADER + words` cells from slot * stride: [length, phaseRun when brought
   * up to date, bits...]. One array per transaction (allocated on first use), not one per source.
   */
  private unions: Int32Array | undefined;
  /** Per source: what its union was computed from (its list, or its single entry). */
  private unionSources: (object | undefined)[] = NO_SOURCES;
  /** Rule bits of the strings scanned in this transaction, `words` cells each (literalBits()). */
  protected scannedBits: Int32Array | undefined;
  private scannedCount = 0;
  /** literalBits() by string: its offset in scannedBits. */
  private scanned = new Map<string, number>();
  /** Tells this transaction's ValueBox.scanAt from others' (and from its own before finish()). */
  private scanEpoch = ++scanEpochs;
  /** READ_FILTERED variables' values by VarRef.cacheSlot, with the length of their list when read. */
  private filteredLists: ({ readonly length: number; readonly entries: Entry[] } | undefined)[];

  constructor(rs: CompiledRuleSet, id?: string) {
    super(rs.config, id);
    this.rs = rs;
    this.nodes = rs.transformations;
    // (at its full length at once, as collections.ts's single variables)
    this.filteredLists = new Array(rs.filteredSlots);
  }

  /**
   * READ_LIST, READ_NAMES, READ_FILTERED: the list, read in place (a snapshot of its length, as
   * ModSecurity copies it).
   */
  protected listRead(ref: VarRef, rule: CompiledRule): readonly Entry[] {
    if (ref.kind === READ_LIST) return this.listAt(ref.index);
    if (ref.kind === READ_NAMES) return this.namesOf(ref.name, this.listAt(ref.index));
    const length = this.listAt(ref.index).length;
    let cached = this.filteredLists[ref.cacheSlot];
    if (cached === undefined || cached.length !== length) {
      cached = { length, entries: this.resolved(ref, rule) };
      this.filteredLists[ref.cacheSlot] = cached;
    }
    return cached.entries;
  }

  protected resolved(ref: VarRef, rule: CompiledRule): Entry[] {
    const values: Entry[] = [];
    ref.resolver.resolve(this, rule, values);
    return values;
  }

  /**
   * Whether some value of `count` sources from slots[from] (RulePrefilter.sources, or a
   * PhasePrefilters record) contains a literal of the rule (`word`, `mask`). A union already up
   * to date for this phase (most reads) is read without a call, and without touching the rule's
   * objects.
   */
  protected sourcesMayMatch(slots: Int32Array, from: number, count: number, word: number, mask: number, rule: CompiledRule): boolean {
    const all = this.rs.prefilter;
    const stride = all.scanner.words + UNION_HEADER;
    const phaseRun = this.phaseRun;
    for (let vi = 0; vi < count; vi++) {
      const slot = slots[from + vi]!;
      if (slot < 0) {
        // an XML read
        if (this.xmlDocument === undefined) continue;
        return true;
      }
      let at = slot * stride;
      const unions = this.unions;
      // (a union stamped with this phaseRun is this transaction's and up to date: sourceBits())
      if (unions !== undefined && unions[at + 1] === phaseRun) at += UNION_HEADER;
      else at = this.sourceBits(slot, all.refs[slot]!, rule);
      if ((this.unions![at + word]! & mask) !== 0) return true;
    }
    return false;
  }

  /** The union of the prefilter bits of a source's values (read through `ref`): its offset in `unions`. */
  private sourceBits(slot: number, ref: VarRef, rule: CompiledRule): number {
    const prefilter = this.rs.prefilter;
    const words = prefilter.scanner.words;
    const stride = words + UNION_HEADER;
    let unions = this.unions;
    if (unions === undefined) {
      // zeroed: no stale stamp (the buffer may come from a finished transaction) reads as current
      unions = this.unions = takeBuffer(prefilter.nodes.length * stride).fill(0);
      // its full length at once: filled by slot, out of order, it grew by steps (a few KB a request)
      this.unionSources = new Array(prefilter.nodes.length);
    }
    const at = slot * stride;
    const source = this.unionSources[slot];
    if (unions[at + 1] === this.phaseRun) return at + UNION_HEADER;
    // the stamp a union gets: this phaseRun, or 0 (never current) for a source whose values change
    // while a phase runs, which is looked at again at every read
    const stamp = prefilter.changing[slot] === 0 ? this.phaseRun : 0;
    const node = prefilter.nodes[slot]!;
    if (ref.kind === READ_SINGLE) {
      const entry = this.singleAt(ref.index, ref.name);
      if (source !== entry) {
        this.unionSources[slot] = entry;
        const found = this.boxBits(entry.box, node);
        const scanned = this.scannedBits!;
        for (let w = 0; w < words; w++) unions[at + UNION_HEADER + w] = scanned[found + w]!;
      }
      unions[at + 1] = stamp;
      return at + UNION_HEADER;
    }
    const list = this.listRead(ref, rule);
    if (list.length === 0) {
      // no value (most lists of most requests: no cookie, no argument, no file): no bits, and
      // no raw source to bring up to date first
      if (source !== list) {
        for (let k = at + UNION_HEADER; k < at + stride; k++) unions[k] = 0;
        this.unionSources[slot] = list;
      }
      unions[at] = 0;
      unions[at + 1] = stamp;
      return at + UNION_HEADER;
    }
    const raw = prefilter.rawOf[slot]!;
    const chain = prefilter.chainMask[slot]!;
    // values without a byte that would make the chain change them have their raw bits
    const rawAt = raw !== slot && chain >= 0 ? this.sourceBits(raw, ref, rule) : -1;
    if (source !== list) {
      // the buffer may come from a finished transaction (or the source held another list)
      for (let k = at; k < at + stride; k++) unions[k] = 0;
      this.unionSources[slot] = list;
    }
    if (rawAt >= 0) {
      // the raw bits of every value, then the bits of those the chain changes
      for (let w = 0; w < words; w++) unions[at + UNION_HEADER + w]! |= unions[rawAt + w]!;
      for (let k = unions[at]!; k < list.length; k++) {
        const box = list[k]!.box;
        if ((box.m & chain) === 0) continue;
        // (a value through a transformation chain and the scanner: as long a step as an operator's)
        this.work(1 + (box.v.length >>> 10));
        const found = this.boxBits(box, node);
        const scanned = this.scannedBits!;
        for (let w = 0; w < words; w++) unions[at + UNION_HEADER + w]! |= scanned[found + w]!;
      }
    } else {
      const isRaw = raw === slot;
      for (let k = unions[at]!; k < list.length; k++) {
        const box = list[k]!.box;
        this.work(1 + (box.v.length >>> 10));
        const found = this.boxBits(box, node);
        const scanned = this.scannedBits!;
        for (let w = 0; w < words; w++) unions[at + UNION_HEADER + w]! |= scanned[found + w]!;
        // the sources reading this list through a chain tell the values it leaves alone by their bytes
        if (isRaw) byteKinds(box);
      }
    }
    unions[at] = list.length;
    unions[at + 1] = stamp;
    return at + UNION_HEADER;
  }

  /** literalBits() of the value of `box` after chain node `node`. */
  protected boxBits(box: ValueBox, node: number): number {
    const value = transformed(this.nodes, box, node);
    if (value !== box.v) return this.literalBits(value);
    if (box.scanEpoch === this.scanEpoch) return box.scanAt;
    // (a value as it came is scanned for its box, not looked up: the lookup by string, a hash of
    // a string seen for the first time, is for the results of transformations, which different
    // chains give alike)
    const at = this.scanInto(value);
    box.scanAt = at;
    box.scanEpoch = this.scanEpoch;
    return at;
  }

  /**
   * The bits of the rules with a literal in `value` (their offset in scannedBits), scanned once
   * per distinct string: most transformation chains leave a benign value as it is, so the same
   * string comes back under many sources. Kept for this transaction only.
   */
  private literalBits(value: string): number {
    let offset = this.scanned.get(value);
    if (offset === undefined) {
      offset = this.scanInto(value);
      this.scanned.set(value, offset);
    }
    return offset;
  }

  /** Scans `value` into the next record of scannedBits: its offset. */
  private scanInto(value: string): number {
    const scanner = this.rs.prefilter.scanner;
    const words = scanner.words;
    const offset = this.scannedCount * words;
    let pool = this.scannedBits;
    if (pool === undefined) pool = this.scannedBits = takeBuffer(SCANNED_STRINGS * words);
    else if (pool.length < offset + words) {
      // (twice the strings: the lengths stay those the pool keeps, up to its bound)
      const length = 2 * pool.length;
      const grown = length <= POOLED_SCANNED_STRINGS * words ? takeBuffer(length) : new Int32Array(length);
      grown.set(pool);
      giveBuffer(pool);
      pool = this.scannedBits = grown;
    }
    for (let w = 0; w < words; w++) pool[offset + w] = 0;
    scanner.scan(value, pool, offset);
    this.scannedCount++;
    return offset;
  }

  /**
   * The transaction is over (after the logging phase): its prefilter buffers go back for the
   * next transactions. Evaluating more would start them afresh.
   */
  finish(): void {
    if (this.unions !== undefined) giveBuffer(this.unions);
    if (this.scannedBits !== undefined) giveBuffer(this.scannedBits);
    this.unions = undefined;
    this.scannedBits = undefined;
    this.unionSources = NO_SOURCES;
    if (this.scanned.size > 0) this.scanned = new Map();
    this.scannedCount = 0;
    this.scanEpoch = ++scanEpochs;
  }

  /** Lets go of the caches and the collections (rule-loop.ts dispose()). */
  protected release(): void {
    this.finish();
    this.releaseCollections();
    this.filteredLists = [];
  }
}
