/**
 * The ACME service's decisions without a real CA: backoff on rate limits (Retry-After) and on an
 * unreachable CA, giving up on a first issuance, checks made before any order (SAN count,
 * wildcards), a failed renewal that keeps the certificate in use and raises an alert, and the
 * choice between HTTP-01 and TLS-ALPN-01 from the tenant's proxies. The CA here is a tiny local
 * HTTP server speaking just enough ACME to refuse; real issuance is tested against Pebble in
 * test/e2e/acme.test.ts.
 */
import { describe, it, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { openStore, type Store } from '../store/index.ts';
import type { StoredAttributes } from '../store/traffic-configs.ts';
import { SecretBox, acmeAccountKeyBinding, certificateKeyBinding } from './secret-box.ts';
import { AcmeService, type AcmeLogger } from './acme.ts';
import { certificateFacts } from './x509.ts';
import { TestCa } from '../../test/support/pki.ts';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';

/** Answers the directory and nonces, and refuses new accounts the way the test says. */
class RefusingCa {
  requests: string[] = [];
  refusal = {
    status: 429,
    type: 'urn:ietf:params:acme:error:rateLimited',
    detail: 'too many new registrations from this IP',
    retryAfter: '7200',
  };
  readonly server = http.createServer((request, response) => {
    this.requests.push(`${request.method} ${request.url}`);
    const base = `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
    const nonce = crypto.randomBytes(8).toString('hex');
    request.resume();
    if (request.url === '/dir') {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ newNonce: `${base}/nonce`, newAccount: `${base}/acct`, newOrder: `${base}/order` }));
    } else if (request.url === '/nonce') {
      response.writeHead(200, { 'replay-nonce': nonce });
      response.end();
    } else {
      response.writeHead(this.refusal.status, {
        'content-type': 'application/problem+json',
        'replay-nonce': nonce,
        ...(this.refusal.retryAfter && { 'retry-after': this.refusal.retryAfter }),
      });
      response.end(JSON.stringify({ type: this.refusal.type, detail: this.refusal.detail, status: this.refusal.status }));
    }
  });
  directoryUrl = '';
  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.directoryUrl = `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}/dir`;
  }
  stop(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

class MemoryLogger implements AcmeLogger {
  lines: { level: string; message: string; object: object }[] = [];
  info(object: object, message: string) {
    this.lines.push({ level: 'info', message, object });
  }
  warn(object: object, message: string) {
    this.lines.push({ level: 'warn', message, object });
  }
  error(object: object, message: string) {
    this.lines.push({ level: 'error', message, object });
  }
}

for (const kind of ['sqlite', 'postgres'] as const) {
  describe(`ACME service decisions (${kind} store)`, () => {
    let dir: string;
    let store: Store;
    let secrets: SecretBox;
    let tenantId: string;
    let ca: RefusingCa;
    let service: AcmeService | undefined;

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-acme-unit-'));
      store = await openStore({ dataDir: dir, databaseUrl: kind === 'postgres' ? await freshPostgresDatabase() : undefined });
      secrets = new SecretBox(crypto.randomBytes(32));
      tenantId = (await store.tenants.create('acme-unit')).id;
      ca = new RefusingCa();
      await ca.start();
    });
    after(async () => {
      await ca.stop();
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    beforeEach(async () => {
      await service?.stop();
      service = undefined;
      ca.requests = [];
    });

    const startService = (options: Partial<ConstructorParameters<typeof AcmeService>[0]> = {}) => {
      service = new AcmeService({
        store,
        secrets,
        directoryUrl: ca.directoryUrl,
        scanIntervalMs: 3600_000,
        retryBaseMs: 60_000,
        ...options,
      });
      service.start();
      return service;
    };

    it('backs off as long as a rate limit says (Retry-After), keeps the request PENDING and says why', async () => {
      const record = await store.certificates.createAcme(tenantId, ['rate.example.test']);
      const acme = startService();
      await acme.idle();
      const after = (await store.certificates.get(tenantId, record.id))!;
      assert.equal(after.status, 'PENDING');
      assert.match(
        after.statusDetail ?? '',
        /attempt 1 failed: registering the ACME account: the CA answered 429 urn:ietf:params:acme:error:rateLimited: too many new registrations/,
      );
      assert.equal(after.acme!.attempts, 1);
      const waitMs = Date.parse(after.acme!.nextAttemptAt!) - Date.now();
      assert.ok(waitMs > 7000_000 && waitMs <= 7200_000, `next attempt after Retry-After (in ${waitMs} ms)`);

      // Nothing is due before then: another scan sends nothing to the CA.
      const sent = ca.requests.length;
      acme.enqueue(record.id);
      await acme.idle();
      assert.equal(ca.requests.length, sent);
      assert.ok(!ca.requests.some((line) => line.includes('order')), 'no order was placed');
    });

    it('retries an unreachable CA with exponential backoff, then gives a first issuance up as FAILED', async () => {
      const closed = await new Promise<number>((resolve) => {
        const probe = net.createServer().listen(0, '127.0.0.1', () => {
          const { port } = probe.address() as net.AddressInfo;
          probe.close(() => resolve(port));
        });
      });
      const record = await store.certificates.createAcme(tenantId, ['down.example.test']);
      const acme = startService({ directoryUrl: `http://127.0.0.1:${closed}/dir`, retryBaseMs: 1000, maxIssuanceAttempts: 2 });
      await acme.idle();
      let now = (await store.certificates.get(tenantId, record.id))!;
      assert.equal(now.status, 'PENDING');
      assert.match(now.statusDetail ?? '', /attempt 1 failed: .*ECONNREFUSED/);
      const firstWait = Date.parse(now.acme!.nextAttemptAt!) - Date.now();
      assert.ok(firstWait > 0 && firstWait <= 1100, `about retryBaseMs (${firstWait} ms)`);

      // Bounded wait for the retry to fall due, then the second (last allowed) attempt.
      await new Promise((resolve) => setTimeout(resolve, firstWait + 50));
      acme.enqueue(record.id);
      await acme.idle();
      now = (await store.certificates.get(tenantId, record.id))!;
      assert.equal(now.status, 'FAILED');
      assert.match(now.statusDetail ?? '', /gave up after 2 attempts: .*ECONNREFUSED/);
    });

    it('refuses before any order what the CA would refuse: too many names, wildcards', async () => {
      const tooMany = await store.certificates.createAcme(tenantId, ['a.example.test', 'b.example.test', 'c.example.test']);
      const wildcard = await store.certificates.createAcme(tenantId, ['*.example.test']);
      const acme = startService({ maxNames: 2 });
      await acme.idle();
      const first = (await store.certificates.get(tenantId, tooMany.id))!;
      assert.equal(first.status, 'FAILED');
      assert.equal(first.statusDetail, 'the certificate names 3 domains; the CA accepts at most 2 per certificate');
      const second = (await store.certificates.get(tenantId, wildcard.id))!;
      assert.equal(second.status, 'FAILED');
      assert.match(second.statusDetail ?? '', /wildcard names need DNS-01/);
      assert.ok(!ca.requests.some((line) => line.includes('order')), 'no order reached the CA');
    });

    it('keeps serving a certificate whose renewal fails, retries it later and raises an alert', async () => {
      await service?.stop();
      // A service-issued certificate issued long ago: its renewal is due.
      const testCa = await TestCa.create('Earlier ACME CA');
      const leaf = await testCa.issue({ commonName: 'renew.example.test', dnsNames: ['renew.example.test'] });
      const record = await store.certificates.createAcme(tenantId, ['renew.example.test']);
      const facts = certificateFacts(new crypto.X509Certificate(leaf.certificatePem));
      await store.certificates.markIssued(
        record.id,
        {
          certificatePem: leaf.certificatePem,
          chainPem: '',
          sealedPrivateKey: secrets.seal(leaf.privateKeyPem, certificateKeyBinding(record)),
        },
        facts,
        new Date(Date.now() - 1000).toISOString(),
      );
      // Everything else in this tenant is settled (FAILED or waiting), so only this one is due.
      const revision = await store.revision();
      const logger = new MemoryLogger();
      const registry = new Registry();
      const acme = startService({ logger, registry });
      await acme.idle();

      const now = (await store.certificates.get(tenantId, record.id))!;
      assert.equal(now.status, 'ISSUED', 'the certificate in use stays ISSUED');
      assert.equal(now.fingerprint, facts.fingerprint, 'and keeps its material');
      assert.match(
        now.statusDetail ?? '',
        /^renewal failed \(attempt 1\): .*rateLimited.*; next attempt at .*; the current certificate stays in use until /,
      );
      assert.match(now.acme!.lastRenewalError ?? '', /rateLimited/);
      assert.equal(await store.revision(), revision, 'a failed renewal changes nothing the edge serves');
      const alert = logger.lines.find((line) => line.level === 'error');
      assert.equal(alert?.message, 'acme: certificate renewal failed');
      assert.equal((alert?.object as { certificateId?: string } | undefined)?.certificateId, record.id);
      assert.match(await registry.metrics(), /tps_acme_renewal_failures_total 1/);

      // The operator's "renew now" skips the backoff: one more attempt at once.
      const sent = ca.requests.length;
      const requested = await acme.renewNow(tenantId, record.id);
      assert.ok(requested?.acme?.renewalRequestedAt);
      await acme.idle();
      assert.ok(ca.requests.length > sent, 'the CA was asked again');
      assert.match((await store.certificates.get(tenantId, record.id))!.statusDetail ?? '', /renewal failed \(attempt 2\)/);
    });

    it('registers a new account when the CA says the stored one is deactivated', async () => {
      // An account stored earlier, which the CA now refuses.
      const key = crypto
        .generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
        .privateKey.export({ format: 'pem', type: 'pkcs8' })
        .toString();
      await store.acmeAccounts.add({
        directoryUrl: ca.directoryUrl,
        tenantId,
        email: null,
        accountUrl: `${ca.directoryUrl}/dead`,
        sealedPrivateKey: secrets.seal(key, acmeAccountKeyBinding(ca.directoryUrl, tenantId)),
      });
      ca.refusal = { status: 403, type: 'urn:ietf:params:acme:error:unauthorized', detail: 'Account has been deactivated', retryAfter: '' };
      try {
        const record = await store.certificates.createAcme(tenantId, ['dead.example.test']);
        const logger = new MemoryLogger();
        const acme = startService({ logger });
        await acme.idle();
        assert.ok(logger.lines.some((line) => line.message === 'acme: the CA refused the account; registering a new one'));
        assert.ok(ca.requests.includes('POST /order'), 'the order was tried with the stored account');
        assert.ok(ca.requests.includes('POST /acct'), 'then a new account was registered');
        assert.equal(
          await store.acmeAccounts.get(ca.directoryUrl, tenantId),
          undefined,
          'the dead account is forgotten (the new registration was refused too)',
        );
        const now = (await store.certificates.get(tenantId, record.id))!;
        assert.equal(now.status, 'PENDING', 'a refused registration is retried later, not a final failure');
      } finally {
        ca.refusal = {
          status: 429,
          type: 'urn:ietf:params:acme:error:rateLimited',
          detail: 'too many new registrations from this IP',
          retryAfter: '7200',
        };
      }
    });

    it('replaces a dead account found while updating its contact e-mail', async () => {
      const key = crypto
        .generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
        .privateKey.export({ format: 'pem', type: 'pkcs8' })
        .toString();
      await store.acmeAccounts.add({
        directoryUrl: ca.directoryUrl,
        tenantId,
        email: null,
        accountUrl: `${ca.directoryUrl}/old`,
        sealedPrivateKey: secrets.seal(key, acmeAccountKeyBinding(ca.directoryUrl, tenantId)),
      });
      ca.refusal = { status: 403, type: 'urn:ietf:params:acme:error:unauthorized', detail: 'Account has been deactivated', retryAfter: '' };
      try {
        await store.certificates.createAcme(tenantId, ['contact.example.test']);
        const logger = new MemoryLogger();
        const acme = startService({ logger, email: 'ops@example.test' });
        await acme.idle();
        assert.ok(ca.requests.includes('POST /dir/old'), 'the contact update went to the stored account');
        assert.ok(ca.requests.includes('POST /acct'), 'then a new account was registered');
        assert.ok(logger.lines.some((line) => line.message === 'acme: the CA refused the account; registering a new one'));
        assert.equal(await store.acmeAccounts.get(ca.directoryUrl, tenantId), undefined);
      } finally {
        ca.refusal = {
          status: 429,
          type: 'urn:ietf:params:acme:error:rateLimited',
          detail: 'too many new registrations from this IP',
          retryAfter: '7200',
        };
      }
    });

    it('lets one node at a time work on a certificate (lease), and its holder extend it', async () => {
      const record = await store.certificates.createAcme(tenantId, ['lease.example.test']);
      const now = new Date().toISOString();
      const later = new Date(Date.now() + 60_000).toISOString();
      assert.equal(await store.certificates.claimAcme(record.id, 'node-a', later, now), true);
      assert.equal(await store.certificates.claimAcme(record.id, 'node-b', later, now), false, 'another node waits');
      assert.ok(!(await store.certificates.dueForAcme(now, 100)).some((due) => due.id === record.id), 'a leased certificate is not due');
      assert.equal(await store.certificates.claimAcme(record.id, 'node-a', later, now), true, 'the holder extends its lease');
      await store.certificates.releaseAcme(record.id, 'node-a');
      assert.equal(await store.certificates.claimAcme(record.id, 'node-b', later, now), true);
      // A lease that ran out (its node died) is taken over.
      const past = new Date(Date.now() - 1000).toISOString();
      await store.certificates.claimAcme(record.id, 'node-b', past, now);
      assert.equal(await store.certificates.claimAcme(record.id, 'node-c', later, new Date().toISOString()), true);
      await store.certificates.markFailed(record.id, 'done with this one');
    });

    it('answers HTTP-01 while a plain proxy of the tenant listens on port 80, TLS-ALPN-01 once only TLS remains', async () => {
      const tenant = (await store.tenants.create('acme-challenge-choice')).id;
      const record = await store.certificates.createAcme(tenant, ['shop.example.test']);
      const acme = new AcmeService({ store, secrets, directoryUrl: ca.directoryUrl });
      const backend = { hosts: [{ address: '127.0.0.12', port: 8080 }] };
      assert.deepEqual(await acme.challengeTypes(record), ['http-01', 'tls-alpn-01'], 'no proxy yet: HTTP-01 first');
      const config = await store.trafficConfigs.create(tenant, 'httpProxy', {
        frontend: { ipv4: '127.0.0.62', port: 80 },
        backend,
      } as unknown as StoredAttributes);
      assert.deepEqual(await acme.challengeTypes(record), ['http-01', 'tls-alpn-01']);
      // The spec's procedure: PUT on 443 with the certificate while it is still PENDING. Port 80
      // is still served (the interim attributes) and answers HTTP-01.
      await store.trafficConfigs.replace(config.tenantId, config, {
        frontend: { ipv4: '127.0.0.62', port: 443, certificateId: record.id },
        backend,
      } as unknown as StoredAttributes);
      assert.deepEqual(
        await acme.challengeTypes(record),
        ['http-01', 'tls-alpn-01'],
        'port 80 still served while the certificate is pending',
      );
      // Issued: port 80 is given up, and a renewal validates on 443.
      const leaf = await (await TestCa.create('Choice CA')).issue({ commonName: 'shop.example.test', dnsNames: ['shop.example.test'] });
      await store.certificates.markIssued(
        record.id,
        {
          certificatePem: leaf.certificatePem,
          chainPem: '',
          sealedPrivateKey: secrets.seal(leaf.privateKeyPem, certificateKeyBinding(record)),
        },
        certificateFacts(new crypto.X509Certificate(leaf.certificatePem)),
        new Date(Date.now() + 3600_000).toISOString(),
      );
      assert.equal((await store.trafficConfigs.get(tenant, config.id))!.interimAttributes, undefined);
      assert.deepEqual(
        await acme.challengeTypes(record),
        ['tls-alpn-01', 'http-01'],
        'port 80 gone, the proxy serves this certificate on 443',
      );
      await acme.stop();
    });

    it('gives up the lease of an order still running when it stops, so a restart takes it up at once', async () => {
      // A CA that accepts connections and never answers: the order hangs in its first request.
      const sockets = new Set<net.Socket>();
      const silent = net.createServer((socket) => {
        sockets.add(socket);
        socket.on('error', () => {});
      });
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      const tenant = (await store.tenants.create('acme-restart')).id;
      const record = await store.certificates.createAcme(tenant, ['restart.example.test']);
      const acme = new AcmeService({
        store,
        secrets,
        directoryUrl: `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}/dir`,
        nodeId: 'stopping-node',
        requestTimeoutMs: 60_000,
        scanIntervalMs: 3600_000,
      });
      try {
        acme.start();
        // Wait (bounded) until the order holds its lease and its first request reached the CA.
        for (let i = 0; i < 200 && sockets.size === 0; i++) await new Promise((resolve) => setTimeout(resolve, 25));
        assert.ok(sockets.size > 0, 'the order is running');
        const now = new Date().toISOString();
        const later = new Date(Date.now() + 60_000).toISOString();
        assert.equal(await store.certificates.claimAcme(record.id, 'next-process', later, now), false, 'leased while it runs');
        await acme.stop(50);
        assert.equal(
          await store.certificates.claimAcme(record.id, 'next-process', later, new Date().toISOString()),
          true,
          'free once the service stopped',
        );
        await store.certificates.releaseAcme(record.id, 'next-process');
        assert.equal((await store.certificates.get(tenant, record.id))!.status, 'PENDING');
      } finally {
        for (const socket of sockets) socket.destroy();
        await new Promise((resolve) => silent.close(resolve));
        await store.certificates.markFailed(record.id, 'done with this one');
      }
    });
  });
}
