/**
 * SecLang operators with ModSecurity v3.0.9's semantics. Each returns the raw result; negation
 * (`!@op`) is applied by the rule runtime, after the operator's side effects (captures), as
 * ModSecurity does.
 */
import { readFileSync } from 'node:fs';
import { BlockList, isIP } from 'node:net';
import { dirname, isAbsolute, join } from 'node:path';
import type { CompiledOperator, CompiledRule, Expand } from '../seclang/program.ts';
import { CompiledRegex } from '../regex/runtime.ts';
import { requiredLiterals } from '../regex/prefilter.ts';
import type { OperatorSpec } from '../seclang/parser.ts';
import type { Transaction } from '../transaction/transaction.ts';
import { detectSqli } from '../../../libinjection/src/sqli.ts';
import { detectXss } from '../../../libinjection/src/xss.ts';
import { AhoCorasick } from './aho-corasick.ts';

export interface OperatorContext {
  /** File of the rule (relative data files resolve next to it). */
  readonly file: string;
  readonly compileExpand: (text: string) => Expand;
  readonly expand: (tx: Transaction, e: Expand, rule: CompiledRule | undefined) => string;
}

/** Leading blanks, optional sign, digits (C strtol-style prefix). */
function parseIntPrefix(s: string): { neg: boolean; digits: string } | undefined {
  let i = 0;
  const n = s.length;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x20 || (c >= 0x09 && c <= 0x0d)) i++;
    else break;
  }
  let neg = false;
  if (i < n && (s.charCodeAt(i) === 0x2d || s.charCodeAt(i) === 0x2b)) {
    neg = s.charCodeAt(i) === 0x2d;
    i++;
  }
  const start = i;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c >= 0x30 && c <= 0x39) i++;
    else break;
  }
  if (i === start) return undefined;
  return { neg, digits: s.slice(start, i) };
}

/**
 * The value of a string of 1-9 decimal digits and nothing else (the usual operand: a score, a
 * paranoia level), or -1: then atoll and stoi parse it the long way. Fewer than 10 digits is
 * within both int ranges.
 */
function plainSmallNumber(s: string): number {
  if (s.length === 0 || s.length >= 10) return -1;
  let v = 0;
  for (let k = 0; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (c < 0x30 || c > 0x39) return -1;
    v = v * 10 + (c - 0x30);
  }
  return v;
}

/** C atoll(): leading blanks, sign, digits; 0 when none; saturates. */
export function atoll(s: string): number {
  const plain = plainSmallNumber(s);
  if (plain >= 0) return plain;
  const p = parseIntPrefix(s);
  if (!p) return 0;
  const v = Number(p.digits);
  const clamped = v > 9223372036854775807 ? 9223372036854775807 : v;
  return p.neg ? -clamped : clamped;
}

/** CompiledOperator.numeric (and the TxCheck's copy): which comparison a static numeric operator makes (0: not one). */
const NUMERIC_EQ = 1;
const NUMERIC_GE = 2;
const NUMERIC_GT = 3;
const NUMERIC_LE = 4;
const NUMERIC_LT = 5;
const NUMERIC_CODES: Readonly<Record<string, number>> = { eq: NUMERIC_EQ, ge: NUMERIC_GE, gt: NUMERIC_GT, le: NUMERIC_LE, lt: NUMERIC_LT };

/** CompiledOperator.numeric and .operand of an operator: a numeric one with a static operand, converted once. */
function numericComparison(name: string, staticParam: string | undefined): { numeric: number; operand: number } {
  const numeric = NUMERIC_CODES[name] ?? 0;
  if (numeric === 0 || staticParam === undefined) return { numeric: 0, operand: 0 };
  return { numeric, operand: numericOperand(numeric, staticParam) };
}

/** A numeric operator's operand as ModSecurity converts it: std::stoi for @eq, atoll for the others. */
function numericOperand(numeric: number, param: string): number {
  return numeric === NUMERIC_EQ ? stoi(param) : atoll(param);
}

/** Whether `value` passes a numeric comparison (CompiledOperator.numeric), before negation: the operator's run(). */
export function compareNumeric(numeric: number, operand: number, value: string): boolean {
  switch (numeric) {
    case NUMERIC_EQ:
      return stoi(value) === operand;
    case NUMERIC_GE:
      return atoll(value) >= operand;
    case NUMERIC_GT:
      return atoll(value) > operand;
    case NUMERIC_LE:
      return atoll(value) <= operand;
    default:
      return atoll(value) < operand;
  }
}

