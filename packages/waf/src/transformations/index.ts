/**
 * SecLang transformations with ModSecurity v3.0.9's exact byte semantics, on binary strings (one
 * char per byte). Each returns its input unchanged (the same string) when there is nothing to do,
 * which keeps the per-transaction cache small and makes multiMatch's "value changed" test cheap.
 *
 * Written from ModSecurity's documented behaviour and checked against the reference engine; the
 * quirks kept on purpose are noted where they are (cssDecode stops at a NUL byte, utf8toUnicode
 * drops the lead byte of a broken sequence, htmlEntityDecode saturates numeric entities ...).
 */
import { hash } from 'node:crypto';

export type Transformation = (input: string) => string;

const isHex = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
/** ModSecurity's x2c: two hex digits to a byte. */
function x2c(a: number, b: number): number {
  const hi = a >= 0x41 ? ((a & 0xdf) - 0x41 + 10) : a - 0x30;
  const lo = b >= 0x41 ? ((b & 0xdf) - 0x41 + 10) : b - 0x30;
  return ((hi * 16) + lo) & 0xff;
}
function xsingle(a: number): number {
  return (a >= 0x41 ? (a & 0xdf) - 0x41 + 10 : a - 0x30) & 0xff;
}
/** C isspace() in the "C" locale. */
const isSpace = (c: number): boolean => c === 0x20 || (c >= 0x09 && c <= 0x0d);

/** Builds a binary string from byte codes in chunks (String.fromCharCode has an argument limit). */
function fromCodes(codes: number[] | Uint8Array, length: number = codes.length): string {
  if (length === codes.length && length <= 8192) return String.fromCharCode.apply(null, codes as number[]);
  let out = '';
  for (let i = 0; i < length; i += 8192) {
    out += String.fromCharCode.apply(null, Array.prototype.slice.call(codes, i, Math.min(length, i + 8192)) as number[]);
  }
  return out;
}

const HAS_LOWER = /[a-z]/;
const NON_ASCII = /[^\x00-\x7f]/;
const UPPER_RUNS = /[A-Z]+/g;
const LOWER_RUNS = /[a-z]+/g;

export function lowercase(s: string): string {
  // ASCII only (C locale); V8's toLowerCase would also fold Latin-1 letters. One builtin call for
  // the usual value (ASCII, or nothing to lower): toLowerCase returns its input when nothing changes.
  const lowered = s.toLowerCase();
  if (lowered === s) return s;
  if (!NON_ASCII.test(s)) return lowered;
  return s.replace(UPPER_RUNS, (m) => m.toLowerCase());
}

export function uppercase(s: string): string {
  if (!HAS_LOWER.test(s)) return s;
  if (!NON_ASCII.test(s)) return s.toUpperCase();
  return s.replace(LOWER_RUNS, (m) => m.toUpperCase());
}

const PLUSES = /\+/g;

/** urlDecode: %XX (valid hex only) and '+' to space. */
export function urlDecode(s: string): string {
  if (s.indexOf('%') < 0) return s.indexOf('+') < 0 ? s : s.replace(PLUSES, ' ');
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x25 && i + 2 < n && isHex(s.charCodeAt(i + 1)) && isHex(s.charCodeAt(i + 2))) {
      out.push(x2c(s.charCodeAt(i + 1), s.charCodeAt(i + 2)));
      i += 3;
    } else {
      out.push(c === 0x2b ? 0x20 : c);
      i++;
    }
  }
  return fromCodes(out);
}

/** urlDecodeUni: urlDecode plus IIS %uXXXX (low byte, full-width ASCII folded). */
export function urlDecodeUni(s: string): string {
  // without '%' only '+' changes (a form's spaces, the '+' of a media type): natively
  if (s.indexOf('%') < 0) return s.indexOf('+') < 0 ? s : s.replace(PLUSES, ' ');
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x25) {
      const c1 = s.charCodeAt(i + 1);
      if (i + 1 < n && (c1 === 0x75 || c1 === 0x55)) {
        if (i + 5 < n) {
          const h2 = s.charCodeAt(i + 2);
          const h3 = s.charCodeAt(i + 3);
          const h4 = s.charCodeAt(i + 4);
          const h5 = s.charCodeAt(i + 5);
          if (isHex(h2) && isHex(h3) && isHex(h4) && isHex(h5)) {
            let d = x2c(h4, h5);
            if (d > 0x00 && d < 0x5f && (h2 === 0x66 || h2 === 0x46) && (h3 === 0x66 || h3 === 0x46)) d += 0x20;
            out.push(d);
            i += 6;
          } else {
            out.push(c, c1);
            i += 2;
          }
        } else {
          out.push(c, c1);
          i += 2;
        }
      } else if (i + 2 < n && isHex(c1) && isHex(s.charCodeAt(i + 2))) {
        out.push(x2c(c1, s.charCodeAt(i + 2)));
        i += 3;
      } else {
        out.push(c);
        i++;
      }
    } else {
      out.push(c === 0x2b ? 0x20 : c);
      i++;
    }
  }
  return fromCodes(out);
}

