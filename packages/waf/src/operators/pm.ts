/** @pm: phrases (ASCII case-insensitive), one Aho-Corasick automaton per rule; with `capture`, the phrase found goes to TX:0. */
import { AhoCorasick } from './aho-corasick.ts';
import type { OperatorDefinition, OperatorOptions } from './registry.ts';
import type { CompiledOperator } from '../seclang/program.ts';

/** ModSecurity's parse_pm_content: optional quotes, |hex| blocks (its digit quirk kept), \ escapes; then split on blanks. */
export function parsePmContent(param: string): string[] {
  let p = param;
  let off = 0;
  while (off < p.length && (p[off] === ' ' || p[off] === '\t')) off++;
  let parm: string;
  if (p[off] === '"' && p[p.length - 1] === '"' && p.length - off >= 2) parm = p.slice(off + 1, -1);
  else parm = p.slice(off);
  if (parm.length === 0) return [];
  let out = '';
  let bin = false;
  let esc = false;
  let hex = '';
  for (let i = 0; i < parm.length; i++) {
    const c = parm[i]!;
    if (c === '|') {
      bin = !bin;
    } else if (!esc && c === '\\') {
      esc = true;
    } else if (bin) {
      // ModSecurity compares with the byte values 0-9 instead of the digits '0'-'9': only a-f/A-F count.
      const code = c.charCodeAt(0);
      if (code <= 9 || /[a-fA-F]/.test(c)) {
        hex += c;
        if (hex.length === 2) {
          out += String.fromCharCode(parseInt(hex, 16) & 0xff);
          hex = '';
        }
      }
    } else if (esc) {
      if (c === ':' || c === ';' || c === '\\' || c === '"') out += c;
      else throw new Error('@pm: unsupported escape sequence');
      esc = false;
    } else {
      out += c;
    }
  }
  // strdup: stops at a NUL byte
  const nul = out.indexOf('\0');
  if (nul >= 0) out = out.slice(0, nul);
  void p;
  p = out;
  return p.split(/[ \t\n\v\f\r]+/).filter((w) => w !== '');
}

/** The operator matching any of `patterns` (@pm and @pmFromFile). */
export function phraseOperator(base: OperatorOptions['base'], patterns: readonly string[]): CompiledOperator {
  const ac = new AhoCorasick(patterns);
  return {
    ...base,
    phrases: ac.patterns,
    run(tx, rule, input) {
      if (!rule.capture) return ac.test(input);
      const found = ac.search(input);
      if (found === undefined) return false;
      tx.setCapture(0, found);
      return true;
    },
  };
}

export const pmOperator: OperatorDefinition = {
  names: ['pm'],
  create: ({ base, param }) => phraseOperator(base, parsePmContent(param)),
};
