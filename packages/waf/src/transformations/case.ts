/**
 * lowercase, uppercase: ASCII letters only, as ModSecurity.
 */
const HAS_LOWER = /[a-z]/;

// biome-ignore lint/suspicious/noControlCharactersInRegex: the ASCII range, control characters included
const NON_ASCII = /[^\x00-\x7f]/;

const UPPER_RUNS = /[A-Z]+/g;

const LOWER_RUNS = /[a-z]+/g;

export function lowercase(s: string): string {
  // ASCII only (C locale); V8's toLowerCase would also fold Latin-1 letters. One builtin call for
  // the usual value (ASCII, or nothing to lower): toLowerCase returns its input when nothing changes.
  const lowered = s.toLowerCase();
  if (lowered === s) return s;
  if (!NON_ASCII.test(s)) return lowered;
  return s.replace(UPPER_RUNS, (m) => m.toLowerCase());
}

export function uppercase(s: string): string {
  if (!HAS_LOWER.test(s)) return s;
  if (!NON_ASCII.test(s)) return s.toUpperCase();
  return s.replace(LOWER_RUNS, (m) => m.toUpperCase());
}