/** strtol(x, 16 or 10) saturating at LONG_MAX, then cast to a byte. */
function entityByte(digits: string, radix: number): number {
  // LONG_MAX = 2^63 - 1; beyond it strtol returns LONG_MAX, whose low byte is 0xFF.
  const big = BigInt(radix === 16 ? '0x' + digits : digits);
  if (big > 0x7fffffffffffffffn) return 0xff;
  return Number(big & 0xffn);
}

export function htmlEntityDecode(s: string): string {
  if (s.indexOf('&') < 0) return s;
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
  const isAlnum = (c: number): boolean => isDigit(c) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
  while (i < n) {
    let copy = 1;
    if (s.charCodeAt(i) === 0x26 && i + 1 < n) {
      let j = i + 1;
      if (s.charCodeAt(j) === 0x23) {
        copy++;
        if (j + 1 < n) {
          j++;
          const cx = s.charCodeAt(j);
          if (cx === 0x78 || cx === 0x58) {
            copy++;
            if (j + 1 < n) {
              j++;
              const k = j;
              while (j < n && isHex(s.charCodeAt(j))) j++;
              if (j > k) {
                out.push(entityByte(s.slice(k, j), 16));
                i = j < n && s.charCodeAt(j) === 0x3b ? j + 1 : j;
                continue;
              }
            }
          } else {
            const k = j;
            while (j < n && isDigit(s.charCodeAt(j))) j++;
            if (j > k) {
              out.push(entityByte(s.slice(k, j), 10));
              i = j < n && s.charCodeAt(j) === 0x3b ? j + 1 : j;
              continue;
            }
          }
        }
      } else {
        const k = j;
        while (j < n && isAlnum(s.charCodeAt(j))) j++;
        if (j > k) {
          const name = s.slice(k, j).toLowerCase();
          let byte = -1;
          if (name === 'quot') byte = 0x22;
          else if (name === 'amp') byte = 0x26;
          else if (name === 'lt') byte = 0x3c;
          else if (name === 'gt') byte = 0x3e;
          else if (name === 'nbsp') byte = 0xa0;
          if (byte >= 0) {
            out.push(byte);
            i = j < n && s.charCodeAt(j) === 0x3b ? j + 1 : j;
            continue;
          }
          copy = j - k + 1;
        }
      }
    }
    for (let z = 0; z < copy && i < n; z++) out.push(s.charCodeAt(i++));
  }
  return fromCodes(out);
}

const isOct = (c: number): boolean => c >= 0x30 && c <= 0x37;

export function jsDecode(s: string): string {
  if (s.indexOf('\\') < 0) return s;
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c !== 0x5c) {
      out.push(c);
      i++;
      continue;
    }
    const c1 = s.charCodeAt(i + 1);
    if (i + 5 < n && c1 === 0x75 && isHex(s.charCodeAt(i + 2)) && isHex(s.charCodeAt(i + 3)) && isHex(s.charCodeAt(i + 4)) && isHex(s.charCodeAt(i + 5))) {
      let d = x2c(s.charCodeAt(i + 4), s.charCodeAt(i + 5));
      const h2 = s.charCodeAt(i + 2);
      const h3 = s.charCodeAt(i + 3);
      if (d > 0x00 && d < 0x5f && (h2 === 0x66 || h2 === 0x46) && (h3 === 0x66 || h3 === 0x46)) d += 0x20;
      out.push(d);
      i += 6;
    } else if (i + 3 < n && c1 === 0x78 && isHex(s.charCodeAt(i + 2)) && isHex(s.charCodeAt(i + 3))) {
      out.push(x2c(s.charCodeAt(i + 2), s.charCodeAt(i + 3)));
      i += 4;
    } else if (i + 1 < n && isOct(c1)) {
      let j = 0;
      let buf = '';
      while (i + 1 + j < n && j < 3) {
        buf += s[i + 1 + j];
        j++;
        if (!isOct(s.charCodeAt(i + 1 + j))) break;
      }
      if (j === 3 && buf.charCodeAt(0) > 0x33) {
        j = 2;
        buf = buf.slice(0, 2);
      }
      out.push(parseInt(buf, 8) & 0xff);
      i += 1 + j;
    } else if (i + 1 < n) {
      let d = c1;
      switch (c1) {
        case 0x61:
          d = 0x07;
          break;
        case 0x62:
          d = 0x08;
          break;
        case 0x66:
          d = 0x0c;
          break;
        case 0x6e:
          d = 0x0a;
          break;
        case 0x72:
          d = 0x0d;
          break;
        case 0x74:
          d = 0x09;
          break;
        case 0x76:
          d = 0x0b;
          break;
      }
      out.push(d);
      i += 2;
    } else {
      while (i < n) out.push(s.charCodeAt(i++));
    }
  }
  return fromCodes(out);
}

