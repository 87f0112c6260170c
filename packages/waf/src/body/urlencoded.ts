/**
 * application/x-www-form-urlencoded and query strings, as ModSecurity's
 * Transaction::extractArguments: split on the separator (getline semantics: no trailing empty
 * token, empty tokens in the middle kept as empty arguments), split each at the first '=',
 * decode both halves (%XX when valid, '+' to space; an invalid % sets URLENCODED_ERROR).
 */
import { decodeThroughScratch, isHex, x2c } from '../transformations/bytes.ts';
import type { CodeSink } from '../transformations/bytes.ts';

/** urldecode_nonstrict_inplace: returns the decoded text and whether an invalid % was seen. */
export function urlDecodeNonStrict(s: string): { text: string; invalid: boolean } {
  if (s.indexOf('%') < 0 && s.indexOf('+') < 0) return { text: s, invalid: false };
  const text = decodeThroughScratch(s, decodeNonStrictInto);
  return { text, invalid: invalidPercentSeen };
}

/** Whether the last `decodeNonStrictInto` met a % not followed by two hex digits (set by it, read right after). */
let invalidPercentSeen = false;

/** urldecode_nonstrict into `out` (a `SinkDecoder`); the OR of the characters copied as they are tells one past 0xFF. */
function decodeNonStrictInto(s: string, out: CodeSink): number {
  const n = s.length;
  let o = 0;
  let copied = 0;
  let invalid = false;
  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x25) {
      if (i + 2 < n && isHex(s.charCodeAt(i + 1)) && isHex(s.charCodeAt(i + 2))) {
        out[o++] = x2c(s.charCodeAt(i + 1), s.charCodeAt(i + 2));
        i += 3;
        continue;
      }
      invalid = true;
    }
    copied |= c;
    out[o++] = c === 0x2b ? 0x20 : c;
    i++;
  }
  invalidPercentSeen = invalid;
  return copied > 0xff ? ~o : o;
}

/** getline()-style split: tokens between separators, no trailing empty token. */
export function getlineSplit(s: string, sep: string): string[] {
  if (s === '') return [];
  const parts = s.split(sep);
  if (parts[parts.length - 1] === '') parts.pop();
  return parts;
}

export interface ArgumentSink {
  /** False: refused by an input limit, and the parse stops there (what is past a limit costs nothing). */
  addArgument(origin: 'GET' | 'POST', key: string, value: string): boolean;
}

/**
 * Returns true when some %-encoding was invalid (URLENCODED_ERROR). Tokens are taken one at a
 * time (not split all at once): a body of a million separators stops at the arguments limit.
 */
export function extractArguments(sink: ArgumentSink, origin: 'GET' | 'POST', text: string, separator = '&'): boolean {
  let invalid = false;
  if (separator === '') return extractTokens(sink, origin, getlineSplit(text, separator));
  const n = text.length;
  let start = 0;
  while (start < n) {
    let end = text.indexOf(separator, start);
    if (end < 0) end = n;
    const token = text.slice(start, end);
    start = end + separator.length;
    const eq = token.indexOf('=');
    const rawKey = eq < 0 ? token : token.slice(0, eq);
    const rawValue = eq < 0 ? '' : token.slice(eq + 1);
    const k = urlDecodeNonStrict(rawKey);
    const v = urlDecodeNonStrict(rawValue);
    if (k.invalid || v.invalid) invalid = true;
    if (!sink.addArgument(origin, k.text, v.text)) break;
  }
  return invalid;
}

function extractTokens(sink: ArgumentSink, origin: 'GET' | 'POST', tokens: readonly string[]): boolean {
  let invalid = false;
  for (const token of tokens) {
    const eq = token.indexOf('=');
    const k = urlDecodeNonStrict(eq < 0 ? token : token.slice(0, eq));
    const v = urlDecodeNonStrict(eq < 0 ? '' : token.slice(eq + 1));
    if (k.invalid || v.invalid) invalid = true;
    if (!sink.addArgument(origin, k.text, v.text)) break;
  }
  return invalid;
}
