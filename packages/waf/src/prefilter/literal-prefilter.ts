/**
 * Literal prefilters: which rules can possibly match any value of a variable, without running
 * their operators.
 *
 * A rule takes part when its operator can only match a value that contains one of a set of
 * literals (ASCII case-insensitively): an `@rx` through the literals every match contains
 * (regex/prefilter.ts), an `@pm`/`@pmFromFile` through its own phrases. All those literals form
 * one Aho-Corasick automaton whose states carry the bit set of the rules whose literals end
 * there, so one pass over a string gives every rule that may match it. A transaction scans each
 * distinct string once (a benign GET reads ~50 distinct strings through ~350 variable and
 * transformation pairs: most transformations leave a plain value as it is) and keeps, per
 * "source" (one variable read through one transformation chain: `ARGS` lower-cased,
 * `REQUEST_FILENAME` URL-decoded ...), the union of its values' bits. A rule none of whose
 * sources has its bit costs a few bit tests instead of an operator run per value (on a benign
 * request, nearly all of them: about 1,000 operator runs of a GET become 100). A rule let through
 * runs its operator only on the values whose own bits have it.
 *
 * A source whose chain would leave every value as it is (no value has a byte any step acts on:
 * TransformationNode.chainChangesOn) takes the union of the same list read raw, plus the bits of
 * the values the chain does change: most sources of a benign request cost a copy, not a
 * transformation and a scan per value. The rule loop decides the rules that cannot match from
 * per-phase records of their sources (PhasePrefilters), without touching their objects.
 */
import { CompiledRegex } from '../regex/runtime.ts';
import { requiredLiterals } from '../regex/prefilter.ts';
import type { CompiledRule, PhaseEntry } from '../seclang/program.ts';
import { READ_FILTERED, READ_LIST, READ_NAMES, READ_SINGLE, READ_XML } from '../seclang/program.ts';
import type { TransformationNode } from '../transformations/trie.ts';
import { LiteralScanner } from './scanner.ts';
import type { LiteralPrefilters, PhasePrefilters } from './scanner.ts';

/** The literals without which a rule's operator cannot match, or undefined when it has none. */
export function operatorLiterals(rule: CompiledRule): readonly string[] | undefined {
  const op = rule.operator;
  if (op === undefined || op.negated) return undefined;
  if (op.name === 'rx') {
    if (!(op.regex instanceof CompiledRegex)) return undefined;
    const literals = requiredLiterals(op.regex.translated.source);
    if (!literals || literals.length === 0 || literals.some((l) => l.length === 0)) return undefined;
    return literals;
  }
  // @pm matches exactly when one of its phrases occurs (its automaton ignores empty phrases)
  if (op.phrases !== undefined) return op.phrases.length > 0 ? op.phrases : undefined;
  return undefined;
}

/**
 * A literal of one letter or digit (932105 and 932150, the Unix command rules, need one of
 * `v`, `s`, `p`, `w`, `n` ...): nearly every value has one, so such a rule would be let through
 * for nearly every value anyway, while its literals made most bytes of any text an accepting state
 * of the automaton (each one OR-ing rule bits). Such a rule is evaluated without prefilter.
 */
function isLetterOrDigit(literal: string): boolean {
  return literal.length === 1 && /[0-9A-Za-z]/.test(literal);
}

/** Reads whose values a source can scan and keep: lists (which only grow) and single variables. */
const SCANNABLE = new Set([READ_LIST, READ_NAMES, READ_FILTERED, READ_SINGLE]);

/** Transformations that only change the case of ASCII letters: the literals found stay the same. */
const CASE_ONLY = new Set(['lowercase', 'uppercase']);

/**
 * Builds the scanner of the rules with literals and their sources; sets CompiledRule.prefilter
 * on every rule whose variables are all scannable (the others are evaluated value by value, as
 * without prefilter). `growingLists`: the lists (Transaction.listAt indexes) that grow while a
 * phase runs; `computedSingle`: whether a single variable's slot is computed at each read.
 * `transformations`: the rule set's chain nodes.
 */
