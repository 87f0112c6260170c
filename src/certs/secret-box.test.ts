/**
 * Sealed private keys are bound to their row: a sealed value copied into another row (another
 * certificate, another tenant, another table) does not open there; a shortened tag is refused;
 * values in the unbound v1 format still open once, through the start-up upgrade, and are then
 * bound to the row that holds them.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SecretBox, SealedSecretError, acmeAccountKeyBinding, certificateKeyBinding, signingKeyBinding } from './secret-box.ts';
import { upgradeSealedSecrets } from './upgrade-sealed-secrets.ts';
import { openStore, type Store } from '../store/index.ts';
import { CertificateRepository } from '../store/certificates.ts';

const KEY_PEM = '-----BEGIN PRIVATE KEY-----\nnot really a key, any text seals\n-----END PRIVATE KEY-----\n';
const FACTS = {
  subject: 'CN=a.example.test',
  subjectAltNames: ['a.example.test'],
  issuer: 'CN=Test CA',
  notBefore: '2024-01-01T00:00:00.000Z',
  notAfter: '2099-01-01T00:00:00.000Z',
  fingerprint: 'AA:BB',
};

/**
 * A value in the unbound v1 format older releases wrote (`v1:iv:tag:body`, base64, AES-256-GCM with
 * a 12-byte IV and no associated data): written here, as the product no longer writes it.
 */
function sealLegacy(key: Buffer, plaintext: string): string {
  const iv = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', key, iv);
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return ['v1', iv.toString('base64'), cipher.getAuthTag().toString('base64'), body.toString('base64')].join(':');
}

describe('secret box', () => {
  const key = crypto.randomBytes(32);
  const box = new SecretBox(key);
  const row = { id: crypto.randomUUID(), tenantId: crypto.randomUUID() };

  it('opens a value for the row it was sealed for', () => {
    const sealed = box.seal(KEY_PEM, certificateKeyBinding(row));
    assert.ok(sealed.startsWith('v2:'));
    assert.ok(!sealed.includes('PRIVATE KEY'));
    assert.equal(box.open(sealed, certificateKeyBinding(row)), KEY_PEM);
    const [, , tag] = sealed.split(':');
    assert.equal(Buffer.from(tag!, 'base64').length, 16, 'a full 16-byte tag');
  });

  it('refuses the value in any other row: another id, another tenant, another table', () => {
    const sealed = box.seal(KEY_PEM, certificateKeyBinding(row));
    for (const other of [
      certificateKeyBinding({ ...row, id: crypto.randomUUID() }),
      certificateKeyBinding({ ...row, tenantId: crypto.randomUUID() }),
      { table: 'certificates' as const, id: row.id },
      signingKeyBinding(row.id),
      acmeAccountKeyBinding(row.id, row.tenantId),
    ]) {
      assert.throws(() => box.open(sealed, other), SealedSecretError, JSON.stringify(other));
    }
    // Parts cannot shift between fields to forge the same associated data.
    const shifted = box.seal(KEY_PEM, { table: 'certificates', id: 'b', tenantId: 'a' });
    assert.throws(() => box.open(shifted, { table: 'certificates', id: 'a\0b' }), SealedSecretError);
  });

  it('refuses a shortened tag, an altered body, another master key and garbage', () => {
    const binding = certificateKeyBinding(row);
    const sealed = box.seal(KEY_PEM, binding);
    const [version, iv, tag, body] = sealed.split(':') as [string, string, string, string];
    const shortTag = [version, iv, Buffer.from(tag, 'base64').subarray(0, 4).toString('base64'), body].join(':');
    assert.throws(() => box.open(shortTag, binding), SealedSecretError);
    const flipped = Buffer.from(body, 'base64');
    flipped[0] = flipped[0]! ^ 1;
    assert.throws(() => box.open([version, iv, tag, flipped.toString('base64')].join(':'), binding), SealedSecretError);
    assert.throws(() => new SecretBox(crypto.randomBytes(32)).open(sealed, binding), SealedSecretError);
    for (const garbage of ['', 'v2', 'v2:::', 'v3:a:b:c', KEY_PEM]) assert.throws(() => box.open(garbage, binding), SealedSecretError);
  });

  it('does not open an unbound (v1) value directly, but upgrades it for its row', () => {
    const legacy = sealLegacy(key, KEY_PEM);
    assert.ok(SecretBox.isLegacy(legacy));
    assert.throws(() => box.open(legacy, certificateKeyBinding(row)), SealedSecretError);
    const upgraded = box.upgrade(legacy, certificateKeyBinding(row));
    assert.ok(upgraded.startsWith('v2:'));
    assert.equal(box.open(upgraded, certificateKeyBinding(row)), KEY_PEM);
    assert.throws(() => box.open(upgraded, certificateKeyBinding({ ...row, id: crypto.randomUUID() })), SealedSecretError);
    // A v1 value with a shortened tag is refused by the upgrade as well.
    const [version, iv, tag, body] = legacy.split(':') as [string, string, string, string];
    const shortTag = [version, iv, Buffer.from(tag, 'base64').subarray(0, 8).toString('base64'), body].join(':');
    assert.throws(() => box.upgrade(shortTag, certificateKeyBinding(row)), SealedSecretError);
  });
});

