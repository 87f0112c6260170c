/**
 * htmlEntityDecode.
 */
import { decodeThroughScratch, isHex } from './bytes.ts';
import type { CodeSink } from './bytes.ts';

/** strtol(x, 16 or 10) saturating at LONG_MAX, then cast to a byte. */
function entityByte(digits: string, radix: number): number {
  // LONG_MAX = 2^63 - 1; beyond it strtol returns LONG_MAX, whose low byte is 0xFF.
  const big = BigInt(radix === 16 ? `0x${digits}` : digits);
  if (big > 0x7fffffffffffffffn) return 0xff;
  return Number(big & 0xffn);
}

export function htmlEntityDecode(s: string): string {
  if (s.indexOf('&') < 0) return s;
  return decodeThroughScratch(s, decodeEntitiesInto);
}

/** htmlEntityDecode into `out` (a `SinkDecoder`); the OR of the characters copied as they are tells one past 0xFF. */
function decodeEntitiesInto(s: string, out: CodeSink): number {
  let o = 0;
  let copied = 0;
  const n = s.length;
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
                out[o++] = entityByte(s.slice(k, j), 16);
                i = j < n && s.charCodeAt(j) === 0x3b ? j + 1 : j;
                continue;
              }
            }
          } else {
            const k = j;
            while (j < n && isDigit(s.charCodeAt(j))) j++;
            if (j > k) {
              out[o++] = entityByte(s.slice(k, j), 10);
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
            out[o++] = byte;
            i = j < n && s.charCodeAt(j) === 0x3b ? j + 1 : j;
            continue;
          }
          copy = j - k + 1;
        }
      }
    }
    for (let z = 0; z < copy && i < n; z++) {
      const c = s.charCodeAt(i++);
      copied |= c;
      out[o++] = c;
    }
  }
  return copied > 0xff ? ~o : o;
}
