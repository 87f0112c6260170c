/**
 * @rx: a PCRE expression (translated to a JavaScript one, regex/), with captures to TX:0-9. A
 * static pattern is compiled once; the rule loop runs it itself (CompiledOperator.rx), with its
 * literal gate (`gate`): literals one of which every match contains, found by indexOf first. A
 * pattern with macros is compiled per distinct expansion (cached); one that does not compile
 * never matches, as in ModSecurity.
 */
import { requiredLiterals } from '../regex/prefilter.ts';
import { CompiledRegex } from '../regex/runtime.ts';
import type { CompiledRule } from '../seclang/program.ts';
import type { TransactionCollections } from '../transaction/collections.ts';
import type { OperatorDefinition } from './registry.ts';

/** The pattern that captures a whole value. */
const WHOLE_VALUE = '^.*$';

/**
 * The literals one of which every match of `re` contains, when none has an ASCII letter (`..`,
 * `<`): plain `indexOf` then finds them whatever the expression's case rules, several times
 * faster than the expression fails on a value without them.
 */
function literalGate(re: CompiledRegex): readonly string[] | undefined {
  const found = requiredLiterals(re.translated.source);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: every byte that is not a letter, control characters included
  if (found === undefined || found.some((l) => l.length === 0 || !/^[\x00-\x40\x5b-\x60\x7b-\x7f]+$/.test(l))) return undefined;
  // a literal holding another is found whenever that one is (930110: `/../`, `..\\` ... -> `..`)
  const literals = found.filter((l, i) => !found.some((o, j) => j !== i && l.includes(o) && (o !== l || j < i)));
  return literals.length > 0 && literals.length <= 4 ? literals : undefined;
}

/** A static @rx on one value (CompiledOperator.rx, .gate): whether it matches; captures go to TX:0-9. */
export function runRegex(
  tx: TransactionCollections,
  rule: CompiledRule,
  re: CompiledRegex,
  gate: readonly string[] | undefined,
  input: string,
): boolean {
  // a rule the literal prefilter does not check value by value (some variables, multiMatch) checks here
  if (gate !== undefined && (rule.prefilter === undefined || rule.multiMatch) && !containsAny(input, gate)) return false;
  if (!rule.capture) return re.test(input);
  const m = re.exec(input);
  if (!m) return false;
  for (let g = 0; g < m.length; g++) if (m[g] !== undefined) tx.setCapture(g, m[g]!);
  return true;
}

export function containsAny(input: string, literals: readonly string[]): boolean {
  for (let i = 0; i < literals.length; i++) if (input.indexOf(literals[i]!) >= 0) return true;
  return false;
}

export const rxOperator: OperatorDefinition = {
  names: ['rx'],
  create({ base, paramOf }) {
    const staticParam = base.staticParam;
    if (staticParam !== undefined) {
      if (staticParam === '') return { ...base, run: () => true };
      const re = new CompiledRegex(staticParam);
      if (staticParam === WHOLE_VALUE) {
        // 901318 and 920450 take each value whole; under PCRE_DOTALL `^.*$` matches any value
        // entirely, newlines included (the golden vectors of rule-cases.json check it)
        return {
          ...base,
          regex: re,
          run(tx, rule, input) {
            if (rule.capture) tx.setCapture(0, input);
            return true;
          },
        };
      }
      const gate = literalGate(re);
      return {
        ...base,
        regex: re,
        rx: re,
        gate,
        run: (tx, rule, input) => runRegex(tx, rule, re, gate, input),
      };
    }
    const cache = new Map<string, CompiledRegex | null>();
    return {
      ...base,
      run(tx, rule, input) {
        const p = paramOf(tx);
        let re = cache.get(p);
        if (re === undefined) {
          try {
            re = new CompiledRegex(p);
          } catch {
            re = null; // ModSecurity: a regex that does not compile never matches
          }
          if (cache.size < 1000) cache.set(p, re);
        }
        if (re === null) return false;
        if (!rule.capture) return re.test(input);
        const m = re.exec(input);
        if (!m) return false;
        for (let g = 0; g < m.length; g++) if (m[g] !== undefined) tx.setCapture(g, m[g]!);
        return true;
      },
    };
  },
};
