/**
 * Front-end TLS certificates: customer-uploaded chains (`certificates/pem`) and service-issued ones
 * (`certificates/lets-encrypt`, ordered from the ACME CA in the background). Private keys are
 * sealed with the master key before they are stored and are never returned.
 *
 * A service-issued certificate claims its domains for its tenant while it is PENDING or ISSUED
 * (and unexpired): another tenant's order naming one of them is refused (409 DOMAIN_CLAIMED), as is
 * an order past the tenant's quota of pending orders (409 QUOTA_EXCEEDED). Uploads neither claim
 * nor are refused: anyone can make a self-signed certificate for any name, and that must not
 * block the name's owner from ordering.
 */
import type { FastifyRequest } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { AccountRelationship, CertificateAttributes, CertificateOrderAttributes, CertificateUploadAttributes, Uuid } from '@tps/model';
import type { ApiDeps, RoutePlugin } from '../types.ts';
import { ApiError, JSONAPI_MEDIA_TYPE, checkAccount, errorObject, notFound } from '../jsonapi.ts';
import { registerOwnedResourceRoutes } from './owned-resources.ts';
import { validateBody } from '../schemas/validator.ts';
import { CertificateCheckError, checkCustomerCertificate } from '../../certs/x509.ts';
import { CertificateRepository, type CertificateRecord } from '../../store/certificates.ts';
import { AcmeOrderRefused, type AcmeOrderLimits } from '../../store/acme-order-checks.ts';
import { normalizeDomain } from '../../certs/acme-challenges.ts';
import { certificateKeyBinding } from '../../certs/secret-box.ts';

const BASE = '/api/v2/traffic-mgmt/certificates';

