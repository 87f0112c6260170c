/**
 * The ClientHello parser on what a connection's first bytes can be: real ClientHellos (Node's TLS
 * client, over a loopback socket), every prefix of them, random bytes and damaged records.
 */
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import fc from 'fast-check';
import { parseClientHello } from './client-hello.ts';

const LISTEN_IP = '127.0.0.91';

/** The first TLS record a client sends with these options. */
async function capturedClientHello(options: { servername?: string; ALPNProtocols?: string[] }): Promise<Buffer> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, LISTEN_IP, resolve));
  const { port } = server.address() as net.AddressInfo;
  try {
    return await new Promise<Buffer>((resolve, reject) => {
      server.once('connection', (socket) => {
        let buffered = Buffer.alloc(0);
        socket.on('data', (chunk: Buffer) => {
          buffered = Buffer.concat([buffered, chunk]);
          if (buffered.length >= 5 && buffered.length >= 5 + buffered.readUInt16BE(3)) {
            resolve(buffered.subarray(0, 5 + buffered.readUInt16BE(3)));
            socket.destroy();
          }
        });
      });
      const client = tls.connect({ host: LISTEN_IP, port, ...options });
      client.on('error', () => {});
      setTimeout(() => reject(new Error('no ClientHello')), 5_000).unref();
    });
  } finally {
    server.close();
  }
}

describe('ClientHello parser', () => {
  let hello: Buffer;
  let bare: Buffer;

  before(async () => {
    hello = await capturedClientHello({ servername: 'shop.example.test', ALPNProtocols: ['acme-tls/1', 'h2'] });
    bare = await capturedClientHello({});
  });

  it('reads the SNI name and the ALPN protocols of a real ClientHello', () => {
    assert.deepEqual(parseClientHello(hello), { servername: 'shop.example.test', alpnProtocols: ['acme-tls/1', 'h2'] });
    assert.deepEqual(parseClientHello(bare), { servername: undefined, alpnProtocols: [] });
  });

  it('says when it needs more bytes or sees something else', () => {
    assert.equal(parseClientHello(Buffer.from('GET / HTTP/1.1\r\n')), undefined);
    assert.equal(parseClientHello(Buffer.from([0x16, 0x03, 0x01])), 'incomplete');
    assert.equal(parseClientHello(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x40, 0x01])), 'incomplete');
    assert.equal(parseClientHello(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x02, 0x01, 0x00])), undefined, 'truncated');
  });

  it('asks for more on every prefix of a ClientHello', () => {
    for (let length = 0; length < hello.length; length++)
      assert.equal(parseClientHello(hello.subarray(0, length)), 'incomplete', `prefix of ${length} bytes`);
  });

  it('answers without throwing on any bytes, and on damaged ClientHellos', () => {
    const wellFormed = (result: ReturnType<typeof parseClientHello>): boolean =>
      result === undefined ||
      result === 'incomplete' ||
      ((result.servername === undefined || typeof result.servername === 'string') &&
        result.alpnProtocols.every((p) => typeof p === 'string'));
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), (bytes) => wellFormed(parseClientHello(Buffer.from(bytes)))),
      { numRuns: 2_000 },
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 8 }), (changes) => {
        const damaged = Buffer.from(hello);
        for (const [at, value] of changes) damaged[at % damaged.length] = value;
        return wellFormed(parseClientHello(damaged));
      }),
      { numRuns: 2_000 },
    );
  });
});
