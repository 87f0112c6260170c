/**
 * Every write of the store is scoped by tenant: a tenant's call on another tenant's id changes
 * nothing of it (its configuration, bindings, references, edge status, certificates, CA
 * certificates, service accounts), and a refusal names nothing of it. Quotas hold, also for
 * concurrent creates at the last slot. On both dialects.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openStore, type Store } from './index.ts';
import { CertificateRepository } from './certificates.ts';
import { ConflictError } from './errors.ts';
import { QUOTA_EXCEEDED } from './quotas.ts';
import type { StoredAttributes } from './traffic-configs.ts';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';

const FACTS = {
  subject: 'CN=a.example.test',
  subjectAltNames: ['a.example.test'],
  issuer: 'CN=Test CA',
  notBefore: '2024-01-01T00:00:00.000Z',
  notAfter: '2099-01-01T00:00:00.000Z',
  fingerprint: 'AA:BB',
};

const httpAttributes = (port: number, refs: { certificateId?: string; caCertificateId?: string } = {}) =>
  ({
    frontend: {
      ipv4: '127.0.9.1',
      port,
      ...(refs.certificateId && { certificateId: refs.certificateId }),
      ...(refs.caCertificateId && {
        clientCertificateVerification: { mode: 'VERIFY_AND_REJECT', caCertificateIds: [refs.caCertificateId], verifyCrl: false },
      }),
    },
    backend: { hosts: [{ address: '127.0.9.10', port: 8080 }], deliveryMethod: 'LEAST_CONNECTIONS' },
  }) as unknown as StoredAttributes;

/** Every row that belongs to the tenant or hangs off one of its configurations, as text. */
async function rowsOf(store: Store, tenantId: string): Promise<string> {
  const configs = `(SELECT id FROM traffic_configs WHERE tenant_id = ?)`;
  const parts = await Promise.all([
    store.db.all('SELECT * FROM traffic_configs WHERE tenant_id = ? ORDER BY id', [tenantId]),
    store.db.all(`SELECT * FROM frontend_bindings WHERE config_id IN ${configs} ORDER BY ip, port, protocol`, [tenantId]),
    store.db.all(`SELECT * FROM config_references WHERE config_id IN ${configs} ORDER BY config_id, ref_id`, [tenantId]),
    store.db.all(`SELECT * FROM edge_status WHERE config_id IN ${configs} ORDER BY node_id, config_id`, [tenantId]),
    store.db.all('SELECT * FROM certificates WHERE tenant_id = ? ORDER BY id', [tenantId]),
    store.db.all('SELECT * FROM ca_certificates WHERE tenant_id = ? ORDER BY id', [tenantId]),
    store.db.all('SELECT * FROM service_accounts WHERE tenant_id = ? ORDER BY id', [tenantId]),
  ]);
  return JSON.stringify(parts);
}

