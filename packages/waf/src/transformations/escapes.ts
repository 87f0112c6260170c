/**
 * Backslash escapes of JavaScript, CSS and C: jsDecode, cssDecode, escapeSeqDecode.
 */
import { fromCodes, isHex, isSpace, x2c, xsingle } from './bytes.ts';

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
    if (
      i + 5 < n &&
      c1 === 0x75 &&
      isHex(s.charCodeAt(i + 2)) &&
      isHex(s.charCodeAt(i + 3)) &&
      isHex(s.charCodeAt(i + 4)) &&
      isHex(s.charCodeAt(i + 5))
    ) {
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
