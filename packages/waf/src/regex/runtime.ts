/**
 * Compiled PCRE patterns for matching binary strings, and the ReDoS guard.
 *
 * ReDoS: V8 is told, once, before any pattern is compiled, to fall back to its linear-time
 * (automaton) engine when a backtracking match exceeds `--regexp-backtracks-before-fallback`
 * backtracks. The translation (pcre.ts) keeps patterns in the subset that engine accepts (no `i`
 * flag, no modifiers); `linear` tells whether V8 accepted a pattern for it. A pattern the linear
 * engine cannot run (lookahead, backreference, huge counted repetition) has no such guarantee: the
 * engine's per-request time budget (compiled-engine.ts) covers those.
 */
import { setFlagsFromString } from 'node:v8';
import { translatePcre } from './pcre.ts';
import type { TranslatedRegex } from './pcre.ts';

let flagsSet = false;

/** Sets the V8 flags of the ReDoS guard (idempotent; must run before patterns are compiled). */
export function enableLinearFallback(backtracks = 10_000): void {
  if (flagsSet) return;
  flagsSet = true;
  setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');
  setFlagsFromString(`--regexp-backtracks-before-fallback=${backtracks}`);
  // Lets us ask V8 whether a pattern can run in linear time (the `l` flag) at load time.
  setFlagsFromString('--enable-experimental-regexp-engine');
}

enableLinearFallback();

function canRunLinear(source: string, flags: string): boolean {
  try {
    new RegExp(source, `l${flags}`);
    return true;
  } catch {
    return false;
  }
}

/**
 * From this many characters on, a pattern the linear engine can take runs on it from the start.
 * The fallback only switches after `--regexp-backtracks-before-fallback` backtracks of one match
 * attempt, and an unanchored search makes an attempt per start position: a long value with many
 * near-misses (941160's `[\x22\x27](?:[^]*[\x09-\x0d\x20\x2f])?(?:on...)` on a value full of
 * quotes) then costs seconds, each attempt a single step the inspection budget cannot interrupt,
 * where the linear engine takes milliseconds. Below this length the backtracking engine's compiled
 * code is faster, and its worst case small.
 */
const LINEAR_FROM_LENGTH = 4096;

export class CompiledRegex {
  readonly pattern: string;
  readonly translated: TranslatedRegex;
  /** For subjects without "\n". */
  readonly re: RegExp;
  /** For subjects with "\n" but no "\r" (JS multiline flag). */
  readonly reM: RegExp;
  /** For subjects with "\n" and "\r" (lookaround anchors). */
  readonly reNl: RegExp;
  /** True when V8's linear engine can take over on subjects without "\r" (the usual case). */
  readonly linear: boolean;
  /** True when it can also for subjects with "\r\n" line ends. */
  readonly linearNl: boolean;
  /** The patterns compiled for the linear engine alone (pickLinear). */
  private linearCopies: { re: RegExp | undefined; reM: RegExp | undefined; reNl: RegExp | undefined } | undefined;

  constructor(pattern: string, caseless = false) {
    this.pattern = pattern;
    const t = translatePcre(pattern, caseless);
    this.translated = t;
    this.re = new RegExp(t.source);
    const nlSensitive = t.sourceNl !== t.source;
    this.reM = nlSensitive ? new RegExp(t.sourceM, 'm') : this.re;
    this.reNl = nlSensitive ? new RegExp(t.sourceNl) : this.re;
    this.linear = canRunLinear(t.source, '') && (!nlSensitive || canRunLinear(t.sourceM, 'm'));
    this.linearNl = this.linear && (this.reNl === this.re || canRunLinear(t.sourceNl, ''));
  }

  private pick(subject: string): RegExp {
    if (subject.length >= LINEAR_FROM_LENGTH && this.linear) return this.pickLinear(subject) ?? this.pickBacktracking(subject);
    return this.pickBacktracking(subject);
  }

  private pickBacktracking(subject: string): RegExp {
    if (this.reNl === this.re || subject.indexOf('\n') < 0) return this.re;
    return subject.indexOf('\r') < 0 ? this.reM : this.reNl;
  }

