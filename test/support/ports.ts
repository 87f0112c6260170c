import net from 'node:net';

/**
 * A port that was free on `host` a moment ago (bound once on port 0, then released): for
 * configurations that need a fixed port up front (tests, benchmarks).
 */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen({ host, port: 0 }, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
