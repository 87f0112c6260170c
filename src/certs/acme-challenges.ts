/**
 * The answers to a CA's validation requests, for every edge node: the ACME service writes each
 * pending challenge to the store (`acme_challenges`), and any node's proxies answer from there.
 *
 * - HTTP-01 (RFC 8555 section 8.3): `challengeResponse(token, host, tenantId)` gives the key
 *   authorization the proxy returns at `GET /.well-known/acme-challenge/<token>` on port 80.
 * - TLS-ALPN-01 (RFC 8737): `alpnChallengeCertificate(servername, tenantId)` gives the self-signed
 *   certificate with the critical acmeIdentifier extension (SHA-256 of the key authorization) the
 *   proxy's TLS listener presents to a client that negotiates ALPN `acme-tls/1` (see acme-tls-alpn.ts).
 *
 * `tenantId` is the tenant of the proxy that received the validation request: a challenge is
 * answered only for the tenant that placed the order, so a tenant cannot obtain a certificate for a
 * name that points at another tenant's proxy (the CA would otherwise take that proxy's answer as
 * proof of control).
 *
 * Lookups read a snapshot of the live challenges: an HTTP-01 hit may come from a snapshot up to
 * `maxAgeMs` old (a token names one challenge only); a miss waits for a snapshot read after the
 * request came (the challenge may be seconds old). A TLS-ALPN-01 lookup always waits for such a
 * snapshot: it goes by domain, and a domain's challenge is replaced when an order is retried or
 * renewed, so a snapshot a second old can hold the previous one, whose certificate the CA refuses.
 * Only CA validators ask for acme-tls/1, so that costs one query per validation. One store query
 * runs at a time and every request waiting shares it, so a flood of requests for unknown tokens
 * (they pass before rate limits and the WAF) cannot pile up queries.
 */
import crypto from 'node:crypto';
// @peculiar/x509 resolves its algorithms through tsyringe, which needs the Reflect metadata polyfill first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { AcmeChallengeRecord, AcmeChallengeRepository } from '../store/acme-challenges.ts';

// `as never`: Node's WebCrypto is the Crypto @peculiar/x509 wants, whichever lib typings are loaded.
x509.cryptoProvider.set(crypto.webcrypto as never);

export interface ChallengeCertificate {
  certPem: string;
  keyPem: string;
}

/** What an edge node needs to answer ACME validations; `AcmeChallengeResponder` implements it. */
export interface AcmeChallengeProvider {
  /** HTTP-01: the key authorization for `token` while `tenantId`'s challenge is pending (for `host`, when given). */
  challengeResponse(token: string, host: string | undefined, tenantId: string): Promise<string | undefined>;
  /** TLS-ALPN-01: the certificate to present for `servername` on an `acme-tls/1` connection to a proxy of `tenantId`. */
  alpnChallengeCertificate(servername: string, tenantId: string): Promise<ChallengeCertificate | undefined>;
}

/** OID of the acmeIdentifier extension (RFC 8737 section 6.1). */
export const ACME_IDENTIFIER_OID = '1.3.6.1.5.5.7.1.31';

export const normalizeDomain = (name: string) => name.trim().toLowerCase().replace(/\.$/, '');

export class AcmeChallengeResponder implements AcmeChallengeProvider {
  readonly #challenges: AcmeChallengeRepository;
  readonly #maxAgeMs: number;
  #snapshot: AcmeChallengeRecord[] = [];
  /** When the query behind the snapshot started (performance.now()). */
  #snapshotReadAt = -Infinity;
  #loading: Promise<void> | undefined;
  /** TLS-ALPN-01 certificates already made, by key authorization and domain. */
  readonly #certificates = new Map<string, Promise<ChallengeCertificate>>();

  constructor(challenges: AcmeChallengeRepository, options: { maxAgeMs?: number } = {}) {
    this.#challenges = challenges;
    this.#maxAgeMs = options.maxAgeMs ?? 1000;
  }

