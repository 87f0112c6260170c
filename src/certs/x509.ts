/**
 * X.509 checks on what customers upload, with OpenSSL through node:crypto's X509Certificate.
 * Each failed check is a CertificateCheckError naming the check and the field at fault.
 */
import crypto, { X509Certificate } from 'node:crypto';
import type { CertificateFacts } from '@tps/model';

/** The check an upload failed; the API answers each as a 422 with this code. */
export type CertificateCheckCode =
  | 'INVALID_CERTIFICATE'
  | 'INVALID_PRIVATE_KEY'
  | 'KEY_MISMATCH'
  | 'WEAK_KEY'
  | 'UNSUPPORTED_KEY'
  | 'CERTIFICATE_NOT_YET_VALID'
  | 'CERTIFICATE_EXPIRED'
  | 'CHAIN_BROKEN'
  | 'NOT_A_CA_CERTIFICATE';

export class CertificateCheckError extends Error {
  readonly code: CertificateCheckCode;
  /** The attribute at fault, relative to /data/attributes. */
  readonly field: string;
  constructor(code: CertificateCheckCode, field: string, detail: string) {
    super(detail);
    this.code = code;
    this.field = field;
  }
}

export interface CustomerCertificateUpload {
  certificate: string;
  intermediateCertificates?: string | undefined;
  privateKey: string;
}

export interface CheckedCertificate {
  /** Leaf PEM. */
  certificatePem: string;
  /** Intermediates PEM, leaf's issuer first. */
  chainPem: string;
  /** The private key, re-encoded as PKCS#8 PEM. */
  privateKeyPem: string;
  facts: CertificateFacts;
}

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

export function pemBlocks(text: string): string[] {
  return (text.match(PEM_BLOCK) ?? []).map((block) => `${block}\n`);
}

function parseCertificates(text: string, field: string): X509Certificate[] {
  const blocks = pemBlocks(text);
  if (blocks.length === 0) throw new CertificateCheckError('INVALID_CERTIFICATE', field, `${field} holds no PEM certificate`);
  return blocks.map((block, index) => {
    try {
      return new X509Certificate(block);
    } catch {
      throw new CertificateCheckError('INVALID_CERTIFICATE', field, `certificate ${index + 1} in ${field} cannot be parsed`);
    }
  });
}

/** One line per distinguished name, "CN=a, O=b", as most tools print it. */
const oneLine = (name: string) => name.split('\n').filter(Boolean).join(', ');

export function subjectAltNames(certificate: X509Certificate): string[] {
  return (certificate.subjectAltName ?? '').split(', ').flatMap((entry) => {
    const name = /^(?:DNS|IP Address):(.+)$/.exec(entry)?.[1];
    return name === undefined ? [] : [name];
  });
}

export function certificateFacts(certificate: X509Certificate): CertificateFacts {
  return {
    subject: oneLine(certificate.subject),
    subjectAltNames: subjectAltNames(certificate),
    issuer: oneLine(certificate.issuer),
    notBefore: certificate.validFromDate.toISOString(),
    notAfter: certificate.validToDate.toISOString(),
    fingerprint: certificate.fingerprint256,
  };
}

function checkDates(certificate: X509Certificate, field: string, now: Date): void {
  if (now < certificate.validFromDate) {
    throw new CertificateCheckError(
      'CERTIFICATE_NOT_YET_VALID',
      field,
      `${field} is valid only from ${certificate.validFromDate.toISOString()}`,
    );
  }
  if (now > certificate.validToDate) {
    throw new CertificateCheckError('CERTIFICATE_EXPIRED', field, `${field} expired on ${certificate.validToDate.toISOString()}`);
  }
}

/** RSA of 2048 bits or more, or EC on P-256, P-384 or P-521: what browsers and CAs accept today. */
function checkKeyStrength(key: crypto.KeyObject, field: string): void {
  const details = key.asymmetricKeyDetails ?? {};
  if (key.asymmetricKeyType === 'rsa' || key.asymmetricKeyType === 'rsa-pss') {
    if ((details.modulusLength ?? 0) < 2048) {
      throw new CertificateCheckError('WEAK_KEY', field, `the RSA key has ${details.modulusLength} bits; at least 2048 are required`);
    }
    return;
  }
  if (key.asymmetricKeyType === 'ec') {
    if (!['prime256v1', 'secp384r1', 'secp521r1'].includes(details.namedCurve ?? '')) {
      throw new CertificateCheckError('WEAK_KEY', field, `the EC curve ${details.namedCurve} is not accepted; use P-256 or stronger`);
    }
    return;
  }
  throw new CertificateCheckError('UNSUPPORTED_KEY', field, `${key.asymmetricKeyType} keys are not accepted; use RSA 2048+ or EC P-256+`);
}

export function checkCustomerCertificate(upload: CustomerCertificateUpload, now = new Date()): CheckedCertificate {
  const [leaf, ...bundled] = parseCertificates(upload.certificate, 'certificate');
  const intermediates = [
    ...bundled,
    ...(upload.intermediateCertificates?.trim() ? parseCertificates(upload.intermediateCertificates, 'intermediateCertificates') : []),
  ];

  let privateKey: crypto.KeyObject;
  try {
    privateKey = crypto.createPrivateKey({ key: upload.privateKey, format: 'pem' });
  } catch (error) {
    const encrypted = /passphrase/i.test((error as Error).message);
    throw new CertificateCheckError(
      'INVALID_PRIVATE_KEY',
      'privateKey',
      encrypted ? 'the private key is encrypted; upload it without a passphrase' : 'privateKey is not a PEM private key',
    );
  }
  if (!leaf!.checkPrivateKey(privateKey)) {
    throw new CertificateCheckError('KEY_MISMATCH', 'privateKey', 'the private key does not belong to the certificate');
  }
  checkKeyStrength(privateKey, 'privateKey');
  checkDates(leaf!, 'certificate', now);

  // Order the intermediates from the leaf's issuer upwards; every one must be used, each signed by the next.
  const chain: X509Certificate[] = [];
  let current = leaf!;
  const remaining = [...intermediates];
  while (remaining.length > 0) {
    const index = remaining.findIndex((candidate) => current.checkIssued(candidate) && current.verify(candidate.publicKey));
    if (index < 0) {
      throw new CertificateCheckError(
        'CHAIN_BROKEN',
        'intermediateCertificates',
        `no intermediate certificate signed "${oneLine(current.subject)}"; the chain does not link the certificate to its issuer`,
      );
    }
    current = remaining.splice(index, 1)[0]!;
    checkDates(current, 'intermediateCertificates', now);
    chain.push(current);
  }

  return {
    certificatePem: leaf!.toString(),
    chainPem: chain.map((certificate) => certificate.toString()).join(''),
    privateKeyPem: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    facts: certificateFacts(leaf!),
  };
}

/** A CA certificate upload: each PEM must parse and be a CA (basicConstraints CA:TRUE). */
export function checkCaCertificate(pem: string, field: string): X509Certificate {
  const certificates = parseCertificates(pem, field);
  if (certificates.length !== 1) {
    throw new CertificateCheckError('INVALID_CERTIFICATE', field, `${field} must hold exactly one certificate (send one entry per CA)`);
  }
  const certificate = certificates[0]!;
  if (!certificate.ca)
    throw new CertificateCheckError('NOT_A_CA_CERTIFICATE', field, `${field} is not a CA certificate (basicConstraints CA:TRUE)`);
  return certificate;
}