describe('sealed keys in the store', () => {
  let dir: string;
  let store: Store;
  const key = crypto.randomBytes(32);
  const box = new SecretBox(key);
  const silent = { info: () => {}, error: () => {} };

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-secret-box-'));
    store = await openStore({ dataDir: dir });
  });
  after(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const customerCertificate = async (tenantId: string) => {
    const id = CertificateRepository.newId();
    return store.certificates.createCustomer(
      tenantId,
      { id, certificatePem: 'PEM', chainPem: '', sealedPrivateKey: box.seal(KEY_PEM, certificateKeyBinding({ id, tenantId })) },
      FACTS,
    );
  };

  it("a key moved into another tenant's certificate row does not open there", async () => {
    const a = await store.tenants.create('a');
    const b = await store.tenants.create('b');
    const ofA = await customerCertificate(a.id);
    const ofB = await customerCertificate(b.id);
    await store.db.run('UPDATE certificates SET private_key = ? WHERE id = ?', [ofA.sealedPrivateKey, ofB.id]);
    const moved = (await store.certificates.get(b.id, ofB.id))!;
    assert.throws(() => box.open(moved.sealedPrivateKey!, certificateKeyBinding(moved)), SealedSecretError);
    assert.equal(box.open(ofA.sealedPrivateKey!, certificateKeyBinding(ofA)), KEY_PEM);
  });

  it('upgrades every v1 value at start, row by row, and leaves one that does not open as it was', async () => {
    const tenant = await store.tenants.create('legacy');
    const certificate = await customerCertificate(tenant.id);
    const legacyCertificate = sealLegacy(key, 'certificate key');
    const legacySigning = sealLegacy(key, 'signing key');
    const legacyAccount = sealLegacy(key, 'account key');
    const foreign = sealLegacy(crypto.randomBytes(32), 'sealed under another master key');
    await store.db.run('UPDATE certificates SET private_key = ? WHERE id = ?', [legacyCertificate, certificate.id]);
    await store.signingKeys.insertFirst({
      kid: 'kid-1',
      publicJwk: '{}',
      sealedPrivateKey: legacySigning,
      createdAt: new Date().toISOString(),
    });
    await store.acmeAccounts.add({
      directoryUrl: 'https://acme.example.test/directory',
      tenantId: tenant.id,
      email: null,
      accountUrl: 'https://acme.example.test/acct/1',
      sealedPrivateKey: legacyAccount,
    });
    await store.acmeAccounts.add({
      directoryUrl: 'https://other.example.test/directory',
      tenantId: tenant.id,
      email: null,
      accountUrl: 'https://other.example.test/acct/1',
      sealedPrivateKey: foreign,
    });

    const result = await upgradeSealedSecrets(store, box, silent);
    assert.deepEqual(result, { upgraded: 3, failed: 1 });

    const upgradedCertificate = (await store.certificates.get(tenant.id, certificate.id))!;
    assert.equal(box.open(upgradedCertificate.sealedPrivateKey!, certificateKeyBinding(upgradedCertificate)), 'certificate key');
    const [signing] = await store.signingKeys.list();
    assert.equal(box.open(signing!.sealedPrivateKey, signingKeyBinding('kid-1')), 'signing key');
    const account = (await store.acmeAccounts.get('https://acme.example.test/directory', tenant.id))!;
    assert.equal(box.open(account.sealedPrivateKey, acmeAccountKeyBinding(account.directoryUrl, tenant.id)), 'account key');
    assert.equal(
      (await store.acmeAccounts.get('https://other.example.test/directory', tenant.id))!.sealedPrivateKey,
      foreign,
      'nothing stored is lost',
    );

    // Idempotent: a second start (or a second node) finds nothing more to do.
    assert.deepEqual(await upgradeSealedSecrets(store, box, silent), { upgraded: 0, failed: 1 });
  });
});
