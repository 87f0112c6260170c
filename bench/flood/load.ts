/**
 * The load of bench/flood part (c): `sources` clients, each its own loopback address
 * (127.0.1.1, 127.0.1.2, ... 250 per /24), each one keep-alive connection sending GET / again as
 * soon as the previous answer is complete, for `seconds`. wrk cannot bind source addresses, hence
 * this. Prints one JSON line: responses, refused (4xx/5xx), passed (2xx/3xx), failed (connections
 * that ended with an error), seconds.
 *
 *   node bench/flood/load.ts '<json: { host, port, sources, seconds }>'
 */
import net from 'node:net';

interface Settings {
  host: string;
  port: number;
  sources: number;
  seconds: number;
}

const settings = JSON.parse(process.argv[2] ?? '{}') as Settings;
const REQUEST = Buffer.from(`GET / HTTP/1.1\r\nHost: ${settings.host}\r\nUser-Agent: flood\r\n\r\n`, 'latin1');
const HEAD_END = Buffer.from('\r\n\r\n');
const counts = { responses: 0, refused: 0, passed: 0, failed: 0, seconds: settings.seconds };
let running = true;

/** The n-th source address: 127.0.1.1 onwards, 250 per third octet. */
function sourceAddress(n: number): string {
  return `127.0.${1 + Math.floor(n / 250)}.${1 + (n % 250)}`;
}

/** Where a chunked body starting at `from` ends (after its last chunk), or -1 while incomplete. */
function chunkedEnd(buffer: Buffer, from: number): number {
  let at = from;
  for (;;) {
    const lineEnd = buffer.indexOf('\r\n', at);
    if (lineEnd === -1) return -1;
    const size = parseInt(buffer.toString('latin1', at, lineEnd), 16);
    if (size === 0) return buffer.length >= lineEnd + 4 ? lineEnd + 4 : -1;
    at = lineEnd + 2 + size + 2;
    if (at > buffer.length) return -1;
  }
}

function client(localAddress: string): void {
  let pending: Buffer = Buffer.alloc(0);
  const socket = net.connect({ host: settings.host, port: settings.port, localAddress, noDelay: true }, () => socket.write(REQUEST));
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    for (;;) {
      const end = pending.indexOf(HEAD_END);
      if (end === -1) return;
      const head = pending.toString('latin1', 0, end);
      const bodyEnd = /\r\ntransfer-encoding:\s*chunked/i.test(head)
        ? chunkedEnd(pending, end + 4)
        : end + 4 + Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      if (bodyEnd === -1 || pending.length < bodyEnd) return;
      pending = pending.subarray(bodyEnd);
      const status = Number(head.slice(9, 12));
      counts.responses++;
      if (status >= 400) counts.refused++;
      else counts.passed++;
      if (!running) {
        socket.destroy();
        return;
      }
      socket.write(REQUEST);
    }
  });
  socket.on('error', () => {
    if (running) counts.failed++;
  });
  // A server that closes (Connection: close) gets a new connection from the same source.
  socket.on('close', () => {
    if (running) client(localAddress);
  });
}

const started = performance.now();
for (let i = 0; i < settings.sources; i++) client(sourceAddress(i));
setTimeout(() => {
  running = false;
  counts.seconds = (performance.now() - started) / 1000;
  process.stdout.write(`${JSON.stringify(counts)}\n`);
  process.exit(0);
}, settings.seconds * 1000);
