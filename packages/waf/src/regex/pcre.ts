/**
 * PCRE (as ModSecurity v3 compiles it: PCRE2, DOTALL | MULTILINE, optional CASELESS, no UTF) to
 * JavaScript regular expressions with byte semantics.
 *
 * Subjects are "binary" strings: one UTF-16 code unit per byte (0x00-0xFF). The translation never
 * relies on a JavaScript behaviour that differs from PCRE's for such strings:
 * - Case-insensitivity is expanded by hand ([Aa]) instead of the `i` flag: PCRE without UTF folds
 *   only ASCII letters, JavaScript's `i` also folds Latin-1 letters (À/à). Expanding by hand also
 *   keeps patterns eligible for V8's linear-time engine, which has no `i` support.
 * - Character classes and escapes are computed as byte sets (256 bits) and written out as explicit
 *   ranges: `\s` is PCRE's [\t\n\v\f\r ] (JavaScript adds \xA0), `\v` is vertical space, `.` with
 *   DOTALL is any byte, POSIX classes become ranges, `[]a]` is a class holding "]".
 * - Anchors: MULTILINE `^`/`$` and `\Z` depend on newlines. Two sources are produced: `source`
 *   for subjects without "\n" (plain `^`/`$`, no lookaround, so the linear engine can take it) and
 *   `sourceNl` for subjects with "\n" (lookbehind/lookahead forms). The caller picks by subject.
 * - Atomic groups and possessive quantifiers become `(?=(X))\k`, the usual equivalent
 *   construction (a lookahead captures what X matches first, a backreference consumes it).
 *   Original capture numbers are remapped (`groupMap`) so TX.0-TX.9 see PCRE's numbering.
 * Anything that cannot be translated with the same meaning (conditionals, recursion, \K, verbs,
 * Unicode properties, code points above 0xFF, unknown escapes) throws PcreTranslationError.
 */

export class PcreTranslationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PcreTranslationError';
  }
}

export interface TranslatedRegex {
  /** For subjects without "\n". */
  readonly source: string;
  /** For subjects containing "\n" (same as `source` when the pattern has no newline-sensitive part). */
  readonly sourceNl: string;
  /**
   * For subjects containing "\n" but no "\r", to compile with the JS `m` flag (whose ^/$ then
   * mean what PCRE's MULTILINE ^/$ mean): keeps linear-engine eligibility without lookarounds.
   */
  readonly sourceM: string;
  /** JS capture index of each PCRE group (index 0 = whole match). */
  readonly groupMap: readonly number[];
  /** Number of PCRE capture groups. */
  readonly groupCount: number;
  /** True when `source` has no construct V8's linear engine refuses (lookahead, backreference). */
  readonly linearCandidate: boolean;
}

/** 256-bit byte set. */
type ByteSet = Uint8Array;

function newSet(): ByteSet {
  return new Uint8Array(256);
}
function addRange(set: ByteSet, from: number, to: number): void {
  for (let c = from; c <= to; c++) set[c] = 1;
}
function invert(set: ByteSet): ByteSet {
  const out = newSet();
  for (let c = 0; c < 256; c++) out[c] = set[c] ? 0 : 1;
  return out;
}
function union(into: ByteSet, other: ByteSet): void {
  for (let c = 0; c < 256; c++) if (other[c]) into[c] = 1;
}
function caseClose(set: ByteSet): void {
  for (let c = 0x41; c <= 0x5a; c++) {
    if (set[c] || set[c + 0x20]) {
      set[c] = 1;
      set[c + 0x20] = 1;
    }
  }
}

const SET_DIGIT = (() => {
  const s = newSet();
  addRange(s, 0x30, 0x39);
  return s;
})();
const SET_WORD = (() => {
  const s = newSet();
  addRange(s, 0x30, 0x39);
  addRange(s, 0x41, 0x5a);
  addRange(s, 0x61, 0x7a);
  s[0x5f] = 1;
  return s;
})();
const SET_SPACE = (() => {
  const s = newSet();
  addRange(s, 0x09, 0x0d);
  s[0x20] = 1;
  return s;
})();
const SET_HSPACE = (() => {
  const s = newSet();
  s[0x09] = 1;
  s[0x20] = 1;
  s[0xa0] = 1;
  return s;
})();
const SET_VSPACE = (() => {
  const s = newSet();
  addRange(s, 0x0a, 0x0d);
  s[0x85] = 1;
  return s;
})();

