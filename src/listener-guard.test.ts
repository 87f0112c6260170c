import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { createMetrics } from './metrics.ts';
import { guardListener } from './listener-guard.ts';
import { waitFor } from '../test/support/wait.ts';

/** A guarded node:http server on loopback answering every request with "ok". */
async function guarded(
  settings: { maxConnections: number; maxConnectionsPerSource?: number; exempt?: string },
  options: http.ServerOptions = {},
) {
  const metrics = createMetrics();
  const server = http.createServer({ connectionsCheckingInterval: 100, ...options }, (_request, response) => response.end('ok'));
  const guard = guardListener(
    server,
    {
      listener: 'api',
      maxConnections: settings.maxConnections,
      ...(settings.maxConnectionsPerSource !== undefined && { maxConnectionsPerSource: settings.maxConnectionsPerSource }),
      ipv6Prefix: 64,
      ...(settings.exempt !== undefined && { exemptFromSourceCap: (address: string) => address === settings.exempt }),
      answerClientErrors: true,
    },
    metrics,
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const refused = async (stage: string, reason: string) =>
    (await metrics.listenerRefused.get()).values.find((value) => value.labels.stage === stage && value.labels.reason === reason)?.value ??
    0;
  return {
    port,
    guard,
    refused,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Connects from `localAddress`, writes `data`; resolves with what came back once the server closed (or after `ms`). */
function exchange(port: number, localAddress: string, data: string, ms = 5_000): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress }, () => socket.write(data));
    let text = '';
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ text, closed: false });
    }, ms);
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closed: true });
    });
  });
}

function hold(port: number, localAddress: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress }, () => resolve(socket));
    socket.on('error', reject);
  });
}

describe('the guard of the service’s own listeners', () => {
  it('caps connections per source at accept, exempting trusted proxies, and gives places back', async () => {
    const server = await guarded({ maxConnections: 100, maxConnectionsPerSource: 2, exempt: '127.0.6.9' });
    const held: net.Socket[] = [];
    try {
      held.push(await hold(server.port, '127.0.6.1'), await hold(server.port, '127.0.6.1'));
      await waitFor('two connections counted', async () => server.guard.open === 2);
      assert.deepEqual(await exchange(server.port, '127.0.6.1', 'GET / HTTP/1.1\r\nHost: x\r\n\r\n'), { text: '', closed: true });
      assert.equal(await server.refused('accept', 'SOURCE_CONNECTIONS'), 1);
      assert.match(
        (await exchange(server.port, '127.0.6.2', 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).text,
        /^HTTP\/1\.1 200/,
      );
      for (let i = 0; i < 3; i++) held.push(await hold(server.port, '127.0.6.9'));
      await waitFor('the trusted proxy not capped per source', async () => server.guard.open === 5);
      held.shift()!.destroy();
      await waitFor('the place given back', async () => server.guard.open === 4);
      assert.match(
        (await exchange(server.port, '127.0.6.1', 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).text,
        /^HTTP\/1\.1 200/,
      );
    } finally {
      for (const socket of held) socket.destroy();
      await server.close();
    }
  });

  it('closes connections over the total before parsing them, counted', async () => {
    const server = await guarded({ maxConnections: 2 });
    const held: net.Socket[] = [];
    try {
      held.push(await hold(server.port, '127.0.6.3'), await hold(server.port, '127.0.6.4'));
      await waitFor('two connections counted', async () => server.guard.open === 2);
      assert.deepEqual(await exchange(server.port, '127.0.6.5', 'GET / HTTP/1.1\r\nHost: x\r\n\r\n'), { text: '', closed: true });
      assert.equal(await server.refused('accept', 'CONNECTIONS'), 1);
    } finally {
      for (const socket of held) socket.destroy();
      await server.close();
    }
  });

  it('answers 408 to a head or a body past its deadline, counted by stage; an idle keep-alive end is no refusal', async () => {
    const server = await guarded({ maxConnections: 10 }, { headersTimeout: 300, requestTimeout: 600, keepAliveTimeout: 200 });
    try {
      const head = await exchange(server.port, '127.0.6.6', 'GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ');
      assert.match(head.text, /^HTTP\/1\.1 408 /);
      assert.equal(await server.refused('head', 'HEADERS_TIMEOUT'), 1);
      const body = await exchange(server.port, '127.0.6.6', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc');
      assert.ok(body.closed);
      assert.equal(await server.refused('body', 'REQUEST_TIMEOUT'), 1);
      // A whole exchange, then silence: the keep-alive timeout closes it, not counted.
      const idle = await exchange(server.port, '127.0.6.6', 'GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      assert.ok(idle.closed);
      assert.match(idle.text, /^HTTP\/1\.1 200/);
      assert.equal(await server.refused('idle', 'IDLE_TIMEOUT'), 0);
      assert.equal(await server.refused('head', 'HEADERS_TIMEOUT'), 1);
    } finally {
      await server.close();
    }
  });
});
