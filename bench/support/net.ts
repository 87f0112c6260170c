/** Loopback helpers of the benchmarks. */
import net from 'node:net';

export { freePort } from '../../test/support/ports.ts';

/** Resolves once something accepts connections on `host:port`; rejects after `timeoutMs`. */
export async function waitForPort(address: string, timeoutMs = 10_000): Promise<void> {
  const [host, port] = splitAddress(address);
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = net.connect({ host, port }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
    });
    if (up) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listens on ${address} after ${timeoutMs} ms`);
}

/** "127.0.0.1:8080" -> ["127.0.0.1", 8080] (IPv4 only). */
export function splitAddress(address: string): [host: string, port: number] {
  const colon = address.lastIndexOf(':');
  return [address.slice(0, colon), Number(address.slice(colon + 1))];
}
