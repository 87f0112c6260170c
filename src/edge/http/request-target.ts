/**
 * The one reading of a request target (RFC 3986 and RFC 9112 section 3.2): parsed once, normalised,
 * and then the only form anything downstream uses. The origin receives exactly the canonical
 * target; the ACME phase, rule exclusions' `pathPrefix` and the access log decide on it. (The WAF
 * rules also see the target as received, which is what the Core Rule Set's rules are written for.)
 *
 * Canonical form of the path, segment by segment:
 * - a percent-encoded unreserved character (ALPHA DIGIT - . _ ~) is decoded (RFC 3986 6.2.2.2), so
 *   `%2e%2E` is `..`; every other escape is kept, its hex in upper case (6.2.2.1); a character that
 *   may not appear in a path (space, `"`, `<`, bytes over 0x7f...) is percent-encoded;
 * - dot segments are removed (5.2.4), never above the root; with `mergeSlashes`, empty segments
 *   (`//`) are dropped, as nginx's `merge_slashes on` does;
 * - the query is passed on as received, the fragment (never valid in a request) is dropped.
 *
 * What servers behind the proxy read in different ways is "ambiguous", and `ambiguousPath` decides
 * (Envoy's `path_with_escaped_slashes_action`, extended to the other cases):
 * - an encoded `/` or `\` (`%2F`, `%5C`) and a raw `\` (read as `/` by browsers, IIS, some
 *   frameworks; as a character by others);
 * - a segment with path parameters that is a dot segment once they are cut (`..;x`, `.;`): Tomcat and
 *   Jetty drop `;params` before resolving `..`, so `/public/..;/admin` is `/admin` to them;
 * - after decoding, a NUL byte or bytes that are not UTF-8 (overlong `%c0%ae` is a `.` to lax
 *   decoders); a `%` not followed by two hex digits.
 * REFUSE (default): 400. NORMALIZE: a slash is a separator, a dot segment with parameters is the dot
 * segment; NUL, bad UTF-8 and bad escapes cannot be normalised and are refused. KEEP: the
 * characters stay data (escaped: `%2F`, `%5C`, `%00`, `%25`), the parameters part of the segment.
 * Either way the origin receives the same path the phases decided on.
 */

export type AmbiguousPathAction = 'REFUSE' | 'NORMALIZE' | 'KEEP';

export interface RequestTargetSettings {
  readonly ambiguousPath: AmbiguousPathAction;
  readonly mergeSlashes: boolean;
}

export const DEFAULT_REQUEST_TARGET_SETTINGS: Readonly<RequestTargetSettings> = Object.freeze({
  ambiguousPath: 'REFUSE',
  mergeSlashes: true,
});

/** Why a target was refused (the `reason` label of tps_edge_refused_total). */
export type TargetRefusal =
  | 'MALFORMED_TARGET'
  | 'ESCAPED_SLASH'
  | 'BACKSLASH'
  | 'DOT_SEGMENT_PARAMETERS'
  | 'NUL'
  | 'INVALID_UTF8'
  | 'BAD_ESCAPE';

/**
 * Why a request was refused as malformed or ambiguous before any other phase looked at it (the
 * request-target phase): its target (`TargetRefusal`), its Host, or an HTTP/2 field HTTP/1.1 cannot carry.
 */
export type RequestRefusal =
  | TargetRefusal
  | 'DUPLICATE_HOST'
  | 'HOST_MISMATCH'
  | 'CONNECTION_HEADER'
  | 'TE_NOT_TRAILERS'
  | 'CONTENT_LENGTH_MISMATCH';

export interface CanonicalTarget {
  /** Canonical path, `/` first (or `*` for OPTIONS' asterisk form). */
  readonly path: string;
  /** What goes to the origin: `path`, then `?` and the query as received when there was one. */
  readonly target: string;
  /** The authority of an absolute-form target (`http://host:port/...`), lower-cased; undefined for origin-form. */
  readonly authority: string | undefined;
}

export type TargetResult = { ok: true; value: CanonicalTarget } | { ok: false; reason: TargetRefusal };

// Byte classes (RFC 3986 2.2, 2.3, 3.3).
const UNRESERVED = 1;
/** sub-delims, ':' and '@': allowed in a segment as they are, meaning kept (never decoded from %XX). */
const PCHAR_DELIM = 2;
const CLASS = new Uint8Array(256);
for (let c = 0x30; c <= 0x39; c++) CLASS[c] = UNRESERVED;
for (let c = 0x41; c <= 0x5a; c++) CLASS[c] = UNRESERVED;
for (let c = 0x61; c <= 0x7a; c++) CLASS[c] = UNRESERVED;
for (const ch of '-._~') CLASS[ch.charCodeAt(0)] = UNRESERVED;
for (const ch of "!$&'()*+,;=:@") CLASS[ch.charCodeAt(0)] = PCHAR_DELIM;

