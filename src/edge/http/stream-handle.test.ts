/**
 * Reads and writes straight on a socket's handle over real loopback sockets: the Node internals they
 * rely on are there (this fails loudly on a Node that changed them); reads into the caller's buffer,
 * stopped and started again, the end still emitted; a write the kernel takes at once, one it does not
 * (queued, completed later), and `socket.end()` after a queued write delivering everything.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { readFromHandle, STREAM_BASE, writeToHandle } from './stream-handle.ts';
import { FRONT_IP } from '../../../test/support/http-servers.ts';

const T = { timeout: 20_000 };

/** A connected pair over loopback: `server` is the accepted side. */
async function pair(listener: net.Server): Promise<{ client: net.Socket; server: net.Socket }> {
  const accepted = new Promise<net.Socket>((resolve) => listener.once('connection', resolve));
  const { port } = listener.address() as net.AddressInfo;
  const client = net.connect({ host: FRONT_IP, port });
  await new Promise<void>((resolve, reject) => {
    client.once('connect', resolve);
    client.once('error', reject);
  });
  return { client, server: await accepted };
}

/** Reads `socket` to its end, counting the bytes and checking each against `expected`. */
function readAll(socket: net.Socket, expected: (offset: number) => number): Promise<number> {
  return new Promise((resolve, reject) => {
    let offset = 0;
    socket.on('data', (chunk: Buffer) => {
      for (let i = 0; i < chunk.length; i++) {
        if (chunk[i] !== expected(offset + i)) reject(new Error(`byte ${offset + i}: ${chunk[i]}, expected ${expected(offset + i)}`));
      }
      offset += chunk.length;
    });
    socket.once('end', () => resolve(offset));
    socket.once('error', reject);
  });
}

describe('writes straight to a socket handle', () => {
  let listener: net.Server;
  before(async () => {
    listener = net.createServer();
    await new Promise<void>((resolve) => listener.listen(0, FRONT_IP, resolve));
  });
  after(() => new Promise<void>((resolve) => listener.close(() => resolve())));

  it('prints no deprecation warning: left alone where process.binding would warn', () => {
    for (const flags of [[], ['--pending-deprecation']]) {
      const module = JSON.stringify(new URL('./stream-handle.ts', import.meta.url).href);
      const script = `const m = await import(${module}); console.log(m.STREAM_BASE === undefined ? 'off' : 'on');`;
      const result = spawnSync(process.execPath, [...flags, '--input-type=module', '-e', script], {
        encoding: 'utf8',
        env: { ...process.env, NODE_OPTIONS: '' },
      });
      assert.equal(result.stderr, '', flags.join(' '));
      assert.equal(result.stdout.trim(), flags.length === 0 ? 'on' : 'off');
    }
  });

  it("finds the Node internals it relies on (a Node that changed them fails here, not in production's figures)", () => {
    assert.ok(STREAM_BASE, "process.binding('stream_wrap') with WriteWrap, streamBaseState, kLastWriteWasAsync and kReadBytesOrError");
  });

  it('writes what the kernel takes at once, with no completion to wait for', T, async () => {
    const { client, server } = await pair(listener);
    const bytes = Buffer.from('hello, direct write');
    const received = readAll(client, (offset) => bytes[offset % bytes.length]!);
    let completions = 0;
    for (let i = 0; i < 3; i++)
      assert.equal(
        writeToHandle(server, bytes, () => completions++),
        true,
      );
    server.end();
    assert.equal(await received, bytes.length * 3);
    assert.equal(completions, 0, 'no completion for writes done at once');
  });

  it('queues what the kernel does not take, says when it is written, and end() after it delivers it all', T, async () => {
    const { client, server } = await pair(listener);
    // A client that does not read: the kernel's buffers fill, then libuv queues the rest.
    client.pause();
    // A multiple of 251 long: byte n of the stream is n % 251.
    const chunk = Buffer.alloc(251 * 1024);
    for (let i = 0; i < chunk.length; i++) chunk[i] = i % 251;
    let written = 0;
    let completions = 0;
    let queued: boolean | undefined = true;
    while (queued === true && written < 256 * chunk.length) {
      queued = writeToHandle(server, chunk, () => completions++);
      written += chunk.length;
    }
    assert.equal(queued, false, 'a write went to libuv queue');
    assert.equal(server.destroyed, false, 'not a failure');
    const handle = (server as unknown as { _handle: { writeQueueSize: number } })._handle;
    assert.ok(handle.writeQueueSize > 0 && handle.writeQueueSize <= chunk.length, 'only the rest of the last write is queued');
    // The end of the answer after it, through the stream (as the lingering close does).
    const tail = Buffer.alloc(1000);
    for (let i = 0; i < tail.length; i++) tail[i] = (written + i) % 251;
    server.end(tail);
    client.resume();
    assert.equal(await readAll(client, (offset) => offset % 251), written + tail.length, 'every byte, in order, then the end');
    assert.equal(completions, 1, 'the queued write completed once');
    client.destroy();
  });

  it("reads into the caller's buffer, stops when told, and leaves the end to the socket", T, async () => {
    const { client, server } = await pair(listener);
    const buffer = Buffer.alloc(64);
    const reads: string[] = [];
    let stopOnce = true;
    let stopped: () => void = () => {};
    const stoppedOnce = new Promise<void>((resolve) => (stopped = resolve));
    assert.equal(
      readFromHandle(server, buffer, {
        onRead: (bytes) => {
          reads.push(buffer.toString('latin1', 0, bytes));
          if (stopOnce) {
            stopOnce = false;
            stopped();
            return false;
          }
          return true;
        },
      }) !== undefined,
      true,
    );
    const ended = new Promise<void>((resolve) => server.once('end', resolve));
    server.on('data', () => assert.fail('no data events: the reads go to the caller'));
    server.resume();
    client.write('first');
    await stoppedOnce;
    const handle = (server as unknown as { _handle: { reading: boolean; readStart(): number } })._handle;
    assert.equal(handle.reading, false, 'reading stopped');
    client.end('second');
    handle.reading = true;
    handle.readStart();
    await ended;
    assert.equal(reads.join(''), 'firstsecond');
    server.destroy();
  });
});
