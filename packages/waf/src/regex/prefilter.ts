/**
 * Regex prefilters: for a translated pattern (pcre.ts output), a set of literal strings such that
 * every match contains at least one of them (ASCII case-insensitively). A value containing none
 * of them cannot match, so the expression need not run. The filter is only a necessary
 * condition: when a literal is present the expression still runs.
 *
 * The analysis works on the translated JavaScript source, whose syntax is under our control:
 * literal chars (alnum, space, _), \xHH escapes, classes written as explicit byte ranges, groups,
 * alternation, quantifiers, anchors, lookarounds and backreferences.
 */

interface Info {
  /** Every string the node can match (lower-cased), when that set is small. */
  exact: Set<string> | null;
  /** A set of literals one of which occurs in every match, or null (no constraint known). */
  any: Set<string> | null;
}

const MAX_EXACT = 32;
const MAX_ANY = 64;

function score(set: Set<string> | null): number {
  if (set === null || set.size === 0) return -1;
  let min = Infinity;
  let letterOrDigit = false;
  for (const s of set) {
    min = Math.min(min, s.length);
    if (s.length === 1 && /[0-9a-z]/.test(s)) letterOrDigit = true;
  }
  if (min === 0) return -1;
  // A one-letter (or digit) literal is in nearly every value: such a set filters nothing, and the
  // literal prefilter leaves its rule out (literal-prefilter.ts). Any other set is better, e.g.
  // the command separators that 932105 and 932150 require before their command names.
  if (letterOrDigit) return 0;
  // a longer shortest literal is better; many alternatives cost a little
  return min * 10 - Math.log2(set.size);
}

function best(a: Set<string> | null, b: Set<string> | null): Set<string> | null {
  return score(b) > score(a) ? b : a;
}

function cross(a: Set<string>, b: Set<string>): Set<string> | null {
  if (a.size * b.size > MAX_EXACT) return null;
  const out = new Set<string>();
  for (const x of a) for (const y of b) out.add(x + y);
  return out;
}

function lower(c: number): number {
  return c >= 0x41 && c <= 0x5a ? c + 0x20 : c;
}

const EMPTY = (): Info => ({ exact: new Set(['']), any: null });
const UNKNOWN = (): Info => ({ exact: null, any: null });

class Parser {
  private i = 0;
  private readonly s: string;

  constructor(s: string) {
    this.s = s;
  }

  parse(): Info {
    const r = this.alternation();
    if (this.i !== this.s.length) throw new Error(`prefilter: unexpected ${this.s[this.i]} at ${this.i}`);
    return r;
  }

  private alternation(): Info {
    const branches: Info[] = [this.concat()];
    while (this.s[this.i] === '|') {
      this.i++;
      branches.push(this.concat());
    }
    if (branches.length === 1) return branches[0]!;
    let exact: Set<string> | null = new Set();
    let any: Set<string> | null = new Set();
    for (const b of branches) {
      if (exact !== null) {
        if (b.exact === null) exact = null;
        else for (const x of b.exact) exact.add(x);
        if (exact !== null && exact.size > MAX_EXACT) exact = null;
      }
      const req = best(b.any, b.exact);
      if (any !== null) {
        if (score(req) < 0) any = null;
        else for (const x of req!) any.add(x);
        if (any !== null && any.size > MAX_ANY) any = null;
      }
    }
    return { exact, any };
  }

  private concat(): Info {
    let exact: Set<string> | null = new Set(['']);
    let run: Set<string> = new Set(['']);
    let any: Set<string> | null = null;
    const flush = (): void => {
      any = best(any, run);
      run = new Set(['']);
    };
    while (this.i < this.s.length && this.s[this.i] !== '|' && this.s[this.i] !== ')') {
      const atom = this.quantified();
      if (atom.exact !== null) {
        exact = exact === null ? null : cross(exact, atom.exact);
        const next = cross(run, atom.exact);
        if (next === null) {
          flush();
          run = atom.exact.size <= MAX_EXACT ? new Set(atom.exact) : new Set(['']);
        } else run = next;
      } else {
        exact = null;
        flush();
        any = best(any, atom.any);
      }
    }
    flush();
    return { exact, any };
  }

