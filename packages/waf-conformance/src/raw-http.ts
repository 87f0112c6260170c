/**
 * Reads raw HTTP/1.x request bytes the way a strict but tolerant front server does, to turn an FTW
 * request into a WafRequest without a socket. Its answers stand in for what the proxy itself does
 * before the WAF sees a request:
 * - a request line without a version is HTTP/0.9: the answer has no status line, which a client
 *   such as go-ftw reports as an error;
 * - malformed request lines (whitespace before the method, raw spaces or control characters or a
 *   "#" in the target, a target that is none of origin-form "/...", absolute-form "scheme://...",
 *   "*" for OPTIONS, authority-form "host:port" for CONNECT), malformed header lines (bare CR,
 *   folding, no colon, bad name), bad Content-Length or chunked framing, HTTP/0.9 with headers,
 *   an HTTP/1.1 request without exactly one Host, a Host that is empty or not a host[:port]: 400;
 * - a Transfer-Encoding other than chunked: 501;
 * - the WAF still sees, then the server refuses: HTTP/2 and later over this text framing (505) and
 *   CONNECT (405: a reverse proxy does not tunnel);
 * - a body shorter than its Content-Length (or an unterminated head or chunked body): the server
 *   would wait for the rest until it times out: an error.
 * Empty lines before the request line are skipped (RFC 9112 2.2). Strings are latin1 (one char per
 * byte), as Node's http module gives them.
 */

export interface ParsedHttpRequest {
  readonly kind: 'request';
  readonly method: string;
  readonly uri: string;
  /** "1.0" / "1.1". */
  readonly httpVersion: string;
  readonly headers: [string, string][];
  readonly body: Buffer;
  /** The server answers this after the WAF has seen the request (it does not forward it). */
  readonly answerStatus?: number;
  readonly answerReason?: string;
}

/** The server answers without handing the request to the WAF. */
export interface RejectedHttpRequest {
  readonly kind: 'rejected';
  readonly status: number;
  readonly reason: string;
}

/** No HTTP answer at all (HTTP/0.9 reply, or the server waits until the client gives up). */
export interface BrokenHttpRequest {
  readonly kind: 'error';
  readonly reason: string;
}

export type RawRequestResult = ParsedHttpRequest | RejectedHttpRequest | BrokenHttpRequest;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function reject(status: number, reason: string): RejectedHttpRequest {
  return { kind: 'rejected', status, reason };
}

function findHeadEnd(bytes: Buffer, from: number): { end: number; bodyStart: number } | undefined {
  for (let i = from; i < bytes.length; i++) {
    if (bytes[i] !== 0x0a) continue;
    // "\n\n" or "\n\r\n"
    if (bytes[i + 1] === 0x0a) return { end: i, bodyStart: i + 2 };
    if (bytes[i + 1] === 0x0d && bytes[i + 2] === 0x0a) return { end: i, bodyStart: i + 3 };
  }
  return undefined;
}

function decodeChunked(bytes: Buffer, start: number): Buffer | RejectedHttpRequest | BrokenHttpRequest {
  const parts: Buffer[] = [];
  let pos = start;
  for (;;) {
    const lineEnd = bytes.indexOf(0x0a, pos);
    if (lineEnd < 0) return { kind: 'error', reason: 'chunked body never ends (server waits)' };
    const line = bytes.toString('latin1', pos, lineEnd).replace(/\r$/, '');
    const sizeText = line.split(';')[0]!.trim();
    if (!/^[0-9a-fA-F]+$/.test(sizeText)) return reject(400, `bad chunk size line ${JSON.stringify(line)}`);
    const size = parseInt(sizeText, 16);
    pos = lineEnd + 1;
    if (size === 0) return Buffer.concat(parts);
    if (pos + size > bytes.length) return { kind: 'error', reason: 'chunk shorter than its size (server waits)' };
    parts.push(bytes.subarray(pos, pos + size));
    pos += size;
    if (bytes[pos] === 0x0d) pos++;
    if (bytes[pos] !== 0x0a) {
      if (pos >= bytes.length) return { kind: 'error', reason: 'chunked body never ends (server waits)' };
      return reject(400, 'chunk not followed by CRLF');
    }
    pos++;
  }
}