export function cssDecode(s: string): string {
  const nul = s.indexOf('\0');
  if (s.indexOf('\\') < 0) return nul < 0 ? s : s.slice(0, nul);
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c !== 0x5c) {
      out.push(c);
      i++;
      continue;
    }
    if (i + 1 >= n) {
      i++;
      continue;
    }
    i++;
    let j = 0;
    while (j < 6 && i + j < n && isHex(s.charCodeAt(i + j))) j++;
    if (j > 0) {
      let d: number;
      let fullcheck = false;
      let push = true;
      switch (j) {
        case 1:
          d = xsingle(s.charCodeAt(i));
          break;
        case 2:
        case 3:
          d = x2c(s.charCodeAt(i + j - 2), s.charCodeAt(i + j - 1));
          break;
        case 4:
          d = x2c(s.charCodeAt(i + j - 2), s.charCodeAt(i + j - 1));
          fullcheck = true;
          push = false;
          break;
        case 5:
          d = x2c(s.charCodeAt(i + j - 2), s.charCodeAt(i + j - 1));
          if (s.charCodeAt(i) === 0x30) {
            fullcheck = true;
            push = false;
          }
          break;
        default:
          d = x2c(s.charCodeAt(i + j - 2), s.charCodeAt(i + j - 1));
          if (s.charCodeAt(i) === 0x30 && s.charCodeAt(i + 1) === 0x30) {
            fullcheck = true;
            push = false;
          }
          break;
      }
      if (push) out.push(d);
      if (fullcheck) {
        const a = s.charCodeAt(i + j - 3);
        const b = s.charCodeAt(i + j - 4);
        if (d > 0x00 && d < 0x5f && (a === 0x66 || a === 0x46) && (b === 0x66 || b === 0x46)) d += 0x20;
        out.push(d);
      }
      if (i + j < n && isSpace(s.charCodeAt(i + j))) j++;
      i += j;
    } else if (s.charCodeAt(i) === 0x0a) {
      i++;
    } else {
      out.push(s.charCodeAt(i++));
    }
  }
  // ModSecurity copies the result as a C string: it ends at the first NUL byte.
  const end = out.indexOf(0);
  return fromCodes(out, end < 0 ? out.length : end);
}

/** cmdLine's treatment of each byte: kept (0), deleted, a space, or an upper-case letter. */
const CMDLINE_KEEP = 0;
const CMDLINE_DELETE = 1;
const CMDLINE_SPACE = 2;
const CMDLINE_UPPER = 3;
const CMDLINE_KIND = new Uint8Array(256);
for (const c of '"\'\\^') CMDLINE_KIND[c.charCodeAt(0)] = CMDLINE_DELETE;
for (const c of ' ,;\t\r\n') CMDLINE_KIND[c.charCodeAt(0)] = CMDLINE_SPACE;
for (let c = 0x41; c <= 0x5a; c++) CMDLINE_KIND[c] = CMDLINE_UPPER;

/**
 * Scratch bytes for transformations that build their result byte by byte: one Buffer, grown on
 * demand, read back with a latin1 decode (a byte loop into it is ~40 % faster than chained
 * replaces, and than an array of codes turned into a string).
 */
let scratch = Buffer.allocUnsafe(4096);
function scratchFor(length: number): Buffer {
  if (scratch.length < length) scratch = Buffer.allocUnsafe(Math.max(length, 2 * scratch.length));
  return scratch;
}

/**
 * ModSecurity's cmdLine: deletes " ' \ ^, turns each run of space , ; \t \r \n into one space
 * (a deleted character does not end the run), drops a space before / or (, lower-cases ASCII.
 */
export function cmdLine(s: string): string {
  const n = s.length;
  let first = 0;
  while (first < n && CMDLINE_KIND[s.charCodeAt(first)] === CMDLINE_KEEP) first++;
  if (first === n) return s;
  const out = scratchFor(n + 1);
  // (the kept prefix copied in the loop: one call into C++ per value, the decode at the end)
  let o = 0;
  for (; o < first; o++) out[o] = s.charCodeAt(o);
  let space = false;
  for (let i = first; i < n; i++) {
    const c = s.charCodeAt(i);
    const kind = CMDLINE_KIND[c];
    if (kind === CMDLINE_SPACE) space = true;
    else if (kind === CMDLINE_KEEP) {
      if (space) {
        if (c !== 0x2f && c !== 0x28) out[o++] = 0x20;
        space = false;
      }
      out[o++] = c;
    } else if (kind === CMDLINE_UPPER) {
      if (space) {
        out[o++] = 0x20;
        space = false;
      }
      out[o++] = c + 0x20;
    }
  }
  if (space) out[o++] = 0x20;
  const result = out.toString('latin1', 0, o);
  return result === s ? s : result;
}

// (module constants: a regular-expression literal in a function body is a new object at every call)
const WHITESPACE = /[\t-\r ]/;
const WHITESPACE_RUNS = /[\t-\r ]+/g;
export function compressWhitespace(s: string): string {
  if (!WHITESPACE.test(s)) return s;
  const out = s.replace(WHITESPACE_RUNS, ' ');
  return out === s ? s : out;
}

// isspace plus 0xA0 and 0xC2 (ModSecurity removes both "non-breaking space" bytes)
const REMOVED_WHITESPACE = /[\t-\r \xa0\xc2]/;
const REMOVED_WHITESPACE_RUNS = /[\t-\r \xa0\xc2]+/g;
export function removeWhitespace(s: string): string {
  if (!REMOVED_WHITESPACE.test(s)) return s;
  return s.replace(REMOVED_WHITESPACE_RUNS, '');
}

