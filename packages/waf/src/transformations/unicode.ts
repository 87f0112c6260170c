/**
 * utf8toUnicode.
 */

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
  const input = `${s}\0`;
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
    return `%u${h.length < 4 ? '0'.repeat(4 - h.length) : ''}${h}`;
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
      if (inputLen < 2)
        unicodeLen = -1; // ModSecurity never decrements bytes_left
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
