/**
 * URL decoding and encoding: urlDecode, urlDecodeUni (IIS %uXXXX), urlEncode.
 */
import { decodeThroughScratch, fromCodes, isHex, x2c } from './bytes.ts';
import type { CodeSink } from './bytes.ts';

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
  return decodeThroughScratch(s, decodeUniInto);
}

/** urlDecodeUni into `out` (a `SinkDecoder`); the OR of the characters copied as they are tells one past 0xFF. */
function decodeUniInto(s: string, out: CodeSink): number {
  const n = s.length;
  let o = 0;
  let copied = 0;
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
            out[o++] = d;
            i += 6;
          } else {
            out[o++] = c;
            out[o++] = c1;
            i += 2;
          }
        } else {
          out[o++] = c;
          out[o++] = c1;
          i += 2;
        }
      } else if (i + 2 < n && isHex(c1) && isHex(s.charCodeAt(i + 2))) {
        out[o++] = x2c(c1, s.charCodeAt(i + 2));
        i += 3;
      } else {
        out[o++] = c;
        i++;
      }
    } else {
      copied |= c;
      out[o++] = c === 0x2b ? 0x20 : c;
      i++;
    }
  }
  return copied > 0xff ? ~o : o;
}

export function urlEncode(s: string): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x20) out += '+';
    else if (
      (c >= 0x30 && c <= 0x39) ||
      (c >= 0x41 && c <= 0x5a) ||
      (c >= 0x61 && c <= 0x7a) ||
      c === 0x2a ||
      c === 0x2d ||
      c === 0x2e ||
      c === 0x5f
    )
      out += s[i];
    else out += `%${c.toString(16).padStart(2, '0')}`;
  }
  return out === s ? s : out;
}
