/**
 * Comments: replaceComments, removeComments, removeCommentsChar.
 */
import { fromCodes } from './bytes.ts';

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

const COMMENT_CHARS = /\/\*|\*\/|--|#/g;

export function removeCommentsChar(s: string): string {
  const out = s.replace(COMMENT_CHARS, '');
  return out === s ? s : out;
}