const NUL_RUNS = /\0+/g;
export function removeNulls(s: string): string {
  if (s.indexOf('\0') < 0) return s;
  return s.replace(NUL_RUNS, '');
}

const NUL_ALL = /\0/g;
export function replaceNulls(s: string): string {
  if (s.indexOf('\0') < 0) return s;
  return s.replace(NUL_ALL, ' ');
}

export function replaceComments(s: string): string {
  if (s.indexOf('/*') < 0) return s;
  const n = s.length;
  let out = '';
  let i = 0;
  let incomment = false;
  while (i < n) {
    if (!incomment) {
      if (s.charCodeAt(i) === 0x2f && i + 1 < n && s.charCodeAt(i + 1) === 0x2a) {
        incomment = true;
        i += 2;
      } else {
        out += s[i++];
      }
    } else if (s.charCodeAt(i) === 0x2a && i + 1 < n && s.charCodeAt(i + 1) === 0x2f) {
      incomment = false;
      i += 2;
      out += ' ';
    } else i++;
  }
  if (incomment) out += ' ';
  return out;
}

export function removeComments(s: string): string {
  const n = s.length;
  const buf: number[] = [];
  for (let k = 0; k < n; k++) buf.push(s.charCodeAt(k));
  let i = 0;
  let j = 0;
  let incomment = false;
  while (i < n) {
    if (!incomment) {
      if (buf[i] === 0x2f && i + 1 < n && buf[i + 1] === 0x2a) {
        incomment = true;
        i += 2;
      } else if (buf[i] === 0x3c && i + 3 < n && buf[i + 1] === 0x21 && buf[i + 2] === 0x2d && buf[i + 3] === 0x2d) {
        incomment = true;
        i += 4;
      } else if (buf[i] === 0x2d && i + 1 < n && buf[i + 1] === 0x2d) {
        buf[i] = 0x20;
        break;
      } else if (buf[i] === 0x23) {
        buf[i] = 0x20;
        break;
      } else {
        buf[j++] = buf[i++]!;
      }
    } else if (buf[i] === 0x2a && i + 1 < n && buf[i + 1] === 0x2f) {
      incomment = false;
      i += 2;
      buf[j++] = buf[i] ?? 0;
      i++;
    } else if (buf[i] === 0x2d && i + 2 < n && buf[i + 1] === 0x2d && buf[i + 2] === 0x3e) {
      incomment = false;
      i += 3;
      buf[j++] = buf[i] ?? 0;
      i++;
    } else i++;
  }
  if (incomment) buf[j++] = 0x20;
  const out = fromCodes(buf, j);
  return out === s ? s : out;
}

/** normalizePath / normalizePathWin (ModSecurity's normalize_path_inplace). */
export function normalizePathImpl(s: string, win: boolean): string {
  const len = s.length;
  if (len <= 0) return s;
  // without a (back)slash only a final '.' can change (the loop below copies everything else)
  if (s.charCodeAt(len - 1) !== 0x2e && s.indexOf('/') < 0 && !(win && s.indexOf('\\') >= 0)) return s;
  const b: number[] = new Array(len + 1);
  for (let k = 0; k < len; k++) b[k] = s.charCodeAt(k);
  b[len] = 0;
  const isSlash = (c: number | undefined): boolean => c === 0x2f || (win && c === 0x5c);
  let src = 0;
  let dst = 0;
  const end = len - 1;
  let ldst = 1;
  let hitroot = false;
  let done = false;
  const relative = !isSlash(b[0]);
  const trailing = isSlash(b[end]);
  while (!done && src <= end && dst <= end) {
    if (win) {
      if (b[src] === 0x5c) b[src] = 0x2f;
      if (src < end && b[src + 1] === 0x5c) b[src + 1] = 0x2f;
    }
    let skipToCopy = false;
    let skipToLength = false;
    if (src === end) done = true;
    else if (b[src + 1] !== 0x2f) skipToCopy = true;
    if (!skipToCopy) {
      if (src !== end && b[src] === 0x2f) {
        skipToCopy = true;
      } else if (b[src] === 0x2e) {
        if (dst > 0 && b[dst - 1] === 0x2e) {
          if (relative && (hitroot || dst - 2 <= 0)) {
            hitroot = true;
            skipToCopy = true;
          } else {
            dst -= 3;
            while (dst > 0 && b[dst] !== 0x2f) dst--;
            if (dst <= 0) {
              hitroot = true;
              dst = 0;
              if (!relative && src === end) dst++;
            }
            if (done) skipToLength = true;
            else src++;
          }
        } else if (dst === 0) {
          if (done) skipToLength = true;
          else src++;
        } else if (b[dst - 1] === 0x2f) {
          if (done) skipToLength = true;
          else {
            dst--;
            src++;
          }
        }
      } else if (dst > 0) {
        hitroot = false;
      }
    }
    if (!skipToLength) {
      // copy:
      let skipCopy = false;
      if (b[src] === 0x2f) {
        while (src < end && (b[src + 1] === 0x2f || (win && b[src + 1] === 0x5c))) src++;
        if (relative && dst === 0) {
          src++;
          skipCopy = true;
        }
      }
      if (!skipCopy) b[dst++] = b[src++]!;
    }
    ldst = dst;
  }
  if (!trailing && dst > 0 && b[dst - 1] === 0x2f) {
    ldst--;
    dst--;
  }
  const out = fromCodes(b, ldst);
  return out === s ? s : out;
}

