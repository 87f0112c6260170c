/**
 * Backup and restore of the SQLite store (backup.ts), on real files: a backup taken while the store
 * is open and written to, restored into a new data folder, holds the same rows and its private keys
 * open with the master key; what a restore refuses, and why.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { loadSettings, type Settings } from '../config/settings.ts';
import { openStore, type Store } from '../store/index.ts';
import { SecretBox, certificateKeyBinding } from '../certs/secret-box.ts';
import { checkCustomerCertificate } from '../certs/x509.ts';
import { LATEST_MIGRATION } from '../store/migrations.ts';
import { selfSigned } from '../../test/support/pki.ts';
import { backupStore, restoreStore } from './backup.ts';
import { CliError } from './output.ts';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-backup-'));
const settingsFor = (dataDir: string, env: Record<string, string> = {}): Settings =>
  loadSettings({ dataDir }, { TPS_ACME_DIRECTORY_URL: 'off', ...env });
const refusal = (code: string) => (error: unknown) => error instanceof CliError && error.errors[0]?.code === code;

describe('tps backup and tps restore (SQLite)', () => {
  const source = settingsFor(path.join(root, 'live'));
  let store: Store;
  let certificateId: string;
  let tenantId: string;
  const backupFile = path.join(root, 'backups', 'tps.backup');

  before(async () => {
    store = await openStore(source);
    const box = SecretBox.fromSettings(source);
    const tenant = await store.tenants.create('acme');
    await store.serviceAccounts.create(tenant.id, 'ci', ['read', 'write']);
    const pem = await selfSigned({ commonName: 'www.example.com', dnsNames: ['www.example.com'] });
    const checked = checkCustomerCertificate({ certificate: pem.certificatePem, privateKey: pem.privateKeyPem });
    certificateId = crypto.randomUUID();
    const sealedPrivateKey = box.seal(checked.privateKeyPem, certificateKeyBinding({ id: certificateId, tenantId: tenant.id }));
    await store.certificates.createCustomer(
      tenant.id,
      { id: certificateId, certificatePem: checked.certificatePem, chainPem: checked.chainPem, sealedPrivateKey },
      checked.facts,
    );
    tenantId = tenant.id;
    await store.trafficConfigs.create(tenant.id, 'l4Proxy', {
      frontend: { ipv4: '127.0.0.2', port: 2222 },
      backend: { hosts: [{ address: '192.0.2.1', port: 22 }], deliveryMethod: 'LEAST_CONNECTIONS' },
      protocols: ['TCP'],
    } as never);
  });
  after(() => store.close());

  it('copies the open store, for its owner only, and says where the master key is', async () => {
    // A write in flight on the live connection: the copy is one consistent snapshot either way.
    const write = store.tenants.create('written during the backup');
    const report = await backupStore(source, backupFile, { force: false });
    await write;
    assert.equal(report.schemaVersion, LATEST_MIGRATION);
    assert.ok(report.counts.tenants === 1 || report.counts.tenants === 2);
    assert.equal(report.counts.certificates, 1);
    assert.equal(report.masterKey.source, 'file');
    assert.match(report.masterKey.fingerprint ?? '', /^[0-9a-f]{16}$/);
    assert.equal(fs.statSync(backupFile).mode & 0o777, 0o600);
    await assert.rejects(backupStore(source, backupFile, { force: false }), refusal('FILE_EXISTS'));
    await backupStore(source, backupFile, { force: true });
  });

  it('restores into a new data folder: the same rows, the private keys open with the master key', async () => {
    const target = settingsFor(path.join(root, 'restored'));
    await assert.rejects(restoreStore(target, backupFile, { force: false }), refusal('MASTER_KEY_MISSING'));
    fs.mkdirSync(target.dataDir, { recursive: true });
    fs.copyFileSync(path.join(source.dataDir, 'master.key'), path.join(target.dataDir, 'master.key'));
    const report = await restoreStore(target, backupFile, { force: false });
    assert.equal(report.privateKeysChecked, 1, "the certificate's key");
    const restored = await openStore(target);
    try {
      assert.deepEqual(
        (await restored.tenants.list()).map((tenant) => tenant.name).sort(),
        (await store.tenants.list()).map((tenant) => tenant.name).sort(),
      );
      const [tenant] = await restored.tenants.list();
      const certificate = await restored.certificates.get(tenant!.id, certificateId);
      assert.ok(certificate);
      const sealed = (await restored.db.one<{ private_key: string }>('SELECT private_key FROM certificates WHERE id = ?', [certificateId]))!
        .private_key;
      assert.match(
        SecretBox.fromSettings(target).open(sealed, certificateKeyBinding({ id: certificateId, tenantId })),
        /BEGIN PRIVATE KEY/,
      );
    } finally {
      await restored.close();
    }
    // Once restored, the store is not replaced again without --force.
    await assert.rejects(restoreStore(target, backupFile, { force: false }), refusal('STORE_NOT_EMPTY'));
    await restoreStore(target, backupFile, { force: true });
  });

  it('refuses a store that a process has open, even without tenants', async () => {
    const target = settingsFor(path.join(root, 'open'));
    fs.mkdirSync(target.dataDir, { recursive: true });
    fs.copyFileSync(path.join(source.dataDir, 'master.key'), path.join(target.dataDir, 'master.key'));
    const running = await openStore(target);
    try {
      await assert.rejects(restoreStore(target, backupFile, { force: false }), refusal('STORE_IN_USE'));
    } finally {
      await running.close();
    }
    await restoreStore(target, backupFile, { force: false });
  });

  it('refuses another master key, a newer schema and a file that is not a backup', async () => {
    const otherKey = settingsFor(path.join(root, 'other-key'), { TPS_MASTER_KEY: crypto.randomBytes(32).toString('base64') });
    await assert.rejects(restoreStore(otherKey, backupFile, { force: false }), refusal('MASTER_KEY_MISMATCH'));
    assert.equal(fs.existsSync(path.join(otherKey.dataDir, 'tps.sqlite')), false, 'nothing was written');

    const newer = path.join(root, 'newer.backup');
    fs.copyFileSync(backupFile, newer);
    const db = new DatabaseSync(newer);
    db.prepare('INSERT INTO schema_migrations (id, name, applied_at) VALUES (?, ?, ?)').run(
      LATEST_MIGRATION + 1,
      'from the future',
      new Date().toISOString(),
    );
    db.close();
    await assert.rejects(restoreStore(settingsFor(path.join(root, 'newer')), newer, { force: false }), refusal('NEWER_SCHEMA'));

    const text = path.join(root, 'not-a-backup');
    fs.writeFileSync(text, 'hello');
    await assert.rejects(restoreStore(settingsFor(path.join(root, 'text')), text, { force: false }), refusal('NOT_A_BACKUP'));
  });

  it('refuses to back up a store that does not exist', async () => {
    await assert.rejects(
      backupStore(settingsFor(path.join(root, 'nothing')), path.join(root, 'x.backup'), { force: false }),
      refusal('NO_STORE'),
    );
  });
});
