/**
 * A request the handle front end serves (front-end.ts): the part of Node's `IncomingMessage` the
 * phases and the upstream read, for a bodiless HTTP/1.1 GET or HEAD. Built from what llhttp handed
 * over, with no stream: the request is complete when its head is.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';

/** Duplicates Node keeps only the first of (`IncomingMessage#headers`, matchKnownFields). */
const FIRST_ONLY = new Set([
  'content-type',
  'content-length',
  'user-agent',
  'referer',
  'host',
  'authorization',
  'proxy-authorization',
  'if-modified-since',
  'if-unmodified-since',
  'from',
  'location',
  'max-forwards',
  'retry-after',
  'etag',
  'last-modified',
  'server',
  'age',
  'expires',
]);

export class FrontRequest {
  readonly method: string;
  readonly url: string;
  readonly rawHeaders: string[];
  readonly socket: Socket;
  /** performance.now() when its head was read (the request's start). */
  readonly receivedAt: number;
  readonly httpVersion = '1.1';
  readonly httpVersionMajor = 1;
  readonly httpVersionMinor = 1;
  /** The head is the whole request. */
  readonly complete = true;
  private headerObject: IncomingHttpHeaders | undefined = undefined;

  constructor(method: string, url: string, rawHeaders: string[], socket: Socket, receivedAt: number) {
    this.method = method;
    this.url = url;
    this.rawHeaders = rawHeaders;
    this.socket = socket;
    this.receivedAt = receivedAt;
  }

  /** Lower-cased names, duplicates combined as Node combines them; built on first use (few requests need it). */
  get headers(): IncomingHttpHeaders {
    this.headerObject ??= combinedHeaders(this.rawHeaders);
    return this.headerObject;
  }

  /** No body: iterating it ends at once. */
  async *[Symbol.asyncIterator](): AsyncGenerator<Buffer> {}
}

/** `IncomingMessage#headers` from a raw list: set-cookie an array, cookie joined by '; ', the rest by ', ' or the first kept. */
export function combinedHeaders(raw: readonly string[]): IncomingHttpHeaders {
  const out: Record<string, string | string[]> = Object.create(null) as Record<string, string | string[]>;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    const value = raw[i + 1]!;
    const before = out[name];
    if (before === undefined) out[name] = name === 'set-cookie' ? [value] : value;
    else if (name === 'set-cookie') (before as string[]).push(value);
    else if (FIRST_ONLY.has(name)) continue;
    else out[name] = `${before as string}${name === 'cookie' ? '; ' : ', '}${value}`;
  }
  // The known fields this builds as Node does (a string each; set-cookie an array).
  return out as IncomingHttpHeaders;
}