export const normalizePath = (s: string): string => normalizePathImpl(s, false);
export const normalizePathWin = (s: string): string => normalizePathImpl(s, true);

function hexLower(d: number): string {
  return d.toString(16);
}

export function utf8toUnicode(s: string): string {
  let ascii = true;
  for (let k = 0; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (c >= 0x80 || c === 0) {
      ascii = false;
      break;
    }
  }
  if (ascii) return s;
  const input = s + '\0';
  const inputLen = input.length;
  let out = '';
  // A NUL byte inside the input is written without advancing, so the next byte overwrites it;
  // the output is then read as a C string.
  let pendingNul = false;
  const emit = (t: string): void => {
    pendingNul = false;
    out += t;
  };
  const u = (d: number): string => {
    const h = hexLower(d);
    return '%u' + (h.length < 4 ? '0'.repeat(4 - h.length) : '') + h;
  };
  let i = 0;
  while (i < inputLen) {
    const c = input.charCodeAt(i);
    let unicodeLen = 0;
    let d = 0;
    if ((c & 0x80) === 0) {
      if (c === 0 && inputLen > i + 1) {
        pendingNul = true;
      } else if (c === 0) {
        break; // terminating NUL
      } else emit(input[i]!);
    } else if ((c & 0xe0) === 0xc0) {
      const c1 = input.charCodeAt(i + 1);
      if (inputLen < 2) unicodeLen = -1; // ModSecurity never decrements bytes_left
      else if ((c1 & 0xc0) !== 0x80) unicodeLen = -1;
      else {
        unicodeLen = 2;
        d = ((c & 0x1f) << 6) | (c1 & 0x3f);
        emit(u(d));
      }
    } else if ((c & 0xf0) === 0xe0) {
      const c1 = input.charCodeAt(i + 1);
      const c2 = input.charCodeAt(i + 2);
      if (inputLen < 3) unicodeLen = -1;
      else if ((c1 & 0xc0) !== 0x80 || (c2 & 0xc0) !== 0x80) unicodeLen = -1;
      else {
        unicodeLen = 3;
        d = ((c & 0x0f) << 12) | ((c1 & 0x3f) << 6) | (c2 & 0x3f);
        emit(u(d));
      }
    } else if ((c & 0xf8) === 0xf0) {
      if (c >= 0xf5) emit(input[i]!);
      const c1 = input.charCodeAt(i + 1);
      const c2 = input.charCodeAt(i + 2);
      const c3 = input.charCodeAt(i + 3);
      if (inputLen < 4) unicodeLen = -1;
      else if ((c1 & 0xc0) !== 0x80 || (c2 & 0xc0) !== 0x80 || (c3 & 0xc0) !== 0x80) unicodeLen = -1;
      else {
        unicodeLen = 4;
        d = ((c & 0x07) << 18) | ((c1 & 0x3f) << 12) | ((c2 & 0x3f) << 6) | (c3 & 0x3f);
        emit(u(d));
      }
    } else {
      emit(input[i]!);
    }
    if (d >= 0xd800 && d <= 0xdfff) emit(input[i]!);
    if ((unicodeLen === 4 && d < 0x10000) || (unicodeLen === 3 && d < 0x800) || (unicodeLen === 2 && d < 0x80)) emit(input[i]!);
    i += unicodeLen > 0 ? unicodeLen : 1;
  }
  void pendingNul;
  const nul = out.indexOf('\0');
  return nul < 0 ? out : out.slice(0, nul);
}

export function length(s: string): string {
  return String(s.length);
}

/** Two lower-case hex digits per byte. */
const HEX_PAIRS: readonly string[] = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

export function hexEncode(s: string): string {
  const n = s.length;
  if (n > 256) {
    const bytes = scratchFor(n);
    bytes.write(s, 0, n, 'latin1');
    return bytes.toString('hex', 0, n);
  }
  // short values (the CRS hex-encodes a SHA-1: 20 bytes) cost less without the two calls into C++
  let out = '';
  for (let i = 0; i < n; i++) out += HEX_PAIRS[s.charCodeAt(i) & 0xff]!;
  return out;
}

export function hexDecode(s: string): string {
  // ModSecurity: pairs of hex digits, no validation (x2c on whatever is there)
  const out: number[] = [];
  for (let i = 0; i + 1 < s.length; i += 2) out.push(x2c(s.charCodeAt(i), s.charCodeAt(i + 1)));
  return fromCodes(out);
}

/** SHA-1 message schedule (sha1Short's scratch). */
const SHA1_W = new Int32Array(80);

/**
 * SHA-1 of a binary string, as a binary string of 20 bytes. Hand-written for short inputs (the
 * CRS hashes every request's User-Agent, 901318): inside a request, a call into node:crypto and
 * the Buffer it needs cost about twice this loop (measured in the engine, not in isolation);
 * longer inputs go to node:crypto.
 */
