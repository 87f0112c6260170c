/**
 * The origin client's reading of an HTTP/1.x response head (origin-client.ts), in one pass over the
 * head's text: no split into lines, no regular expression for the status line, each name and value
 * sliced once. It is a security boundary (a keep-alive connection that misreads where a response
 * ends hands the next client someone else's response), so it is strict, and its accept/refuse
 * decisions and fields are checked against the line-splitting reader it replaced, kept as the
 * oracle in response-head.test.ts, on generated hostile heads:
 *
 * - the status line is `HTTP/1.0` or `HTTP/1.1`, a space, three digits (the first 1-9), then the
 *   end of the line or a space and a reason phrase;
 * - every field line is a token, a colon and a value (spaces and tabs around it trimmed); a line
 *   without a colon, with an empty name, or with a bare CR or LF anywhere is refused, and so is a
 *   name that is not a token (which is how obs-fold, a line starting with a space or a tab, ends);
 * - Content-Length is 1 to 15 digits, and every one given has the same value; Transfer-Encoding and
 *   Content-Length together are refused; the last Transfer-Encoding says whether chunked is last.
 *
 * Values may hold other control characters: the front end's `writeHead` (node:http's check) refuses
 * them when the head is relayed, as it refuses them from any origin.
 */

import { isNamed } from '../header-name.ts';

/** A response head as read: filled by `parseResponseHead`, one per connection (reused). */
export interface ResponseHead {
  status: number;
  http10: boolean;
  /** Every field as sent, flat `[name, value, ...]` (values trimmed): a new list per head. */
  headers: string[];
  /** Content-Length; -1 when absent. */
  contentLength: number;
  transferEncoding: boolean;
  /** The (last) Transfer-Encoding ends in chunked. */
  chunked: boolean;
  /** The origin asked to close after this response (Connection: close, or HTTP/1.0 without keep-alive). */
  close: boolean;
  /** The last Keep-Alive `timeout=` in seconds; -1 when none. */
  keepAliveTimeoutSeconds: number;
}

export function emptyResponseHead(): ResponseHead {
  return {
    status: 0,
    http10: false,
    headers: [],
    contentLength: -1,
    transferEncoding: false,
    chunked: false,
    close: false,
    keepAliveTimeoutSeconds: -1,
  };
}

const SP = 32;
const HT = 9;
const ZERO = 48;
const NINE = 57;

/** RFC 9110 tchar, by character code (latin1: codes above 127 are not). */
const TOKEN_CHAR = ((): Uint8Array => {
  const table = new Uint8Array(256);
  for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") table[c.charCodeAt(0)] = 1;
  return table;
})();

const CHUNKED_LAST = /(?:^|,)\s*chunked\s*$/i;
const KEEP_ALIVE_TIMEOUT = /timeout=(\d+)/i;

/**
 * Reads the head `text[0, size)` (bytes as latin1), which `text[size, size + 4)`, its CRLF CRLF,
 * ends (what follows it, the start of the body, is not read), into `into`. Returns why it is
 * refused, or undefined when it is a well-formed head (`into` filled).
 */
export function parseResponseHead(head: string, size: number, into: ResponseHead): string | undefined {
  // Every line ends with a CRLF, the last one with the first half of the CRLF CRLF at `size`.
  let lineEnd = head.indexOf('\r\n');
  if (lineEnd < 12 || !head.startsWith('HTTP/1.') || head.charCodeAt(8) !== SP) return 'bad status line';
  const minor = head.charCodeAt(7);
  const d0 = head.charCodeAt(9);
  const d1 = head.charCodeAt(10);
  const d2 = head.charCodeAt(11);
  if ((minor !== ZERO && minor !== ZERO + 1) || d0 <= ZERO || d0 > NINE || d1 < ZERO || d1 > NINE || d2 < ZERO || d2 > NINE)
    return 'bad status line';
  if (lineEnd > 12 && (head.charCodeAt(12) !== SP || hasBareBreak(head, 13, lineEnd))) return 'bad status line';
  const status = (d0 - ZERO) * 100 + (d1 - ZERO) * 10 + (d2 - ZERO);
  const http10 = minor === ZERO;
  const headers: string[] = [];
  let contentLength = -1;
  let chunked = false;
  let transferEncoding = false;
  let close = http10;
  let keepAliveTimeoutSeconds = -1;
  while (lineEnd < size) {
    const start = lineEnd + 2;
    lineEnd = head.indexOf('\r\n', start);
    // A bare CR or LF inside a line would split it differently for the next reader: refuse it.
    if (hasBareBreak(head, start, lineEnd)) return 'bad header line';
    const colon = head.indexOf(':', start);
    if (colon <= start || colon >= lineEnd) return 'bad header line';
    for (let i = start; i < colon; i++) {
      if (TOKEN_CHAR[head.charCodeAt(i)] !== 1) return 'bad header name';
    }
    let from = colon + 1;
    let to = lineEnd;
    while (from < to && (head.charCodeAt(from) === SP || head.charCodeAt(from) === HT)) from++;
    while (to > from && (head.charCodeAt(to - 1) === SP || head.charCodeAt(to - 1) === HT)) to--;
    const value = head.slice(from, to);
    headers.push(head.slice(start, colon), value);
    switch (colon - start) {
      case 10:
        if (isNamed(head, 'connection', start)) {
          const v = value.toLowerCase();
          if (v.includes('close')) close = true;
          else if (http10 && v.includes('keep-alive')) close = false;
        } else if (isNamed(head, 'keep-alive', start)) {
          const hint = KEEP_ALIVE_TIMEOUT.exec(value);
          if (hint) keepAliveTimeoutSeconds = Number(hint[1]);
        }
        break;
      case 14:
        if (isNamed(head, 'content-length', start)) {
          if (!isDecimal(value)) return 'bad content-length';
          const n = Number(value);
          if (contentLength !== -1 && contentLength !== n) return 'conflicting content-length';
          contentLength = n;
        }
        break;
      case 17:
        if (isNamed(head, 'transfer-encoding', start)) {
          transferEncoding = true;
          chunked = CHUNKED_LAST.test(value);
        }
        break;
    }
  }
  if (transferEncoding && contentLength !== -1) return 'both Transfer-Encoding and Content-Length';
  if (status === 101) return 'unexpected protocol switch';
  into.status = status;
  into.http10 = http10;
  into.headers = headers;
  into.contentLength = contentLength;
  into.transferEncoding = transferEncoding;
  into.chunked = chunked;
  into.close = close;
  into.keepAliveTimeoutSeconds = keepAliveTimeoutSeconds;
  return undefined;
}

/**
 * Whether `head[from, lineEnd)` holds a CR or an LF. `lineEnd` is the line's (first) CRLF, so the
 * first CR from `from` must be at `lineEnd` and the first LF right after it.
 */
function hasBareBreak(head: string, from: number, lineEnd: number): boolean {
  return head.indexOf('\r', from) !== lineEnd || head.indexOf('\n', from) !== lineEnd + 1;
}

/** 1 to 15 ASCII digits (a length JavaScript's numbers hold exactly). */
function isDecimal(value: string): boolean {
  const length = value.length;
  if (length === 0 || length > 15) return false;
  for (let i = 0; i < length; i++) {
    const c = value.charCodeAt(i);
    if (c < ZERO || c > NINE) return false;
  }
  return true;
}
