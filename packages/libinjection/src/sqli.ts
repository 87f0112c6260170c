/**
 * SQL injection detection with libinjection's algorithm (v3.9 as bundled in ModSecurity 3.0.9):
 * tokenize the input as SQL in up to five contexts (as is, as if inside '...', as if inside "...",
 * ANSI or MySQL comment rules), fold the tokens into a fingerprint of at most five token types,
 * and look the fingerprint up in the table of known SQLi fingerprints; a few small fingerprints
 * are then re-checked against the input to cut false positives.
 *
 * Written here from the published algorithm. Byte-level behaviour of the C code is kept where it
 * changes results: token values hold at most 31 bytes, a NUL byte is whitespace and ends words,
 * bytes >= 0x80 are signed chars in some comparisons. The word and fingerprint table is data
 * derived from the installed reference engine (data.ts).
 */
import { loadSqliData } from './data.ts';

const FLAG_QUOTE_NONE = 1;
const FLAG_QUOTE_SINGLE = 2;
const FLAG_QUOTE_DOUBLE = 4;
const FLAG_SQL_ANSI = 8;
const FLAG_SQL_MYSQL = 16;

const MAX_TOKENS = 5;
const TOKEN_SIZE = 32;

// token types (as in the fingerprint alphabet)
const T_NONE = '';
const T_KEYWORD = 'k';
const T_UNION = 'U';
const T_GROUP = 'B';
const T_EXPRESSION = 'E';
const T_SQLTYPE = 't';
const T_FUNCTION = 'f';
const T_BAREWORD = 'n';
const T_NUMBER = '1';
const T_VARIABLE = 'v';
const T_STRING = 's';
const T_OPERATOR = 'o';
const T_LOGIC_OPERATOR = '&';
const T_COMMENT = 'c';
const T_COLLATE = 'A';
const T_LEFTPARENS = '(';
const T_RIGHTPARENS = ')';
const T_LEFTBRACE = '{';
const T_RIGHTBRACE = '}';
const T_DOT = '.';
const T_COMMA = ',';
const T_COLON = ':';
const T_SEMICOLON = ';';
const T_TSQL = 'T';
const T_UNKNOWN = '?';
const T_EVIL = 'X';
const T_FINGERPRINT = 'F';
const T_BACKSLASH = '\\';

class Token {
  pos = 0;
  len = 0;
  count = 0;
  type = T_NONE;
  strOpen = '';
  strClose = '';
  /** At most 31 bytes of the token's text. */
  val = '';

  clear(): void {
    this.pos = 0;
    this.len = 0;
    this.count = 0;
    this.type = T_NONE;
    this.strOpen = '';
    this.strClose = '';
    this.val = '';
  }

  copyFrom(o: Token): void {
    this.pos = o.pos;
    this.len = o.len;
    this.count = o.count;
    this.type = o.type;
    this.strOpen = o.strOpen;
    this.strClose = o.strClose;
    this.val = o.val;
  }

  assign(type: string, pos: number, len: number, src: string, from: number): void {
    const last = len < TOKEN_SIZE ? len : TOKEN_SIZE - 1;
    this.type = type;
    this.pos = pos;
    this.len = last;
    this.val = src.substr(from, last);
  }

  assignChar(type: string, pos: number, value: string): void {
    this.type = type;
    this.pos = pos;
    this.len = 1;
    this.val = value;
  }
}

let words: ReadonlyMap<string, string> | undefined;
/**
 * For each word in the table, a flag at wordHash(word): a word whose flag is clear is in no
 * table, known without building its upper-cased copy (most words of benign input).
 */
const WORD_FLAGS = new Uint8Array(1 << 16);

/**
 * Hash of a word's length, first two and last bytes, ASCII case-insensitive: & 0xdf folds a-z onto
 * A-Z (and other bytes onto others: the hash only needs to agree on the table's upper-case keys).
 */
function wordHash(s: string): number {
  const n = s.length;
  const c0 = s.charCodeAt(0) & 0xdf;
  const c1 = n > 1 ? s.charCodeAt(1) & 0xdf : 0;
  const cl = s.charCodeAt(n - 1) & 0xdf;
  return (Math.imul(n * 0x3b + c0, 0x9e3779b1) ^ Math.imul(c1 * 0x95 + cl, 0x85ebca6b)) >>> 16;
}

/**
 * For each word-boundary prefix of a multi-word table entry ("FOR", "FOR UPDATE" of "FOR UPDATE
 * SKIP"), a flag at wordHash(prefix): two adjacent words can only merge (mergeWords) when the
 * first one's flag is set, which spares building the phrase for nearly every pair.
 */
const MERGE_FLAGS = new Uint8Array(1 << 16);

function table(): ReadonlyMap<string, string> {
  if (!words) {
    words = loadSqliData().words;
    for (const key of words.keys()) {
      if (key.length > 0) WORD_FLAGS[wordHash(key)] = 1;
      for (let space = key.indexOf(' '); space > 0; space = key.indexOf(' ', space + 1)) MERGE_FLAGS[wordHash(key.slice(0, space))] = 1;
    }
  }
  return words;
}

/** A NUL or a byte >= 0x80: such a word is in no table. */
const NOT_A_KEYWORD = /[\0\x80-\uffff]/;

/** libinjection's keyword lookup: ASCII case-insensitive exact match; words with NUL or high bytes never match. */
function lookupWord(s: string): string {
  const t = table(); // first: it fills WORD_FLAGS
  if (s.length === 0) return t.get(s) ?? T_NONE;
  if (WORD_FLAGS[wordHash(s)] === 0) return T_NONE;
  if (NOT_A_KEYWORD.test(s)) return T_NONE;
  // the rest is ASCII, which toUpperCase maps exactly as the C code's a-z -> A-Z
  return t.get(s.toUpperCase()) ?? T_NONE;
}

