/**
 * Whitespace and NUL bytes: compressWhitespace, removeWhitespace, removeNulls, replaceNulls,
 * trim*.
 */
import { isSpace } from './bytes.ts';

// (module constants: a regular-expression literal in a function body is a new object at every call)
/**
 * What compressWhitespace changes: whitespace other than a space, or two in a row. A value whose
 * whitespace is single spaces (most text with spaces: a name, an address, a sentence) comes back
 * as it is, without the copy and the comparison a replace() would cost.
 */
const COMPRESSIBLE = /[\t-\r]|[\t-\r ]{2}/;

const WHITESPACE_RUNS = /[\t-\r ]+/g;

export function compressWhitespace(s: string): string {
  if (!COMPRESSIBLE.test(s)) return s;
  return s.replace(WHITESPACE_RUNS, ' ');
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
