/**
 * Bench load generator, run as a child of run.ts (several at once, so that the client side is not
 * one event loop). Two modes:
 *
 *   bulk <host> <port> <streams> <seconds>
 *       each stream writes a 256 KiB buffer as fast as the socket takes it (the origin counts);
 *   download <host> <port> <streams> <seconds>
 *       each stream reads what the origin sends; IPC { type: 'bytes' } -> bytes received so far;
 *   connections <host> <port> <concurrency> <warmupSeconds> <seconds>
 *       each of `concurrency` loops: connect, send 5 bytes, read the reply, the server closes,
 *       next; reports the connections completed inside the measured window.
 */
import { connect } from 'node:net';

const [mode, host = '127.0.0.1', portText = '0', countText = '1', ...rest] = process.argv.slice(2);
const port = Number(portText);
const count = Number(countText);

if (mode === 'bulk') {
  const seconds = Number(rest[0] ?? '4');
  const block = Buffer.alloc(256 * 1024, 0x61);
  for (let i = 0; i < count; i++) {
    const socket = connect({ host, port, noDelay: true });
    const pump = () => {
      while (socket.write(block));
    };
    socket.on('connect', pump);
    socket.on('drain', pump);
    socket.on('error', () => {});
  }
  setTimeout(() => process.exit(0), seconds * 1000);
} else if (mode === 'download') {
  const seconds = Number(rest[0] ?? '4');
  let received = 0;
  for (let i = 0; i < count; i++) {
    const socket = connect({ host, port, noDelay: true });
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length;
    });
    socket.on('error', () => {});
  }
  process.on('message', (message: { type: string }) => {
    if (message.type === 'bytes') process.send?.({ type: 'bytes', bytes: received });
  });
  setTimeout(() => process.exit(0), seconds * 1000);
} else if (mode === 'connections') {
  const warmupMs = Number(rest[0] ?? '0.5') * 1000;
  const measureMs = Number(rest[1] ?? '4') * 1000;
  const request = Buffer.from('ping\n');
  const started = performance.now();
  const windowStart = started + warmupMs;
  const windowEnd = windowStart + measureMs;
  let completed = 0;
  let failed = 0;
  const loop = () => {
    if (performance.now() >= windowEnd) return;
    const socket = connect({ host, port, noDelay: true });
    let answered = false;
    socket.on('connect', () => socket.write(request));
    socket.on('data', () => {
      answered = true;
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      const now = performance.now();
      if (now >= windowStart && now < windowEnd) {
        if (answered) completed++;
        else failed++;
      }
      loop();
    });
  };
  for (let i = 0; i < count; i++) loop();
  setTimeout(
    () => {
      process.send?.({ type: 'result', completed, failed, seconds: measureMs / 1000 });
      setTimeout(() => process.exit(0), 50);
    },
    warmupMs + measureMs + 100,
  );
} else {
  console.error('usage: load.ts bulk|download|connections ...');
  process.exit(2);
}