/** cstrcasecmp(UPPER, val, len) === 0 */
function ieq(upper: string, val: string, len: number): boolean {
  if (len !== upper.length) return false;
  for (let i = 0; i < len; i++) {
    let c = val.charCodeAt(i);
    if (c >= 0x61 && c <= 0x7a) c -= 0x20;
    if (c !== upper.charCodeAt(i)) return false;
  }
  return true;
}

/** char_is_white: " \t\n\v\f\r\xa0\0" (strchr also finds the terminating NUL). */
function isWhite(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d) || c === 0xa0 || c === 0 || Number.isNaN(c);
}

const WORD_STOP = new Uint8Array(256);
for (const ch of ' []{}<>:\\?=@!#~+-*/&|^%(),\';\t\n\x0b\f\r"\xa0\0') WORD_STOP[ch.charCodeAt(0)] = 1;
const VAR_STOP = new Uint8Array(256);
for (const ch of " <>:\\?=@!#~+-*/&|^%(),';\t\n\x0b\f\r'`\"\0") VAR_STOP[ch.charCodeAt(0)] = 1;

/** strlenspn: bytes from `set` (and NUL, which strchr always finds). */
function spanOf(s: string, from: number, end: number, set: (c: number) => boolean): number {
  let i = from;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c !== 0 && !set(c)) break;
    i++;
  }
  return i - from;
}
function spanUntil(s: string, from: number, end: number, stop: Uint8Array): number {
  let i = from;
  while (i < end && !stop[s.charCodeAt(i)]) i++;
  return i - from;
}

/** memchr2: index of c0 c1 at or after `from` (within [from, end)), or -1. */
function find2(s: string, from: number, end: number, c0: string, c1: string): number {
  if (end - from < 2) return -1;
  for (let i = from; i < end - 1; i++) if (s[i] === c0 && s[i + 1] === c1) return i;
  return -1;
}

function isArithmeticOp(t: Token): boolean {
  const ch = t.val;
  return t.type === T_OPERATOR && t.len === 1 && (ch === '*' || ch === '/' || ch === '-' || ch === '+' || ch === '%');
}

function isUnaryOp(t: Token): boolean {
  if (t.type !== T_OPERATOR) return false;
  switch (t.len) {
    case 1:
      return t.val === '+' || t.val === '-' || t.val === '!' || t.val === '~';
    case 2:
      return t.val === '!!';
    case 3:
      return ieq('NOT', t.val, 3);
    default:
      return false;
  }
}

class State {
  s = '';
  slen = 0;
  flags = 0;
  pos = 0;
  readonly tokens: Token[] = Array.from({ length: 8 }, () => new Token());
  /** Tokens [0, dirty) may hold a previous fingerprint's values: reset clears only those. */
  private dirty = 8;
  /** fold's last comment token (one object for every call). */
  private readonly lastComment = new Token();
  current: Token;
  fingerprint = '';
  statsCommentDdx = 0;
  statsCommentHash = 0;
  statsTokens = 0;

  constructor() {
    this.current = this.tokens[0]!;
  }

  reset(flags: number): void {
    this.flags = flags === 0 ? FLAG_QUOTE_NONE | FLAG_SQL_ANSI : flags;
    this.pos = 0;
    const tokens = this.tokens;
    for (let i = 0; i < this.dirty; i++) tokens[i]!.clear();
    this.dirty = 1;
    this.current = tokens[0]!;
    this.fingerprint = '';
    this.statsCommentDdx = 0;
    this.statsCommentHash = 0;
    this.statsTokens = 0;
  }

  /** The byte at i, or 0 past the end (the C input is NUL-terminated). */
  at(i: number): number {
    return i < this.slen ? this.s.charCodeAt(i) : 0;
  }

  // ------------------------------------------------------------------ parsers

  parseWhite(): number {
    return this.pos + 1;
  }

  parseOperator1(): number {
    this.current.assignChar(T_OPERATOR, this.pos, this.s[this.pos]!);
    return this.pos + 1;
  }

  parseOther(): number {
    this.current.assignChar(T_UNKNOWN, this.pos, this.s[this.pos]!);
    return this.pos + 1;
  }

  parseChar(): number {
    const ch = this.s[this.pos]!;
    this.current.assignChar(ch, this.pos, ch);
    return this.pos + 1;
  }

  parseEolComment(): number {
    const pos = this.pos;
    const nl = this.s.indexOf('\n', pos);
    if (nl < 0 || nl >= this.slen) {
      this.current.assign(T_COMMENT, pos, this.slen - pos, this.s, pos);
      return this.slen;
    }
    this.current.assign(T_COMMENT, pos, nl - pos, this.s, pos);
    return nl + 1;
  }

  parseHash(): number {
    this.statsCommentHash += 1;
    if (this.flags & FLAG_SQL_MYSQL) {
      this.statsCommentHash += 1;
      return this.parseEolComment();
    }
    this.current.assignChar(T_OPERATOR, this.pos, '#');
    return this.pos + 1;
  }

  parseDash(): number {
    const pos = this.pos;
    const slen = this.slen;
    const s = this.s;
    if (pos + 2 < slen && s[pos + 1] === '-' && isWhite(s.charCodeAt(pos + 2))) return this.parseEolComment();
    if (pos + 2 === slen && s[pos + 1] === '-') return this.parseEolComment();
    if (pos + 1 < slen && s[pos + 1] === '-' && this.flags & FLAG_SQL_ANSI) {
      this.statsCommentDdx += 1;
      return this.parseEolComment();
    }
    this.current.assignChar(T_OPERATOR, pos, '-');
    return pos + 1;
  }

