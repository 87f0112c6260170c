/** @validateUrlEncoding: matches a value with a % not followed by two hex digits. */
import type { OperatorDefinition } from './registry.ts';

export function validateUrlEncoding(input: string): boolean {
  const n = input.length;
  if (n === 0) return false;
  let i = 0;
  const hex = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
  while (i < n) {
    if (input.charCodeAt(i) === 0x25) {
      if (i + 2 >= n) return true;
      if (hex(input.charCodeAt(i + 1)) && hex(input.charCodeAt(i + 2))) i += 3;
      else return true;
    } else i++;
  }
  return false;
}

export const validateUrlEncodingOperator: OperatorDefinition = {
  names: ['validateurlencoding'],
  create: ({ base }) => ({ ...base, run: (_tx, _r, input) => validateUrlEncoding(input) }),
};
