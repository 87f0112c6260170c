/** @validateUtf8Encoding: matches a value that is not valid UTF-8 (overlong forms and surrogates included). */
import type { OperatorDefinition } from './registry.ts';

/** True when the input is NOT valid UTF-8 (ModSecurity's @validateUtf8Encoding matches on errors). */
export function invalidUtf8(input: string): boolean {
  const n = input.length;
  let i = 0;
  while (i < n) {
    const c = input.charCodeAt(i);
    if ((c & 0x80) === 0) {
      i++;
      continue;
    }
    let len: number;
    let d: number;
    const b = (k: number): number => (i + k < n ? input.charCodeAt(i + k) : -1);
    const cont = (k: number): boolean => (b(k) & 0xc0) === 0x80 && b(k) >= 0;
    if ((c & 0xe0) === 0xc0) {
      if (n - i < 2) return true;
      if (!cont(1)) return true;
      len = 2;
      d = ((c & 0x1f) << 6) | (b(1) & 0x3f);
    } else if ((c & 0xf0) === 0xe0) {
      if (n - i < 3) return true;
      if (!cont(1) || !cont(2)) return true;
      len = 3;
      d = ((c & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
    } else if ((c & 0xf8) === 0xf0) {
      if (c >= 0xf5) return true;
      if (n - i < 4) return true;
      if (!cont(1) || !cont(2) || !cont(3)) return true;
      len = 4;
      d = ((c & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
    } else {
      return true;
    }
    if (d >= 0xd800 && d <= 0xdfff) return true;
    if ((len === 4 && d < 0x10000) || (len === 3 && d < 0x800) || (len === 2 && d < 0x80)) return true;
    i += len;
  }
  return false;
}

export const validateUtf8EncodingOperator: OperatorDefinition = {
  names: ['validateutf8encoding'],
  create: ({ base }) => ({ ...base, run: (_tx, _r, input) => invalidUtf8(input) }),
};