  parseSlash(): number {
    const s = this.s;
    const slen = this.slen;
    const pos = this.pos;
    if (pos + 1 === slen || s[pos + 1] !== '*') return this.parseOperator1();
    const end = find2(s, pos + 2, slen, '*', '/');
    const clen = end < 0 ? slen - pos : end + 2 - pos;
    let ctype = T_COMMENT;
    // a nested "/*" inside the comment, or MySQL's "/*!" conditional comment: evil
    if (end >= 0 && find2(s, pos + 2, pos + 2 + (end - (pos + 1)), '/', '*') >= 0) ctype = T_EVIL;
    else if (pos + 2 < slen && s[pos + 2] === '!') ctype = T_EVIL;
    this.current.assign(ctype, pos, clen, s, pos);
    return pos + clen;
  }

  parseBackslash(): number {
    const pos = this.pos;
    if (pos + 1 < this.slen && this.s[pos + 1] === 'N') {
      this.current.assign(T_NUMBER, pos, 2, this.s, pos);
      return pos + 2;
    }
    this.current.assignChar(T_BACKSLASH, pos, this.s[pos]!);
    return pos + 1;
  }

  parseOperator2(): number {
    const s = this.s;
    const pos = this.pos;
    if (pos + 1 >= this.slen) return this.parseOperator1();
    if (pos + 2 < this.slen && s[pos] === '<' && s[pos + 1] === '=' && s[pos + 2] === '>') {
      this.current.assign(T_OPERATOR, pos, 3, s, pos);
      return pos + 3;
    }
    const ch = lookupWord(s.substr(pos, 2));
    if (ch !== T_NONE) {
      this.current.assign(ch, pos, 2, s, pos);
      return pos + 2;
    }
    if (s[pos] === ':') {
      this.current.assign(T_COLON, pos, 1, s, pos);
      return pos + 1;
    }
    return this.parseOperator1();
  }

  /** parse_string_core: a string delimited by `delim`, starting `offset` bytes after pos. */
  parseStringCore(pos: number, delim: string, offset: number, st: Token = this.current): number {
    const s = this.s;
    const len = this.slen;
    const start = pos + offset;
    let q = s.indexOf(delim, start);
    if (q >= len) q = -1;
    st.strOpen = offset > 0 ? delim : '';
    for (;;) {
      if (q < 0) {
        st.assign(T_STRING, start, len - start, s, start);
        st.strClose = '';
        return len;
      }
      // backslash-escaped (odd number of backslashes before the quote, counted back to `start`)?
      let b = q - 1;
      while (b >= start && s[b] === '\\') b--;
      if (((q - 1 - b) & 1) === 1) {
        q = s.indexOf(delim, q + 1);
        if (q >= len) q = -1;
        continue;
      }
      if (q + 1 < len && s[q + 1] === s[q]) {
        q = s.indexOf(delim, q + 2);
        if (q >= len) q = -1;
        continue;
      }
      st.assign(T_STRING, start, q - start, s, start);
      st.strClose = delim;
      return q + 1;
    }
  }

  parseString(): number {
    return this.parseStringCore(this.pos, this.s[this.pos]!, 1);
  }

  parseEstring(): number {
    const pos = this.pos;
    if (pos + 2 >= this.slen || this.s[pos + 1] !== "'") return this.parseWord();
    return this.parseStringCore(pos, "'", 2);
  }

  parseUstring(): number {
    const pos = this.pos;
    if (pos + 2 < this.slen && this.s[pos + 1] === '&' && this.s[pos + 2] === "'") {
      this.pos += 2;
      const r = this.parseString();
      this.current.strOpen = 'u';
      if (this.current.strClose === "'") this.current.strClose = 'u';
      return r;
    }
    return this.parseWord();
  }

  parseQstringCore(offset: number): number {
    const s = this.s;
    const slen = this.slen;
    const pos = this.pos + offset;
    if (pos >= slen || (s[pos] !== 'q' && s[pos] !== 'Q') || pos + 2 >= slen || s[pos + 1] !== "'") return this.parseWord();
    let ch = s.charCodeAt(pos + 2);
    // signed char: bytes >= 0x80 are negative, so "< 33" too
    if (ch < 33 || ch >= 0x80) return this.parseWord();
    let close = String.fromCharCode(ch);
    if (close === '(') close = ')';
    else if (close === '[') close = ']';
    else if (close === '{') close = '}';
    else if (close === '<') close = '>';
    void ch;
    ch = 0;
    const end = find2(s, pos + 3, slen, close, "'");
    if (end < 0) {
      this.current.assign(T_STRING, pos + 3, slen - pos - 3, s, pos + 3);
      this.current.strOpen = 'q';
      this.current.strClose = '';
      return slen;
    }
    this.current.assign(T_STRING, pos + 3, end - pos - 3, s, pos + 3);
    this.current.strOpen = 'q';
    this.current.strClose = 'q';
    return end + 2;
  }

  parseQstring(): number {
    return this.parseQstringCore(0);
  }

  parseNqstring(): number {
    const pos = this.pos;
    if (pos + 2 < this.slen && this.s[pos + 1] === "'") return this.parseEstring();
    return this.parseQstringCore(1);
  }

  parseBstring(): number {
    const s = this.s;
    const pos = this.pos;
    const slen = this.slen;
    if (pos + 2 >= slen || s[pos + 1] !== "'") return this.parseWord();
    const wlen = spanOf(s, pos + 2, slen, (c) => c === 0x30 || c === 0x31);
    if (pos + 2 + wlen >= slen || s[pos + 2 + wlen] !== "'") return this.parseWord();
    this.current.assign(T_NUMBER, pos, wlen + 3, s, pos);
    return pos + 2 + wlen + 1;
  }