function posixSet(name: string): ByteSet | undefined {
  const s = newSet();
  switch (name) {
    case 'alpha':
      addRange(s, 0x41, 0x5a);
      addRange(s, 0x61, 0x7a);
      return s;
    case 'digit':
      return SET_DIGIT.slice();
    case 'alnum':
      addRange(s, 0x30, 0x39);
      addRange(s, 0x41, 0x5a);
      addRange(s, 0x61, 0x7a);
      return s;
    case 'upper':
      addRange(s, 0x41, 0x5a);
      return s;
    case 'lower':
      addRange(s, 0x61, 0x7a);
      return s;
    case 'space':
      return SET_SPACE.slice();
    case 'blank':
      s[0x09] = 1;
      s[0x20] = 1;
      return s;
    case 'punct':
      addRange(s, 0x21, 0x2f);
      addRange(s, 0x3a, 0x40);
      addRange(s, 0x5b, 0x60);
      addRange(s, 0x7b, 0x7e);
      return s;
    case 'xdigit':
      addRange(s, 0x30, 0x39);
      addRange(s, 0x41, 0x46);
      addRange(s, 0x61, 0x66);
      return s;
    case 'word':
      return SET_WORD.slice();
    case 'cntrl':
      addRange(s, 0x00, 0x1f);
      s[0x7f] = 1;
      return s;
    case 'print':
      addRange(s, 0x20, 0x7e);
      return s;
    case 'graph':
      addRange(s, 0x21, 0x7e);
      return s;
    case 'ascii':
      addRange(s, 0x00, 0x7f);
      return s;
    default:
      return undefined;
  }
}

function hex2(c: number): string {
  return `\\x${c.toString(16).padStart(2, '0')}`;
}

/** A byte set written as a JS class (or a single char when the set has one member). */
function emitSet(set: ByteSet): string {
  let count = 0;
  for (let c = 0; c < 256; c++) if (set[c]) count++;
  if (count === 256) return '[^]';
  if (count === 0) return '[]';
  if (count === 1) {
    for (let c = 0; c < 256; c++) if (set[c]) return emitChar(c);
  }
  // Prefer the shorter of the set and its complement.
  const negate = count > 128;
  const s = negate ? invert(set) : set;
  let out = negate ? '[^' : '[';
  let c = 0;
  while (c < 256) {
    if (!s[c]) {
      c++;
      continue;
    }
    let end = c;
    while (end + 1 < 256 && s[end + 1]) end++;
    out += classChar(c);
    if (end > c + 1) out += `-${classChar(end)}`;
    else if (end === c + 1) out += classChar(end);
    c = end + 1;
  }
  return `${out}]`;
}

function classChar(c: number): string {
  if ((c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)) return String.fromCharCode(c);
  return hex2(c);
}