export function sha1(s: string): string {
  if (s.length > 1024) return hash('sha1', Buffer.from(s, 'latin1'), 'latin1' as 'hex');
  return sha1Short(s);
}

function sha1Short(s: string): string {
  const n = s.length;
  const W = SHA1_W;
  // the message, 0x80, zeros and the bit length in 64-byte blocks
  const blocks = ((n + 8) >> 6) + 1;
  let h0 = 0x67452301;
  let h1 = 0xefcdab89 | 0;
  let h2 = 0x98badcfe | 0;
  let h3 = 0x10325476;
  let h4 = 0xc3d2e1f0 | 0;
  for (let b = 0; b < blocks; b++) {
    const base = b << 6;
    for (let i = 0; i < 16; i++) {
      let word = 0;
      for (let k = 0; k < 4; k++) {
        const p = base + (i << 2) + k;
        word = (word << 8) | (p < n ? s.charCodeAt(p) & 0xff : p === n ? 0x80 : 0);
      }
      W[i] = word;
    }
    if (b === blocks - 1) {
      W[14] = Math.floor(n / 0x20000000); // the high word of n * 8
      W[15] = (n * 8) | 0;
    }
    for (let i = 16; i < 80; i++) {
      const x = W[i - 3]! ^ W[i - 8]! ^ W[i - 14]! ^ W[i - 16]!;
      W[i] = (x << 1) | (x >>> 31);
    }
    let a = h0;
    let bb = h1;
    let c = h2;
    let d = h3;
    let e = h4;
    for (let i = 0; i < 80; i++) {
      let f: number;
      let k: number;
      if (i < 20) {
        f = (bb & c) | (~bb & d);
        k = 0x5a827999;
      } else if (i < 40) {
        f = bb ^ c ^ d;
        k = 0x6ed9eba1;
      } else if (i < 60) {
        f = (bb & c) | (bb & d) | (c & d);
        k = 0x8f1bbcdc | 0;
      } else {
        f = bb ^ c ^ d;
        k = 0xca62c1d6 | 0;
      }
      const t = (((a << 5) | (a >>> 27)) + f + e + k + W[i]!) | 0;
      e = d;
      d = c;
      c = (bb << 30) | (bb >>> 2);
      bb = a;
      a = t;
    }
    h0 = (h0 + a) | 0;
    h1 = (h1 + bb) | 0;
    h2 = (h2 + c) | 0;
    h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0;
  }
  return wordBytes(h0) + wordBytes(h1) + wordBytes(h2) + wordBytes(h3) + wordBytes(h4);
}

function wordBytes(h: number): string {
  return String.fromCharCode((h >>> 24) & 0xff, (h >>> 16) & 0xff, (h >>> 8) & 0xff, h & 0xff);
}

export function md5(s: string): string {
  return hash('md5', Buffer.from(s, 'latin1'), 'latin1' as 'hex');
}

const B64 = (() => {
  const t = new Int16Array(256).fill(127);
  const a = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  for (let k = 0; k < 64; k++) t[a.charCodeAt(k)] = k;
  t[0x3d] = 64;
  return t;
})();

/** base64Decode as ModSecurity 3.0.9 runs it (mbedtls, strict): invalid input decodes to "". */
export function base64Decode(input: string): string {
  const nulAt = input.indexOf('\0');
  const src = nulAt < 0 ? input : input.slice(0, nulAt);
  const slen = src.length;
  let i = 0;
  let n = 0;
  let j = 0;
  for (i = 0; i < slen; i++) {
    let x = 0;
    while (i < slen && src.charCodeAt(i) === 0x20) {
      i++;
      x++;
    }
    if (i === slen) break;
    const c = src.charCodeAt(i);
    if (slen - i >= 2 && c === 0x0d && src.charCodeAt(i + 1) === 0x0a) continue;
    if (c === 0x0a) continue;
    if (x !== 0) return '';
    if (c === 0x3d && ++j > 2) return '';
    if (c > 127 || B64[c] === 127) return '';
    if (B64[c]! < 64 && j !== 0) return '';
    n++;
  }
  if (n === 0) return '';
  // short values (cookies, arguments: 934100 decodes every one) as a string built directly; long
  // ones through an array of codes
  const out: number[] | undefined = i > 256 ? [] : undefined;
  let decoded = '';
  let jj = 3;
  let nn = 0;
  let x = 0;
  for (let k = 0; k < i; k++) {
    const c = src.charCodeAt(k);
    if (c === 0x0d || c === 0x0a || c === 0x20) continue;
    const v = B64[c]!;
    if (v === 64) jj--;
    x = ((x << 6) | (v & 0x3f)) >>> 0;
    if (++nn === 4) {
      nn = 0;
      if (out !== undefined) {
        if (jj > 0) out.push((x >>> 16) & 0xff);
        if (jj > 1) out.push((x >>> 8) & 0xff);
        if (jj > 2) out.push(x & 0xff);
      } else if (jj > 2) decoded += String.fromCharCode((x >>> 16) & 0xff, (x >>> 8) & 0xff, x & 0xff);
      else if (jj > 1) decoded += String.fromCharCode((x >>> 16) & 0xff, (x >>> 8) & 0xff);
      else if (jj > 0) decoded += String.fromCharCode((x >>> 16) & 0xff);
    }
  }
  return out !== undefined ? fromCodes(out) : decoded;
}

