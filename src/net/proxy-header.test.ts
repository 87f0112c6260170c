/**
 * Reading PROXY headers off real connections on loopback: what a listener gets afterwards must be
 * exactly the bytes after the header, however the header was split over packets.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { encodeProxyV1, encodeProxyV2 } from './proxy-protocol.ts';
import { readProxyHeader, type ProxyHeaderOutcome } from './proxy-header.ts';

const SERVER = '127.0.0.2';
const client = { sourceAddress: '198.51.100.7', sourcePort: 40001, destinationAddress: '203.0.113.1', destinationPort: 443 };
const T = { timeout: 10_000 };

/**
 * Accepts one connection (paused, as the L4 listener does), reads its header with `options`, then
 * collects what the socket delivers after it until the peer ends. `send` writes from the client side.
 */
async function exchange(
  options: { required: boolean; timeoutMs?: number },
  send: (socket: net.Socket) => Promise<void>,
): Promise<{ outcome: ProxyHeaderOutcome; rest: string }> {
  const server = net.createServer({ pauseOnConnect: true });
  await new Promise<void>((resolve) => server.listen(0, SERVER, resolve));
  try {
    const accepted = new Promise<{ outcome: ProxyHeaderOutcome; rest: string }>((resolve) => {
      server.once('connection', (socket: net.Socket) => {
        socket.on('error', () => {});
        void readProxyHeader(socket, { required: options.required, timeoutMs: options.timeoutMs ?? 5_000 }).then((outcome) => {
          if (outcome.kind === 'refused') {
            socket.destroy();
            resolve({ outcome, rest: '' });
            return;
          }
          let rest = '';
          socket.on('data', (chunk: Buffer) => (rest += chunk.toString('latin1')));
          socket.on('end', () => {
            socket.end();
            resolve({ outcome, rest });
          });
          socket.resume();
        });
      });
    });
    const socket = net.connect({ host: SERVER, port: (server.address() as net.AddressInfo).port, localAddress: '127.0.0.1' });
    socket.on('error', () => {});
    await new Promise((resolve) => socket.once('connect', resolve));
    await send(socket);
    const result = await accepted;
    socket.destroy();
    return result;
  } finally {
    server.close();
  }
}

/** Writes each part as its own packet (waiting for each write to be flushed), then ends. */
function inParts(...parts: (Buffer | string)[]): (socket: net.Socket) => Promise<void> {
  return async (socket) => {
    for (const part of parts) {
      await new Promise((resolve) => socket.write(part, resolve));
      await new Promise((resolve) => setImmediate(resolve));
    }
    socket.end();
  };
}

describe('readProxyHeader', () => {
  it('reads a v1 header sent with the payload, and leaves the payload byte for byte', T, async () => {
    const { outcome, rest } = await exchange(
      { required: true },
      inParts(Buffer.concat([encodeProxyV1(client), Buffer.from('hello')]), ' world'),
    );
    assert.deepEqual(outcome, { kind: 'header', addresses: client });
    assert.equal(rest, 'hello world');
  });

  it('reads a v2 header that arrives one byte at a time', T, async () => {
    const header = encodeProxyV2(client, 'TCP');
    const parts = [...header].map((byte) => Buffer.from([byte]));
    const { outcome, rest } = await exchange({ required: true }, inParts(...parts, 'payload'));
    assert.deepEqual(outcome, { kind: 'header', addresses: client });
    assert.equal(rest, 'payload');
  });

  it('optional: a connection without a header is taken as it is, its first bytes put back', T, async () => {
    // "PRO" could still become a header: the reader waits for the bytes that tell.
    const { outcome, rest } = await exchange({ required: false }, inParts('PRO', 'PFIND / HTTP/1.1\r\n', 'more'));
    assert.deepEqual(outcome, { kind: 'absent' });
    assert.equal(rest, 'PROPFIND / HTTP/1.1\r\nmore');
  });

  it('required: a connection without a header is refused', T, async () => {
    const { outcome } = await exchange({ required: true }, inParts('GET / HTTP/1.1\r\nHost: x\r\n\r\n'));
    assert.deepEqual(outcome, { kind: 'refused', reason: 'MISSING' });
  });

  it('refuses a malformed header, optional or not', T, async () => {
    for (const required of [true, false]) {
      const { outcome } = await exchange({ required }, inParts('PROXY TCP4 198.51.100.7 nonsense 1 2\r\nGET /'));
      assert.deepEqual(outcome, { kind: 'refused', reason: 'INVALID' });
    }
  });

  it('refuses a connection that ends in the middle of its header', T, async () => {
    const { outcome } = await exchange({ required: false }, inParts(encodeProxyV2(client, 'TCP').subarray(0, 20)));
    assert.deepEqual(outcome, { kind: 'refused', reason: 'CLOSED' });
  });

  it('refuses a header begun and never finished; optional: a silent peer is taken as it is', T, async () => {
    const stalled = await exchange({ required: false, timeoutMs: 50 }, async (socket) => {
      socket.write('PROXY TCP4 198.51.100.7');
      await new Promise((resolve) => socket.once('close', resolve));
    });
    assert.deepEqual(stalled.outcome, { kind: 'refused', reason: 'TIMEOUT' });

    const silent = await exchange({ required: false, timeoutMs: 50 }, async (socket) => {
      // Server speaks first (SMTP, MySQL): the client waits, then sends after the header timeout.
      await new Promise((resolve) => setTimeout(resolve, 200));
      socket.end('late');
    });
    assert.deepEqual(silent.outcome, { kind: 'absent' });
    assert.equal(silent.rest, 'late');
  });
});