  parseXstring(): number {
    const s = this.s;
    const pos = this.pos;
    const slen = this.slen;
    if (pos + 2 >= slen || s[pos + 1] !== "'") return this.parseWord();
    const wlen = spanOf(s, pos + 2, slen, isHexDigit);
    if (pos + 2 + wlen >= slen || s[pos + 2 + wlen] !== "'") return this.parseWord();
    this.current.assign(T_NUMBER, pos, wlen + 3, s, pos);
    return pos + 2 + wlen + 1;
  }

  parseBword(): number {
    const s = this.s;
    const pos = this.pos;
    let end = s.indexOf(']', pos);
    if (end >= this.slen) end = -1;
    if (end < 0) {
      this.current.assign(T_BAREWORD, pos, this.slen - pos, s, pos);
      return this.slen;
    }
    this.current.assign(T_BAREWORD, pos, end - pos + 1, s, pos);
    return end + 1;
  }

  parseWord(): number {
    const s = this.s;
    const pos = this.pos;
    const wlen = spanUntil(s, pos, this.slen, WORD_STOP);
    const cur = this.current;
    cur.assign(T_BAREWORD, pos, wlen, s, pos);
    // "SELECT.1", "SELECT`col`": a keyword before '.' or '`' is its own token
    for (let i = 0; i < cur.len; i++) {
      const d = s.charCodeAt(pos + i);
      if (d === 0x2e || d === 0x60) {
        const ch = lookupWord(cur.val.slice(0, i));
        if (ch !== T_NONE && ch !== T_BAREWORD) {
          cur.clear();
          cur.assign(ch, pos, i, s, pos);
          return pos + i;
        }
      }
    }
    if (wlen < TOKEN_SIZE) {
      const ch = lookupWord(cur.val.slice(0, wlen));
      cur.type = ch === T_NONE ? T_BAREWORD : ch;
    }
    return pos + wlen;
  }

  parseTick(): number {
    const r = this.parseStringCore(this.pos, '`', 1);
    const ch = lookupWord(this.current.val.slice(0, this.current.len));
    this.current.type = ch === T_FUNCTION ? T_FUNCTION : T_BAREWORD;
    return r;
  }

  parseVar(): number {
    const s = this.s;
    const slen = this.slen;
    let pos = this.pos + 1;
    if (pos < slen && s[pos] === '@') {
      pos += 1;
      this.current.count = 2;
    } else this.current.count = 1;
    if (pos < slen) {
      if (s[pos] === '`') {
        this.pos = pos;
        const r = this.parseTick();
        this.current.type = T_VARIABLE;
        return r;
      }
      if (s[pos] === "'" || s[pos] === '"') {
        this.pos = pos;
        const r = this.parseString();
        this.current.type = T_VARIABLE;
        return r;
      }
    }
    const xlen = spanUntil(s, pos, slen, VAR_STOP);
    this.current.assign(T_VARIABLE, pos, xlen, s, pos);
    return pos + xlen;
  }

  parseMoney(): number {
    const s = this.s;
    const slen = this.slen;
    const pos = this.pos;
    if (pos + 1 === slen) {
      this.current.assignChar(T_BAREWORD, pos, '$');
      return slen;
    }
    let xlen = spanOf(s, pos + 1, slen, (c) => (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x2c);
    if (xlen === 0) {
      if (s[pos + 1] === '$') {
        const end = find2(s, pos + 2, slen, '$', '$');
        if (end < 0) {
          this.current.assign(T_STRING, pos + 2, slen - (pos + 2), s, pos + 2);
          this.current.strOpen = '$';
          this.current.strClose = '';
          return slen;
        }
        this.current.assign(T_STRING, pos + 2, end - (pos + 2), s, pos + 2);
        this.current.strOpen = '$';
        this.current.strClose = '$';
        return end + 2;
      }
      xlen = spanOf(s, pos + 1, slen, (c) => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a));
      if (xlen === 0) {
        this.current.assignChar(T_BAREWORD, pos, '$');
        return pos + 1;
      }
      if (pos + xlen + 1 === slen || s[pos + xlen + 1] !== '$') {
        this.current.assignChar(T_BAREWORD, pos, '$');
        return pos + 1;
      }
      const tag = s.substr(pos, xlen + 2);
      let end = s.indexOf(tag, pos + xlen + 2);
      if (end >= 0 && end + tag.length > slen) end = -1;
      if (end < 0) {
        this.current.assign(T_STRING, pos + xlen + 2, slen - pos - xlen - 2, s, pos + xlen + 2);
        this.current.strOpen = '$';
        this.current.strClose = '';
        return slen;
      }
      this.current.assign(T_STRING, pos + xlen + 2, end - (pos + xlen + 2), s, pos + xlen + 2);
      this.current.strOpen = '$';
      this.current.strClose = '$';
      return end + xlen + 2;
    }
    if (xlen === 1 && s[pos + 1] === '.') return this.parseWord();
    this.current.assign(T_NUMBER, pos, 1 + xlen, s, pos);
    return pos + 1 + xlen;
  }

