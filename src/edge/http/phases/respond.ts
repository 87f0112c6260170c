/**
 * Writing the proxy's own answers: to the response object, or raw onto the socket of an upgrade
 * request (which has no response object).
 */
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { renderPage, pageStatus, type PageKind } from '../block-page.ts';
import type { RequestCtx } from '../ctx.ts';
import { loggingPhase } from './logging.ts';
import type { Answer, PhaseName } from './answer.ts';
import { lingerAfterEnd } from '../lingering-close.ts';

const PAGE_HEADERS = ['content-type', 'text/html; charset=utf-8', 'cache-control', 'no-store', 'x-content-type-options', 'nosniff'];

/** One of our pages as an answer (the page shows `ctx.supportId`). */
export function pageAnswer(
  ctx: RequestCtx,
  phase: PhaseName,
  kind: PageKind,
  options: { status?: number; headers?: readonly string[]; close?: boolean } = {},
): Answer {
  const status = options.status ?? pageStatus(kind);
  return {
    phase,
    status,
    headers: options.headers === undefined ? PAGE_HEADERS : [...PAGE_HEADERS, ...options.headers],
    body: renderPage(kind, ctx.supportId, ctx.proxy.location, status),
    ...(options.close ? { close: true } : {}),
  };
}

/** Part of the request body was not read (the connection closes after our answer). */
export function bodyUnread(ctx: RequestCtx): boolean {
  const body = ctx.body;
  return body === 'stream' || (body !== null && body.rest !== null);
}

/** Once the answer is out, the connection of a request whose body we did not read closes the lingering way (lingering-close.ts). */
function lingerBeforeClosing(socket: Socket | null | undefined): void {
  if (socket === null || socket === undefined || socket.destroyed) return;
  // Node's HTTP server calls destroySoon on the socket of a response with Connection: close.
  socket.destroySoon = function (this: Socket): void {
    if (this.writable) this.end();
    lingerAfterEnd(this);
  };
}

export function respond(ctx: RequestCtx, answer: Answer): void {
  ctx.answeredBy = answer.phase;
  ctx.statusCode = answer.status;
  const res = ctx.res;
  if (res !== undefined) {
    if (res.headersSent || res.writableEnded || res.destroyed) {
      // Too late for a page (the origin's head went out): cutting the response is all that is left.
      res.destroy();
      return;
    }
    const headers = [...answer.headers, 'x-request-id', ctx.requestId];
    // A request body we did not read is not worth reading now (Node would read and discard it to
    // keep the connection): close instead. HTTP/2 has no connection-level headers; there the request
    // stream is simply reset when unread.
    if ((answer.close || ctx.body === 'stream') && !ctx.http2) {
      headers.push('connection', 'close');
      if (bodyUnread(ctx)) lingerBeforeClosing(ctx.req.socket);
    }
    res.writeHead(answer.status, headers);
    if (ctx.req.method !== 'HEAD') ctx.bytesOut += answer.body.length;
    // The logging phase runs from the response's 'close' (see HttpProxy), as for proxied responses.
    res.end(answer.body);
    return;
  }
  const socket = ctx.upgradeSocket;
  if (socket === undefined || socket.destroyed) return;
  const body = Buffer.from(answer.body);
  let head = `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status] ?? ''}\r\n`;
  for (let i = 0; i < answer.headers.length; i += 2) head += `${answer.headers[i]}: ${answer.headers[i + 1]}\r\n`;
  head += `x-request-id: ${ctx.requestId}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`;
  ctx.bytesOut += body.length;
  socket.end(Buffer.concat([Buffer.from(head, 'latin1'), ctx.req.method === 'HEAD' ? Buffer.alloc(0) : body]));
  loggingPhase.run(ctx);
}
