/**
 * The edge's side of the ACME challenges: HTTP-01 key authorizations and TLS-ALPN-01 certificates
 * looked up in the store (the TLS-ALPN dispatch on a listener: src/edge/http/tls-alpn-acme.test.ts).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto, { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import acme from 'acme-client';
import * as x509 from '@peculiar/x509';
import { openStore, type Store } from '../store/index.ts';
import { AcmeChallengeResponder, ACME_IDENTIFIER_OID, tlsAlpnCertificate } from './acme-challenges.ts';

const inOneHour = () => new Date(Date.now() + 3600_000).toISOString();
/** The tenant that ordered, and another one (whose proxies must never answer its challenges). */
const ORDERING = 'tenant-ordering';
const OTHER = 'tenant-other';

describe('ACME challenge answers from the store', () => {
  let dir: string;
  let store: Store;
  let responder: AcmeChallengeResponder;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-acme-challenges-'));
    store = await openStore({ dataDir: dir });
    responder = new AcmeChallengeResponder(store.acmeChallenges);
  });
  after(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('answers an HTTP-01 token for its domain only, and not once it expired', async () => {
    await store.acmeChallenges.put({
      type: 'http-01',
      token: 'tok-1',
      tenantId: ORDERING,
      domain: 'www.example.test',
      keyAuthorization: 'tok-1.thumbprint',
      certificateId: 'c1',
      expiresAt: inOneHour(),
    });
    assert.equal(await responder.challengeResponse('tok-1', 'www.example.test', ORDERING), 'tok-1.thumbprint');
    assert.equal(
      await responder.challengeResponse('tok-1', 'WWW.Example.Test.', ORDERING),
      'tok-1.thumbprint',
      'host compared case-insensitively',
    );
    assert.equal(await responder.challengeResponse('tok-1', undefined, ORDERING), 'tok-1.thumbprint', 'no host given: token alone');
    assert.equal(await responder.challengeResponse('tok-1', 'other.example.test', ORDERING), undefined);
    assert.equal(await responder.challengeResponse('unknown', undefined, ORDERING), undefined);
    assert.equal(
      await responder.challengeResponse('tok-1', 'www.example.test', OTHER),
      undefined,
      "another tenant's proxy does not answer it",
    );

    await store.acmeChallenges.put({
      type: 'http-01',
      token: 'tok-old',
      tenantId: ORDERING,
      domain: 'www.example.test',
      keyAuthorization: 'tok-old.thumbprint',
      certificateId: 'c1',
      expiresAt: new Date(Date.now() - 1000).toISOString(),
    });
    assert.equal(await responder.challengeResponse('tok-old', undefined, ORDERING), undefined);
  });

  it('finds a challenge written after its last look (a miss refreshes the snapshot)', async () => {
    assert.equal(await responder.challengeResponse('tok-late', undefined, ORDERING), undefined);
    await store.acmeChallenges.put({
      type: 'http-01',
      token: 'tok-late',
      tenantId: ORDERING,
      domain: 'late.example.test',
      keyAuthorization: 'tok-late.thumbprint',
      certificateId: 'c2',
      expiresAt: inOneHour(),
    });
    const found = await responder.challengeResponse('tok-late', undefined, ORDERING);
    assert.equal(found, 'tok-late.thumbprint');
    await store.acmeChallenges.deleteForCertificate('c2');
  });

  it('presents the current TLS-ALPN-01 challenge of a domain, not the one it replaced a moment ago', async () => {
    const put = (keyAuthorization: string) =>
      store.acmeChallenges.put({
        type: 'tls-alpn-01',
        token: keyAuthorization,
        tenantId: ORDERING,
        domain: 'again.example.test',
        keyAuthorization,
        certificateId: 'c3',
        expiresAt: inOneHour(),
      });
    await put('first.thumbprint');
    const first = await responder.alpnChallengeCertificate('again.example.test', ORDERING);
    assert.equal(acme.crypto.isAlpnCertificateAuthorizationValid(first!.certPem, 'first.thumbprint'), true);
    assert.equal(
      await responder.alpnChallengeCertificate('again.example.test', OTHER),
      undefined,
      "another tenant's proxy does not present it",
    );
    // The order is retried at once (well within the snapshot's maxAgeMs): new challenge, same domain.
    await store.acmeChallenges.deleteForCertificate('c3');
    await put('second.thumbprint');
    const second = await responder.alpnChallengeCertificate('again.example.test', ORDERING);
    assert.equal(acme.crypto.isAlpnCertificateAuthorizationValid(second!.certPem, 'second.thumbprint'), true);
    await store.acmeChallenges.deleteForCertificate('c3');
  });

  it('builds the TLS-ALPN-01 certificate RFC 8737 asks for', async () => {
    const keyAuthorization = 'alpn-token.thumbprint';
    const { certPem, keyPem } = await tlsAlpnCertificate('alpn.example.test', keyAuthorization);
    const certificate = new X509Certificate(certPem);
    assert.equal(certificate.subjectAltName, 'DNS:alpn.example.test');
    assert.ok(certificate.checkPrivateKey(crypto.createPrivateKey(keyPem)));
    // acme-client's own check of the acmeIdentifier extension (critical, SHA-256 of the key authorization).
    assert.equal(acme.crypto.isAlpnCertificateAuthorizationValid(certPem, keyAuthorization), true);
    assert.equal(acme.crypto.isAlpnCertificateAuthorizationValid(certPem, 'another.thumbprint'), false);
    const parsed = new x509.X509Certificate(certPem);
    assert.equal(parsed.getExtension(ACME_IDENTIFIER_OID)?.critical, true);
  });
});
