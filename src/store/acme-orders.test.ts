/**
 * The store's rules for service-issued certificates between tenants: a domain claimed by one
 * tenant's PENDING or ISSUED order is refused to the others (customer uploads claim nothing), the
 * quota of pending orders, and a proxy PUT with a certificate still pending keeping what it served
 * (and its ports) until the certificate is issued. On both dialects, with concurrent orders.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openStore, type Store } from './index.ts';
import { CertificateRepository } from './certificates.ts';
import { AcmeOrderRefused } from './acme-order-checks.ts';
import { ConflictError } from './errors.ts';
import type { StoredAttributes } from './traffic-configs.ts';
import { certificateFacts } from '../certs/x509.ts';
import { TestCa } from '../../test/support/pki.ts';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';

/** Polls until `probe` gives a value (a condition, never a duration); fails after 15 s. */
async function waitForValue<T>(probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) assert.fail('timed out waiting for a condition');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const refusal = async (promise: Promise<unknown>) => {
  try {
    await promise;
  } catch (error) {
    if (error instanceof AcmeOrderRefused) return error.problems;
    throw error;
  }
  assert.fail('the order was accepted');
};

for (const kind of ['sqlite', 'postgres'] as const) {
  describe(`service-issued certificates between tenants (${kind} store)`, () => {
    let dir: string;
    let store: Store;
    let a: string;
    let b: string;
    let ca: TestCa;

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-acme-orders-'));
      store = await openStore({ dataDir: dir, databaseUrl: kind === 'postgres' ? await freshPostgresDatabase() : undefined });
      a = (await store.tenants.create('tenant-a')).id;
      b = (await store.tenants.create('tenant-b')).id;
      ca = await TestCa.create('Orders Test CA');
    });
    after(async () => {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    const issue = async (id: string, domain: string) => {
      const leaf = await ca.issue({ commonName: domain, dnsNames: [domain] });
      await store.certificates.markIssued(
        id,
        { certificatePem: leaf.certificatePem, chainPem: '', sealedPrivateKey: 'sealed' },
        certificateFacts(new crypto.X509Certificate(leaf.certificatePem)),
        new Date(Date.now() + 3600_000).toISOString(),
      );
    };

    it("refuses a domain another tenant's PENDING or ISSUED order claims, pointing at it; the owner may order it again", async () => {
      const pending = await store.certificates.createAcme(a, ['shop.a.test']);
      const problems = await refusal(store.certificates.createAcme(b, ['www.b.test', 'shop.a.test']));
      assert.deepEqual(
        problems.map((problem) => [problem.code, problem.pointer]),
        [['DOMAIN_CLAIMED', '/data/attributes/domains/1']],
      );
      assert.doesNotMatch(problems[0]!.detail, new RegExp(a), "the claiming tenant's id is not shown");
      assert.deepEqual(await store.certificates.list(b), [], 'nothing was written');
      await store.certificates.createAcme(a, ['shop.a.test', 'api.a.test']);

      await issue(pending.id, 'shop.a.test');
      assert.equal((await refusal(store.certificates.createAcme(b, ['shop.a.test'])))[0]!.code, 'DOMAIN_CLAIMED', 'ISSUED claims too');
    });

    it('lets a FAILED or expired certificate claim nothing, nor an uploaded one', async () => {
      const failed = await store.certificates.createAcme(a, ['failed.a.test']);
      await store.certificates.markFailed(failed.id, 'validation failed');
      await store.certificates.createAcme(b, ['failed.a.test']);

      const expired = await store.certificates.createAcme(a, ['expired.a.test']);
      await issue(expired.id, 'expired.a.test');
      await store.db.run('UPDATE certificates SET not_after = ? WHERE id = ?', [new Date(Date.now() - 1000).toISOString(), expired.id]);
      await store.certificates.createAcme(b, ['expired.a.test']);

      // B uploads a self-signed certificate for a name first: A, who controls it, still orders it.
      const selfSigned = await ca.issue({ commonName: 'uploaded.a.test', dnsNames: ['uploaded.a.test'] });
      await store.certificates.createCustomer(
        b,
        { id: CertificateRepository.newId(), certificatePem: selfSigned.certificatePem, chainPem: '', sealedPrivateKey: 'sealed' },
        certificateFacts(new crypto.X509Certificate(selfSigned.certificatePem)),
      );
      await store.certificates.createAcme(a, ['uploaded.a.test']);
    });

    it('lets one of two tenants ordering the same name at once win, never both', async () => {
      for (let round = 0; round < 5; round++) {
        const domain = `race-${round}.test`;
        const outcomes = await Promise.allSettled([store.certificates.createAcme(a, [domain]), store.certificates.createAcme(b, [domain])]);
        assert.equal(outcomes.filter((outcome) => outcome.status === 'fulfilled').length, 1, `round ${round}: ${JSON.stringify(outcomes)}`);
        const lost = outcomes.find((outcome) => outcome.status === 'rejected') as PromiseRejectedResult;
        assert.ok(lost.reason instanceof AcmeOrderRefused);
      }
    });

    it('holds the quota of pending orders, a renewal of a FAILED one included', async () => {
      const tenant = (await store.tenants.create('tenant-quota')).id;
      const limits = { maxPendingOrders: 2 };
      const first = await store.certificates.createAcme(tenant, ['one.quota.test'], limits);
      await store.certificates.createAcme(tenant, ['two.quota.test'], limits);
      const problems = await refusal(store.certificates.createAcme(tenant, ['three.quota.test'], limits));
      assert.deepEqual(
        problems.map((problem) => [problem.code, problem.pointer]),
        [['QUOTA_EXCEEDED', '/data']],
      );
      assert.match(problems[0]!.detail, /2 service-issued certificate orders pending/);
      assert.equal((await store.certificates.list(tenant)).length, 2, 'nothing was written');

      await store.certificates.markFailed(first.id, 'validation failed');
      const third = await store.certificates.createAcme(tenant, ['three.quota.test'], limits);
      // Ordering the FAILED one again would be a third pending order.
      assert.equal((await refusal(store.certificates.requestRenewal(tenant, first.id, limits)))[0]!.code, 'QUOTA_EXCEEDED');
      assert.equal((await store.certificates.get(tenant, first.id))!.status, 'FAILED');
      await store.certificates.markFailed(third.id, 'validation failed');
      assert.equal((await store.certificates.requestRenewal(tenant, first.id, limits))!.status, 'PENDING');
    });

    it('refuses to order a FAILED certificate again once another tenant claims its name', async () => {
      const failed = await store.certificates.createAcme(a, ['moved.test']);
      await store.certificates.markFailed(failed.id, 'validation failed');
      await store.certificates.createAcme(b, ['moved.test']);
      const problems = await refusal(store.certificates.requestRenewal(a, failed.id));
      assert.deepEqual(
        problems.map((problem) => [problem.code, problem.pointer]),
        [['DOMAIN_CLAIMED', '/data/attributes/domains/0']],
      );
    });

    it('keeps serving (and holding the ports of) what a proxy served while the certificate it was PUT with is pending', async () => {
      const backend = { hosts: [{ address: '192.0.2.10', port: 8080 }] };
      const onPort80 = { frontend: { ipv4: '127.0.0.2', port: 80 }, backend } as unknown as StoredAttributes;
      const config = await store.trafficConfigs.create(a, 'httpProxy', onPort80);
      const certificate = await store.certificates.createAcme(a, ['interim.a.test']);
      const onPort443 = {
        frontend: { ipv4: '127.0.0.2', port: 443, certificateId: certificate.id },
        backend,
      } as unknown as StoredAttributes;

      let record = await store.trafficConfigs.replace(config.tenantId, config, onPort443);
      assert.deepEqual(record.attributes, onPort443, 'the configuration is what was PUT');
      assert.deepEqual(record.interimAttributes, onPort80, 'port 80 is served meanwhile');
      assert.deepEqual(
        (await store.trafficConfigs.get(a, config.id))!.interimAttributes,
        onPort80,
        'kept in the store (a restart finds it)',
      );
      const portTaken = (attributes: StoredAttributes) =>
        store.trafficConfigs.create(b, 'httpProxy', attributes).then(
          () => assert.fail('another proxy got the port'),
          (error: unknown) => assert.ok(error instanceof ConflictError && error.code === 'PORT_IN_USE'),
        );
      await portTaken(onPort80);

      // A second change while still pending serves the same interim attributes.
      const patched = { ...onPort443, waf: { mode: 'LOGGING' } } as unknown as StoredAttributes;
      record = await store.trafficConfigs.replace(record.tenantId, record, patched);
      assert.deepEqual(record.interimAttributes, onPort80);

      // Issued: the interim attributes and port 80 are given up.
      await issue(certificate.id, 'interim.a.test');
      record = (await store.trafficConfigs.get(a, config.id))!;
      assert.equal(record.interimAttributes, undefined);
      assert.deepEqual(record.attributes, patched);
      const other = await store.trafficConfigs.create(b, 'httpProxy', onPort80);
      await store.trafficConfigs.delete(b, other.id);

      // With an issued certificate nothing is held back.
      record = await store.trafficConfigs.replace(record.tenantId, record, onPort443);
      assert.equal(record.interimAttributes, undefined);
    });

    it('ends a PENDING claim after its time: the name is free, the stale order FAILED; a running attempt keeps it', async () => {
      const short = { claimSeconds: 1 };
      const stale = await store.certificates.createAcme(a, ['claim-ends.a.test'], short);
      assert.ok(stale.acme?.claimUntil, 'the claim has an end');
      assert.equal((await refusal(store.certificates.createAcme(b, ['claim-ends.a.test'])))[0]!.code, 'DOMAIN_CLAIMED');
      // Wait for the claim's end (a condition, not a duration): then another tenant's order passes.
      const taken = await waitForValue(async () => {
        try {
          return await store.certificates.createAcme(b, ['claim-ends.a.test']);
        } catch (error) {
          if (error instanceof AcmeOrderRefused) return undefined;
          throw error;
        }
      });
      assert.equal(taken.status, 'PENDING');
      const given = (await store.certificates.get(a, stale.id))!;
      assert.equal(given.status, 'FAILED');
      assert.match(given.statusDetail ?? '', /claim on the names ended/);
      assert.deepEqual(
        await store.certificates.dueForAcme(new Date().toISOString(), 100).then((due) => due.filter((r) => r.id === stale.id)),
        [],
      );

      // Past its end, an order an attempt is working on (its lease held) keeps its claim.
      const leased = await store.certificates.createAcme(a, ['claim-leased.a.test'], short);
      assert.ok(
        await store.certificates.claimAcme(leased.id, 'node-1', new Date(Date.now() + 600_000).toISOString(), new Date().toISOString()),
      );
      const claimEnd = Date.parse(leased.acme!.claimUntil!);
      await waitForValue(async () => Date.now() > claimEnd + 10 || undefined);
      assert.deepEqual(await store.certificates.expireStaleOrders(), []);
      assert.equal((await refusal(store.certificates.createAcme(b, ['claim-leased.a.test'])))[0]!.code, 'DOMAIN_CLAIMED');
      // The attempt ends without a certificate: the order is stale now, and the next sweep gives it up.
      await store.certificates.releaseAcme(leased.id, 'node-1');
      assert.deepEqual(await store.certificates.expireStaleOrders(), [leased.id]);
      assert.equal((await store.certificates.get(a, leased.id))!.status, 'FAILED');

      // Ordering a FAILED one again is a new claim, with a new end.
      const again = await store.certificates.requestRenewal(a, leased.id, { claimSeconds: 3600 });
      assert.equal(again?.status, 'PENDING');
      assert.ok(Date.parse(again!.acme!.claimUntil!) > Date.now() + 3000_000);
    });

    it('keeps the interim attributes of a FAILED certificate until the proxy is changed again', async () => {
      const backend = { hosts: [{ address: '192.0.2.10', port: 8080 }] };
      const onPort80 = { frontend: { ipv4: '127.0.0.3', port: 80 }, backend } as unknown as StoredAttributes;
      const config = await store.trafficConfigs.create(a, 'httpProxy', onPort80);
      const certificate = await store.certificates.createAcme(a, ['failing.a.test']);
      const onPort443 = {
        frontend: { ipv4: '127.0.0.3', port: 443, certificateId: certificate.id },
        backend,
      } as unknown as StoredAttributes;
      let record = await store.trafficConfigs.replace(config.tenantId, config, onPort443);
      await store.certificates.markFailed(certificate.id, 'http-01 validation of failing.a.test failed');
      assert.deepEqual((await store.trafficConfigs.get(a, config.id))!.interimAttributes, onPort80, 'FAILED: the proxy stays as it was');
      // Back to plain HTTP: nothing to wait for, nothing held.
      record = await store.trafficConfigs.replace(record.tenantId, record, onPort80);
      assert.equal(record.interimAttributes, undefined);
      const onPort8443 = { frontend: { ipv4: '127.0.0.3', port: 8443 }, backend } as unknown as StoredAttributes;
      record = await store.trafficConfigs.replace(record.tenantId, record, onPort8443);
      await store.trafficConfigs.create(b, 'httpProxy', onPort80);
    });
  });
}