  parseNumber(): number {
    const s = this.s;
    const slen = this.slen;
    let pos = this.pos;
    const isDigit = (i: number): boolean => {
      const c = s.charCodeAt(i);
      return c >= 0x30 && c <= 0x39;
    };
    if (s[pos] === '0' && pos + 1 < slen) {
      const c1 = s[pos + 1];
      let digits: ((c: number) => boolean) | undefined;
      if (c1 === 'X' || c1 === 'x') digits = isHexDigit;
      else if (c1 === 'B' || c1 === 'b') digits = (c) => c === 0x30 || c === 0x31;
      if (digits) {
        const xlen = spanOf(s, pos + 2, slen, digits);
        if (xlen === 0) {
          this.current.assign(T_BAREWORD, pos, 2, s, pos);
          return pos + 2;
        }
        this.current.assign(T_NUMBER, pos, 2 + xlen, s, pos);
        return pos + 2 + xlen;
      }
    }
    const start = pos;
    while (pos < slen && isDigit(pos)) pos++;
    if (pos < slen && s[pos] === '.') {
      pos++;
      while (pos < slen && isDigit(pos)) pos++;
      if (pos - start === 1) {
        this.current.assignChar(T_DOT, start, '.');
        return pos;
      }
    }
    let haveE = false;
    let haveExp = false;
    if (pos < slen && (s[pos] === 'E' || s[pos] === 'e')) {
      haveE = true;
      pos++;
      if (pos < slen && (s[pos] === '+' || s[pos] === '-')) pos++;
      while (pos < slen && isDigit(pos)) {
        haveExp = true;
        pos++;
      }
    }
    if (pos < slen && (s[pos] === 'd' || s[pos] === 'D' || s[pos] === 'f' || s[pos] === 'F')) {
      if (pos + 1 === slen) pos++;
      else if (isWhite(s.charCodeAt(pos + 1)) || s[pos + 1] === ';') pos++;
      else if (s[pos + 1] === 'u' || s[pos + 1] === 'U') pos++;
    }
    if (haveE && !haveExp) this.current.assign(T_BAREWORD, start, pos - start, s, start);
    else this.current.assign(T_NUMBER, start, pos - start, s, start);
    return pos;
  }

  dispatch(c: number): number {
    if (c <= 32 || c === 127 || c === 160) return this.parseWhite();
    switch (c) {
      case 33: // !
      case 38: // &
      case 42: // *
      case 58: // :
      case 60: // <
      case 61: // =
      case 62: // >
      case 124: // |
        return this.parseOperator2();
      case 34: // "
      case 39: // '
        return this.parseString();
      case 35:
        return this.parseHash();
      case 36:
        return this.parseMoney();
      case 37: // %
      case 43: // +
      case 94: // ^
      case 126: // ~
        return this.parseOperator1();
      case 40: // (
      case 41: // )
      case 44: // ,
      case 59: // ;
      case 123: // {
      case 125: // }
        return this.parseChar();
      case 45:
        return this.parseDash();
      case 46: // .
        return this.parseNumber();
      case 47:
        return this.parseSlash();
      case 63: // ?
      case 93: // ]
        return this.parseOther();
      case 64:
        return this.parseVar();
      case 66:
      case 98:
        return this.parseBstring();
      case 69:
      case 101:
        return this.parseEstring();
      case 78:
      case 110:
        return this.parseNqstring();
      case 81:
      case 113:
        return this.parseQstring();
      case 85:
      case 117:
        return this.parseUstring();
      case 88:
      case 120:
        return this.parseXstring();
      case 91:
        return this.parseBword();
      case 92:
        return this.parseBackslash();
      case 96:
        return this.parseTick();
      default:
        if (c >= 48 && c <= 57) return this.parseNumber();
        return this.parseWord();
    }
  }

  /** libinjection_sqli_tokenize: fills this.current; false at the end of input. */
  tokenize(): boolean {
    const slen = this.slen;
    if (slen === 0) return false;
    const cur = this.current;
    cur.clear();
    if (this.pos === 0 && this.flags & (FLAG_QUOTE_SINGLE | FLAG_QUOTE_DOUBLE)) {
      this.pos = this.parseStringCore(0, this.flags & FLAG_QUOTE_SINGLE ? "'" : '"', 0, cur);
      this.statsTokens += 1;
      return true;
    }
    while (this.pos < slen) {
      this.pos = this.dispatch(this.s.charCodeAt(this.pos));
      if (cur.type !== T_NONE) {
        this.statsTokens += 1;
        return true;
      }
    }
    return false;
  }

  /** syntax_merge_words: "UNION" + "ALL" -> "UNION ALL" when the phrase is a keyword. */
  mergeWords(a: Token, b: Token): boolean {
    const okA =
      a.type === T_KEYWORD ||
      a.type === T_BAREWORD ||
      a.type === T_OPERATOR ||
      a.type === T_UNION ||
      a.type === T_FUNCTION ||
      a.type === T_EXPRESSION ||
      a.type === T_TSQL ||
      a.type === T_SQLTYPE;
    if (!okA) return false;
    const okB =
      b.type === T_KEYWORD ||
      b.type === T_BAREWORD ||
      b.type === T_OPERATOR ||
      b.type === T_UNION ||
      b.type === T_FUNCTION ||
      b.type === T_EXPRESSION ||
      b.type === T_TSQL ||
      b.type === T_SQLTYPE ||
      b.type === T_LOGIC_OPERATOR;
    if (!okB) return false;
    const sz3 = a.len + b.len + 1;
    if (sz3 >= TOKEN_SIZE) return false;
    const first = a.val.slice(0, a.len);
    table(); // first: it fills MERGE_FLAGS
    if (first.length === 0 || MERGE_FLAGS[wordHash(first)] === 0) return false;
    const merged = `${first} ${b.val.slice(0, b.len)}`;
    const ch = lookupWord(merged);
    if (ch === T_NONE) return false;
    a.type = ch;
    a.len = sz3;
    a.val = merged;
    return true;
  }