  readonly challengeResponse = async (token: string, host: string | undefined, tenantId: string): Promise<string | undefined> => {
    const wanted = host ? normalizeDomain(host) : undefined;
    const match = (challenge: AcmeChallengeRecord) =>
      challenge.type === 'http-01' &&
      challenge.token === token &&
      challenge.tenantId === tenantId &&
      (wanted === undefined || challenge.domain === wanted);
    return (await this.#find(match))?.keyAuthorization;
  };

  readonly alpnChallengeCertificate = async (servername: string, tenantId: string): Promise<ChallengeCertificate | undefined> => {
    const domain = normalizeDomain(servername);
    if (domain === '') return undefined;
    const challenge = await this.#find((c) => c.type === 'tls-alpn-01' && c.domain === domain && c.tenantId === tenantId, { fresh: true });
    if (!challenge) return undefined;
    const key = `${challenge.keyAuthorization}\0${domain}`;
    let certificate = this.#certificates.get(key);
    if (!certificate) {
      certificate = tlsAlpnCertificate(domain, challenge.keyAuthorization);
      this.#certificates.set(key, certificate);
      certificate.catch(() => this.#certificates.delete(key));
      // Challenges live minutes; a bounded cache is enough.
      if (this.#certificates.size > 256) this.#certificates.delete(this.#certificates.keys().next().value!);
    }
    return certificate;
  };

  async #find(
    match: (challenge: AcmeChallengeRecord) => boolean,
    options: { fresh?: boolean } = {},
  ): Promise<AcmeChallengeRecord | undefined> {
    const asked = performance.now();
    // A snapshot younger than maxAgeMs answers hits (unless `fresh`); a miss waits for a snapshot
    // read after it was asked, since the challenge may have been written just before the CA's request.
    await this.#freshSince(options.fresh ? asked : asked - this.#maxAgeMs);
    const found = this.#live(match);
    if (found) return found;
    await this.#freshSince(asked);
    return this.#live(match);
  }

  #live(match: (challenge: AcmeChallengeRecord) => boolean): AcmeChallengeRecord | undefined {
    const now = new Date().toISOString();
    return this.#snapshot.find((challenge) => challenge.expiresAt > now && match(challenge));
  }

  /**
   * Waits until the snapshot was read from a query started at or after `since`. One query at a
   * time: requests arriving meanwhile share the next one, so a flood of unknown tokens (these
   * requests come before rate limits and the WAF) costs one query after another, never a pile.
   */
  async #freshSince(since: number): Promise<void> {
    for (;;) {
      if (this.#snapshotReadAt >= since) return;
      if (!this.#loading) {
        const startedAt = performance.now();
        this.#loading = this.#challenges
          .live(new Date().toISOString())
          .then((snapshot) => {
            this.#snapshot = snapshot;
            this.#snapshotReadAt = startedAt;
          })
          .finally(() => {
            this.#loading = undefined;
          });
      }
      await this.#loading;
    }
  }
}

/**
 * The TLS-ALPN-01 certificate (RFC 8737 section 3): self-signed, one dNSName SAN, and the critical
 * acmeIdentifier extension holding the SHA-256 digest of the key authorization as an OCTET STRING.
 */
export async function tlsAlpnCertificate(domain: string, keyAuthorization: string): Promise<ChallengeCertificate> {
  const algorithm = { name: 'ECDSA', namedCurve: 'P-256' };
  const keys = (await crypto.webcrypto.subtle.generateKey(algorithm, true, ['sign', 'verify'])) as crypto.webcrypto.CryptoKeyPair;
  const digest = crypto.createHash('sha256').update(keyAuthorization).digest();
  // DER: OCTET STRING (0x04), length 32, the digest.
  const acmeIdentifier = Buffer.concat([Buffer.from([0x04, digest.length]), digest]);
  const now = Date.now();
  const certificate = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: `01${crypto.randomBytes(15).toString('hex')}`,
    name: [{ CN: [domain] }],
    notBefore: new Date(now - 3600_000),
    notAfter: new Date(now + 7 * 24 * 3600_000),
    keys: keys as unknown as x509.X509CertificateCreateSelfSignedParams['keys'],
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    extensions: [
      new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: domain }]),
      new x509.Extension(ACME_IDENTIFIER_OID, true, acmeIdentifier),
    ],
  });
  const der = Buffer.from(await crypto.webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  return {
    certPem: `${certificate.toString('pem')}\n`,
    keyPem: crypto.createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }).export({ format: 'pem', type: 'pkcs8' }).toString(),
  };
}