function emitChar(c: number): string {
  if ((c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x20 || c === 0x5f) {
    return String.fromCharCode(c);
  }
  return hex2(c);
}

interface Flags {
  i: boolean;
  s: boolean;
  m: boolean;
  x: boolean;
}

const IS_HEX = /^[0-9a-fA-F]$/;
const IS_OCT = /^[0-7]$/;

/** Counts capturing groups (for PCRE's backreference-versus-octal rule). */
function countGroups(p: string): number {
  let n = 0;
  let inClass = false;
  for (let i = 0; i < p.length; i++) {
    const ch = p[i];
    if (ch === '\\') {
      if (p[i + 1] === 'Q') {
        const end = p.indexOf('\\E', i + 2);
        i = end < 0 ? p.length : end + 1;
      } else i++;
      continue;
    }
    if (inClass) {
      if (ch === ']') inClass = false;
      continue;
    }
    if (ch === '[') {
      inClass = true;
      if (p[i + 1] === '^') i++;
      if (p[i + 1] === ']') i++;
      continue;
    }
    if (ch === '(') {
      if (p[i + 1] !== '?' && p[i + 1] !== '*') n++;
      else if (p[i + 1] === '?' && (p[i + 2] === '<' || p[i + 2] === "'" || p[i + 2] === 'P')) {
        const c3 = p[i + 3];
        if (p[i + 2] === 'P' ? c3 === '<' : c3 !== '=' && c3 !== '!') n++;
      }
    }
  }
  return n;
}

interface GroupFrame {
  /** Flags to restore when the group closes. */
  saved: Flags;
  /** Output index where this group's text starts (for a quantifier after it). */
  start: number;
  /** Text to append when the group closes. */
  close: string;
  /** Named group name, to resolve \k<name>. */
  name?: string;
}

/**
 * Translates one PCRE pattern. `caseless` is ModSecurity's CASELESS compile option (used for
 * collection-key regexes); @rx patterns compile without it.
 */
export function translatePcre(pattern: string, caseless = false): TranslatedRegex {
  const p = pattern === '' ? '.*' : pattern;
  for (let k = 0; k < p.length; k++) {
    if (p.charCodeAt(k) > 0xff) throw new PcreTranslationError('pattern has characters above 0xFF (expected a binary string)');
  }
  const totalGroups = countGroups(p);
  let flags: Flags = { i: caseless, s: true, m: true, x: false };
  // Two outputs are built in lockstep; they differ only in anchors.
  const out: string[] = [];
  const outNl: string[] = [];
  const outM: string[] = [];
  const groupMap: number[] = [0];
  const names = new Map<string, number>();
  let jsGroups = 0;
  let pcreGroups = 0;
  let usesLookahead = false;
  let usesBackref = false;
  let nlSensitive = false;
  const stack: GroupFrame[] = [];
  /** Output index (in out/outNl, same length) where the last atom starts; -1 = none. */
  let atomStart = -1;
  let i = 0;

  const push = (a: string, b: string = a, m: string = b === a ? a : b): void => {
    out.push(a);
    outNl.push(b);
    outM.push(m);
  };
  const fail = (msg: string): never => {
    throw new PcreTranslationError(`${msg} at offset ${i} in /${p.length > 120 ? `${p.slice(0, 120)}...` : p}/`);
  };
  const literal = (c: number): void => {
    atomStart = out.length;
    if (flags.i && ((c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a))) {
      const up = c & ~0x20;
      push(`[${String.fromCharCode(up)}${String.fromCharCode(up | 0x20)}]`);
    } else {
      push(emitChar(c));
    }
  };
  const setAtom = (set: ByteSet): void => {
    atomStart = out.length;
    let s = set;
    if (flags.i) {
      s = set.slice();
      caseClose(s);
    }
    push(emitSet(s));
  };

  /** Reads an escape that stands for one byte (or a set) inside or outside a class. */
  const readEscape = (inClass: boolean): { kind: 'char'; c: number } | { kind: 'set'; set: ByteSet } | { kind: 'other'; esc: string } => {
    // p[i] is the char after the backslash
    const e = p[i];
    if (e === undefined) fail('pattern ends with a backslash');
    const code = e!.charCodeAt(0);
    i++;
    switch (e) {
      case 'd':
        return { kind: 'set', set: SET_DIGIT };
      case 'D':
        return { kind: 'set', set: invert(SET_DIGIT) };
      case 'w':
        return { kind: 'set', set: SET_WORD };
      case 'W':
        return { kind: 'set', set: invert(SET_WORD) };
      case 's':
        return { kind: 'set', set: SET_SPACE };
      case 'S':
        return { kind: 'set', set: invert(SET_SPACE) };
      case 'h':
        return { kind: 'set', set: SET_HSPACE };
      case 'H':
        return { kind: 'set', set: invert(SET_HSPACE) };
      case 'v':
        return { kind: 'set', set: SET_VSPACE };
      case 'V':
        return { kind: 'set', set: invert(SET_VSPACE) };
      case 'N':
        if (inClass) fail('\\N in a class');
        return { kind: 'set', set: invert(Uint8Array.from({ length: 256 }, (_, k) => (k === 0x0a ? 1 : 0))) };
      case 't':
        return { kind: 'char', c: 0x09 };
      case 'n':
        return { kind: 'char', c: 0x0a };
      case 'r':
        return { kind: 'char', c: 0x0d };
      case 'f':
        return { kind: 'char', c: 0x0c };
      case 'e':
        return { kind: 'char', c: 0x1b };
      case 'a':
        return { kind: 'char', c: 0x07 };
      case 'b':
        if (inClass) return { kind: 'char', c: 0x08 };
        return { kind: 'other', esc: 'b' };
      case 'c': {
        const x = p[i];
        if (x === undefined) fail('\\c at end of pattern');
        i++;
        const xc = x!.charCodeAt(0);
        if (xc > 0x7f) fail('\\c followed by a non-ASCII character');
        const up = xc >= 0x61 && xc <= 0x7a ? xc - 0x20 : xc;
        return { kind: 'char', c: up ^ 0x40 };
      }
      case 'x': {
        if (p[i] === '{') {
          const end = p.indexOf('}', i);
          if (end < 0) fail('unterminated \\x{');
          const hex = p.slice(i + 1, end);
          if (!/^[0-9a-fA-F]+$/.test(hex)) fail('bad \\x{...}');
          const v = parseInt(hex, 16);
          if (v > 0xff) fail('code point above 0xFF in a non-UTF pattern');
          i = end + 1;
          return { kind: 'char', c: v };
        }
        let hex = '';
        while (hex.length < 2 && p[i] !== undefined && IS_HEX.test(p[i]!)) hex += p[i++];
        return { kind: 'char', c: hex === '' ? 0 : parseInt(hex, 16) };
      }
      case 'o': {
        if (p[i] !== '{') fail('\\o without {');
        const end = p.indexOf('}', i);
        if (end < 0) fail('unterminated \\o{');
        const oct = p.slice(i + 1, end);
        if (!/^[0-7]+$/.test(oct)) fail('bad \\o{...}');
        const v = parseInt(oct, 8);
        if (v > 0xff) fail('code point above 0xFF in a non-UTF pattern');
        i = end + 1;
        return { kind: 'char', c: v };
      }
      case '0': {
        let oct = '';
        while (oct.length < 2 && p[i] !== undefined && IS_OCT.test(p[i]!)) oct += p[i++];
        return { kind: 'char', c: oct === '' ? 0 : parseInt(oct, 8) };
      }
      default:
        break;
    }
    if (code >= 0x31 && code <= 0x39) {
      // \1-\9 ...: backreference or octal (PCRE2 rules).
      let digits = e!;
      while (p[i] !== undefined && /[0-9]/.test(p[i]!)) digits += p[i++];
      const n = parseInt(digits, 10);
      if (!inClass && (n < 10 || n <= totalGroups)) return { kind: 'other', esc: `ref${n}` };
      // octal: up to three octal digits from the start
      i -= digits.length;
      let oct = '';
      while (oct.length < 3 && p[i] !== undefined && IS_OCT.test(p[i]!)) oct += p[i++];
      if (oct === '') {
        // \8 or \9: the literal character
        i++;
        return { kind: 'char', c: code };
      }
      const v = parseInt(oct, 8);
      if (v > 0xff) fail('octal escape above 0xFF');
      return { kind: 'char', c: v };
    }
    if ((code >= 0x41 && code <= 0x5a) || (code >= 0x61 && code <= 0x7a)) {
      if (!inClass && 'ABGZzkgQEKRXpPC'.includes(e!)) return { kind: 'other', esc: e! };
      if (inClass && (e === 'Q' || e === 'E')) return { kind: 'other', esc: e };
      if (inClass && (e === 'p' || e === 'P')) fail('Unicode properties are not supported');
      fail(`unsupported escape \\${e}`);
    }
    // Any other escaped character is itself.
    return { kind: 'char', c: code };
  };

  const readClass = (): ByteSet => {
    // p[i] is the char after '['
    const set = newSet();
    let negated = false;
    if (p[i] === '^') {
      negated = true;
      i++;
    }
    let first = true;
    let prev: number | undefined; // last single char, candidate start of a range
    for (;;) {
      const ch = p[i];
      if (ch === undefined) return fail('unterminated character class');
      if (ch === ']' && !first) {
        i++;
        break;
      }
      first = false;
      if (ch === '[' && p[i + 1] === ':') {
        const end = p.indexOf(':]', i + 2);
        if (end > 0) {
          let name = p.slice(i + 2, end);
          let neg = false;
          if (name.startsWith('^')) {
            neg = true;
            name = name.slice(1);
          }
          const s = posixSet(name);
          if (!s) fail(`unknown POSIX class [:${name}:]`);
          union(set, neg ? invert(s!) : s!);
          i = end + 2;
          prev = undefined;
          continue;
        }
      }
      let single: number | undefined;
      if (ch === '\\') {
        i++;
        if (p[i] === 'Q') {
          i++;
          const end = p.indexOf('\\E', i);
          const text = end < 0 ? p.slice(i) : p.slice(i, end);
          for (const t of text) set[t.charCodeAt(0)] = 1;
          prev = text.length > 0 ? text.charCodeAt(text.length - 1) : prev;
          i = end < 0 ? p.length : end + 2;
          continue;
        }
        if (p[i] === 'E') {
          i++;
          continue;
        }
        const esc = readEscape(true);
        if (esc.kind === 'set') {
          union(set, esc.set);
          prev = undefined;
          continue;
        }
        if (esc.kind === 'other') fail(`unsupported escape in class \\${esc.esc}`);
        single = (esc as { c: number }).c;
      } else {
        single = ch.charCodeAt(0);
        i++;
      }
      // range?
      if (p[i] === '-' && p[i + 1] !== undefined && p[i + 1] !== ']') {
        const save = i;
        i++;
        let to: number | undefined;
        if (p[i] === '\\') {
          i++;
          const esc = readEscape(true);
          if (esc.kind === 'char') to = esc.c;
          else {
            // [a-\d]: '-' is literal
            i = save;
          }
        } else if (p[i] === '[' && p[i + 1] === ':') {
          i = save;
        } else {
          to = p.charCodeAt(i);
          i++;
        }
        if (to !== undefined) {
          if (to < single) fail('range out of order in character class');
          addRange(set, single, to);
          prev = undefined;
          continue;
        }
      }
      set[single] = 1;
      prev = single;
    }
    void prev;
    if (flags.i) caseClose(set);
    return negated ? invert(set) : set;
  };

  const applyQuantifier = (q: string, lazy: boolean, possessive: boolean): void => {
    if (atomStart < 0) fail('quantifier without a preceding atom');
    const atomA = out.splice(atomStart).join('');
    const atomB = outNl.splice(atomStart).join('');
    const atomM = outM.splice(atomStart).join('');
    if (possessive) {
      // The wrapper capture opens before any group inside the atom: it takes the number after the
      // groups already emitted before the atom, and the groups inside move up by one.
      const g = countCaptures(out.join('')) + 1;
      jsGroups++;
      usesLookahead = true;
      usesBackref = true;
      const shiftA = shiftGroupRefs(atomA, g);
      const shiftB = shiftGroupRefs(atomB, g);
      const shiftM = shiftGroupRefs(atomM, g);
      renumberAfter(g);
      push(`(?:(?=(${shiftA.text}${q}))\\${g})`, `(?:(?=(${shiftB.text}${q}))\\${g})`, `(?:(?=(${shiftM.text}${q}))\\${g})`);
    } else {
      push(atomA + q + (lazy ? '?' : ''), atomB + q + (lazy ? '?' : ''), atomM + q + (lazy ? '?' : ''));
    }
    atomStart = -1;
  };

  /**
   * JS groups are numbered by position. When a capture is inserted before already-emitted
   * groups (atomic/possessive wrappers), the groups inside get +1. Refs in the atom text are
   * written as \N; renumber those >= from.
   */
  function countCaptures(text: string): number {
    let n = 0;
    for (let k = 0; k < text.length; k++) {
      const c = text[k];
      if (c === '\\') k++;
      else if (c === '(' && text[k + 1] !== '?') n++;
    }
    return n;
  }
  function shiftGroupRefs(text: string, from: number): { text: string } {
    return { text: text.replace(/\\(\d+)/g, (m, d: string) => (Number(d) >= from ? `\\${Number(d) + 1}` : m)) };
  }
  function renumberAfter(from: number): void {
    // PCRE groups already mapped to JS numbers >= from move up by one (they sit inside the atom).
    for (let k = 1; k < groupMap.length; k++) if (groupMap[k]! >= from) groupMap[k] = groupMap[k]! + 1;
    for (const [name, g] of names) if (g >= from) names.set(name, g + 1);
  }

  const readQuantifierAt = (): { q: string; len: number } | undefined => {
    const ch = p[i];
    if (ch === '*' || ch === '+' || ch === '?') return { q: ch, len: 1 };
    if (ch === '{') {
      const m = /^\{(\d+)(?:(,)(\d*))?\}/.exec(p.slice(i, i + 24));
      if (!m) return undefined;
      const min = Number(m[1]);
      const max = m[3] !== undefined && m[3] !== '' ? Number(m[3]) : undefined;
      if (max !== undefined && max < min) fail('numbers out of order in {} quantifier');
      if (min > 65535 || (max ?? 0) > 65535) fail('number too big in {} quantifier');
      return { q: m[0], len: m[0].length };
    }
    return undefined;
  };

  while (i < p.length) {
    const ch = p[i]!;
    if (flags.x) {
      if (ch === ' ' || ch === '\t' || ch === '\n' || ch === '\r' || ch === '\f' || ch === '\x0b') {
        i++;
        continue;
      }
      if (ch === '#') {
        while (i < p.length && p[i] !== '\n') i++;
        continue;
      }
    }
    // quantifiers
    const quant = readQuantifierAt();
    if (quant) {
      i += quant.len;
      let lazy = false;
      let possessive = false;
      if (p[i] === '?') {
        lazy = true;
        i++;
      } else if (p[i] === '+') {
        possessive = true;
        i++;
      }
      applyQuantifier(quant.q, lazy, possessive);
      continue;
    }
    switch (ch) {
      case '\\': {
        i++;
        if (p[i] === 'Q') {
          i++;
          const end = p.indexOf('\\E', i);
          const text = end < 0 ? p.slice(i) : p.slice(i, end);
          i = end < 0 ? p.length : end + 2;
          for (const t of text) literal(t.charCodeAt(0));
          continue;
        }
        const esc = readEscape(false);
        if (esc.kind === 'char') literal(esc.c);
        else if (esc.kind === 'set') setAtom(esc.set);
        else {
          const e = esc.esc;
          if (e === 'b' || e === 'B') {
            push(`\\${e}`);
            atomStart = -1;
          } else if (e === 'A' || e === 'G') {
            push('^', '(?<![^])', '(?<![^])');
            atomStart = -1;
          } else if (e === 'z') {
            nlSensitive = true;
            push('$', '(?![^])', '(?![^])');
            atomStart = -1;
          } else if (e === 'Z') {
            nlSensitive = true;
            push('$', '(?=\\n?(?![^]))', '(?=\\n?(?![^]))');
            atomStart = -1;
          } else if (e === 'E') {
            // stray \E: ignored
          } else if (e.startsWith('ref')) {
            const n = Number(e.slice(3));
            usesBackref = true;
            const js = groupMap[n];
            atomStart = out.length;
            if (js === undefined) {
              // forward reference: resolved as the group's JS number at the end (placeholder)
              push(`\\${`@${n}`}`);
            } else push(`\\${js}`);
          } else if (e === 'g' || e === 'k') {
            // \g{n} \g{-n} \gn \k<name> \k'name' \k{name} \g{name}
            let ref: number | undefined;
            const rest = p.slice(i);
            let m = /^\{(-?\d+)\}|^(-?\d+)/.exec(rest);
            if (e === 'g' && m) {
              const v = Number(m[1] ?? m[2]);
              ref = v < 0 ? pcreGroups + 1 + v : v;
              i += m[0].length;
            } else {
              m = /^(?:<([A-Za-z_]\w*)>|'([A-Za-z_]\w*)'|\{([A-Za-z_]\w*)\})/.exec(rest);
              if (!m) fail(`bad \\${e} reference`);
              const name = m![1] ?? m![2] ?? m![3]!;
              const g = names.get(name);
              if (g === undefined) fail(`reference to unknown or later group ${name}`);
              i += m![0].length;
              usesBackref = true;
              atomStart = out.length;
              push(`\\${g}`);
              continue;
            }
            if (ref === undefined || ref < 1 || groupMap[ref] === undefined) fail('bad or forward \\g reference');
            usesBackref = true;
            atomStart = out.length;
            push(`\\${groupMap[ref!]}`);
          } else {
            fail(`unsupported escape \\${e}`);
          }
        }
        continue;
      }
      case '[': {
        i++;
        const set = readClass();
        atomStart = out.length;
        // readClass already applied case closure
        push(emitSet(set));
        continue;
      }
      case '.': {
        i++;
        atomStart = out.length;
        if (flags.s) push('[^]');
        else push('[^\\n]');
        continue;
      }
      case '^': {
        i++;
        atomStart = -1;
        if (flags.m) {
          nlSensitive = true;
          push('^', '(?<![^\\n])', '^');
        } else push('^', '(?<![^])', '(?<![^])');
        continue;
      }
      case '$': {
        i++;
        atomStart = -1;
        nlSensitive = true;
        if (flags.m) push('$', '(?![^\\n])', '$');
        else push('$', '(?=\\n?(?![^]))', '(?=\\n?(?![^]))');
        continue;
      }
      case '|': {
        i++;
        atomStart = -1;
        push('|');
        continue;
      }
      case ')': {
        i++;
        const frame = stack.pop();
        if (!frame) fail('unmatched )');
        push(frame!.close);
        flags = frame!.saved;
        atomStart = frame!.start;
        continue;
      }
      case '(': {
        i++;
        const start = out.length;
        const saved = { ...flags };
        if (p[i] === '*') fail('backtracking control verbs are not supported');
        if (p[i] !== '?') {
          pcreGroups++;
          jsGroups++;
          groupMap[pcreGroups] = jsGroups;
          stack.push({ saved, start, close: ')' });
          push('(');
          atomStart = -1;
          continue;
        }
        i++; // past '?'
        const c = p[i];
        if (c === ':') {
          i++;
          stack.push({ saved, start, close: ')' });
          push('(?:');
        } else if (c === '=' || c === '!') {
          i++;
          usesLookahead = true;
          stack.push({ saved, start, close: ')' });
          push(`(?${c}`);
        } else if (c === '<' && (p[i + 1] === '=' || p[i + 1] === '!')) {
          const d = p[i + 1];
          i += 2;
          stack.push({ saved, start, close: ')' });
          push(`(?<${d}`);
        } else if (c === '>') {
          // atomic group: (?=(X))\N
          i++;
          jsGroups++;
          const g = jsGroups;
          usesLookahead = true;
          usesBackref = true;
          stack.push({ saved, start, close: `))\\${g})` });
          push('(?:(?=(');
        } else if (c === '#') {
          const end = p.indexOf(')', i);
          if (end < 0) fail('unterminated comment');
          i = end + 1;
          continue;
        } else if (c === 'P' && p[i + 1] === '<') {
          const m = /^P<([A-Za-z_]\w*)>/.exec(p.slice(i));
          if (!m) fail('bad group name');
          i += m![0].length;
          pcreGroups++;
          jsGroups++;
          groupMap[pcreGroups] = jsGroups;
          names.set(m![1]!, jsGroups);
          stack.push({ saved, start, close: ')' });
          push('(');
        } else if ((c === '<' || c === "'") && /^[<'][A-Za-z_]/.test(p.slice(i, i + 2))) {
          const m = /^(?:<([A-Za-z_]\w*)>|'([A-Za-z_]\w*)')/.exec(p.slice(i));
          if (!m) fail('bad group name');
          i += m![0].length;
          pcreGroups++;
          jsGroups++;
          groupMap[pcreGroups] = jsGroups;
          names.set(m![1] ?? m![2]!, jsGroups);
          stack.push({ saved, start, close: ')' });
          push('(');
        } else if (c === 'P' && p[i + 1] === '=') {
          const m = /^P=([A-Za-z_]\w*)\)/.exec(p.slice(i));
          if (!m) fail('bad (?P= reference');
          const g = names.get(m![1]!);
          if (g === undefined) fail('reference to unknown group');
          i += m![0].length;
          usesBackref = true;
          atomStart = start;
          push(`\\${g}`);
          continue;
        } else if (c !== undefined && /[imsxJUn-]/.test(c)) {
          // inline option setting: (?i) (?-i) (?i:...) (?^) not supported
          const m = /^([imsxJUn]*)(?:-([imsxJUn]*))?([:)])/.exec(p.slice(i));
          if (!m) fail('bad inline option');
          const on = m![1]!;
          const off = m![2] ?? '';
          for (const f of on + off) {
            if (f === 'J' || f === 'U' || f === 'n') fail(`inline option ${f} is not supported`);
          }
          const apply = (target: Flags): void => {
            for (const f of on) if (f === 'i' || f === 's' || f === 'm' || f === 'x') target[f] = true;
            for (const f of off) if (f === 'i' || f === 's' || f === 'm' || f === 'x') target[f] = false;
          };
          i += m![0].length;
          if (m![3] === ')') {
            // applies to the rest of the enclosing group
            apply(flags);
            continue;
          }
          const inner = { ...flags };
          apply(inner);
          stack.push({ saved, start, close: ')' });
          flags = inner;
          push('(?:');
        } else {
          fail('unsupported group construct (conditional, recursion or unknown)');
        }
        atomStart = -1;
        continue;
      }
      default: {
        i++;
        literal(ch.charCodeAt(0));
        continue;
      }
    }
  }
  if (stack.length > 0) fail('missing )');
  let source = out.join('');
  let sourceNl = outNl.join('');
  let sourceM = outM.join('');
  if (source.includes('\\@') || sourceNl.includes('\\@')) {
    const fix = (s: string): string =>
      s.replace(/\\@(\d+)/g, (_m, d: string) => {
        const js = groupMap[Number(d)];
        if (js === undefined) fail(`backreference to missing group ${d}`);
        return `\\${js}`;
      });
    source = fix(source);
    sourceNl = fix(sourceNl);
    sourceM = fix(sourceM);
  }
  if (!nlSensitive) {
    sourceNl = source;
    sourceM = source;
  }
  // Validate both with V8 now: a translation JS rejects is a load error too.
  try {
    new RegExp(source, 'd');
    if (sourceNl !== source) new RegExp(sourceNl, 'd');
    if (sourceM !== source) new RegExp(sourceM, 'm');
  } catch (error) {
    throw new PcreTranslationError(`translated pattern is not a valid JS regex (${(error as Error).message}) for /${p.slice(0, 120)}/`);
  }
  return {
    source,
    sourceNl,
    sourceM,
    groupMap,
    groupCount: pcreGroups,
    linearCandidate: !usesLookahead && !usesBackref,
  };
}