export function base64Encode(s: string): string {
  return Buffer.from(s, 'latin1').toString('base64');
}

export function trim(s: string): string {
  return trimRight(trimLeft(s));
}
export function trimLeft(s: string): string {
  let k = 0;
  while (k < s.length && isSpace(s.charCodeAt(k))) k++;
  return k === 0 ? s : s.slice(k);
}
export function trimRight(s: string): string {
  let k = s.length;
  while (k > 0 && isSpace(s.charCodeAt(k - 1))) k--;
  return k === s.length ? s : s.slice(0, k);
}

export function urlEncode(s: string): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x20) out += '+';
    else if ((c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x2a || c === 0x2d || c === 0x2e || c === 0x5f) out += s[i];
    else out += '%' + c.toString(16).padStart(2, '0');
  }
  return out === s ? s : out;
}

/** sqlHexDecode: 0xHEX sequences to bytes. */
const SQL_HEX = /0[xX][0-9a-fA-F]{2}/;
export function sqlHexDecode(s: string): string {
  if (!SQL_HEX.test(s)) return s;
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x30 && i + 3 < n && (s.charCodeAt(i + 1) | 0x20) === 0x78 && isHex(s.charCodeAt(i + 2)) && isHex(s.charCodeAt(i + 3))) {
      i += 2;
      while (i + 1 < n && isHex(s.charCodeAt(i)) && isHex(s.charCodeAt(i + 1))) {
        out.push(x2c(s.charCodeAt(i), s.charCodeAt(i + 1)));
        i += 2;
      }
    } else {
      out.push(c);
      i++;
    }
  }
  return fromCodes(out);
}

export function escapeSeqDecode(s: string): string {
  if (s.indexOf('\\') < 0) return s;
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x5c && i + 1 < n) {
      const c1 = s.charCodeAt(i + 1);
      let d = -1;
      switch (c1) {
        case 0x61:
          d = 7;
          break;
        case 0x62:
          d = 8;
          break;
        case 0x66:
          d = 12;
          break;
        case 0x6e:
          d = 10;
          break;
        case 0x72:
          d = 13;
          break;
        case 0x74:
          d = 9;
          break;
        case 0x76:
          d = 11;
          break;
        case 0x5c:
          d = 0x5c;
          break;
        case 0x3f:
          d = 0x3f;
          break;
        case 0x27:
          d = 0x27;
          break;
        case 0x22:
          d = 0x22;
          break;
      }
      if (d >= 0) {
        out.push(d);
        i += 2;
        continue;
      }
      if ((c1 === 0x78 || c1 === 0x58) && i + 3 < n && isHex(s.charCodeAt(i + 2)) && isHex(s.charCodeAt(i + 3))) {
        out.push(x2c(s.charCodeAt(i + 2), s.charCodeAt(i + 3)));
        i += 4;
        continue;
      }
      if (isOct(c1)) {
        let j = 1;
        let buf = '';
        while (j < 4 && i + j < n && isOct(s.charCodeAt(i + j))) buf += s[i + j++];
        out.push(parseInt(buf, 8) & 0xff);
        i += j;
        continue;
      }
      out.push(c1);
      i += 2;
      continue;
    }
    out.push(c);
    i++;
  }
  return fromCodes(out);
}

function parity(s: string, mode: 'even' | 'odd' | 'zero'): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i) & 0x7f;
    if (mode !== 'zero') {
      let bits = 0;
      for (let b = c; b; b >>= 1) bits += b & 1;
      const odd = bits % 2 === 1;
      if ((mode === 'even' && odd) || (mode === 'odd' && !odd)) c |= 0x80;
    }
    out += String.fromCharCode(c);
  }
  return out;
}

const COMMENT_CHARS = /\/\*|\*\/|--|#/g;
export function removeCommentsChar(s: string): string {
  const out = s.replace(COMMENT_CHARS, '');
  return out === s ? s : out;
}

/** Aliases: the same transformation under another name. */
export const TRANSFORMATION_ALIASES: ReadonlyMap<string, string> = new Map([
  ['normalisepath', 'normalizepath'],
  ['normalisepathwin', 'normalizepathwin'],
]);

// Kinds of bytes a value holds (charMask): a transformation whose CHANGES_ON kinds are all absent
// returns the value as it is, and the engine does not call it (most calls on benign values).
const UPPER = 1;
const LOWER = 2;
const PERCENT = 4;
const PLUS = 8;
const AMP = 16;
const BACKSLASH = 32;
const SLASH = 64;
const DOT = 128;
const NUL = 256;
const SPACE = 512; // \t \n \v \f \r and space
const HIGH = 1024; // >= 0x80
const CMDLINE_PUNCT = 2048; // " ' ^ , ; (
const CMDLINE_DELETED = 4096; // " ' ^ \ (cmdLine deletes them, joining their neighbours)

