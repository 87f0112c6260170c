/**
 * Paths: normalizePath, normalizePathWin.
 */
import { fromCodes } from './bytes.ts';

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