  /** libinjection_sqli_fold: returns the number of tokens of the fingerprint. */
  fold(): number {
    const v = this.tokens;
    const lastComment = this.lastComment;
    lastComment.type = T_NONE;
    let pos = 0;
    let left = 0;
    let more = true;
    this.current = v[0]!;
    while (more) {
      more = this.tokenize();
      const t = this.current;
      if (!(t.type === T_COMMENT || t.type === T_LEFTPARENS || t.type === T_SQLTYPE || isUnaryOp(t))) break;
    }
    if (!more) return 0;
    pos += 1;
    for (;;) {
      if (pos >= MAX_TOKENS) {
        const t0 = v[0]!.type;
        const t1 = v[1]!.type;
        const t2 = v[2]!.type;
        const t3 = v[3]!.type;
        const t4 = v[4]!.type;
        if (
          (t0 === T_NUMBER && (t1 === T_OPERATOR || t1 === T_COMMA) && t2 === T_LEFTPARENS && t3 === T_NUMBER && t4 === T_RIGHTPARENS) ||
          (t0 === T_BAREWORD &&
            t1 === T_OPERATOR &&
            t2 === T_LEFTPARENS &&
            (t3 === T_BAREWORD || t3 === T_NUMBER) &&
            t4 === T_RIGHTPARENS) ||
          (t0 === T_NUMBER && t1 === T_RIGHTPARENS && t2 === T_COMMA && t3 === T_LEFTPARENS && t4 === T_NUMBER) ||
          (t0 === T_BAREWORD && t1 === T_RIGHTPARENS && t2 === T_OPERATOR && t3 === T_LEFTPARENS && t4 === T_BAREWORD)
        ) {
          if (pos > MAX_TOKENS) {
            v[1]!.copyFrom(v[MAX_TOKENS]!);
            pos = 2;
            left = 0;
          } else {
            pos = 1;
            left = 0;
          }
        }
      }
      if (!more || left >= MAX_TOKENS) {
        left = pos;
        break;
      }
      // get up to two tokens
      while (more && pos <= MAX_TOKENS && pos - left < 2) {
        this.current = v[pos]!;
        if (pos >= this.dirty) this.dirty = pos + 1;
        more = this.tokenize();
        if (more) {
          if (this.current.type === T_COMMENT) lastComment.copyFrom(this.current);
          else {
            lastComment.type = T_NONE;
            pos += 1;
          }
        }
      }
      if (pos - left < 2) {
        left = pos;
        continue;
      }
      const a = v[left]!;
      const b = v[left + 1]!;
      if (a.type === T_STRING && b.type === T_STRING) {
        pos -= 1;
        continue;
      } else if (a.type === T_SEMICOLON && b.type === T_SEMICOLON) {
        pos -= 1;
        continue;
      } else if ((a.type === T_OPERATOR || a.type === T_LOGIC_OPERATOR) && (isUnaryOp(b) || b.type === T_SQLTYPE)) {
        pos -= 1;
        left = 0;
        continue;
      } else if (a.type === T_LEFTPARENS && isUnaryOp(b)) {
        pos -= 1;
        if (left > 0) left -= 1;
        continue;
      } else if (this.mergeWords(a, b)) {
        pos -= 1;
        if (left > 0) left -= 1;
        continue;
      } else if (
        a.type === T_SEMICOLON &&
        b.type === T_FUNCTION &&
        (b.val[0] === 'I' || b.val[0] === 'i') &&
        (b.val[1] === 'F' || b.val[1] === 'f')
      ) {
        b.type = T_TSQL;
        continue;
      } else if (
        (a.type === T_BAREWORD || a.type === T_VARIABLE) &&
        b.type === T_LEFTPARENS &&
        (ieq('USER_ID', a.val, a.len) ||
          ieq('USER_NAME', a.val, a.len) ||
          ieq('DATABASE', a.val, a.len) ||
          ieq('PASSWORD', a.val, a.len) ||
          ieq('USER', a.val, a.len) ||
          ieq('CURRENT_USER', a.val, a.len) ||
          ieq('CURRENT_DATE', a.val, a.len) ||
          ieq('CURRENT_TIME', a.val, a.len) ||
          ieq('CURRENT_TIMESTAMP', a.val, a.len) ||
          ieq('LOCALTIME', a.val, a.len) ||
          ieq('LOCALTIMESTAMP', a.val, a.len))
      ) {
        a.type = T_FUNCTION;
        continue;
      } else if (a.type === T_KEYWORD && (ieq('IN', a.val, a.len) || ieq('NOT IN', a.val, a.len))) {
        a.type = b.type === T_LEFTPARENS ? T_OPERATOR : T_BAREWORD;
        continue;
      } else if (a.type === T_OPERATOR && (ieq('LIKE', a.val, a.len) || ieq('NOT LIKE', a.val, a.len))) {
        if (b.type === T_LEFTPARENS) a.type = T_FUNCTION;
      } else if (
        a.type === T_SQLTYPE &&
        (b.type === T_BAREWORD ||
          b.type === T_NUMBER ||
          b.type === T_SQLTYPE ||
          b.type === T_LEFTPARENS ||
          b.type === T_FUNCTION ||
          b.type === T_VARIABLE ||
          b.type === T_STRING)
      ) {
        a.copyFrom(b);
        pos -= 1;
        left = 0;
        continue;
      } else if (a.type === T_COLLATE && b.type === T_BAREWORD) {
        if (b.val.indexOf('_') >= 0) {
          b.type = T_SQLTYPE;
          left = 0;
        }
      } else if (a.type === T_BACKSLASH) {
        if (isArithmeticOp(b)) a.type = T_NUMBER;
        else {
          a.copyFrom(b);
          pos -= 1;
        }
        left = 0;
        continue;
      } else if (a.type === T_LEFTPARENS && b.type === T_LEFTPARENS) {
        pos -= 1;
        left = 0;
        continue;
      } else if (a.type === T_RIGHTPARENS && b.type === T_RIGHTPARENS) {
        pos -= 1;
        left = 0;
        continue;
      } else if (a.type === T_LEFTBRACE && b.type === T_BAREWORD) {
        if (b.len === 0) {
          b.type = T_EVIL;
          return left + 2;
        }
        left = 0;
        pos -= 2;
        continue;
      } else if (b.type === T_RIGHTBRACE) {
        pos -= 1;
        left = 0;
        continue;
      }
      // get one more token
      while (more && pos <= MAX_TOKENS && pos - left < 3) {
        this.current = v[pos]!;
        if (pos >= this.dirty) this.dirty = pos + 1;
        more = this.tokenize();
        if (more) {
          if (this.current.type === T_COMMENT) lastComment.copyFrom(this.current);
          else {
            lastComment.type = T_NONE;
            pos += 1;
          }
        }
      }
      if (pos - left < 3) {
        left = pos;
        continue;
      }
      const x = v[left]!;
      const y = v[left + 1]!;
      const z = v[left + 2]!;
      if (x.type === T_NUMBER && y.type === T_OPERATOR && z.type === T_NUMBER) {
        pos -= 2;
        left = 0;
        continue;
      } else if (x.type === T_OPERATOR && y.type !== T_LEFTPARENS && z.type === T_OPERATOR) {
        left = 0;
        pos -= 2;
        continue;
      } else if (x.type === T_LOGIC_OPERATOR && z.type === T_LOGIC_OPERATOR) {
        pos -= 2;
        left = 0;
        continue;
      } else if (
        x.type === T_VARIABLE &&
        y.type === T_OPERATOR &&
        (z.type === T_VARIABLE || z.type === T_NUMBER || z.type === T_BAREWORD)
      ) {
        pos -= 2;
        left = 0;
        continue;
      } else if (
        (x.type === T_BAREWORD || x.type === T_NUMBER) &&
        y.type === T_OPERATOR &&
        (z.type === T_NUMBER || z.type === T_BAREWORD)
      ) {
        pos -= 2;
        left = 0;
        continue;
      } else if (
        (x.type === T_BAREWORD || x.type === T_NUMBER || x.type === T_VARIABLE || x.type === T_STRING) &&
        y.type === T_OPERATOR &&
        y.val === '::' &&
        z.type === T_SQLTYPE
      ) {
        pos -= 2;
        left = 0;
        continue;
      } else if (
        (x.type === T_BAREWORD || x.type === T_NUMBER || x.type === T_STRING || x.type === T_VARIABLE) &&
        y.type === T_COMMA &&
        (z.type === T_NUMBER || z.type === T_BAREWORD || z.type === T_STRING || z.type === T_VARIABLE)
      ) {
        pos -= 2;
        left = 0;
        continue;
      } else if ((x.type === T_EXPRESSION || x.type === T_GROUP || x.type === T_COMMA) && isUnaryOp(y) && z.type === T_LEFTPARENS) {
        y.copyFrom(z);
        pos -= 1;
        left = 0;
        continue;
      } else if (
        (x.type === T_KEYWORD || x.type === T_EXPRESSION || x.type === T_GROUP) &&
        isUnaryOp(y) &&
        (z.type === T_NUMBER || z.type === T_BAREWORD || z.type === T_VARIABLE || z.type === T_STRING || z.type === T_FUNCTION)
      ) {
        y.copyFrom(z);
        pos -= 1;
        left = 0;
        continue;
      } else if (
        x.type === T_COMMA &&
        isUnaryOp(y) &&
        (z.type === T_NUMBER || z.type === T_BAREWORD || z.type === T_VARIABLE || z.type === T_STRING)
      ) {
        y.copyFrom(z);
        left = 0;
        pos -= 3;
        continue;
      } else if (x.type === T_COMMA && isUnaryOp(y) && z.type === T_FUNCTION) {
        y.copyFrom(z);
        pos -= 1;
        left = 0;
        continue;
      } else if (x.type === T_BAREWORD && y.type === T_DOT && z.type === T_BAREWORD) {
        pos -= 2;
        left = 0;
        continue;
      } else if (x.type === T_EXPRESSION && y.type === T_DOT && z.type === T_BAREWORD) {
        y.copyFrom(z);
        pos -= 1;
        left = 0;
        continue;
      } else if (x.type === T_FUNCTION && y.type === T_LEFTPARENS && z.type !== T_RIGHTPARENS) {
        if (ieq('USER', x.val, x.len)) x.type = T_BAREWORD;
      }
      left += 1;
    }
    if (left < MAX_TOKENS && lastComment.type === T_COMMENT) {
      v[left]!.copyFrom(lastComment);
      left += 1;
    }
    if (left > MAX_TOKENS) left = MAX_TOKENS;
    return left;
  }

