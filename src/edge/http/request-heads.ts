/**
 * Where HTTP/1 request heads end in a byte stream, for the early refusal path (early-refusal.ts):
 * a connection of a blocked source gets one prebuilt answer per request head, without Node's
 * parser. The scan only needs to know where each head ends and how to answer it; nothing of the
 * request goes anywhere, so it decides conservatively: anything it does not fully understand is
 * `bad` (400 and close), and a head that announces a body (Content-Length, Transfer-Encoding) or
 * asks for the connection to close is the last one answered, so a body is never read as requests.
 */

/** What `nextHead` found from `from`. */
export type HeadScan =
  /** No complete head yet: keep the bytes from `start` (leading empty lines skipped). */
  | { readonly kind: 'incomplete'; readonly start: number }
  /** One head ends before `next`: answer it (without a body for HEAD), then close if `close`. */
  | { readonly kind: 'head'; readonly next: number; readonly head: boolean; readonly close: boolean }
  /** Not an HTTP/1.0 or 1.1 request head we answer, or longer than allowed: 400 and close. */
  | { readonly kind: 'bad' };

const CR = 13;
const LF = 10;
const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');

/** `METHOD SP request-target SP HTTP/1.x` (RFC 9112 3), the method a token. */
const REQUEST_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) [\x21-\x7e\x80-\xff]+ HTTP\/1\.([01])$/;
/** A field line that announces a body (RFC 9112 6.3): the connection must end after this head. */
const BODY_FIELD = /\r\n(?:content-length|transfer-encoding)[ \t]*:/i;
const CONNECTION_CLOSE = /\r\nconnection[ \t]*:[^\r\n]*\bclose\b/i;
/** A CR not followed by LF, or a LF not preceded by CR: line endings Node's parser refuses too. */
const BARE_CR_OR_LF = /\r(?!\n)|(?<!\r)\n/;

/**
 * The next request head in `buffer` from `from`. Empty lines before a request line are skipped
 * (RFC 9112 2.2). `maxHeadBytes`: a head longer than this (or that many bytes with no end yet) is
 * `bad`, as Node answers 431 to one over `maxHeaderSize`.
 */
export function nextHead(buffer: Buffer, from: number, maxHeadBytes: number): HeadScan {
  const start = headStart(buffer, from);
  const end = buffer.indexOf(HEAD_END, start);
  if (end === -1) return buffer.length - start > maxHeadBytes ? BAD : { kind: 'incomplete', start };
  return scanHead(buffer, start, end, maxHeadBytes);
}

/**
 * `nextHead` remembering the last head it answered: a flood sends the same head again and again,
 * and the same bytes scan the same way (the scan depends on nothing else), so a head equal to the
 * last one is answered after a comparison of bytes, without a string or a regular expression.
 */
export class HeadScanner {
  private readonly maxHeadBytes: number;
  /** The last head answered (from its request line to its end), in `last[0, lastLength)`. */
  private readonly last: Buffer;
  private lastLength = -1;
  private lastHead = false;
  private lastClose = false;

  constructor(maxHeadBytes: number) {
    this.maxHeadBytes = maxHeadBytes;
    this.last = Buffer.alloc(maxHeadBytes);
  }

  /** The last head answered (request line to its end, without the CRLF CRLF); a view that the next scan may change. */
  lastHeadBytes(): Buffer {
    return this.last.subarray(0, Math.max(0, this.lastLength));
  }

  /** As `nextHead(buffer, from, maxHeadBytes)`. */
  next(buffer: Buffer, from: number): HeadScan {
    const start = headStart(buffer, from);
    const end = buffer.indexOf(HEAD_END, start);
    if (end === -1) return buffer.length - start > this.maxHeadBytes ? BAD : { kind: 'incomplete', start };
    const length = end - start;
    if (length === this.lastLength && buffer.compare(this.last, 0, length, start, end) === 0)
      return { kind: 'head', next: end + 4, head: this.lastHead, close: this.lastClose };
    const scan = scanHead(buffer, start, end, this.maxHeadBytes);
    if (scan.kind === 'head') {
      buffer.copy(this.last, 0, start, end);
      this.lastLength = length;
      this.lastHead = scan.head;
      this.lastClose = scan.close;
    }
    return scan;
  }
}

/** Where the request line starts from `from`: empty lines before it are skipped (RFC 9112 2.2). */
function headStart(buffer: Buffer, from: number): number {
  let start = from;
  const length = buffer.length;
  while (start < length && (buffer[start] === CR || buffer[start] === LF)) start++;
  return start;
}

/** The head from `start` (a request line) to `end` (its CRLFCRLF). */
function scanHead(buffer: Buffer, start: number, end: number, maxHeadBytes: number): HeadScan {
  if (end - start > maxHeadBytes) return BAD;
  const text = buffer.toString('latin1', start, end);
  const lineEnd = text.indexOf('\r\n');
  const match = REQUEST_LINE.exec(lineEnd === -1 ? text : text.slice(0, lineEnd));
  if (match === null || BARE_CR_OR_LF.test(text)) return BAD;
  const fields = lineEnd === -1 ? '' : text.slice(lineEnd);
  const close = match[2] === '0' || (fields !== '' && (BODY_FIELD.test(fields) || CONNECTION_CLOSE.test(fields)));
  return { kind: 'head', next: end + 4, head: match[1] === 'HEAD', close };
}

const BAD: HeadScan = Object.freeze({ kind: 'bad' });
