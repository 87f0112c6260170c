/**
 * The origin side of a TCP tunnel on a bare libuv handle (and on a net.Socket), over real loopback sockets: the Node
 * internals it relies on are there (this fails loudly on a Node that changed them); it connects,
 * relays both ways, passes a half-close on, reports a refused connect as an error then a close, and
 * the origin policy still decides: a refused address gets no connect at all.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { EVERY_NETWORK, recordingOriginGuard } from '../../../test/support/origin-guard.ts';
import { freePort } from '../../../test/support/ports.ts';
import {
  ACCEPT_NOTE,
  type AcceptedTcp,
  acceptHandles,
  connectOrigin,
  type TcpSide,
  type OriginEvents,
  type SideReader,
  tcpHandlesEnabled,
  TCP_HANDLE,
  takeAccepted,
  useTcpHandles,
} from './tcp-sides.ts';

const T = { timeout: 20_000 };
const ORIGIN = '127.0.0.3';

/** Collects what the origin connection reports, and the bytes it reads. */
class Recorder implements SideReader, OriginEvents {
  buffer = Buffer.alloc(4096);
  received = Buffer.alloc(0);
  connected = false;
  ended = false;
  errors: Error[] = [];
  readonly closed: Promise<boolean>;
  private onClosed!: (hadError: boolean) => void;

  constructor() {
    this.closed = new Promise((resolve) => {
      this.onClosed = resolve;
    });
  }

  onRead(bytes: number): boolean {
    this.received = Buffer.concat([this.received, this.buffer.subarray(0, bytes)]);
    return true;
  }
  onChunk(chunk: Buffer): boolean {
    this.received = Buffer.concat([this.received, chunk]);
    return true;
  }
  onConnect(): void {
    this.connected = true;
  }
  onEnd(): void {
    this.ended = true;
  }
  onError(error: Error): void {
    this.errors.push(error);
  }
  onClose(hadError: boolean): void {
    this.onClosed(hadError);
  }
}

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((resolve) => setTimeout(resolve, 5));
}

it('prints no deprecation warning: the net.Socket path where process.binding would warn', T, () => {
  for (const flags of [[], ['--pending-deprecation']]) {
    const module = JSON.stringify(new URL('./tcp-sides.ts', import.meta.url).href);
    const script = `const m = await import(${module}); console.log(m.tcpHandlesEnabled() ? 'on' : 'off');`;
    const result = spawnSync(process.execPath, [...flags, '--input-type=module', '-e', script], {
      encoding: 'utf8',
      env: { ...process.env, NODE_OPTIONS: '' },
    });
    assert.equal(result.stderr, '', flags.join(' '));
    assert.equal(result.stdout.trim(), flags.length === 0 ? 'on' : 'off');
  }
});

it("finds the Node internals the bare TCP handle relies on (a Node that changed them fails here, not in production's figures)", () => {
  assert.ok(TCP_HANDLE, "process.binding('tcp_wrap') with TCP, TCPConnectWrap, constants.SOCKET, and stream_wrap's ShutdownWrap");
  assert.equal(tcpHandlesEnabled(), true);
});

