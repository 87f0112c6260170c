/**
 * Literal prefilters: which rules can possibly match any value of a variable, without running
 * their operators.
 *
 * A rule takes part when its operator can only match a value that contains one of a set of
 * literals (ASCII case-insensitively): an `@rx` through the literals every match contains
 * (regex/prefilter.ts), an `@pm`/`@pmFromFile` through its own phrases. A "source" is one
 * variable read through one transformation chain (`ARGS` lower-cased, `REQUEST_FILENAME`
 * URL-decoded ...); its scanner holds the literals of the rules reading it there, in one
 * Aho-Corasick automaton whose states carry the bit set of the rules whose literals end there.
 * A transaction scans each value of a source once and keeps the union of their bits, so a rule
 * none of whose values can match costs a few bit tests instead of an operator run per value
 * (on a benign request, nearly all of them: about 1,000 operator runs of a GET become 100).
 *
 * The automaton and its byte loop are hand-written (not a library) because they are the hot path.
 */
import type { CompiledRule } from './program.ts';
import { READ_FILTERED, READ_LIST, READ_NAMES, READ_SINGLE, READ_XML } from './program.ts';
import { CompiledRegex } from './regex/runtime.ts';
import { requiredLiterals } from './regex/prefilter.ts';
import { buildAutomaton } from './operators/aho-corasick.ts';

function escapeLiteral(l: string): string {
  let out = '';
  for (let i = 0; i < l.length; i++) {
    const c = l.charCodeAt(i) & 0xff;
    out += (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x7a) ? l[i] : '\\x' + c.toString(16).padStart(2, '0');
  }
  return out;
}

/** A rule in a scanner: its literals, or a test of its own (@pm: its phrase automaton, whose phrases are many). */
export type ScannedRule = readonly string[] | { readonly test: (input: string) => boolean };

export class LiteralScanner {
  /** Bit-set words per value (one bit per rule of the source). */
  readonly words: number;
  private readonly classOf: Uint8Array;
  private readonly classCount: number;
  /**
   * row[state * classCount + cls] = next state * classCount (the start of its row), bit-inverted
   * when the next state ends a literal: one read per byte in the loop.
   */
  private readonly row: Int32Array;
  /** Per state: offset of its rule bit set in `masks`, or -1 when no literal ends there. */
  private readonly maskAt: Int32Array;
  private readonly masks: Int32Array;
  /**
   * Whether any literal occurs at all: V8 compiles it to machine code that rejects a benign value
   * several times faster than the automaton's byte loop; the automaton then says which rules.
   */
  private readonly gate: RegExp | undefined;
  /** Rules tested on their own (@pm: its phrase automaton), with their bit. */
  private readonly own: readonly { readonly word: number; readonly mask: number; readonly test: (input: string) => boolean }[];

  /** `rules[j]`: the literals of the source's rule j (matched ASCII case-insensitively), or a test of its own. */
  constructor(rules: readonly ScannedRule[]) {
    const words = Math.max(1, Math.ceil(rules.length / 32));
    this.words = words;
    const literalsByRule: (readonly string[])[] = [];
    const own: { word: number; mask: number; test: (input: string) => boolean }[] = [];
    rules.forEach((rule, j) => {
      if (Array.isArray(rule)) literalsByRule[j] = rule as readonly string[];
      else {
        literalsByRule[j] = [];
        own.push({ word: j >> 5, mask: 1 << (j & 31), test: (rule as { test: (input: string) => boolean }).test });
      }
    });
    this.own = own;
    const owners: number[] = [];
    const literals: string[] = [];
    literalsByRule.forEach((list, rule) => {
      for (const l of list) {
        literals.push(l);
        owners.push(rule);
      }
    });
    const automaton = buildAutomaton(literals);
    this.classOf = automaton.classOf;
    this.classCount = automaton.classCount;
    // a state's rules as a bit set, with those of its failure state (shorter literals ending there too)
    const bitsAt: (Int32Array | undefined)[] = automaton.ends.map((e) => {
      if (e === undefined) return undefined;
      const bits = new Int32Array(words);
      for (const index of e) bits[owners[index]! >> 5]! |= 1 << (owners[index]! & 31);
      return bits;
    });
    for (const s of automaton.order) {
      const inherited = bitsAt[automaton.fail[s]!];
      if (inherited === undefined) continue;
      const bits = (bitsAt[s] ??= new Int32Array(words));
      for (let w = 0; w < words; w++) bits[w]! |= inherited[w]!;
    }
    const maskAt = new Int32Array(automaton.states).fill(-1);
    const masks: number[] = [];
    bitsAt.forEach((bits, s) => {
      if (bits === undefined) return;
      maskAt[s] = masks.length;
      for (let w = 0; w < words; w++) masks.push(bits[w]!);
    });
    this.maskAt = maskAt;
    const row = new Int32Array(automaton.next.length);
    for (let k = 0; k < row.length; k++) {
      const target = automaton.next[k]!;
      row[k] = maskAt[target]! >= 0 ? ~(target * this.classCount) : target * this.classCount;
    }
    this.row = row;
    this.masks = Int32Array.from(masks);
    const all = new Set(literalsByRule.flat().map((l) => l.toLowerCase()));
    this.gate = all.size === 0 ? undefined : new RegExp([...all].map(escapeLiteral).join('|'), 'i');
  }