/** Body of `POST /certificates/pem` (and of the spec's GET form of it). */
const CertificatePemDocument = Type.Object(
  {
    data: Type.Object(
      { type: Type.Literal('certificate'), attributes: CertificateUploadAttributes, relationships: AccountRelationship },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

/** Body of `POST /certificates/lets-encrypt`. */
const AcmeCertificateDocument = Type.Object(
  {
    data: Type.Object(
      { type: Type.Literal('certificate'), attributes: CertificateOrderAttributes, relationships: AccountRelationship },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

const CertificateResource = Type.Object({
  type: Type.Literal('certificate'),
  id: Uuid,
  attributes: CertificateAttributes,
});
const CertificateDocument = Type.Object({ data: CertificateResource });
const ErrorDocument = Type.Object({ errors: Type.Array(Type.Unknown()) });

export function toCertificateResource(record: CertificateRecord) {
  return {
    type: 'certificate' as const,
    id: record.id,
    attributes: {
      source: record.source,
      status: record.status,
      statusDetail: record.statusDetail,
      domains: record.domains,
      ...(record.subject !== undefined && {
        subject: record.subject,
        subjectAltNames: record.subjectAltNames,
        issuer: record.issuer,
        notBefore: record.notBefore,
        notAfter: record.notAfter,
        fingerprint: record.fingerprint,
      }),
      ...(record.certificatePem && { certificate: record.certificatePem, intermediateCertificates: record.chainPem ?? '' }),
      createdAt: record.createdAt,
      updatedAt: record.updatedAt,
    },
    relationships: { belongsTo: { data: { type: 'account', id: record.tenantId } } },
    links: { self: `${BASE}/${record.id}` },
  };
}

/** The store refused an order: 409 with one error per claimed domain (and for the quota), counted. */
function orderRefused(deps: ApiDeps, refusal: AcmeOrderRefused): ApiError {
  for (const code of new Set(refusal.problems.map((problem) => problem.code))) {
    deps.metrics.acmeOrdersRefused.inc({ reason: code });
    // Every quota refusal is in one counter, whatever the resource.
    if (code === 'QUOTA_EXCEEDED') deps.metrics.quotaExceeded.inc({ resource: 'pending ACME orders' });
  }
  return ApiError.many(refusal.problems.map((problem) => errorObject(problem.code, problem.detail, { pointer: problem.pointer })));
}

/**
 * With no ACME service (TPS_ACME_DIRECTORY_URL=off) an order would wait PENDING for ever and claim
 * its names from every other tenant meanwhile: it is refused, and nothing is stored.
 */
function refuseWithoutAcme(deps: ApiDeps, source?: { pointer: string }): void {
  if (deps.settings.acmeDirectoryUrl !== undefined) return;
  deps.metrics.acmeOrdersRefused.inc({ reason: 'ACME_DISABLED' });
  throw new ApiError(
    'ACME_DISABLED',
    'this service issues no certificates (its operator turned ACME off): upload a certificate with POST /api/v2/traffic-mgmt/certificates/pem',
    source,
  );
}

export const certificateRoutes: RoutePlugin = async (app, { deps }) => {
  const tags = ['certificates'];
  const security = [{ bearer: [] }];
  const orderLimits = (): AcmeOrderLimits => ({
    maxPendingOrders: deps.settings.quotaPendingAcmeOrders,
    claimSeconds: deps.settings.acmeClaimSeconds,
  });

  const upload = async (request: FastifyRequest, body: Static<typeof CertificatePemDocument>) => {
    const { data } = body;
    checkAccount(data.relationships, request.principal!.tenantId);
    let checked: ReturnType<typeof checkCustomerCertificate>;
    try {
      checked = checkCustomerCertificate(data.attributes);
    } catch (error) {
      if (!(error instanceof CertificateCheckError)) throw error;
      throw new ApiError(error.code, error.message, { pointer: `/data/attributes/${error.field}` });
    }
    const tenantId = request.principal!.tenantId;
    const id = CertificateRepository.newId();
    const record = await deps.store.certificates.createCustomer(
      tenantId,
      {
        id,
        certificatePem: checked.certificatePem,
        chainPem: checked.chainPem,
        sealedPrivateKey: deps.secrets.seal(checked.privateKeyPem, certificateKeyBinding({ id, tenantId })),
      },
      checked.facts,
    );
    return { data: toCertificateResource(record) };
  };

  app.post(
    `${BASE}/pem`,
    {
      config: { scope: 'write', jsonApiBody: true },
      schema: {
        tags,
        security,
        summary: 'Upload a customer certificate chain and its private key',
        description:
          'Checks: the key matches the leaf, the intermediates link the leaf to its issuer, the dates are valid, ' +
          'the key is RSA 2048+ or EC P-256+. Each failure is a 422 whose code names the check. ' +
          'The spec names GET for this path; a GET carrying the same body is accepted the same way.',
        // The GET form below reads and checks the same body itself.
        body: CertificatePemDocument,
        response: { 201: CertificateDocument, 415: ErrorDocument, 422: ErrorDocument },
      },
    },
    async (request, reply) => {
      const document = await upload(request, request.body);
      void reply.code(201).type(JSONAPI_MEDIA_TYPE).header('Location', `${BASE}/${document.data.id}`);
      return document;
    },
  );

  // The spec's own wording: "GET /certificates/pem" uploads. HTTP servers do not parse GET bodies,
  // so this route reads the body itself.
  app.get(`${BASE}/pem`, { config: { scope: 'write' }, schema: { hide: true } }, async (request, reply) => {
    const mediaType = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (mediaType !== JSONAPI_MEDIA_TYPE) {
      throw new ApiError('UNSUPPORTED_MEDIA_TYPE', `the body must be sent as Content-Type: ${JSONAPI_MEDIA_TYPE}`, {
        header: 'Content-Type',
      });
    }
    const document = await upload(request, validateBody(CertificatePemDocument, await readJsonBody(request)));
    void reply.code(201).type(JSONAPI_MEDIA_TYPE).header('Location', `${BASE}/${document.data.id}`);
    return document;
  });

  app.post(
    `${BASE}/lets-encrypt`,
    {
      config: { scope: 'write', jsonApiBody: true },
      schema: {
        tags,
        security,
        summary: 'Request a certificate from the public ACME certificate authority',
        description:
          'Answers at once with the certificate id and status PENDING; the order runs in the background and the ' +
          'status turns ISSUED or FAILED (with statusDetail). Renewed automatically every 30 days. ' +
          'Refused with 409: DOMAIN_CLAIMED (pointer /data/attributes/domains/N) when another account holds a PENDING or ' +
          'unexpired ISSUED service-issued certificate for a name (uploaded certificates claim nothing); QUOTA_EXCEEDED ' +
          '(pointer /data) when the account already has TPS_QUOTA_PENDING_ACME_ORDERS orders PENDING. ' +
          'A proxy may be PUT with the certificate id at once (the procedure of the spec): it keeps serving its previous ' +
          'configuration (port 80, answering the challenge) until the certificate is ISSUED.',
        body: AcmeCertificateDocument,
        response: { 201: CertificateDocument, 409: ErrorDocument, 415: ErrorDocument, 422: ErrorDocument },
      },
    },
    async (request, reply) => {
      const { data } = request.body;
      const tenantId = request.principal!.tenantId;
      checkAccount(data.relationships, tenantId);
      refuseWithoutAcme(deps, { pointer: '/data' });
      const domains = data.attributes.domains.map(normalizeDomain);
      const duplicates = domains.flatMap((domain, index) =>
        domains.indexOf(domain) === index
          ? []
          : [
              errorObject('DUPLICATE_DOMAIN', `${domain} is named twice (names are compared without case and trailing dot)`, {
                pointer: `/data/attributes/domains/${index}`,
              }),
            ],
      );
      if (duplicates.length > 0) throw ApiError.many(duplicates);
      let record: CertificateRecord;
      try {
        record = await deps.store.certificates.createAcme(tenantId, domains, orderLimits());
      } catch (error) {
        if (error instanceof AcmeOrderRefused) throw orderRefused(deps, error);
        throw error;
      }
      deps.acme?.enqueue(record.id);
      void reply.code(201).type(JSONAPI_MEDIA_TYPE).header('Location', `${BASE}/${record.id}`);
      return { data: toCertificateResource(record) };
    },
  );

  app.post(
    `${BASE}/:id/renew`,
    {
      config: { scope: 'write' },
      schema: {
        tags,
        security,
        summary: 'Renew a service-issued certificate now',
        description:
          'An ISSUED service-issued certificate is renewed at once (the renewed certificate replaces it in the same record, ' +
          'so proxies serve it without a change); a FAILED one is requested again (back to PENDING), refused like a new ' +
          'order (409 DOMAIN_CLAIMED, QUOTA_EXCEEDED). Customer certificates are renewed by uploading a new one (409).',
        params: Type.Object({ id: Uuid }),
        response: { 202: CertificateDocument, 404: ErrorDocument, 409: ErrorDocument },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const tenantId = request.principal!.tenantId;
      const existing = await deps.store.certificates.get(tenantId, id);
      if (!existing) throw notFound('certificate', id);
      if (existing.source !== 'ACME') {
        throw new ApiError('NOT_SERVICE_ISSUED', `certificate ${id} was uploaded by the customer; renew it by uploading a new one`);
      }
      refuseWithoutAcme(deps);
      // Without an ACME service in this process the request waits in the store for the node that runs one.
      let record: CertificateRecord | undefined;
      try {
        record = deps.acme
          ? await deps.acme.renewNow(tenantId, id, orderLimits())
          : await deps.store.certificates.requestRenewal(tenantId, id, orderLimits());
      } catch (error) {
        if (error instanceof AcmeOrderRefused) throw orderRefused(deps, error);
        throw error;
      }
      if (!record) throw notFound('certificate', id);
      void reply.code(202).type(JSONAPI_MEDIA_TYPE);
      return { data: toCertificateResource(record) };
    },
  );

  registerOwnedResourceRoutes(app, {
    base: BASE,
    name: 'certificate',
    tags,
    resourceSchema: CertificateResource,
    list: (tenantId) => deps.store.certificates.list(tenantId),
    get: (tenantId, id) => deps.store.certificates.get(tenantId, id),
    delete: (tenantId, id) => deps.store.certificates.delete(tenantId, id),
    present: toCertificateResource,
  });
};

async function readJsonBody(request: FastifyRequest): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request.raw) {
    size += (chunk as Buffer).length;
    if (size > 1024 * 1024) throw new ApiError('BODY_TOO_LARGE', 'the body is larger than 1 MiB');
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new ApiError('MALFORMED_BODY', 'the body is not valid JSON');
  }
}