export function buildLiteralPrefilters(
  rules: readonly CompiledRule[],
  growingLists: ReadonlySet<number>,
  computedSingle: (slot: number) => boolean,
  transformations: readonly TransformationNode[],
): LiteralPrefilters<CompiledRule['refs'][number]> {
  interface Source {
    readonly slot: number;
    readonly node: number;
    readonly changing: boolean;
    /** The slot of the same read's raw source (chain node 0), -1 for single variables. */
    readonly raw: number;
    /** The first variable read of its key: every read of the key reads the same values. */
    readonly ref: CompiledRule['refs'][number];
  }
  const sources = new Map<string, Source>();
  const sourceOf = (ref: CompiledRule['refs'][number], node: number): Source => {
    const key = `${ref.kind}:${ref.index}:${ref.cacheSlot}:${ref.name}@${node}`;
    let source = sources.get(key);
    if (source === undefined) {
      const changing = ref.kind === READ_SINGLE ? computedSingle(ref.index) : growingLists.has(ref.index);
      const raw = ref.kind === READ_SINGLE ? -1 : node === 0 ? sources.size : sourceOf(ref, 0).slot;
      source = { slot: sources.size, node, changing, raw, ref };
      sources.set(key, source);
    }
    return source;
  };
  const literalsByRule: (readonly string[])[] = [];
  // a chain ending in lowercase (the CRS's usual last step) has the literals of the chain before
  // it, since the scanner ignores ASCII case: the source reads that one (one union and no
  // lower-cased copy for the values of both chains)
  const scannedNode = (node: number): number => {
    let n = node;
    while (n !== 0 && CASE_ONLY.has(transformations[n]!.name)) n = transformations[n]!.parent;
    return n;
  };
  for (const rule of rules) {
    const literals = operatorLiterals(rule);
    if (literals === undefined || literals.some(isLetterOrDigit)) continue;
    if (!rule.refs.every((ref) => SCANNABLE.has(ref.kind) || ref.kind === READ_XML)) continue;
    // a multiMatch rule with a gate (930110's `..`) passes over most values by their byte kinds
    // already; its values read at every step of a long chain cost more scans than they save
    if (rule.multiMatch && rule.gateKinds >= 0) continue;
    const j = literalsByRule.length;
    literalsByRule.push(literals);
    const node = scannedNode(rule.tnode);
    // multiMatch runs the operator on the value as it is and after each step of the chain: the
    // literals may be in any of them, so each variable is read at each of those nodes
    const nodes = rule.multiMatch ? [...new Set([0, ...rule.tpath].map(scannedNode))] : [node];
    const refs = rule.refs.length;
    const slots = new Int32Array(nodes.length * refs).fill(-1);
    nodes.forEach((n, k) => {
      rule.refs.forEach((ref, vi) => {
        if (ref.kind !== READ_XML) slots[k * refs + vi] = sourceOf(ref, n).slot;
      });
    });
    rule.prefilter = { sources: slots, word: j >> 5, mask: 1 << (j & 31), node, steps: Int32Array.from(nodes) };
  }
  const list = [...sources.values()];
  return {
    scanner: new LiteralScanner(literalsByRule),
    nodes: Int32Array.from(list.map((s) => s.node)),
    changing: Uint8Array.from(list.map((s) => (s.changing ? 1 : 0))),
    rawOf: Int32Array.from(list.map((s) => s.raw)),
    chainMask: Int32Array.from(list.map((s) => transformations[s.node]!.chainChangesOn)),
    refs: list.map((s) => s.ref),
  };
}

/** PhasePrefilters of each phase: plain rules with a prefilter (not SecActions, TX checks or chain members). */
export function phasePrefilters(phases: readonly (readonly PhaseEntry[])[]): PhasePrefilters[] {
  return phases.map((list) => {
    const at = new Int32Array(list.length).fill(-1);
    const records: number[] = [];
    list.forEach((entry, k) => {
      const rule = entry.rule;
      const prefilter = rule?.prefilter;
      if (rule === undefined || prefilter === undefined || rule.type !== 'rule' || rule.txCheck !== undefined) return;
      at[k] = records.length;
      records.push(prefilter.word, prefilter.mask, prefilter.sources.length, ...prefilter.sources);
    });
    return { at, records: Int32Array.from(records) };
  });
}