  /** libinjection_sqli_fingerprint. */
  computeFingerprint(flags: number): string {
    this.reset(flags);
    const tlen = this.fold();
    const v = this.tokens;
    if (tlen > 2) {
      const last = v[tlen - 1]!;
      if (last.type === T_BAREWORD && last.strOpen === '`' && last.len === 0 && last.strClose === '') last.type = T_COMMENT;
    }
    let fp = '';
    for (let i = 0; i < tlen; i++) fp += v[i]!.type;
    if (fp.indexOf(T_EVIL) >= 0) {
      fp = T_EVIL;
      v[0]!.type = T_EVIL;
      v[0]!.val = T_EVIL;
      v[1]!.type = T_NONE;
      if (this.dirty < 2) this.dirty = 2;
    }
    this.fingerprint = fp;
    return fp;
  }

  blacklisted(): boolean {
    const fp = this.fingerprint;
    if (fp.length < 1) return false;
    let listed = BLACKLISTED.get(fp);
    if (listed === undefined) {
      let key = '0';
      for (let i = 0; i < fp.length; i++) {
        let c = fp.charCodeAt(i);
        if (c >= 0x61 && c <= 0x7a) c -= 0x20;
        key += String.fromCharCode(c);
      }
      listed = table().get(key) === T_FINGERPRINT;
      if (BLACKLISTED.size < BLACKLISTED_MAX) BLACKLISTED.set(fp, listed);
    }
    return listed;
  }