for (const dialect of ['sqlite', 'postgres'] as const) {
  describe(`tenant-scoped writes (${dialect})`, () => {
    let dir: string;
    let store: Store;

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-scoping-'));
      const databaseUrl = dialect === 'postgres' ? await freshPostgresDatabase() : undefined;
      store = await openStore({ dataDir: dir, databaseUrl, quotaProxies: 6, quotaCertificates: 4, quotaCaCertificates: 3 });
    });
    after(async () => {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    /** Tenant B with a proxy that uses a certificate and a CA certificate, reported ACTIVE by an edge node. */
    async function victim(port: number) {
      const tenant = await store.tenants.create(`victim-${port}`);
      const id = CertificateRepository.newId();
      const certificate = await store.certificates.createCustomer(
        tenant.id,
        { id, certificatePem: 'PEM', chainPem: '', sealedPrivateKey: 'v2:sealed' },
        FACTS,
      );
      const ca = await store.caCertificates.create(tenant.id, [
        { certificate: 'PEM', subject: 'CN=CA', fingerprint: 'CC', notAfter: FACTS.notAfter },
      ]);
      const config = await store.trafficConfigs.create(
        tenant.id,
        'httpProxy',
        httpAttributes(port, { certificateId: certificate.id, caCertificateId: ca.id }),
      );
      await store.edgeStatus.heartbeat('node-1', 'TST');
      await store.edgeStatus.report('node-1', config.id, config.revision, 'ACTIVE', null);
      const account = await store.serviceAccounts.create(tenant.id, 'ci', ['read', 'write']);
      return { tenant, certificate, ca, config, account };
    }

    it("another tenant's delete, replace and revoke change nothing of the victim's", async () => {
      const b = await victim(8001);
      const attacker = await store.tenants.create('attacker');
      const before = await rowsOf(store, b.tenant.id);
      const revision = await store.revision();

      assert.equal(await store.trafficConfigs.delete(attacker.id, b.config.id), false);
      await assert.rejects(store.trafficConfigs.replace(attacker.id, b.config, httpAttributes(8002)), ConflictError);
      // Even with the victim's own record in hand (read anyhow), the write is scoped by the caller's tenant.
      await assert.rejects(
        store.trafficConfigs.replace(attacker.id, { ...b.config, tenantId: attacker.id }, httpAttributes(8003)),
        ConflictError,
      );
      assert.deepEqual(await store.certificates.delete(attacker.id, b.certificate.id), { deleted: false, notFound: true });
      assert.deepEqual(await store.caCertificates.delete(attacker.id, b.ca.id), { deleted: false, notFound: true });
      assert.equal(await store.serviceAccounts.revoke(attacker.id, b.account.clientId), undefined);
      assert.equal(await store.certificates.requestRenewal(attacker.id, b.certificate.id), undefined);

      assert.equal(await rowsOf(store, b.tenant.id), before, 'nothing of the victim changed');
      assert.equal(await store.revision(), revision, 'the edge has nothing to reload');
      // The port is still the victim's: the attacker cannot create a proxy on it.
      await assert.rejects(
        store.trafficConfigs.create(attacker.id, 'httpProxy', httpAttributes(8001)),
        (error: ConflictError) => error.code === 'PORT_IN_USE',
      );
    });

    it('a delete refused for references names only configurations of the deleting tenant', async () => {
      const b = await victim(8011);
      const intruder = await store.tenants.create('intruder');
      // A reference from another tenant's configuration (the API never lets one be made): it keeps the
      // certificate, but its id is not handed to the certificate's owner.
      const foreign = await store.trafficConfigs.create(intruder.id, 'httpProxy', httpAttributes(8012));
      await store.db.run('INSERT INTO config_references (config_id, ref_kind, ref_id) VALUES (?, ?, ?)', [
        foreign.id,
        'certificate',
        b.certificate.id,
      ]);
      const outcome = await store.certificates.delete(b.tenant.id, b.certificate.id);
      assert.deepEqual(outcome, { deleted: false, notFound: false, referencedBy: [b.config.id] });
      assert.ok(!JSON.stringify(outcome).includes(foreign.id));

      // Once its own proxy is gone, only the foreign reference is left: still kept, named to no one.
      assert.equal(await store.trafficConfigs.delete(b.tenant.id, b.config.id), true);
      assert.deepEqual(await store.certificates.delete(b.tenant.id, b.certificate.id), {
        deleted: false,
        notFound: false,
        referencedBy: [],
      });
      assert.deepEqual(await store.caCertificates.delete(b.tenant.id, b.ca.id), { deleted: true });
    });

    it("the owner's delete removes its configuration with its bindings, references and status", async () => {
      const b = await victim(8021);
      assert.equal(await store.trafficConfigs.delete(b.tenant.id, b.config.id), true);
      const left = JSON.parse(await rowsOf(store, b.tenant.id)) as unknown[][];
      assert.deepEqual(left.slice(0, 4), [[], [], [], []]);
      assert.deepEqual(await store.certificates.delete(b.tenant.id, b.certificate.id), { deleted: true });
    });

    it('keeps the binding since-revision across unrelated changes, and moves it with the port', async () => {
      const tenant = await store.tenants.create('since');
      const created = await store.trafficConfigs.create(tenant.id, 'httpProxy', httpAttributes(8031));
      const key = '127.0.9.1|8031|TCP';
      assert.deepEqual(created.bindingSince, { [key]: created.revision });
      const touched = await store.trafficConfigs.replace(tenant.id, created, {
        ...httpAttributes(8031),
        waf: { mode: 'LOGGING', paranoiaLevel: 2 },
      } as unknown as StoredAttributes);
      assert.ok(touched.revision > created.revision);
      assert.deepEqual((await store.trafficConfigs.get(tenant.id, created.id))!.bindingSince, { [key]: created.revision });
      const moved = await store.trafficConfigs.replace(tenant.id, touched, httpAttributes(8032));
      assert.deepEqual((await store.trafficConfigs.get(tenant.id, created.id))!.bindingSince, { '127.0.9.1|8032|TCP': moved.revision });
    });

    it('holds each quota with 409 QUOTA_EXCEEDED at /data, per tenant', async () => {
      const tenant = await store.tenants.create('quota');
      const other = await store.tenants.create('quota-other');
      const isQuota = (error: ConflictError) =>
        error.code === QUOTA_EXCEEDED && error.pointer === '/data' && /quota is 6/.test(error.message);
      for (let i = 0; i < 6; i++) await store.trafficConfigs.create(tenant.id, 'httpProxy', httpAttributes(8100 + i));
      await assert.rejects(store.trafficConfigs.create(tenant.id, 'httpProxy', httpAttributes(8110)), isQuota);
      await store.trafficConfigs.create(other.id, 'httpProxy', httpAttributes(8111));

      for (let i = 0; i < 4; i++) await store.certificates.createAcme(tenant.id, [`d${i}.example.test`]);
      await assert.rejects(
        store.certificates.createAcme(tenant.id, ['e.example.test']),
        (error: ConflictError) => error.code === QUOTA_EXCEEDED,
      );
      const id = CertificateRepository.newId();
      await assert.rejects(
        store.certificates.createCustomer(tenant.id, { id, certificatePem: 'PEM', chainPem: '', sealedPrivateKey: 'v2:x' }, FACTS),
        (error: ConflictError) => error.code === QUOTA_EXCEEDED,
      );
      assert.equal(await store.certificates.get(tenant.id, id), undefined);

      for (let i = 0; i < 3; i++) await store.caCertificates.create(tenant.id, []);
      await assert.rejects(store.caCertificates.create(tenant.id, []), (error: ConflictError) => error.code === QUOTA_EXCEEDED);
      assert.equal((await store.caCertificates.list(tenant.id)).length, 3);
    });

    it('lets exactly one of several concurrent creates take the last slot', async () => {
      const tenant = await store.tenants.create('race');
      for (let i = 0; i < 5; i++) await store.trafficConfigs.create(tenant.id, 'httpProxy', httpAttributes(8200 + i));
      const outcomes = await Promise.allSettled(
        Array.from({ length: 8 }, (_, i) => store.trafficConfigs.create(tenant.id, 'httpProxy', httpAttributes(8210 + i))),
      );
      assert.equal(outcomes.filter((outcome) => outcome.status === 'fulfilled').length, 1);
      for (const outcome of outcomes) {
        if (outcome.status === 'rejected') assert.equal((outcome.reason as ConflictError).code, QUOTA_EXCEEDED);
      }
      assert.equal((await store.trafficConfigs.list(tenant.id)).length, 6);

      const certificates = await Promise.allSettled(
        Array.from({ length: 8 }, (_, i) => store.certificates.createAcme(tenant.id, [`r${i}.example.test`])),
      );
      assert.equal(certificates.filter((outcome) => outcome.status === 'fulfilled').length, 4);
      assert.equal((await store.certificates.list(tenant.id)).length, 4);
    });
  });
}

describe('service accounts', () => {
  it('the operator CLI may revoke any account; a tenant only its own', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-scoping-'));
    const store = await openStore({ dataDir: dir });
    try {
      const a = await store.tenants.create('a');
      const b = await store.tenants.create('b');
      const account = await store.serviceAccounts.create(b.id, 'ci', ['read']);
      assert.equal(await store.serviceAccounts.revoke(a.id, account.clientId), undefined);
      assert.equal((await store.serviceAccounts.getByClientId(account.clientId))!.revokedAt, null);
      assert.ok((await store.serviceAccounts.revoke(undefined, account.clientId))!.revokedAt);
    } finally {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