/** C++ std::stoi(): like atoll but 0 when out of int range (the exception ModSecurity catches). */
export function stoi(s: string): number {
  const plain = plainSmallNumber(s);
  if (plain >= 0) return plain;
  const p = parseIntPrefix(s);
  if (!p) return 0;
  const v = Number((p.neg ? '-' : '') + p.digits);
  if (v > 2147483647 || v < -2147483648) return 0;
  return v;
}

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

function resolveDataFile(param: string, ruleFile: string): string {
  const name = param.trim();
  if (isAbsolute(name)) return name;
  return join(dirname(ruleFile), name);
}

/** Lines of a @pmFromFile file: not blank, not a comment (# after optional blanks). */
export function pmFileLines(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    if (line.length === 0) continue;
    const hash = line.indexOf('#');
    if (hash >= 0 && /^[\t-\r ]*$/.test(line.slice(0, hash))) continue;
    out.push(line);
  }
  return out;
}

function ipList(param: string): BlockList {
  const list = new BlockList();
  for (const raw of param.split(/[,\s]+/)) {
    const item = raw.trim();
    if (item === '') continue;
    const [addr, bits] = item.split('/');
    const family = isIP(addr ?? '');
    if (family === 0) throw new Error(`@ipMatch: bad address ${item}`);
    const type = family === 4 ? 'ipv4' : 'ipv6';
    if (bits === undefined) list.addAddress(addr!, type);
    else {
      const n = Number(bits);
      if (!Number.isInteger(n) || n < 0 || n > (family === 4 ? 32 : 128)) throw new Error(`@ipMatch: bad mask ${item}`);
      list.addSubnet(addr!, n, type);
    }
  }
  return list;
}

function byteRangeTable(param: string): Uint8Array {
  const table = new Uint8Array(256);
  for (const part of param.split(',')) {
    const dash = part.indexOf('-');
    const num = (t: string): number => {
      const v = stoiStrict(t);
      if (v === undefined) throw new Error(`@validateByteRange: not a number ${JSON.stringify(t)}`);
      return v;
    };
    if (dash < 0) {
      const v = num(part);
      if (v >= 0 && v <= 255) table[v] = 1;
      continue;
    }
    const start = num(part.slice(0, dash));
    const end = num(part.slice(dash + 1));
    if (start < 0 || start > 255 || end < 0 || end > 255 || start > end) throw new Error(`@validateByteRange: bad range ${part}`);
    for (let c = start; c <= end; c++) table[c] = 1;
  }
  return table;
}

function stoiStrict(s: string): number | undefined {
  const m = /^[\t-\r ]*([+-]?\d+)/.exec(s);
  return m ? Number(m[1]) : undefined;
}

export function validateUrlEncoding(input: string): boolean {
  const n = input.length;
  if (n === 0) return false;
  let i = 0;
  const hex = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
  while (i < n) {
    if (input.charCodeAt(i) === 0x25) {
      if (i + 2 >= n) return true;
      if (hex(input.charCodeAt(i + 1)) && hex(input.charCodeAt(i + 2))) i += 3;
      else return true;
    } else i++;
  }
  return false;
}