const HEX = '0123456789ABCDEF';
const SLASH = 0x2f;
const BACKSLASH = 0x5c;
const PERCENT = 0x25;
const SEMICOLON = 0x3b;
const QUESTION = 0x3f;
const DOT = 0x2e;

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const lower = c | 0x20;
  if (lower >= 0x61 && lower <= 0x66) return lower - 0x61 + 10;
  return -1;
}

function escaped(byte: number): string {
  return `%${HEX[byte >> 4]}${HEX[byte & 15]}`;
}

class Refused {
  readonly reason: TargetRefusal;
  constructor(reason: TargetRefusal) {
    this.reason = reason;
  }
}

/** One segment being read: its canonical text and its bytes fully decoded (for the UTF-8, NUL and parameter checks). */
interface Segment {
  text: string;
  decoded: number[];
  /** A raw or encoded `;` appeared. */
  parameters: boolean;
  /** Some byte was percent-encoded or not ASCII: `decoded` must be checked. */
  needsCheck: boolean;
}

function newSegment(): Segment {
  return { text: '', decoded: [], parameters: false, needsCheck: false };
}

/**
 * Parses and normalises `raw` (the request target as received: each char one byte, as Node hands
 * it). Never throws.
 */
export function canonicalTarget(raw: string, settings: RequestTargetSettings = DEFAULT_REQUEST_TARGET_SETTINGS): TargetResult {
  try {
    return { ok: true, value: parse(raw, settings) };
  } catch (err) {
    if (err instanceof Refused) return { ok: false, reason: err.reason };
    throw err;
  }
}