for (const handles of [true, false]) {
  describe(handles ? 'the origin side on a bare TCP handle' : 'the origin side on a net.Socket (the fallback)', () => {
    before(() => useTcpHandles(handles));
    after(() => useTcpHandles(true));

    it('connects, relays both ways and passes a half-close on in each direction', T, async () => {
      let accepted: net.Socket | undefined;
      const fromProxy: Buffer[] = [];
      const server = net.createServer({ allowHalfOpen: true }, (socket) => {
        accepted = socket;
        socket.on('data', (chunk: Buffer) => fromProxy.push(chunk));
      });
      await new Promise<void>((resolve) => server.listen(0, ORIGIN, resolve));
      try {
        const { port } = server.address() as net.AddressInfo;
        const { guard } = recordingOriginGuard({ allowedNetworks: EVERY_NETWORK });
        const recorder = new Recorder();
        const connection: TcpSide = connectOrigin(guard.for('test'), ORIGIN, port, recorder, recorder);
        await until(() => recorder.connected && accepted !== undefined);
        assert.equal(
          connection.write(Buffer.from('to the origin'), () => {}),
          true,
        );
        accepted!.write('from the origin');
        await until(() => recorder.received.length === 15);
        assert.equal(recorder.received.toString(), 'from the origin');
        // The proxy's FIN: the origin sees its end, and may still answer.
        const originEnded = new Promise((resolve) => accepted!.once('end', resolve));
        connection.end();
        await originEnded;
        assert.equal(Buffer.concat(fromProxy).toString(), 'to the origin');
        accepted!.end('last words');
        assert.equal(await recorder.closed, false);
        assert.equal(recorder.ended, true);
        assert.equal(recorder.received.toString(), 'from the originlast words');
        assert.deepEqual(recorder.errors, []);
      } finally {
        server.close();
      }
    });

    it('reports a refused connect as an error, then a close with an error', T, async () => {
      const port = await freePort(ORIGIN); // nothing listens there
      const { guard } = recordingOriginGuard({ allowedNetworks: EVERY_NETWORK });
      const recorder = new Recorder();
      connectOrigin(guard.for('test'), ORIGIN, port, recorder, recorder);
      assert.equal(await recorder.closed, true);
      assert.equal(recorder.connected, false);
      assert.equal((recorder.errors[0] as NodeJS.ErrnoException | undefined)?.code, 'ECONNREFUSED');
    });

    it('does not connect to an address the origin policy refuses', T, async () => {
      let accepted = 0;
      const server = net.createServer((socket) => {
        accepted++;
        socket.destroy();
      });
      await new Promise<void>((resolve) => server.listen(0, ORIGIN, resolve));
      try {
        const { port } = server.address() as net.AddressInfo;
        const { guard, refusals } = recordingOriginGuard({ allowedNetworks: [] });
        const recorder = new Recorder();
        connectOrigin(guard.for('test'), ORIGIN, port, recorder, recorder);
        assert.equal(await recorder.closed, true);
        assert.equal((recorder.errors[0] as NodeJS.ErrnoException | undefined)?.code, 'TPS_ORIGIN_REFUSED');
        assert.deepEqual(
          refusals.map((r) => [r.scope, r.address, r.reason]),
          [['test', ORIGIN, 'loopback']],
        );
        assert.equal(accepted, 0);
      } finally {
        server.close();
      }
    });
  });
}

describe('accepting on bare handles', () => {
  it('takes what the caller takes, without a socket; hands the rest to net with the note and the peer', T, async () => {
    const sockets: net.Socket[] = [];
    const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true }, (socket) => sockets.push(socket));
    await new Promise<void>((resolve) => server.listen(0, ORIGIN, resolve));
    const taken: AcceptedTcp[] = [];
    let take = true;
    acceptHandles(server, (accepted) => {
      if (!take) return 'a note';
      taken.push(accepted);
      return true;
    });
    try {
      const { port } = server.address() as net.AddressInfo;
      // Taken: an echo of one line on the bare handle.
      const first = net.connect({ host: ORIGIN, port, localAddress: '127.0.0.9' });
      await until(() => taken.length === 1);
      assert.equal(taken[0]!.ip, '127.0.0.9');
      const recorder = new Recorder();
      const side = takeAccepted(taken[0]!, recorder, recorder);
      side.resume();
      first.write('hello');
      await until(() => recorder.received.length === 5);
      side.write(Buffer.from('olleh'), () => {});
      side.end();
      const answer = await new Promise<string>((resolve) => {
        let text = '';
        first.on('data', (chunk: Buffer) => {
          text += chunk.toString();
        });
        first.once('end', () => resolve(text));
      });
      assert.equal(answer, 'olleh');
      first.destroy();
      assert.equal(sockets.length, 0, 'no socket made for a taken connection');
      // Handed back: net's socket, with the note and the peer read once.
      take = false;
      const second = net.connect({ host: ORIGIN, port, localAddress: '127.0.0.10' });
      await until(() => sockets.length === 1);
      const socket = sockets[0]! as net.Socket & { [ACCEPT_NOTE]?: string };
      assert.equal(socket[ACCEPT_NOTE], 'a note');
      assert.equal(socket.remoteAddress, '127.0.0.10');
      second.destroy();
      socket.destroy();
    } finally {
      server.close();
    }
  });
});
