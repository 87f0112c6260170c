/**
 * Certificates: front-end TLS certificates (uploaded by the customer, or issued by the service
 * through ACME) and CA certificates (they validate client certificates and origin certificates).
 * The API checks uploads and orders with these schemas and documents the resources with them, the
 * store keeps records of these types, src/certs fills in what X.509 parsing and CRL fetches tell.
 *
 * Names follow ../shared/spec/traffic-protection-api.md (a contract).
 */
import { Type } from '@sinclair/typebox';
import { ReadOnlyTimestamps } from './schema-helpers.ts';

export const CERTIFICATE_SOURCES = ['CUSTOMER', 'ACME'] as const;
/** CUSTOMER: uploaded with its private key. ACME: ordered by the service from its ACME CA. */
export type CertificateSource = (typeof CERTIFICATE_SOURCES)[number];

export const CERTIFICATE_STATUSES = ['PENDING', 'ISSUED', 'FAILED'] as const;
export type CertificateStatus = (typeof CERTIFICATE_STATUSES)[number];

/** What X.509 parsing tells about a leaf certificate. */
export interface CertificateFacts {
  subject: string;
  subjectAltNames: string[];
  issuer: string;
  notBefore: string;
  notAfter: string;
  fingerprint: string;
}

/** An upload (`certificates/pem`): a leaf, its intermediates and its private key, all PEM. */
export const CertificateUploadAttributes = Type.Object(
  {
    certificate: Type.String({ minLength: 1, maxLength: 65536, description: 'PEM leaf certificate (intermediates may follow it).' }),
    intermediateCertificates: Type.Optional(Type.String({ maxLength: 262144, description: 'PEM intermediate certificates.' })),
    privateKey: Type.String({ minLength: 1, maxLength: 65536, description: 'PEM private key (unencrypted), RSA 2048+ or EC P-256+.' }),
  },
  { additionalProperties: false },
);

/** An order of a service-issued certificate (`certificates/lets-encrypt`): the names it is for. */
export const CertificateOrderAttributes = Type.Object(
  {
    domains: Type.Array(Type.String({ format: 'hostname', minLength: 1, maxLength: 253 }), {
      minItems: 1,
      maxItems: 100,
      uniqueItems: true,
      description:
        'DNS names; each must resolve to a front-end IP where a proxy of this account answers the challenge (HTTP-01 on port 80, ' +
        'or TLS-ALPN-01 on the port of a proxy serving this certificate). A name another account holds a PENDING or ISSUED ' +
        'service-issued certificate for is refused (409 DOMAIN_CLAIMED).',
    }),
  },
  { additionalProperties: false },
);

/** A certificate as the API answers it: never its private key. */
export const CertificateAttributes = Type.Object({
  source: Type.String({ enum: [...CERTIFICATE_SOURCES] }),
  status: Type.String({ enum: [...CERTIFICATE_STATUSES] }),
  statusDetail: Type.Union([Type.String(), Type.Null()]),
  domains: Type.Array(Type.String()),
  subject: Type.Optional(Type.String()),
  subjectAltNames: Type.Optional(Type.Array(Type.String())),
  issuer: Type.Optional(Type.String()),
  notBefore: Type.Optional(Type.String({ format: 'date-time' })),
  notAfter: Type.Optional(Type.String({ format: 'date-time' })),
  fingerprint: Type.Optional(Type.String({ description: 'SHA-256 of the leaf certificate.' })),
  certificate: Type.Optional(Type.String({ description: 'PEM leaf certificate (public).' })),
  intermediateCertificates: Type.Optional(Type.String()),
  ...ReadOnlyTimestamps,
});

/** One CA certificate of an upload, with the URL of its revocation list. */
export const CaCertificateUploadEntry = Type.Object(
  {
    certificate: Type.String({ minLength: 1, maxLength: 65536, description: 'PEM-encoded CA certificate.' }),
    crlUrl: Type.Optional(
      Type.String({
        format: 'uri',
        pattern: '^https?://',
        maxLength: 2048,
        description:
          "URL of the certificate revocation list. Fetched under the same origin policy as proxies' origins (an " +
          'internal address is refused: 422 ORIGIN_NOT_ALLOWED, or a failed fetch when a name or redirect leads there).',
      }),
    ),
  },
  { additionalProperties: false },
);

/** An upload of CA certificates (`ca-certificates`): one resource holds up to 50. */
export const CaCertificateUploadAttributes = Type.Object(
  {
    certificates: Type.Array(CaCertificateUploadEntry, { minItems: 1, maxItems: 50 }),
  },
  { additionalProperties: false },
);

/** A CA certificate resource as the API answers it. */
export const CaCertificateAttributes = Type.Object({
  certificates: Type.Array(
    Type.Object({
      certificate: Type.String(),
      crlUrl: Type.Optional(Type.String()),
      subject: Type.String(),
      fingerprint: Type.String(),
      notAfter: Type.String({ format: 'date-time' }),
    }),
  ),
  ...ReadOnlyTimestamps,
});

/** One stored CA certificate of a CA certificate resource. */
export interface CaCertificateEntry {
  certificate: string;
  crlUrl?: string;
  subject: string;
  fingerprint: string;
  notAfter: string;
  /** Entries with a crlUrl: how the revocation list fetches go (written by src/certs/crl.ts). */
  crl?: CrlStatus;
}

/** The state of one CA entry's revocation list, as shown in the CA certificate resource. */
export interface CrlStatus {
  /** Last successful fetch (the CRL in use was fetched then); null while none succeeded. */
  fetchedAt: string | null;
  /** Why the last fetch failed; null when it succeeded. The last good CRL stays in use. */
  error: string | null;
  /** The last fetch attempt, successful or not. */
  attemptedAt: string;
  /** The CRL's own thisUpdate / nextUpdate, when one is in use. */
  thisUpdate?: string;
  nextUpdate?: string;
  /** How many certificates the CRL in use revokes. */
  revokedCount?: number;
}
