/**
 * Bench origin, run as a child of run.ts, on loopback: a sink (counts what it reads: upload
 * throughput), a source (writes as fast as each connection takes it: download throughput) and an
 * echo-and-close server (answers the first bytes and closes: short connections).
 *
 *   node bench/l4/origin.ts <address>   then IPC: { type: 'bytes' } -> { type: 'bytes', bytes }
 */
import { createServer, type AddressInfo } from 'node:net';

const address = process.argv[2] ?? '127.0.0.31';
let received = 0;

const sink = createServer({ noDelay: true }, (socket) => {
  socket.on('data', (chunk: Buffer) => {
    received += chunk.length;
  });
  socket.on('error', () => {});
});

const block = Buffer.alloc(256 * 1024, 0x62);
const source = createServer({ noDelay: true }, (socket) => {
  const pump = () => {
    while (socket.write(block));
  };
  socket.on('drain', pump);
  socket.on('error', () => {});
  pump();
});

const reply = Buffer.from('pong\n');
const echo = createServer({ noDelay: true }, (socket) => {
  socket.once('data', () => socket.end(reply));
  socket.on('error', () => {});
});

await Promise.all(
  [sink, source, echo].map((server) => new Promise<void>((resolve) => server.listen({ host: address, port: 0, backlog: 4096 }, resolve))),
);

process.on('message', (message: { type: string }) => {
  if (message.type === 'bytes') process.send?.({ type: 'bytes', bytes: received });
  if (message.type === 'exit') process.exit(0);
});
process.send?.({
  type: 'ready',
  sinkPort: (sink.address() as AddressInfo).port,
  sourcePort: (source.address() as AddressInfo).port,
  echoPort: (echo.address() as AddressInfo).port,
});
