/**
 * A raw HTTP/1.1 client connection for the early refusal tests: writes bytes as given (pipelined
 * requests, malformed heads), reads the responses one by one, and sees the server close.
 */
import net from 'node:net';
import { FRONT_IP } from './http-servers.ts';

export interface RawResponse {
  status: number;
  headers: Map<string, string>;
  body: string;
}

/** A raw HTTP/1.1 client connection: writes bytes, reads responses (HEAD ones without a body). */
export class RawConnection {
  private readonly socket: net.Socket;
  private buffer = Buffer.alloc(0);
  private waiting: (() => void) | undefined;
  closed = false;

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.waiting?.();
    });
    socket.on('close', () => {
      this.closed = true;
      this.waiting?.();
    });
    socket.on('error', () => {});
  }

  static open(port: number, localAddress: string): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: FRONT_IP, port, localAddress }, () => resolve(new RawConnection(socket)));
      socket.once('error', reject);
    });
  }

  write(text: string): void {
    this.socket.write(text);
  }

  /** The next responses, one per method in `methods` (HEAD: head only). */
  async read(methods: readonly string[]): Promise<RawResponse[]> {
    const responses: RawResponse[] = [];
    for (const method of methods) {
      for (;;) {
        const end = this.buffer.indexOf('\r\n\r\n');
        if (end !== -1) {
          const lines = this.buffer.toString('latin1', 0, end).split('\r\n');
          const headers = new Map(
            lines.slice(1).map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
          );
          const status = Number(lines[0]!.split(' ')[1]);
          if (method !== 'HEAD' && headers.get('transfer-encoding') === 'chunked') {
            const chunked = dechunk(this.buffer, end + 4);
            if (chunked !== undefined) {
              responses.push({ status, headers, body: chunked.body });
              this.buffer = this.buffer.subarray(chunked.next);
              break;
            }
          } else {
            const length = method === 'HEAD' ? 0 : Number(headers.get('content-length') ?? 0);
            if (this.buffer.length >= end + 4 + length) {
              responses.push({ status, headers, body: this.buffer.toString('utf8', end + 4, end + 4 + length) });
              this.buffer = this.buffer.subarray(end + 4 + length);
              break;
            }
          }
        }
        if (this.closed) throw new Error(`connection closed after ${responses.length} of ${methods.length} responses`);
        await new Promise<void>((resolve) => (this.waiting = resolve));
      }
    }
    return responses;
  }

  /** Resolves when the server has closed the connection. */
  async ended(): Promise<void> {
    while (!this.closed) await new Promise<void>((resolve) => (this.waiting = resolve));
  }

  close(): void {
    this.socket.destroy();
  }
}

/** A chunked body from `from`: its text and where it ends; undefined while incomplete. */
function dechunk(buffer: Buffer, from: number): { body: string; next: number } | undefined {
  let body = '';
  let at = from;
  for (;;) {
    const lineEnd = buffer.indexOf('\r\n', at);
    if (lineEnd === -1) return undefined;
    const size = parseInt(buffer.toString('latin1', at, lineEnd), 16);
    if (buffer.length < lineEnd + 2 + size + 2) return undefined;
    if (size === 0) return { body, next: lineEnd + 4 };
    body += buffer.toString('utf8', lineEnd + 2, lineEnd + 2 + size);
    at = lineEnd + 2 + size + 2;
  }
}

export const get = (path: string, method = 'GET') => `${method} ${path} HTTP/1.1\r\nHost: site.test\r\n\r\n`;
export const supportIdOf = (body: string) => /Support ID: <code>([0-9a-f]{32})<\/code>/.exec(body)?.[1];
