/**
 * TLS settings of both segments: what the listener offers clients, and how the proxy connects to
 * origins.
 *
 * Client side (front end), following Mozilla's "intermediate" profile (v5.7):
 * - TLS 1.2 and 1.3 only: TLS 1.0/1.1 are deprecated (RFC 8996) and SSLv3 is long gone.
 * - TLS 1.3 suites: AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305 (all AEAD; the only ones OpenSSL enables).
 * - TLS 1.2 suites: ECDHE key exchange (forward secrecy) with AES-GCM or ChaCha20-Poly1305 only.
 *   No CBC, no RSA key exchange, no 3DES/RC4/NULL/EXPORT, no DHE (slow, and needs our own parameters).
 *   Every one of these is allowed by HTTP/2 (RFC 9113 appendix A bans the rest).
 * - Curves X25519, P-256, P-384. The client chooses among the suites (all are strong, and
 *   ChaCha20 is faster on clients without AES instructions), so the server order is not imposed.
 * - ALPN: h2, then http/1.1.
 *
 * Origin side: TLS 1.2+ with Node's default suites (already free of weak ones), the validation
 * variant of `backend.tlsSettings.verifyCertificate`, and the proxy's client certificate when the
 * origin wants mutual TLS.
 */
import type { ConnectionOptions, SecureContextOptions } from 'node:tls';
import type { ResolvedHttpProxy } from './types.ts';

export const TLS_MIN_VERSION = 'TLSv1.2' as const;

export const TLS_CIPHERS = [
  'TLS_AES_128_GCM_SHA256',
  'TLS_AES_256_GCM_SHA384',
  'TLS_CHACHA20_POLY1305_SHA256',
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

export const TLS_ECDH_CURVES = 'X25519:prime256v1:secp384r1';

/** Secure-context options of a front-end listener; `setSecureContext` takes the same object. */
export interface FrontendTlsOptions extends SecureContextOptions {
  requestCert: boolean;
  rejectUnauthorized: boolean;
}

/**
 * Stands in for the CRLs of a proxy with `verifyCrl` whose CAs have none yet. Node turns on
 * OpenSSL's CRL checks only when it is given a CRL; with none, `verifyCrl: true` would check no
 * revocation at all. This CRL is issued by a name no CA has (its key was thrown away), so it is never
 * used to judge a certificate: it only turns the checks on, and a certificate whose CA has no CRL
 * then fails with "unable to get certificate CRL" (fail closed).
 */
export const NO_CRL_YET_PLACEHOLDER = `-----BEGIN X509 CRL-----
MIHyMIGaAgEBMAoGCCqGSM49BAMCMFkxSTBHBgNVBAMMQHRwcyBwbGFjZWhvbGRl
cjogbm8gQ1JMIGhhcyBiZWVuIGZldGNoZWQgZm9yIHRoaXMgcHJveHkncyBDQSB5
ZXQxDDAKBgNVBAoMA3RwcxcNMjYxMTI1MTc0MjU3WhgPMjEyNjExMDExNzQyNTda
oA4wDDAKBgNVHRQEAwIBATAKBggqhkjOPQQDAgNHADBEAiA7LvyfUkeEuOFK20cm
jowMe9XsAVG/ndRoFiN65xsUjAIgRgAEESds4zUPJkgbEdQ5Wj8DfBEeuai/nuXL
Cmhnjrs=
-----END X509 CRL-----
`;

/**
 * The listener's TLS options for one configuration. mTLS:
 * - VERIFY_AND_REJECT asks for a certificate and lets OpenSSL refuse the handshake when there is none
 *   or it does not verify (untrusted, expired, revoked by a given CRL): the request never exists.
 * - VERIFY_AND_FORWARD asks for one but accepts any; the verdict goes to the origin in headers.
 * With `verifyCrl`, OpenSSL's CRL checks are on for the whole chain: every CA in it must have a CRL
 * among `crlPems`, or its certificates fail with "unable to get certificate CRL" (fail closed), also
 * while no CRL at all has been fetched (`NO_CRL_YET_PLACEHOLDER`).
 */
export function frontendTlsOptions(config: ResolvedHttpProxy): FrontendTlsOptions | undefined {
  const certificate = config.frontendCertificate;
  if (certificate === undefined) return undefined;
  const verification = config.clientVerification;
  const options: FrontendTlsOptions = {
    cert: certificate.certificatePem,
    key: certificate.privateKeyPem,
    minVersion: TLS_MIN_VERSION,
    ciphers: TLS_CIPHERS,
    ecdhCurve: TLS_ECDH_CURVES,
    honorCipherOrder: false,
    requestCert: verification !== undefined,
    rejectUnauthorized: verification?.mode === 'VERIFY_AND_REJECT',
  };
  if (verification !== undefined) {
    options.ca = verification.caPems;
    if (verification.verifyCrl) options.crl = [...verification.crlPems, NO_CRL_YET_PLACEHOLDER];
  }
  return options;
}

/** A string that changes whenever the listener's TLS options change (what `update` compares). */
export function frontendTlsSettingsKey(config: ResolvedHttpProxy): string {
  const certificate = config.frontendCertificate;
  if (certificate === undefined) return '';
  const verification = config.clientVerification;
  return [
    certificate.certificatePem,
    certificate.privateKeyPem,
    verification?.mode ?? '',
    ...(verification?.caPems ?? []),
    verification?.verifyCrl ? '--crl--' : '--no-crl--',
    ...(verification?.crlPems ?? []),
  ].join('\0');
}

/**
 * Connect options towards the origins: undefined for plain HTTP (`backend.tlsSettings` absent).
 * Origin validation:
 * - NONE (no `verifyCertificate`): encrypted, but any certificate is accepted.
 * - SYSTEM_TRUSTSTORE: Node's bundled store of well-known CAs (Mozilla's list), and the certificate
 *   must name the host (SNI = the request's Host name, or the origin address when Host is an IP).
 * - CUSTOM_TRUSTSTORE: only the given CAs, with the same name check.
 */
export function originTlsOptions(config: ResolvedHttpProxy): ConnectionOptions | undefined {
  if (!config.attributes.backend.tlsSettings) return undefined;
  const options: ConnectionOptions = { minVersion: TLS_MIN_VERSION };
  const trust = config.originTrust ?? { mode: 'NONE' };
  switch (trust.mode) {
    case 'NONE':
      options.rejectUnauthorized = false;
      break;
    case 'SYSTEM_TRUSTSTORE':
      options.rejectUnauthorized = true;
      break;
    case 'CUSTOM_TRUSTSTORE':
      options.rejectUnauthorized = true;
      options.ca = trust.caPems;
      break;
  }
  const client = config.originClientCertificate;
  if (client !== undefined) {
    options.cert = client.certificatePem;
    options.key = client.privateKeyPem;
  }
  return options;
}
