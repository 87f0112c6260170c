/**
 * CRLs of uploaded CA certificates: fetched from a local HTTP server, verified against their CA,
 * kept when a later fetch fails, and used by a TLS server to refuse a revoked client certificate.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { openStore, type Store } from '../store/index.ts';
import type { CaCertificateEntry } from '@tps/model';
import { CRL_FETCH_FAILED, CrlService, verifyCrl } from './crl.ts';
import { TestCa, type IssuedCertificate } from '../../test/support/pki.ts';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';
import { permissiveOriginGuard } from '../../test/support/origin-guard.ts';

/** A local CRL distribution point whose answer the test sets. */
class CrlServer {
  body: string | Buffer = '';
  status = 200;
  requests = 0;
  readonly server = http.createServer((_request, response) => {
    this.requests++;
    response.writeHead(this.status, { 'content-type': 'application/pkix-crl' });
    response.end(this.body);
  });
  url = '';
  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}/ca.crl`;
  }
  stop(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

function entryOf(ca: TestCa, crlUrl: string): CaCertificateEntry {
  const certificate = new X509Certificate(ca.certificatePem);
  return {
    certificate: ca.certificatePem,
    crlUrl,
    subject: `CN=${ca.name}`,
    fingerprint: certificate.fingerprint256,
    notAfter: certificate.validToDate.toISOString(),
  };
}

/**
 * A TLS handshake with a client certificate against a server that checks it with `ca` and `crl`:
 * 'accepted', or the server's verdict (OpenSSL's code, e.g. CERT_REVOKED).
 */
async function handshake(server: { ca: string; crl: string[] }, client: IssuedCertificate, serverCert: IssuedCertificate): Promise<string> {
  const listener = tls.createServer({
    cert: serverCert.certificatePem,
    key: serverCert.privateKeyPem,
    ca: server.ca,
    crl: server.crl,
    requestCert: true,
    // The server answers its verdict instead of cutting the connection, so the test can read it.
    rejectUnauthorized: false,
  });
  listener.on('secureConnection', (socket) => socket.end(socket.authorized ? 'accepted' : String(socket.authorizationError)));
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  try {
    return await new Promise((resolve, reject) => {
      const socket = tls.connect({
        host: '127.0.0.1',
        port: (listener.address() as net.AddressInfo).port,
        cert: client.certificatePem,
        key: client.privateKeyPem,
        rejectUnauthorized: false,
      });
      let data = '';
      socket.on('data', (chunk: Buffer) => (data += chunk.toString()));
      socket.on('end', () => resolve(data));
      socket.on('error', reject);
    });
  } finally {
    listener.close();
  }
}

for (const kind of ['sqlite', 'postgres'] as const) {
  describe(`CRLs of CA certificates (${kind} store)`, () => {
    let dir: string;
    let store: Store;
    let tenantId: string;
    let clientCa: TestCa;
    let otherCa: TestCa;
    let good: IssuedCertificate;
    let revoked: IssuedCertificate;
    let distribution: CrlServer;
    let service: CrlService;
    /** What the service told the operator's log. */
    const warnings: { object: Record<string, unknown>; message: string }[] = [];
    const logger = {
      info: () => {},
      warn: (object: object, message: string) => warnings.push({ object: object as Record<string, unknown>, message }),
    };

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-crl-'));
      store = await openStore({ dataDir: dir, databaseUrl: kind === 'postgres' ? await freshPostgresDatabase() : undefined });
      tenantId = (await store.tenants.create('crl-tenant')).id;
      clientCa = await TestCa.create('Client CA');
      otherCa = await TestCa.create('Other CA');
      good = await clientCa.issue({ commonName: 'good client', client: true });
      revoked = await clientCa.issue({ commonName: 'revoked client', client: true });
      clientCa.revoke(revoked.serialNumber);
      distribution = new CrlServer();
      await distribution.start();
      // The distribution point is on loopback, which the product's origin policy refuses by default.
      service = new CrlService({ store, logger, originGuard: permissiveOriginGuard(), watchIntervalMs: 50, refreshIntervalMs: 3600_000 });
    });
    after(async () => {
      await service.stop();
      await distribution.stop();
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('verifies a CRL against its CA and lists the revoked serials', async () => {
      const crl = await verifyCrl(await clientCa.crlPem(), clientCa.certificatePem);
      assert.deepEqual(crl.revokedSerials, [revoked.serialNumber.toLowerCase()]);
      assert.ok(crl.nextUpdate && crl.nextUpdate > new Date().toISOString());
      await assert.rejects(
        verifyCrl(await otherCa.crlPem(), clientCa.certificatePem),
        /issued by "CN=Other CA", not by the CA "CN=Client CA"/,
      );
      await assert.rejects(verifyCrl('not a crl', clientCa.certificatePem), /not a certificate revocation list/);
    });

    it('fetches the CRL of a new upload, and a TLS server given it refuses the revoked client certificate', async () => {
      distribution.body = await clientCa.crlPem();
      service.start();
      const before = await store.revision();
      const record = await store.caCertificates.create(tenantId, [entryOf(clientCa, distribution.url)]);

      // The upload is noticed by the revision watch (every 50 ms here); bounded wait. The CRL (what
      // the edge loads) and the status the API shows are stored in one transaction: once the CRL
      // is there, so is its status.
      let crls: string[] = [];
      for (let i = 0; i < 100 && crls.length === 0; i++) {
        crls = await service.crlsFor([record.id]);
        if (crls.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.equal(crls.length, 1, 'the CRL was fetched after the upload');
      const parsed = await verifyCrl(crls[0]!, clientCa.certificatePem);
      assert.ok(parsed.revokedSerials.includes(revoked.serialNumber.toLowerCase()), 'the revoked serial is in the fetched CRL');
      assert.ok((await store.revision()) > before + 1, 'a new CRL moves the store revision (the edge reloads it)');

      const shown = (await store.caCertificates.get(tenantId, record.id))!.entries[0]!.crl!;
      assert.equal(shown.error, null);
      assert.ok(shown.fetchedAt);
      assert.equal(shown.revokedCount, 1);

      const serverCert = await clientCa.issue({ commonName: 'server', dnsNames: ['localhost'] });
      assert.equal(await handshake({ ca: clientCa.certificatePem, crl: crls }, good, serverCert), 'accepted');
      const refused = await handshake({ ca: clientCa.certificatePem, crl: crls }, revoked, serverCert);
      assert.equal(refused, 'CERT_REVOKED', 'the revoked certificate is refused as revoked');
      assert.equal(
        await handshake({ ca: clientCa.certificatePem, crl: [] }, revoked, serverCert),
        'accepted',
        'without the CRL the same certificate would pass: the CRL made the difference',
      );
    });

    it('refuses a CRL signed by another CA, and a failing URL, keeping the last good CRL', async () => {
      const [record] = (await store.caCertificates.list(tenantId)).slice(-1);
      const id = record!.id;
      const lastGood = (await service.crlsFor([id]))[0]!;
      const revision = await store.revision();

      distribution.body = await otherCa.crlPem();
      await service.refreshAll();
      let shown = (await store.caCertificates.get(tenantId, id))!.entries[0]!.crl!;
      assert.match(shown.error ?? '', /not by the CA "CN=Client CA"/);
      assert.deepEqual(await service.crlsFor([id]), [lastGood], 'the foreign CRL is not used; the last good one is');

      // A failed fetch tells the tenant only that it failed; the operator's log says why.
      distribution.status = 500;
      warnings.length = 0;
      await service.refreshAll();
      shown = (await store.caCertificates.get(tenantId, id))!.entries[0]!.crl!;
      assert.equal(shown.error, CRL_FETCH_FAILED);
      assert.ok(
        warnings.some((w) => /answered HTTP 500/.test(String(w.object.error)) && w.object.reason === 'status'),
        JSON.stringify(warnings),
      );
      assert.ok(shown.fetchedAt, 'the time of the last good fetch stays visible');
      assert.deepEqual(await service.crlsFor([id]), [lastGood]);

      distribution.status = 200;
      await distribution.stop();
      warnings.length = 0;
      await service.refreshAll();
      shown = (await store.caCertificates.get(tenantId, id))!.entries[0]!.crl!;
      assert.equal(shown.error, CRL_FETCH_FAILED, 'a closed port reads the same as an error status');
      assert.ok(
        warnings.some((w) => /ECONNREFUSED/.test(String(w.object.error)) && w.object.reason === 'network'),
        JSON.stringify(warnings),
      );
      assert.deepEqual(await service.crlsFor([id]), [lastGood]);
      assert.equal(await store.revision(), revision, 'failed fetches change nothing the edge serves');

      // Back again with a newer CRL (one more revoked certificate): it replaces the kept one.
      await distribution.start();
      const updatedEntry = entryOf(clientCa, distribution.url);
      const moved = await store.caCertificates.create(tenantId, [updatedEntry]);
      const another = await clientCa.issue({ commonName: 'another', client: true });
      clientCa.revoke(another.serialNumber);
      distribution.body = await clientCa.crlPem();
      await service.refreshAll();
      const fresh = await service.crlsFor([moved.id]);
      assert.equal(fresh.length, 1);
      assert.equal((await verifyCrl(fresh[0]!, clientCa.certificatePem)).revokedSerials.length, 2);
    });

    it('reports a CA whose URL serves a foreign CRL from the start, and gives the edge no CRL for it', async () => {
      distribution.body = await otherCa.crlPem();
      const record = await store.caCertificates.create(tenantId, [entryOf(clientCa, distribution.url)]);
      await service.refreshNew();
      assert.deepEqual(await service.crlsFor([record.id]), []);
      const shown = (await store.caCertificates.get(tenantId, record.id))!.entries[0]!.crl!;
      assert.equal(shown.fetchedAt, null);
      assert.match(shown.error ?? '', /issued by "CN=Other CA"/);
    });
  });
}