  /** ORs into `out` the bits of the rules whose literals occur in `input`. */
  scan(input: string, out: Int32Array): void {
    if (this.gate === undefined || this.gate.test(input)) this.scanLiterals(input, out);
    for (let k = 0; k < this.own.length; k++) {
      const r = this.own[k]!;
      if (r.test(input)) out[r.word]! |= r.mask;
    }
  }

  private scanLiterals(input: string, out: Int32Array): void {
    const { classOf, classCount, row, maskAt, masks, words } = this;
    let s = 0;
    for (let i = 0; i < input.length; i++) {
      const t = row[s + classOf[input.charCodeAt(i) & 0xff]!]!;
      if (t >= 0) {
        s = t;
        continue;
      }
      s = ~t;
      const m = maskAt[s / classCount]!;
      for (let w = 0; w < words; w++) out[w]! |= masks[m + w]!;
    }
  }
}

/** The literals without which a rule's operator cannot match, or undefined when it has none. */
export function operatorLiterals(rule: CompiledRule): ScannedRule | undefined {
  const op = rule.operator;
  if (op === undefined || op.negated || rule.multiMatch) return undefined;
  if (op.name === 'rx') {
    if (!(op.regex instanceof CompiledRegex)) return undefined;
    const literals = requiredLiterals(op.regex.translated.source);
    if (!literals || literals.length === 0 || literals.some((l) => l.length === 0)) return undefined;
    return literals;
  }
  // @pm matches exactly when one of its phrases occurs (its automaton ignores empty phrases)
  if (op.phrases !== undefined) return op.phrases;
  return undefined;
}

export interface LiteralPrefilters {
  /**
   * Per source (a variable read through one transformation chain node: `ARGS` lower-cased,
   * `REQUEST_FILENAME` URL-decoded ...): the scanner of the rules reading it there.
   */
  readonly scanners: readonly LiteralScanner[];
  /** Per source: its chain node. */
  readonly nodes: Int32Array;
  /**
   * Per source: 1 when its values can change while a phase runs (single variables,
   * MATCHED_VARS): checked at every read; the others are read once per phase (ARGS, headers and
   * the other lists are filled before the phase that reads them).
   */
  readonly changing: Uint8Array;
}

/** What the loop needs to ask whether some value of a rule's variables may match (CompiledRule.prefilter). */
export interface RulePrefilter {
  /** Per variable (parallel to CompiledRule.refs): its source, or -1 for an XML read. */
  readonly sources: Int32Array;
  /** Per variable: the word and the bit of the rule in its source's bit set. */
  readonly words: Int32Array;
  readonly masks: Int32Array;
}

/** Reads whose values a source can scan and keep: lists (which only grow) and single variables. */
const SCANNABLE = new Set([READ_LIST, READ_NAMES, READ_FILTERED, READ_SINGLE]);

/**
 * Groups the rules with literals by source and builds one scanner per source; sets
 * CompiledRule.prefilter on every rule whose variables are all scannable (the others are
 * evaluated value by value, as without prefilter). `growingLists`: the lists (Transaction.listAt
 * indexes) that grow while a phase runs.
 */
export function buildLiteralPrefilters(rules: readonly CompiledRule[], growingLists: ReadonlySet<number>): LiteralPrefilters {
  const sources = new Map<string, { slot: number; node: number; changing: boolean; rules: CompiledRule[] }>();
  const literalsOf = new Map<CompiledRule, ScannedRule>();
  for (const rule of rules) {
    const literals = operatorLiterals(rule);
    if (literals === undefined) continue;
    if (!rule.refs.every((ref) => SCANNABLE.has(ref.kind) || ref.kind === READ_XML)) continue;
    literalsOf.set(rule, literals);
    const n = rule.refs.length;
    const prefilter = { sources: new Int32Array(n).fill(-1), words: new Int32Array(n), masks: new Int32Array(n) };
    rule.refs.forEach((ref, vi) => {
      if (ref.kind === READ_XML) return;
      const key = `${ref.kind}:${ref.index}:${ref.cacheSlot}:${ref.name}@${rule.tnode}`;
      let source = sources.get(key);
      if (source === undefined) {
        const changing = ref.kind === READ_SINGLE || growingLists.has(ref.index);
        source = { slot: sources.size, node: rule.tnode, changing, rules: [] };
        sources.set(key, source);
      }
      const j = source.rules.length;
      source.rules.push(rule);
      prefilter.sources[vi] = source.slot;
      prefilter.words[vi] = j >> 5;
      prefilter.masks[vi] = 1 << (j & 31);
    });
    rule.prefilter = prefilter;
  }
  const list = [...sources.values()];
  // sources read by the same rules (ARGS and ARGS_NAMES through one chain ...) share a scanner
  const ruleIndex = new Map(rules.map((rule, k) => [rule, k]));
  const scanners = new Map<string, LiteralScanner>();
  const scannerOf = (members: readonly CompiledRule[]): LiteralScanner => {
    const key = members.map((rule) => ruleIndex.get(rule)).join(',');
    let scanner = scanners.get(key);
    if (scanner === undefined) {
      scanner = new LiteralScanner(members.map((rule) => literalsOf.get(rule)!));
      scanners.set(key, scanner);
    }
    return scanner;
  };
  return {
    scanners: list.map((s) => scannerOf(s.rules)),
    nodes: Int32Array.from(list.map((s) => s.node)),
    changing: Uint8Array.from(list.map((s) => (s.changing ? 1 : 0))),
  };
}