  private quantified(): Info {
    const atom = this.atom();
    const c = this.s[this.i];
    let min: number;
    let max: number;
    if (c === '*' || c === '+' || c === '?') {
      this.i++;
      min = c === '+' ? 1 : 0;
      max = c === '?' ? 1 : Infinity;
    } else if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.s.slice(this.i));
      if (!m) return atom;
      this.i += m[0].length;
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
    } else return atom;
    if (this.s[this.i] === '?') this.i++; // lazy
    if (min === 0) {
      if (max === 1 && atom.exact !== null) {
        const e = new Set(atom.exact);
        e.add('');
        return { exact: e, any: null };
      }
      return UNKNOWN();
    }
    if (min === 1 && max === 1) return atom;
    return { exact: null, any: best(atom.any, atom.exact) };
  }

  private atom(): Info {
    const s = this.s;
    const c = s[this.i]!;
    if (c === '(') {
      this.i++;
      let look = false;
      if (s[this.i] === '?') {
        const three = s.slice(this.i, this.i + 3);
        if (three.startsWith('?:')) this.i += 2;
        else if (three.startsWith('?=') || three.startsWith('?!')) {
          this.i += 2;
          look = true;
        } else if (three === '?<=' || three === '?<!') {
          this.i += 3;
          look = true;
        } else throw new Error('prefilter: unknown group');
      }
      const inner = this.alternation();
      if (s[this.i] !== ')') throw new Error('prefilter: missing )');
      this.i++;
      return look ? EMPTY() : inner;
    }
    if (c === '[') {
      const end = this.classEnd();
      const body = s.slice(this.i + 1, end);
      this.i = end + 1;
      if (body.startsWith('^')) return UNKNOWN();
      const codes = parseClassBody(body);
      if (codes === null) return UNKNOWN();
      const chars = new Set<string>();
      for (const code of codes) chars.add(String.fromCharCode(lower(code)));
      if (chars.size <= 4) return { exact: chars, any: null };
      // A larger class of punctuation (942420-942432's "restricted SQL characters", thirty of
      // them): one of its bytes is in every match, a literal set that passes over the values
      // without any. Not one with a letter or digit, which nearly every value has.
      for (const ch of chars) if (/[0-9a-z]/.test(ch)) return UNKNOWN();
      return { exact: null, any: chars };
    }
    if (c === '^' || c === '$') {
      this.i++;
      return EMPTY();
    }
    if (c === '\\') {
      const n = s[this.i + 1]!;
      if (n === 'x') {
        const code = parseInt(s.slice(this.i + 2, this.i + 4), 16);
        this.i += 4;
        return { exact: new Set([String.fromCharCode(lower(code))]), any: null };
      }
      if (n === 'b' || n === 'B') {
        this.i += 2;
        return EMPTY();
      }
      if (/[0-9]/.test(n)) {
        let k = this.i + 1;
        while (/[0-9]/.test(s[k] ?? '')) k++;
        this.i = k;
        return UNKNOWN();
      }
      throw new Error(`prefilter: unexpected escape \\${n}`);
    }
    this.i++;
    return { exact: new Set([String.fromCharCode(lower(c.charCodeAt(0)))]), any: null };
  }

  private classEnd(): number {
    const s = this.s;
    let k = this.i + 1;
    if (s[k] === '^') k++;
    if (s[k] === ']') return k; // [^] or []
    while (k < s.length && s[k] !== ']') k += s[k] === '\\' ? 4 : 1;
    return k;
  }
}

/** Codes of a class body written by pcre.ts (chars, \xHH, ranges a-b), or null when large (more than MAX_ANY). */
function parseClassBody(body: string): number[] | null {
  const items: number[] = [];
  let k = 0;
  const read = (): number => {
    if (body[k] === '\\') {
      const v = parseInt(body.slice(k + 2, k + 4), 16);
      k += 4;
      return v;
    }
    return body.charCodeAt(k++);
  };
  while (k < body.length) {
    const a = read();
    if (body[k] === '-' && k + 1 < body.length) {
      k++;
      const b = read();
      if (b - a >= MAX_ANY) return null;
      for (let c = a; c <= b; c++) items.push(c);
    } else items.push(a);
    if (items.length > MAX_ANY) return null;
  }
  return items;
}

/**
 * The literals one of which every match of `source` (a pcre.ts translation) contains,
 * lower-cased; undefined when no useful set exists (then the expression always runs).
 */
export function requiredLiterals(source: string): string[] | undefined {
  let info: Info;
  try {
    info = new Parser(source).parse();
  } catch {
    return undefined;
  }
  const set = best(info.any, info.exact);
  if (score(set) < 0) return undefined;
  return [...set!];
}