export function parseRawRequest(bytes: Buffer): RawRequestResult {
  let start = 0;
  while (bytes[start] === 0x0d || bytes[start] === 0x0a) start++;
  const firstLf = bytes.indexOf(0x0a, start);
  if (firstLf < 0) return { kind: 'error', reason: 'request line never ends (server waits)' };
  const requestLine = bytes.toString('latin1', start, firstLf).replace(/\r$/, '');
  if (/^[ \t]/.test(requestLine)) return reject(400, 'whitespace before the method');
  const tokens = requestLine.split(' ');
  const method = tokens[0] ?? '';
  if (!TOKEN.test(method)) return reject(400, `bad method ${JSON.stringify(method)}`);
  if (tokens.length < 2 || tokens[1] === '') {
    if (tokens.length === 2 || (tokens.length === 3 && tokens[2] === '')) {
      return { kind: 'error', reason: 'HTTP/0.9 request (no version): the answer has no status line' };
    }
    return reject(400, 'request line without a target');
  }
  const last = tokens[tokens.length - 1] ?? '';
  if (tokens.length === 2 || (tokens.length === 3 && last === '')) {
    return { kind: 'error', reason: 'HTTP/0.9 request (no version): the answer has no status line' };
  }
  if (tokens.length > 3) return reject(400, 'spaces in the request target');
  const uri = tokens[1] ?? '';
  const version = /^HTTP\/(\d)\.(\d)$/.exec(last);
  if (!version) return reject(400, `bad protocol ${JSON.stringify(last)}`);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  if (/[\x00-\x20\x7f#]/.test(uri)) return reject(400, 'control character, space or fragment in the request target');
  // A target starting with "?" is accepted like origin-form (Apache and nginx serve it).
  const originForm = uri.startsWith('/') || uri.startsWith('?');
  const absoluteForm = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(uri);
  const authorityForm = method === 'CONNECT' && /^[^/?@\s]+:\d{1,5}$/.test(uri);
  const asteriskForm = method === 'OPTIONS' && uri === '*';
  if (!(originForm || absoluteForm || authorityForm || asteriskForm))
    return reject(400, `bad request target ${JSON.stringify(uri.slice(0, 40))}`);
  const major = Number(version[1]);
  const minor = Number(version[2]);
  if (major === 0) return reject(400, 'HTTP/0.9 with a version token and headers');
  const httpVersion = major >= 2 ? `${major}.${minor}` : `1.${minor === 0 ? 0 : 1}`;

  const head = findHeadEnd(bytes, firstLf);
  if (!head) return { kind: 'error', reason: 'header section never ends (server waits)' };
  const headerText = bytes.toString('latin1', firstLf + 1, head.end + 1);
  if (/\r(?!\n)/.test(headerText)) return reject(400, 'bare CR in the header section');
  const headers: [string, string][] = [];
  for (const rawLine of headerText.split('\n')) {
    const line = rawLine.replace(/\r$/, '');
    if (line === '') continue;
    if (/^[ \t]/.test(line)) return reject(400, 'obsolete header line folding');
    const colon = line.indexOf(':');
    if (colon <= 0) return reject(400, `header line without a name: ${JSON.stringify(line.slice(0, 40))}`);
    const name = line.slice(0, colon);
    if (!TOKEN.test(name)) return reject(400, `bad header name ${JSON.stringify(name)}`);
    headers.push([name, line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, '')]);
  }
  const values = (name: string): string[] => headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v);

  const hosts = values('host');
  if (httpVersion !== '1.0' && hosts.length !== 1) return reject(400, `${hosts.length} Host headers in an HTTP/1.1 request`);
  if (hosts.length > 1) return reject(400, 'several Host headers');
  const host = hosts[0];
  if (host !== undefined && !/^(?:[A-Za-z0-9._~!$&'()*+,;=-]+|\[[0-9A-Fa-f:.]+\])(?::\d{0,5})?$/.test(host)) {
    return reject(400, `bad Host ${JSON.stringify(host.slice(0, 40))}`);
  }

  let body: Buffer = Buffer.alloc(0);
  const te = values('transfer-encoding');
  const cl = values('content-length');
  if (te.length > 0 && httpVersion === '1.1') {
    if (cl.length > 0) return reject(400, 'both Transfer-Encoding and Content-Length');
    const codings = te
      .join(',')
      .split(',')
      .map((c) => c.trim().toLowerCase())
      .filter((c) => c !== '');
    if (codings[codings.length - 1] !== 'chunked') return reject(501, `Transfer-Encoding ${te.join(', ')} not supported`);
    const decoded = decodeChunked(bytes, head.bodyStart);
    if (!Buffer.isBuffer(decoded)) return decoded;
    body = decoded;
  } else if (cl.length > 0) {
    const distinct = new Set(cl.flatMap((v) => v.split(',').map((x) => x.trim())));
    if (distinct.size !== 1) return reject(400, 'conflicting Content-Length values');
    const text = [...distinct][0]!;
    if (!/^\d{1,15}$/.test(text)) return reject(400, `bad Content-Length ${JSON.stringify(text)}`);
    const length = Number(text);
    if (head.bodyStart + length > bytes.length) return { kind: 'error', reason: 'body shorter than Content-Length (server waits)' };
    body = bytes.subarray(head.bodyStart, head.bodyStart + length);
  }
  if (major >= 2) {
    return {
      kind: 'request',
      method,
      uri,
      httpVersion,
      headers,
      body,
      answerStatus: 505,
      answerReason: `HTTP/${major}.${minor} over HTTP/1 framing`,
    };
  }
  if (method === 'CONNECT') {
    return {
      kind: 'request',
      method,
      uri,
      httpVersion,
      headers,
      body,
      answerStatus: 405,
      answerReason: 'CONNECT is not served by a reverse proxy',
    };
  }
  return { kind: 'request', method, uri, httpVersion, headers, body };
}
