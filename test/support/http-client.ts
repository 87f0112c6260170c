/**
 * A small HTTP(S)/1.1 client for tests: one request on a fresh connection (no pooling, no TLS
 * session reuse, so each request shows what a new client would see).
 */
import http from 'node:http';
import https from 'node:https';
import type { TLSSocket } from 'node:tls';
import type { Readable } from 'node:stream';

export interface TestResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  text: string;
  /** Fingerprint (sha256 hex, no colons) of the certificate the server presented, over TLS. */
  serverCertificate?: string;
}

export interface TestRequest {
  method?: string;
  headers?: http.OutgoingHttpHeaders;
  body?: string | Buffer | Readable;
  /** Bind the client socket to this address (to appear from a given loopback IP). */
  localAddress?: string;
  /** https: trust these CAs (PEM). */
  ca?: string | string[];
  cert?: string;
  key?: string;
  servername?: string;
  timeoutMs?: number;
}

export function request(url: string, options: TestRequest = {}): Promise<TestResponse> {
  const target = new URL(url);
  const secure = target.protocol === 'https:';
  return new Promise((resolve, reject) => {
    const req = (secure ? https : http).request(
      target,
      {
        method: options.method ?? 'GET',
        headers: options.headers ?? {},
        agent: false,
        ...(options.localAddress !== undefined ? { localAddress: options.localAddress } : {}),
        ...(secure
          ? {
              ca: options.ca,
              cert: options.cert,
              key: options.key,
              ...(options.servername !== undefined ? { servername: options.servername } : {}),
            }
          : {}),
        timeout: options.timeoutMs ?? 10_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const body = Buffer.concat(chunks);
          const socket = res.socket as TLSSocket;
          const result: TestResponse = { status: res.statusCode ?? 0, headers: res.headers, body, text: body.toString() };
          if (secure && typeof socket.getPeerCertificate === 'function') {
            const fp = socket.getPeerCertificate()?.fingerprint256;
            if (fp) result.serverCertificate = fp.replaceAll(':', '').toLowerCase();
          }
          resolve(result);
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('test request timed out')));
    req.on('error', reject);
    const body = options.body;
    if (body === undefined) req.end();
    else if (typeof body === 'string' || Buffer.isBuffer(body)) req.end(body);
    else body.pipe(req);
  });
}