/** True when the input is NOT valid UTF-8 (ModSecurity's @validateUtf8Encoding matches on errors). */
export function invalidUtf8(input: string): boolean {
  const n = input.length;
  let i = 0;
  while (i < n) {
    const c = input.charCodeAt(i);
    if ((c & 0x80) === 0) {
      i++;
      continue;
    }
    let len: number;
    let d: number;
    const b = (k: number): number => (i + k < n ? input.charCodeAt(i + k) : -1);
    const cont = (k: number): boolean => (b(k) & 0xc0) === 0x80 && b(k) >= 0;
    if ((c & 0xe0) === 0xc0) {
      if (n - i < 2) return true;
      if (!cont(1)) return true;
      len = 2;
      d = ((c & 0x1f) << 6) | (b(1) & 0x3f);
    } else if ((c & 0xf0) === 0xe0) {
      if (n - i < 3) return true;
      if (!cont(1) || !cont(2)) return true;
      len = 3;
      d = ((c & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
    } else if ((c & 0xf8) === 0xf0) {
      if (c >= 0xf5) return true;
      if (n - i < 4) return true;
      if (!cont(1) || !cont(2) || !cont(3)) return true;
      len = 4;
      d = ((c & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
    } else {
      return true;
    }
    if (d >= 0xd800 && d <= 0xdfff) return true;
    if ((len === 4 && d < 0x10000) || (len === 3 && d < 0x800) || (len === 2 && d < 0x80)) return true;
    i += len;
  }
  return false;
}

function containsWord(str: string, target: string): boolean {
  if (target.length === 0) return true;
  if (str.length === 0) return false;
  if (str === target) return true;
  const acceptable = (pos: number): boolean => {
    if (pos < 0 || pos >= str.length) return false;
    const c = str.charCodeAt(pos);
    return !((c >= 65 && c <= 90) || (c >= 97 && c <= 122));
  };
  let pos = str.indexOf(target);
  while (pos >= 0) {
    if (pos === 0 && acceptable(target.length)) return true;
    if (pos + target.length === str.length && acceptable(pos - 1)) return true;
    if (acceptable(pos - 1) && acceptable(pos + target.length)) return true;
    pos = str.indexOf(target, pos + 1);
  }
  return false;
}

/** The pattern that captures a whole value. */
const WHOLE_VALUE = '^.*$';

const SUPPORTED = new Set([
  'rx',
  'pm',
  'pmf',
  'pmfromfile',
  'within',
  'contains',
  'containsword',
  'streq',
  'beginswith',
  'endswith',
  'eq',
  'ge',
  'gt',
  'le',
  'lt',
  'ipmatch',
  'ipmatchf',
  'ipmatchfromfile',
  'validatebyterange',
  'validateurlencoding',
  'validateutf8encoding',
  'detectsqli',
  'detectxss',
  'unconditionalmatch',
  'nomatch',
  'rbl',
  'geolookup',
]);

/**
 * The literals one of which every match of `re` contains, when none has an ASCII letter (`..`,
 * `<`): plain `indexOf` then finds them whatever the expression's case rules, several times
 * faster than the expression fails on a value without them.
 */
function literalGate(re: CompiledRegex): readonly string[] | undefined {
  const found = requiredLiterals(re.translated.source);
  if (found === undefined || found.some((l) => l.length === 0 || !/^[\x00-\x40\x5b-\x60\x7b-\x7f]+$/.test(l))) return undefined;
  // a literal holding another is found whenever that one is (930110: `/../`, `..\\` ... -> `..`)
  const literals = found.filter((l, i) => !found.some((o, j) => j !== i && l.includes(o) && (o !== l || j < i)));
  return literals.length > 0 && literals.length <= 4 ? literals : undefined;
}

/** A static @rx on one value (CompiledOperator.rx, .gate): whether it matches; captures go to TX:0-9. */
export function runRegex(tx: Transaction, rule: CompiledRule, re: CompiledRegex, gate: readonly string[] | undefined, input: string): boolean {
  // a rule the literal prefilter does not cover (multiMatch, some variables) checks here
  if (gate !== undefined && rule.prefilter === undefined && !containsAny(input, gate)) return false;
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

export function compileOperator(spec: OperatorSpec, ctx: OperatorContext): CompiledOperator {
  const name = spec.name;
  if (!SUPPORTED.has(name)) throw new Error(`unknown or unsupported operator @${name}`);
  const param = ctx.compileExpand(spec.param);
  const staticParam = param.text;
  // every operator object has every field (one hidden class for the loop's reads)
  const base = {
    name,
    param: spec.param,
    negated: spec.negated,
    staticParam,
    regex: undefined as CompiledRegex | undefined,
    phrases: undefined as readonly string[] | undefined,
    ...numericComparison(name, staticParam),
    rx: undefined as CompiledRegex | undefined,
    gate: undefined as readonly string[] | undefined,
  };
  const paramOf = (tx: Transaction): string => (staticParam !== undefined ? staticParam : ctx.expand(tx, param, undefined));
  switch (name) {
    case 'rx': {
      if (staticParam !== undefined) {
        if (staticParam === '') return { ...base, run: () => true };
        const re = new CompiledRegex(staticParam);
        if (staticParam === WHOLE_VALUE) {
          // 901318 and 920450 take each value whole; under PCRE_DOTALL `^.*$` matches any value
          // entirely, newlines included (operators.test.ts checks it against the addon)
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
    }
    case 'pm':
    case 'pmf':
    case 'pmfromfile': {
      let patterns: string[];
      if (name === 'pm') patterns = parsePmContent(spec.param);
      else {
        patterns = [];
        for (const f of spec.param.trim().split(/\s+/)) {
          patterns.push(...pmFileLines(readFileSync(resolveDataFile(f, ctx.file), 'latin1')));
        }
      }
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
    case 'within':
      return { ...base, run: (tx, _r, input) => input.length === 0 || paramOf(tx).indexOf(input) >= 0 };
    case 'contains':
      return { ...base, run: (tx, _r, input) => input.indexOf(paramOf(tx)) >= 0 };
    case 'containsword':
      return { ...base, run: (tx, _r, input) => containsWord(input, paramOf(tx)) };
    case 'streq':
      return { ...base, run: (tx, _r, input) => input === paramOf(tx) };
    case 'beginswith':
      return { ...base, run: (tx, _r, input) => input.startsWith(paramOf(tx)) };
    case 'endswith':
      return { ...base, run: (tx, _r, input) => input.endsWith(paramOf(tx)) };
    case 'eq':
    case 'ge':
    case 'gt':
    case 'le':
    case 'lt': {
      // a static operand was converted once (base.operand: the CRS's paranoia gates and setting checks)
      const { numeric, operand } = base;
      if (numeric !== 0) return { ...base, run: (_tx, _r, input) => compareNumeric(numeric, operand, input) };
      const code = NUMERIC_CODES[name]!;
      return { ...base, run: (tx, _r, input) => compareNumeric(code, numericOperand(code, paramOf(tx)), input) };
    }
    case 'ipmatch':
    case 'ipmatchf':
    case 'ipmatchfromfile': {
      const text =
        name === 'ipmatch'
          ? spec.param
          : readFileSync(resolveDataFile(spec.param, ctx.file), 'latin1')
              .split('\n')
              .map((l) => l.replace(/#.*$/, '').trim())
              .filter((l) => l !== '')
              .join(',');
      const list = ipList(text);
      return {
        ...base,
        run(_tx, _r, input) {
          const family = isIP(input);
          if (family === 0) return false;
          return list.check(input, family === 4 ? 'ipv4' : 'ipv6');
        },
      };
    }
    case 'validatebyterange': {
      const table = byteRangeTable(spec.param);
      const outside: number[] = [];
      for (let c = 0; c < 256; c++) if (!table[c]) outside.push(c);
      if (outside.length === 1) {
        // 920270's 1-255: a NUL byte, found by indexOf (vectorised) rather than a loop in JS
        const only = String.fromCharCode(outside[0]!);
        return { ...base, run: (_tx, _r, input) => input.indexOf(only) >= 0 };
      }
      return {
        ...base,
        run(_tx, _r, input) {
          for (let i = 0; i < input.length; i++) if (!table[input.charCodeAt(i) & 0xff]) return true;
          return false;
        },
      };
    }
    case 'validateurlencoding':
      return { ...base, run: (_tx, _r, input) => validateUrlEncoding(input) };
    case 'validateutf8encoding':
      return { ...base, run: (_tx, _r, input) => invalidUtf8(input) };
    case 'detectsqli':
      return {
        ...base,
        run(tx, rule, input) {
          const fp = detectSqli(input);
          if (fp === null) return false;
          if (rule.capture) tx.setCapture(0, fp);
          return true;
        },
      };
    case 'detectxss':
      return {
        ...base,
        run(tx, rule, input) {
          if (!detectXss(input)) return false;
          if (rule.capture) tx.setCapture(0, input);
          return true;
        },
      };
    case 'unconditionalmatch':
      return { ...base, run: () => true };
    case 'nomatch':
      return { ...base, run: () => false };
    case 'rbl':
      // DNS block lists are not queried: never a match (the CRS runs @rbl only when an operator
      // configures tx.block_* reputation lists).
      return { ...base, run: () => false };
    case 'geolookup':
      // No GeoIP database is configured: ModSecurity's @geoLookup then fails too.
      return { ...base, run: () => false };
    default:
      throw new Error(`unknown operator @${name}`);
  }
}