  notWhitelisted(): boolean {
    const fp = this.fingerprint;
    const tlen = fp.length;
    const v = this.tokens;
    if (tlen > 1 && fp[tlen - 1] === T_COMMENT) {
      if (this.s.indexOf('sp_password') >= 0) return true;
    }
    switch (tlen) {
      case 2: {
        if (fp[1] === T_UNION) return this.statsTokens !== 2;
        if (v[1]!.val[0] === '#') return false;
        if (v[0]!.type === T_BAREWORD && v[1]!.type === T_COMMENT && v[1]!.val[0] !== '/') return false;
        if (v[0]!.type === T_NUMBER && v[1]!.type === T_COMMENT && v[1]!.val[0] === '/') return true;
        if (v[0]!.type === T_NUMBER && v[1]!.type === T_COMMENT) {
          if (this.statsTokens > 2) return true;
          const ch = this.at(v[0]!.len);
          // signed char: bytes >= 0x80 are "<= 32" too
          if (ch <= 32 || ch >= 0x80) return true;
          if (ch === 0x2f && this.at(v[0]!.len + 1) === 0x2a) return true;
          if (ch === 0x2d && this.at(v[0]!.len + 1) === 0x2d) return true;
          return false;
        }
        if (v[1]!.len > 2 && v[1]!.val[0] === '-') return false;
        break;
      }
      case 3: {
        if (fp === 'sos' || fp === 's&s') {
          if (v[0]!.strOpen === '' && v[2]!.strClose === '' && v[0]!.strClose === v[2]!.strOpen) return true;
          return false;
        } else if (fp === 's&n' || fp === 'n&1' || fp === '1&1' || fp === '1&v' || fp === '1&s') {
          if (this.statsTokens === 3) return false;
        } else if (v[1]!.type === T_KEYWORD) {
          if (v[1]!.len < 5 || !ieqPrefix('INTO', v[1]!.val)) return false;
        }
        break;
      }
      default:
        break;
    }
    return true;
  }

  check(): boolean {
    return this.blacklisted() && this.notWhitelisted();
  }

  /** libinjection_is_sqli: the fingerprint when SQLi, else null. */
  detect(input: string): string | null {
    this.s = input;
    this.slen = input.length;
    if (this.slen === 0) return null;
    if (ONE_TOKEN.test(input) && !oneTokenListed()) return null;
    this.computeFingerprint(FLAG_QUOTE_NONE | FLAG_SQL_ANSI);
    if (this.check()) return this.fingerprint;
    if (this.statsCommentDdx || this.statsCommentHash) {
      this.computeFingerprint(FLAG_QUOTE_NONE | FLAG_SQL_MYSQL);
      if (this.check()) return this.fingerprint;
    }
    if (input.indexOf("'") >= 0) {
      this.computeFingerprint(FLAG_QUOTE_SINGLE | FLAG_SQL_ANSI);
      if (this.check()) return this.fingerprint;
      if (this.statsCommentDdx || this.statsCommentHash) {
        this.computeFingerprint(FLAG_QUOTE_SINGLE | FLAG_SQL_MYSQL);
        if (this.check()) return this.fingerprint;
      }
    }
    if (input.indexOf('"') >= 0) {
      this.computeFingerprint(FLAG_QUOTE_DOUBLE | FLAG_SQL_MYSQL);
      if (this.check()) return this.fingerprint;
    }
    return null;
  }
}

function isHexDigit(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** cstrcasecmp("INTO", val, 4) === 0 where val is longer than 4: compares 4 chars then needs the keyword's end. */
function ieqPrefix(upper: string, val: string): boolean {
  // cstrcasecmp(a, b, n) returns 0 only when the n chars match AND a ends there (*a == 0).
  for (let i = 0; i < upper.length; i++) {
    let c = val.charCodeAt(i);
    if (c >= 0x61 && c <= 0x7a) c -= 0x20;
    if (c !== upper.charCodeAt(i)) return false;
  }
  return true;
}

/**
 * Fingerprint -> whether libinjection's table lists it (upper-cased, behind a '0'): a fixed
 * function of at most five token types, looked up for every value of every request, so its
 * answers are kept (a few hundred fingerprints occur in practice; the bound is for the rest).
 */
const BLACKLISTED = new Map<string, boolean>();
const BLACKLISTED_MAX = 4096;

/**
 * A word of letters, digits and `_` not starting with a digit, or only digits: without quotes,
 * comment marks or any byte that ends a word it is one token in the only context tried (as is,
 * ANSI), a fingerprint of one type, and the table lists no such fingerprint (checked below, once)
 * but `X`, which a word or a number never is. Most names and values of benign requests are such
 * (`page`, `red`, `42`, `price_asc`).
 */
const ONE_TOKEN = /^(?:[A-Za-z_][0-9A-Za-z_]*|[0-9]+)$/;
let oneTokenFingerprints: boolean | undefined;
function oneTokenListed(): boolean {
  if (oneTokenFingerprints === undefined) {
    oneTokenFingerprints = false;
    for (const [key, type] of table()) if (type === T_FINGERPRINT && key.length === 2 && key !== `0${T_EVIL}`) oneTokenFingerprints = true;
  }
  return oneTokenFingerprints;
}

const state = new State();

/** The SQLi fingerprint (as ModSecurity's @detectSQLi reports it), or null when not SQLi. */
export function detectSqli(input: string): string | null {
  return state.detect(input);
}

/** For tests: the fingerprint of one context without the table check. */
export function sqliFingerprint(input: string, flags = FLAG_QUOTE_NONE | FLAG_SQL_ANSI): string {
  state.s = input;
  state.slen = input.length;
  return state.computeFingerprint(flags);
}

export const SQLI_FLAGS = { FLAG_QUOTE_NONE, FLAG_QUOTE_SINGLE, FLAG_QUOTE_DOUBLE, FLAG_SQL_ANSI, FLAG_SQL_MYSQL } as const;
