/**
 * Encodings: hexEncode, hexDecode, base64Decode, base64Encode, sqlHexDecode, length, the parity
 * transformations.
 */
import { fromCodes, isHex, scratchFor, x2c } from './bytes.ts';

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

export function parity(s: string, mode: 'even' | 'odd' | 'zero'): string {
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