  /**
   * The linear engine's copy for a long subject, or undefined when it cannot take this one. Made on
   * first use: most patterns never see a long subject.
   */
  private pickLinear(subject: string): RegExp | undefined {
    const linear = (this.linearCopies ??= { re: undefined, reM: undefined, reNl: undefined });
    const t = this.translated;
    if (this.reNl === this.re || subject.indexOf('\n') < 0) return (linear.re ??= new RegExp(t.source, 'l'));
    if (subject.indexOf('\r') < 0) return (linear.reM ??= new RegExp(t.sourceM, 'lm'));
    if (!this.linearNl) return undefined;
    return (linear.reNl ??= new RegExp(t.sourceNl, 'l'));
  }

  test(subject: string): boolean {
    return this.pick(subject).test(subject);
  }

  /** PCRE-numbered captures of the first match (undefined for groups that did not take part), or null. */
  exec(subject: string): (string | undefined)[] | null {
    const m = this.pick(subject).exec(subject);
    if (!m) return null;
    const map = this.translated.groupMap;
    const out: (string | undefined)[] = new Array(map.length);
    for (let g = 0; g < map.length; g++) out[g] = m[map[g]!];
    return out;
  }
}

export interface KeyRegex {
  test(key: string): boolean;
  /** test() of a key given lower-cased (lowerAscii: the dynamic collections' own keys), when cheaper. */
  testLowerCase?(lowerKey: string): boolean;
}

/**
 * A selector that says "holds this word" (or "starts with it", after `^`): printable ASCII, with
 * punctuation escaped or not, and a last character made optional by `*` or `?` (a search may then
 * leave it out) or repeated by `+`, or followed by `.*`. The CRS's TX selectors are all such:
 * `^header_name_`, `LEAKAGE` + escaped `\` and `/` + `ERRORS`, `MULTIPART_HEADERS_CONTENT_TYPES` + `_*`,
 * `paramcounter_.*` ...
 * Undefined for anything else.
 */
function plainKeyWord(pattern: string): { anchored: boolean; word: string } | undefined {
  const anchored = pattern.startsWith('^');
  let word = '';
  for (let i = anchored ? 1 : 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c < ' ' || c > '~') return undefined;
    if (c === '\\') {
      const next = pattern[i + 1];
      if (next === undefined || next < ' ' || next > '~' || /[0-9A-Za-z]/.test(next)) return undefined;
      word += next;
      i++;
    } else if (c === '.' && i === pattern.length - 2 && pattern[i + 1] === '*') {
      // a trailing `.*` (921180's `paramcounter_.*`) matches wherever the word does
      break;
    } else if ('*?+'.includes(c) && i === pattern.length - 1 && word.length > 0 && pattern[i - 1] !== '\\') {
      if (c !== '+') word = word.slice(0, -1);
    } else if ('.^$|?*+()[]{}'.includes(c)) return undefined;
    else word += c;
  }
  return { anchored, word: word.toLowerCase() };
}

/**
 * A collection-key selector (`ARGS:/re/`): case-insensitive, as ModSecurity compiles them. A plain
 * word (plainKeyWord) is compared as such, without the regex machinery: the CRS's TX selectors
 * test every TX key of every request (fifty or more), most of them failing on the first byte.
 * PCRE's caseless matching folds ASCII letters only (no UTF mode), as this comparison does.
 */
export function compileKeyRegex(pattern: string): KeyRegex {
  const plain = plainKeyWord(pattern);
  if (plain === undefined) return new CompiledRegex(pattern, true);
  const { anchored, word } = plain;
  return {
    test(key: string): boolean {
      if (anchored) return caselessAt(key, 0, word);
      for (let at = 0; at + word.length <= key.length; at++) if (caselessAt(key, at, word)) return true;
      return false;
    },
    testLowerCase: (lowerKey: string): boolean => (anchored ? lowerKey.startsWith(word) : lowerKey.includes(word)),
  };
}

/** Whether `key` holds `word` (lower-case ASCII) at `at`, ASCII letters compared caselessly. */
function caselessAt(key: string, at: number, word: string): boolean {
  if (key.length - at < word.length) return false;
  for (let i = 0; i < word.length; i++) {
    let c = key.charCodeAt(at + i);
    if (c >= 0x41 && c <= 0x5a) c += 0x20;
    if (c !== word.charCodeAt(i)) return false;
  }
  return true;
}
