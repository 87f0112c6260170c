/**
 * The limits of CRL fetches, over real sockets on loopback: the origin policy at every connect
 * (redirects included), the size limit, the time limit, the number of fetches at a time, and the
 * check of the CRL in a thread of its own.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { X509Certificate } from 'node:crypto';
import { CRL_FETCH_FAILED, CrlFetchError, CrlService, MAX_CRL_REDIRECTS, crlDispatcher, downloadCrl } from './crl.ts';
import { CrlError } from './crl-verify.ts';
import { CrlVerifier } from './crl-verifier.ts';
import { openStore, type Store } from '../store/index.ts';
import { recordingOriginGuard } from '../../test/support/origin-guard.ts';
import { TestCa } from '../../test/support/pki.ts';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';

/** Allowed distribution points, and an "internal" one the policy refuses (loopback outside the allowed network). */
const ALLOWED_IP = '127.0.0.236';
const INTERNAL_IP = '127.0.0.238';

interface TestServer {
  url: (path: string) => string;
  requests: string[];
  close(): Promise<void>;
}

async function serve(host: string, handler: http.RequestListener): Promise<TestServer> {
  const requests: string[] = [];
  const server = http.createServer((request, response) => {
    requests.push(request.url ?? '');
    handler(request, response);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: (p) => `http://${host}:${port}${p}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function failureOf(promise: Promise<unknown>): Promise<CrlFetchError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof CrlFetchError, `a CrlFetchError, got ${String(error)}`);
    return error;
  }
  assert.fail('the fetch should have failed');
}

describe('CRL fetches: origin policy and limits', () => {
  const { guard, refusals } = recordingOriginGuard({ allowedNetworks: [`${ALLOWED_IP}/32`] });
  const dispatcher = crlDispatcher(guard.for('crl'), 2_000);
  const options = { dispatcher, timeoutMs: 2_000, maxBytes: 1024 };
  let internal: TestServer;
  let allowed: TestServer;
  let hold: http.ServerResponse[] = [];

  before(async () => {
    internal = await serve(INTERNAL_IP, (_request, response) => response.end('secret'));
    allowed = await serve(ALLOWED_IP, (request, response) => {
      const url = new URL(request.url ?? '/', 'http://x');
      switch (url.pathname) {
        case '/to-internal':
          response.writeHead(302, { location: internal.url('/crl') }).end();
          return;
        case '/relative':
          response.writeHead(301, { location: '/small' }).end();
          return;
        case '/loop':
          response.writeHead(307, { location: '/loop' }).end();
          return;
        case '/ftp':
          response.writeHead(302, { location: 'ftp://example.com/crl' }).end();
          return;
        case '/small':
          response.end(Buffer.alloc(100, 1));
          return;
        case '/declared-large':
          response.writeHead(200, { 'content-length': '5000' }).end(Buffer.alloc(5000, 1));
          return;
        case '/chunked-large':
          response.write(Buffer.alloc(600, 1));
          response.end(Buffer.alloc(600, 1));
          return;
        case '/never':
          hold.push(response); // headers never come
          return;
        case '/drip':
          response.writeHead(200);
          response.write('x'); // the body never ends
          hold.push(response);
          return;
        default:
          response.writeHead(404).end();
      }
    });
  });
  after(async () => {
    for (const response of hold) response.destroy();
    hold = [];
    await dispatcher.close();
    await Promise.all([internal.close(), allowed.close()]);
  });

  it('fetches from an allowed address, following a relative redirect', async () => {
    assert.equal((await downloadCrl(allowed.url('/relative'), options)).length, 100);
  });

  it('never connects to a refused address, given directly or as a redirect target', async () => {
    refusals.length = 0;
    const direct = await failureOf(downloadCrl(internal.url('/crl'), options));
    assert.equal(direct.reason, 'origin-refused');
    const redirected = await failureOf(downloadCrl(allowed.url('/to-internal'), options));
    assert.equal(redirected.reason, 'origin-refused');
    assert.match(redirected.message, /from http:\/\/127\.0\.0\.236/);
    assert.deepEqual(internal.requests, [], 'the internal server saw no request');
    assert.deepEqual(
      refusals.map((r) => [r.scope, r.address, r.reason]),
      [
        ['crl', INTERNAL_IP, 'loopback'],
        ['crl', INTERNAL_IP, 'loopback'],
      ],
    );
  });

  it('follows a few redirects only, and only to http(s)', async () => {
    const loop = await failureOf(downloadCrl(allowed.url('/loop'), options));
    assert.equal(loop.reason, 'redirects');
    assert.equal(allowed.requests.filter((p) => p === '/loop').length, MAX_CRL_REDIRECTS + 1);
    assert.equal((await failureOf(downloadCrl(allowed.url('/ftp'), options))).reason, 'redirects');
  });

  it('stops at the size limit, declared or not', async () => {
    assert.equal((await failureOf(downloadCrl(allowed.url('/declared-large'), options))).reason, 'too-large');
    assert.equal((await failureOf(downloadCrl(allowed.url('/chunked-large'), options))).reason, 'too-large');
  });

  it('gives up on a server that does not answer, or never finishes its body', async () => {
    const short = { ...options, timeoutMs: 300 };
    assert.equal((await failureOf(downloadCrl(allowed.url('/never'), short))).reason, 'timeout');
    assert.equal((await failureOf(downloadCrl(allowed.url('/drip'), short))).reason, 'timeout');
  });
});

describe('CRL check off the event loop', () => {
  it('verifies a CRL in its own thread, and says what is wrong with one that does not hold', async () => {
    const ca = await TestCa.create('Threaded CA');
    const other = await TestCa.create('Other CA');
    const revoked = await ca.issue({ commonName: 'revoked', client: true });
    ca.revoke(revoked.serialNumber);
    const verifier = new CrlVerifier();
    try {
      const crl = await verifier.verify(Buffer.from(await ca.crlPem()), ca.certificatePem);
      assert.deepEqual(crl.revokedSerials, [revoked.serialNumber.toLowerCase()]);
      await assert.rejects(
        verifier.verify(Buffer.from('<html>not a crl</html>'), ca.certificatePem),
        (error: unknown) => error instanceof CrlError && error.problem === 'not-a-crl',
      );
      await assert.rejects(
        verifier.verify(Buffer.from(await other.crlPem()), ca.certificatePem),
        (error: unknown) => error instanceof CrlError && error.problem === 'not-this-ca',
      );
      await verifier.close();
      // A closed verifier starts a new thread for the next CRL.
      assert.equal((await verifier.verify(Buffer.from(await ca.crlPem()), ca.certificatePem)).revokedSerials.length, 1);
    } finally {
      await verifier.close();
    }
  });

  it('ends a thread that takes too long, and the next CRL gets a new one', async () => {
    const ca = await TestCa.create('Slow CA');
    const impatient = new CrlVerifier({ timeoutMs: 1 });
    try {
      await assert.rejects(impatient.verify(Buffer.from(await ca.crlPem()), ca.certificatePem), /took longer than 1 ms/);
    } finally {
      await impatient.close();
    }
  });
});

// Both stores: the statuses of one CA certificate's entries, fetched at the same time, must all be kept.
for (const kind of ['sqlite', 'postgres'] as const) {
  describe(`CRL service: a few fetches at a time, generic errors for the tenant (${kind} store)`, () => {
    let dir: string;
    let store: Store;
    let server: TestServer;
    const held: http.ServerResponse[] = [];
    let releaseAll = false;
    let crlPem = '';

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-crl-fetch-'));
      store = await openStore({ dataDir: dir, databaseUrl: kind === 'postgres' ? await freshPostgresDatabase() : undefined });
      server = await serve(ALLOWED_IP, (request, response) => {
        if (request.url?.startsWith('/fail')) return void response.writeHead(503).end();
        if (releaseAll) return void response.end(crlPem);
        held.push(response);
      });
    });
    after(async () => {
      for (const response of held) response.destroy();
      await server.close();
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('holds no more than `concurrency` fetches open, and fetches them all', async () => {
      const ca = await TestCa.create('Concurrent CA');
      crlPem = await ca.crlPem();
      const tenantId = (await store.tenants.create('crl-concurrency')).id;
      const certificate = new X509Certificate(ca.certificatePem);
      const entry = (index: number) => ({
        certificate: ca.certificatePem,
        crlUrl: server.url(`/crl-${index}`),
        subject: 'CN=Concurrent CA',
        fingerprint: certificate.fingerprint256,
        notAfter: certificate.validToDate.toISOString(),
      });
      const record = await store.caCertificates.create(tenantId, [0, 1, 2, 3, 4].map(entry));
      const { guard } = recordingOriginGuard({ allowedNetworks: [`${ALLOWED_IP}/32`] });
      const service = new CrlService({
        store,
        originGuard: guard,
        concurrency: 2,
        watchIntervalMs: 3_600_000,
        refreshIntervalMs: 3_600_000,
      });
      try {
        const pass = service.refreshAll();
        const deadline = Date.now() + 5_000;
        while (held.length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
        assert.equal(held.length, 2, 'two fetches started');
        // No third one joins while both are open.
        await new Promise((resolve) => setTimeout(resolve, 200));
        assert.equal(server.requests.length, 2, 'no more than two at a time');
        releaseAll = true;
        for (const response of held.splice(0)) response.end(crlPem);
        await pass;
        assert.equal(server.requests.length, 5);
        const shown = (await store.caCertificates.get(tenantId, record.id))!.entries;
        assert.ok(
          shown.every((e) => e.crl?.error === null && e.crl.fetchedAt !== null),
          JSON.stringify(shown.map((e) => e.crl)),
        );
      } finally {
        await service.stop();
      }
    });

    it('tells the tenant the same thing whatever went wrong with the fetch', async () => {
      const ca = await TestCa.create('Generic CA');
      const tenantId = (await store.tenants.create('crl-generic')).id;
      const certificate = new X509Certificate(ca.certificatePem);
      const entry = (crlUrl: string) => ({
        certificate: ca.certificatePem,
        crlUrl,
        subject: 'CN=Generic CA',
        fingerprint: certificate.fingerprint256,
        notAfter: certificate.validToDate.toISOString(),
      });
      const closedPort = await new Promise<number>((resolve) => {
        const probe = net.createServer().listen(0, ALLOWED_IP, () => {
          const { port } = probe.address() as net.AddressInfo;
          probe.close(() => resolve(port));
        });
      });
      const record = await store.caCertificates.create(tenantId, [
        entry(server.url('/fail')), // an HTTP error status
        entry(`http://${ALLOWED_IP}:${closedPort}/crl`), // nothing listens
        entry(`http://${INTERNAL_IP}:${closedPort}/crl`), // refused by the policy
      ]);
      const { guard } = recordingOriginGuard({ allowedNetworks: [`${ALLOWED_IP}/32`] });
      const service = new CrlService({ store, originGuard: guard, watchIntervalMs: 3_600_000, refreshIntervalMs: 3_600_000 });
      try {
        await service.refreshAll();
        const errors = (await store.caCertificates.get(tenantId, record.id))!.entries.map((e) => e.crl?.error);
        assert.deepEqual(errors, [CRL_FETCH_FAILED, CRL_FETCH_FAILED, CRL_FETCH_FAILED]);
      } finally {
        await service.stop();
      }
    });
  });
}