function parse(raw: string, settings: RequestTargetSettings): CanonicalTarget {
  if (raw === '*') return { path: '*', target: '*', authority: undefined };
  // An empty path is '/' (RFC 3986 6.2.3): `?x=1` is `/?x=1`.
  let rest = raw.charCodeAt(0) === QUESTION ? `/${raw}` : raw;
  let authority: string | undefined;
  if (rest.charCodeAt(0) !== SLASH) {
    // Absolute form (RFC 9112 3.2.2): only http and https, no user info, an authority; the path
    // that follows is read like any other.
    const match = /^(https?):\/\/([^/?#]*)/i.exec(rest);
    if (match === null) throw new Refused('MALFORMED_TARGET');
    const host = match[2]!;
    if (host === '' || host.includes('@')) throw new Refused('MALFORMED_TARGET');
    authority = host.toLowerCase();
    rest = rest.slice(match[0].length);
    if (rest === '' || rest.charCodeAt(0) !== SLASH) rest = `/${rest}`;
  }
  const hash = rest.indexOf('#');
  if (hash !== -1) rest = rest.slice(0, hash);
  const question = rest.indexOf('?');
  const rawPath = question === -1 ? rest : rest.slice(0, question);
  const query = question === -1 ? undefined : rest.slice(question);
  const path = canonicalPath(rawPath, settings);
  // A path already canonical (canonicalPath gave it back): the target is what came, not a copy.
  const target = query === undefined ? path : path === rawPath ? rest : path + query;
  return { path, target, authority };
}

/**
 * Already canonical, as nearly every browser's path is: only characters kept as they are (no
 * escape, no `;`), and no segment that is empty or starts with a dot. Such a path is its own
 * canonical form, read without building anything.
 */
function isPlainPath(rawPath: string): boolean {
  let previous = SLASH;
  for (let i = 1; i < rawPath.length; i++) {
    const c = rawPath.charCodeAt(i);
    if (c === SLASH) {
      if (previous === SLASH) return false;
    } else if (c > 0xff || CLASS[c] === 0 || c === SEMICOLON || (c === DOT && previous === SLASH)) {
      return false;
    }
    previous = c;
  }
  return true;
}

/** The canonical form of an absolute path (RFC 3986 `path-absolute`, `/` first). */
function canonicalPath(rawPath: string, settings: RequestTargetSettings): string {
  if (isPlainPath(rawPath)) return rawPath;
  const action = settings.ambiguousPath;
  const segments: string[] = [];
  let segment = newSegment();
  // Whether the segment list ends with a directory (trailing '/', or a final dot segment).
  let trailingSlash = false;

  const finishSegment = (last: boolean): void => {
    const text = classify(segment, action);
    segment = newSegment();
    if (text === '.' || text === '..') {
      if (text === '..' && segments.length > 0) segments.pop();
      trailingSlash = true;
      return;
    }
    if (text === '') {
      // The first segment is the empty one before the leading '/'.
      if (last) trailingSlash = true;
      else if (!settings.mergeSlashes) segments.push('');
      return;
    }
    segments.push(text);
    trailingSlash = false;
  };

  const length = rawPath.length;
  // rawPath starts with '/': the segments start after it.
  for (let i = 1; i < length; i++) {
    const c = rawPath.charCodeAt(i);
    if (c > 0xff) throw new Refused('MALFORMED_TARGET');
    if (c === SLASH) {
      finishSegment(false);
      continue;
    }
    if (c === BACKSLASH) {
      if (action === 'REFUSE') throw new Refused('BACKSLASH');
      if (action === 'NORMALIZE') finishSegment(false);
      else addEscaped(segment, c);
      continue;
    }
    if (c === PERCENT) {
      const hi = i + 2 < length ? hexValue(rawPath.charCodeAt(i + 1)) : -1;
      const lo = hi === -1 ? -1 : hexValue(rawPath.charCodeAt(i + 2));
      if (lo === -1) {
        if (action !== 'KEEP') throw new Refused('BAD_ESCAPE');
        addEscaped(segment, PERCENT);
        continue;
      }
      i += 2;
      const byte = (hi << 4) | lo;
      if (byte === SLASH || byte === BACKSLASH) {
        if (action === 'REFUSE') throw new Refused('ESCAPED_SLASH');
        if (action === 'NORMALIZE') {
          finishSegment(false);
          continue;
        }
        addEscaped(segment, byte);
        continue;
      }
      if (CLASS[byte] === UNRESERVED) {
        segment.text += String.fromCharCode(byte);
        segment.decoded.push(byte);
        continue;
      }
      addEscaped(segment, byte);
      continue;
    }
    if (CLASS[c] !== 0) {
      segment.text += String.fromCharCode(c);
      segment.decoded.push(c);
      if (c === SEMICOLON) segment.parameters = true;
      continue;
    }
    // Not allowed in a path as it is: percent-encoded (a space, '"', '<', '{', a byte over 0x7f...).
    addEscaped(segment, c);
  }
  finishSegment(true);
  let path = `/${segments.join('/')}`;
  if (trailingSlash && segments.length > 0) path += '/';
  return path;
}

function addEscaped(segment: Segment, byte: number): void {
  segment.text += escaped(byte);
  segment.decoded.push(byte);
  segment.needsCheck = true;
  if (byte === SEMICOLON) segment.parameters = true;
}

/**
 * The segment's canonical text, after the checks that need it decoded: `.` or `..` for a dot
 * segment (one with parameters, under NORMALIZE, too).
 */
function classify(segment: Segment, action: AmbiguousPathAction): string {
  const text = segment.text;
  if (segment.needsCheck && action !== 'KEEP') {
    const bytes = segment.decoded;
    if (bytes.includes(0)) throw new Refused('NUL');
    if (!isUtf8(bytes)) throw new Refused('INVALID_UTF8');
  }
  if (text === '.' || text === '..' || !segment.parameters) return text;
  // With path parameters: what Tomcat and Jetty see once they cut them (everything from the first ';', decoded or not).
  const bytes = segment.decoded;
  const cut = bytes.indexOf(SEMICOLON);
  const dots = cut === 1 ? bytes[0] === 0x2e : cut === 2 ? bytes[0] === 0x2e && bytes[1] === 0x2e : false;
  if (!dots) return text;
  if (action === 'REFUSE') throw new Refused('DOT_SEGMENT_PARAMETERS');
  if (action === 'NORMALIZE') return cut === 1 ? '.' : '..';
  return text;
}

/** Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF. */
export function isUtf8(bytes: readonly number[]): boolean {
  let i = 0;
  const n = bytes.length;
  while (i < n) {
    const b = bytes[i]!;
    if (b < 0x80) {
      i++;
      continue;
    }
    let need: number;
    let min: number;
    let cp: number;
    if (b >= 0xc2 && b <= 0xdf) {
      need = 1;
      min = 0x80;
      cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
      need = 2;
      min = 0x800;
      cp = b & 0x0f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      need = 3;
      min = 0x10000;
      cp = b & 0x07;
    } else {
      return false;
    }
    for (let k = 1; k <= need; k++) {
      const next = bytes[i + k];
      if (next === undefined || (next & 0xc0) !== 0x80) return false;
      cp = (cp << 6) | (next & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += need + 1;
  }
  return true;
}

/**
 * A rule exclusion's `pathPrefix` in the same canonical form as request paths (so that `/api/./`,
 * `/%61pi` and `/api` are one prefix), without its trailing `/`; '' for the root. A prefix that is
 * itself ambiguous is read leniently (NORMALIZE, then KEEP): it is the operator's, not an attack.
 */
export function canonicalPathPrefix(pathPrefix: string, mergeSlashes: boolean): string {
  let result = canonicalTarget(pathPrefix, { ambiguousPath: 'NORMALIZE', mergeSlashes });
  if (!result.ok) result = canonicalTarget(pathPrefix, { ambiguousPath: 'KEEP', mergeSlashes });
  const path = result.ok ? result.value.path : pathPrefix;
  return path.replace(/\/+$/, '');
}