const BYTE_KINDS = new Int32Array(256);
for (let c = 0; c < 256; c++) {
  let k = 0;
  if (c >= 0x41 && c <= 0x5a) k |= UPPER;
  if (c >= 0x61 && c <= 0x7a) k |= LOWER;
  if (c === 0x25) k |= PERCENT;
  if (c === 0x2b) k |= PLUS;
  if (c === 0x26) k |= AMP;
  if (c === 0x5c) k |= BACKSLASH;
  if (c === 0x2f) k |= SLASH;
  if (c === 0x2e) k |= DOT;
  if (c === 0) k |= NUL;
  if (isSpace(c)) k |= SPACE;
  if (c >= 0x80) k |= HIGH;
  if (c === 0x22 || c === 0x27 || c === 0x5e || c === 0x2c || c === 0x3b || c === 0x28) k |= CMDLINE_PUNCT;
  if (CMDLINE_KIND[c] === CMDLINE_DELETE) k |= CMDLINE_DELETED;
  BYTE_KINDS[c] = k;
}

/** The kinds of bytes in `s` (the CHANGES_ON bits). */
export function charMask(s: string): number {
  let m = 0;
  for (let i = 0; i < s.length; i++) m |= BYTE_KINDS[s.charCodeAt(i) & 0xff]!;
  return m;
}

/**
 * Per transformation: the byte kinds without which it returns its input unchanged (checked by
 * a test on random values, transformations.test.ts). Those not listed always run.
 */
export const CHANGES_ON: ReadonlyMap<string, number> = new Map([
  ['lowercase', UPPER],
  ['uppercase', LOWER],
  ['urldecode', PERCENT | PLUS],
  ['urldecodeuni', PERCENT | PLUS],
  ['htmlentitydecode', AMP],
  ['jsdecode', BACKSLASH],
  ['cssdecode', BACKSLASH | NUL],
  ['cmdline', CMDLINE_PUNCT | BACKSLASH | SPACE | SLASH | UPPER],
  ['compresswhitespace', SPACE],
  ['removewhitespace', SPACE | HIGH],
  ['removenulls', NUL],
  ['replacenulls', NUL],
  ['replacecomments', SLASH],
  ['normalizepath', SLASH | DOT],
  ['normalizepathwin', SLASH | DOT | BACKSLASH],
  ['utf8tounicode', HIGH | NUL],
  ['trim', SPACE],
  ['trimleft', SPACE],
  ['trimright', SPACE],
  ['escapeseqdecode', BACKSLASH],
]);

/**
 * What transformation `name` can do to a letter-free `literal` (no ASCII letter in it):
 * `creating`, the byte kinds without which it cannot make the literal appear in a value that does
 * not hold it; `adds`, the kinds its result may hold that its input did not. Undefined when not
 * known. A transformation that returns its input without its CHANGES_ON kinds creates nothing and
 * adds nothing then. cmdLine (which runs on nearly every value) only deletes " ' ^ \, turns runs
 * of space , ; into one space, drops a space before / or ( and lower-cases: it cannot make a
 * literal without a space, '/' or '(' appear without one of the bytes it deletes (the only joins
 * it makes between bytes that were apart), and adds spaces and lower-case letters. Checked on
 * random values (transformations.test.ts).
 */
export function literalEffect(name: string, literal: string): { readonly creating: number; readonly adds: number } | undefined {
  if (/[A-Za-z]/.test(literal)) return undefined;
  if (name === 'cmdline') return /[ /(]/.test(literal) ? undefined : { creating: CMDLINE_DELETED, adds: SPACE | LOWER };
  const changesOn = CHANGES_ON.get(name);
  return changesOn === undefined || changesOn < 0 ? undefined : { creating: changesOn, adds: 0 };
}

/** Lower-case transformation name -> implementation. */
export const TRANSFORMATIONS: ReadonlyMap<string, Transformation> = new Map<string, Transformation>([
  ['lowercase', lowercase],
  ['uppercase', uppercase],
  ['urldecode', urlDecode],
  ['urldecodeuni', urlDecodeUni],
  ['htmlentitydecode', htmlEntityDecode],
  ['jsdecode', jsDecode],
  ['cssdecode', cssDecode],
  ['cmdline', cmdLine],
  ['compresswhitespace', compressWhitespace],
  ['removewhitespace', removeWhitespace],
  ['removenulls', removeNulls],
  ['replacenulls', replaceNulls],
  ['replacecomments', replaceComments],
  ['removecomments', removeComments],
  ['removecommentschar', removeCommentsChar],
  ['normalizepath', normalizePath],
  ['normalizepathwin', normalizePathWin],
  ['utf8tounicode', utf8toUnicode],
  ['length', length],
  ['hexencode', hexEncode],
  ['hexdecode', hexDecode],
  ['sha1', sha1],
  ['md5', md5],
  ['base64decode', base64Decode],
  ['base64encode', base64Encode],
  ['trim', trim],
  ['trimleft', trimLeft],
  ['trimright', trimRight],
  ['urlencode', urlEncode],
  ['sqlhexdecode', sqlHexDecode],
  ['escapeseqdecode', escapeSeqDecode],
  ['parityeven7bit', (s) => parity(s, 'even')],
  ['parityodd7bit', (s) => parity(s, 'odd')],
  ['parityzero7bit', (s) => parity(s, 'zero')],
]);
