/**
 * The kinds of bytes a value holds (charMask), and per transformation the kinds without which it
 * leaves a value as it is (CHANGES_ON): the engine does not call a transformation on a value it
 * would not change (most calls on benign values).
 */
import { isSpace } from './bytes.ts';
import { CMDLINE_DELETE, CMDLINE_KIND } from './command-line.ts';

// Kinds of bytes a value holds (charMask): a transformation whose CHANGES_ON kinds are all absent
// returns the value as it is, and the engine does not call it (most calls on benign values).
const UPPER = 1;

const LOWER = 2;

const PERCENT = 4;

const PLUS = 8;

const AMP = 16;

const BACKSLASH = 32;

const SLASH = 64;

const DOT = 128;

const NUL = 256;

const SPACE = 512; // \t \n \v \f \r and space

const HIGH = 1024; // >= 0x80

const CMDLINE_PUNCT = 2048; // " ' ^ , ; (

const CMDLINE_DELETED = 4096; // " ' ^ \ (cmdLine deletes them, joining their neighbours)

const BYTE_KINDS = new Int32Array(256);
for (let c = 0; c < 256; c++) {
  let k = 0;
  if (c >= 0x41 && c <= 0x5a) k |= UPPER;
  if (c >= 0x61 && c <= 0x7a) k |= LOWER;
  if (c === 0x25) k |= PERCENT;
  if (c === 0x2b) k |= PLUS;
  if (c === 0x26) k |= AMP;
  if (c === 0x5c) k |= BACKSLASH;
  if (c === 0x2f) k |= SLASH;
  if (c === 0x2e) k |= DOT;
  if (c === 0) k |= NUL;
  if (isSpace(c)) k |= SPACE;
  if (c >= 0x80) k |= HIGH;
  if (c === 0x22 || c === 0x27 || c === 0x5e || c === 0x2c || c === 0x3b || c === 0x28) k |= CMDLINE_PUNCT;
  if (CMDLINE_KIND[c] === CMDLINE_DELETE) k |= CMDLINE_DELETED;
  BYTE_KINDS[c] = k;
}

/** The kinds of bytes in `s` (the CHANGES_ON bits). */
export function charMask(s: string): number {
  let m = 0;
  for (let i = 0; i < s.length; i++) m |= BYTE_KINDS[s.charCodeAt(i) & 0xff]!;
  return m;
}

/**
 * Per transformation: the byte kinds without which it returns its input unchanged (checked by
 * a test on random values, transformations.test.ts). Those not listed always run.
 */
export const CHANGES_ON: ReadonlyMap<string, number> = new Map([
  ['lowercase', UPPER],
  ['uppercase', LOWER],
  ['urldecode', PERCENT | PLUS],
  ['urldecodeuni', PERCENT | PLUS],
  ['htmlentitydecode', AMP],
  ['jsdecode', BACKSLASH],
  ['cssdecode', BACKSLASH | NUL],
  ['cmdline', CMDLINE_PUNCT | BACKSLASH | SPACE | SLASH | UPPER],
  ['compresswhitespace', SPACE],
  ['removewhitespace', SPACE | HIGH],
  ['removenulls', NUL],
  ['replacenulls', NUL],
  ['replacecomments', SLASH],
  ['normalizepath', SLASH | DOT],
  ['normalizepathwin', SLASH | DOT | BACKSLASH],
  ['utf8tounicode', HIGH | NUL],
  ['trim', SPACE],
  ['trimleft', SPACE],
  ['trimright', SPACE],
  ['escapeseqdecode', BACKSLASH],
]);

/**
 * What transformation `name` can do to a letter-free `literal` (no ASCII letter in it):
 * `creating`, the byte kinds without which it cannot make the literal appear in a value that does
 * not hold it; `adds`, the kinds its result may hold that its input did not. Undefined when not
 * known. A transformation that returns its input without its CHANGES_ON kinds creates nothing and
 * adds nothing then. cmdLine (which runs on nearly every value) only deletes " ' ^ \, turns runs
 * of space , ; into one space, drops a space before / or ( and lower-cases: it cannot make a
 * literal without a space, '/' or '(' appear without one of the bytes it deletes (the only joins
 * it makes between bytes that were apart), and adds spaces and lower-case letters. Checked on
 * random values (transformations.test.ts).
 */
export function literalEffect(name: string, literal: string): { readonly creating: number; readonly adds: number } | undefined {
  if (/[A-Za-z]/.test(literal)) return undefined;
  if (name === 'cmdline') return /[ /(]/.test(literal) ? undefined : { creating: CMDLINE_DELETED, adds: SPACE | LOWER };
  const changesOn = CHANGES_ON.get(name);
  return changesOn === undefined || changesOn < 0 ? undefined : { creating: changesOn, adds: 0 };
}
