/**
 * SecLang transformations with ModSecurity v3.0.9's exact byte semantics, on binary strings (one
 * char per byte), by family (one module each). Each returns its input unchanged (the same string)
 * when there is nothing to do, which keeps the per-transaction cache small and makes multiMatch's
 * "value changed" test cheap.
 *
 * Written from ModSecurity's documented behaviour and checked against the reference engine; the
 * quirks kept on purpose are noted where they are (cssDecode stops at a NUL byte, utf8toUnicode
 * drops the lead byte of a broken sequence, htmlEntityDecode saturates numeric entities ...).
 */
import type { Transformation } from './bytes.ts';
import { lowercase, uppercase } from './case.ts';
import { cmdLine } from './command-line.ts';
import { removeComments, removeCommentsChar, replaceComments } from './comments.ts';
import { base64Decode, base64Encode, hexDecode, hexEncode, length, parity, sqlHexDecode } from './encodings.ts';
import { cssDecode, escapeSeqDecode, jsDecode } from './escapes.ts';
import { md5, sha1 } from './hashes.ts';
import { htmlEntityDecode } from './html.ts';
import { normalizePath, normalizePathWin } from './path.ts';
import { utf8toUnicode } from './unicode.ts';
import { urlDecode, urlDecodeUni, urlEncode } from './url.ts';
import { compressWhitespace, removeNulls, removeWhitespace, replaceNulls, trim, trimLeft, trimRight } from './whitespace.ts';

export type { Transformation } from './bytes.ts';
export { CHANGES_ON, charMask, literalEffect } from './byte-kinds.ts';
export {
  base64Decode,
  base64Encode,
  cmdLine,
  compressWhitespace,
  cssDecode,
  escapeSeqDecode,
  hexDecode,
  hexEncode,
  htmlEntityDecode,
  jsDecode,
  length,
  lowercase,
  md5,
  normalizePath,
  normalizePathWin,
  removeComments,
  removeCommentsChar,
  removeNulls,
  removeWhitespace,
  replaceComments,
  replaceNulls,
  sha1,
  sqlHexDecode,
  trim,
  trimLeft,
  trimRight,
  uppercase,
  urlDecode,
  urlDecodeUni,
  urlEncode,
  utf8toUnicode,
};

/** Aliases: the same transformation under another name. */
export const TRANSFORMATION_ALIASES: ReadonlyMap<string, string> = new Map([
  ['normalisepath', 'normalizepath'],
  ['normalisepathwin', 'normalizepathwin'],
]);

/** Lower-case transformation name -> implementation. */
export const TRANSFORMATIONS: ReadonlyMap<string, Transformation> = new Map<string, Transformation>([
  ['lowercase', lowercase],
  ['uppercase', uppercase],
  ['urldecode', urlDecode],
  ['urldecodeuni', urlDecodeUni],
  ['htmlentitydecode', htmlEntityDecode],
  ['jsdecode', jsDecode],
  ['cssdecode', cssDecode],
  ['cmdline', cmdLine],
  ['compresswhitespace', compressWhitespace],
  ['removewhitespace', removeWhitespace],
  ['removenulls', removeNulls],
  ['replacenulls', replaceNulls],
  ['replacecomments', replaceComments],
  ['removecomments', removeComments],
  ['removecommentschar', removeCommentsChar],
  ['normalizepath', normalizePath],
  ['normalizepathwin', normalizePathWin],
  ['utf8tounicode', utf8toUnicode],
  ['length', length],
  ['hexencode', hexEncode],
  ['hexdecode', hexDecode],
  ['sha1', sha1],
  ['md5', md5],
  ['base64decode', base64Decode],
  ['base64encode', base64Encode],
  ['trim', trim],
  ['trimleft', trimLeft],
  ['trimright', trimRight],
  ['urlencode', urlEncode],
  ['sqlhexdecode', sqlHexDecode],
  ['escapeseqdecode', escapeSeqDecode],
  ['parityeven7bit', (s) => parity(s, 'even')],
  ['parityodd7bit', (s) => parity(s, 'odd')],
  ['parityzero7bit', (s) => parity(s, 'zero')],
]);
