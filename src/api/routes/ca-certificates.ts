/**
 * CA certificates: they validate client certificates (client-to-proxy mutual TLS) and origin
 * certificates (CUSTOM_TRUSTSTORE). Each entry may name the URL of its revocation list.
 */
import { Type } from '@sinclair/typebox';
import { AccountRelationship, CaCertificateAttributes, CaCertificateUploadAttributes, Uuid, type CaCertificateEntry } from '@tps/model';
import type { RoutePlugin } from '../types.ts';
import { ApiError, JSONAPI_MEDIA_TYPE, checkAccount, errorObject, type JsonApiErrorObject } from '../jsonapi.ts';
import { CertificateCheckError, checkCaCertificate } from '../../certs/x509.ts';
import type { CaCertificateRecord } from '../../store/ca-certificates.ts';
import { registerOwnedResourceRoutes } from './owned-resources.ts';
import { crlUrlError, originPolicyOf } from '../origin-checks.ts';

const BASE = '/api/v2/traffic-mgmt/ca-certificates';

/** Body of `POST /ca-certificates`. */
const CaCertificateDocument = Type.Object(
  {
    data: Type.Object(
      { type: Type.Literal('caCertificate'), attributes: CaCertificateUploadAttributes, relationships: AccountRelationship },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

const CaResource = Type.Object({
  type: Type.Literal('caCertificate'),
  id: Uuid,
  attributes: CaCertificateAttributes,
});
const CaDocument = Type.Object({ data: CaResource });
const ErrorDocument = Type.Object({ errors: Type.Array(Type.Unknown()) });

function toResource(record: CaCertificateRecord) {
  return {
    type: 'caCertificate' as const,
    id: record.id,
    attributes: { certificates: record.entries, createdAt: record.createdAt, updatedAt: record.updatedAt },
    relationships: { belongsTo: { data: { type: 'account', id: record.tenantId } } },
    links: { self: `${BASE}/${record.id}` },
  };
}

export const caCertificateRoutes: RoutePlugin = async (app, { deps }) => {
  const tags = ['CA certificates'];
  const security = [{ bearer: [] }];

  app.post(
    BASE,
    {
      config: { scope: 'write', jsonApiBody: true },
      schema: {
        tags,
        security,
        summary: 'Upload CA certificates',
        body: CaCertificateDocument,
        response: { 201: CaDocument, 415: ErrorDocument, 422: ErrorDocument },
      },
    },
    async (request, reply) => {
      const { data } = request.body;
      checkAccount(data.relationships, request.principal!.tenantId);
      const errors: JsonApiErrorObject[] = [];
      const entries: CaCertificateEntry[] = [];
      const policy = originPolicyOf(deps);
      for (const [index, entry] of data.attributes.certificates.entries()) {
        const field = `/data/attributes/certificates/${index}/certificate`;
        // A literal internal address is refused now; a name is checked at every fetch (crl.ts).
        const refused =
          entry.crlUrl === undefined
            ? undefined
            : crlUrlError(policy, entry.crlUrl, `/data/attributes/certificates/${index}/crlUrl`, request.log);
        if (refused !== undefined) errors.push(refused);
        try {
          const certificate = checkCaCertificate(entry.certificate, `certificates[${index}].certificate`);
          entries.push({
            certificate: certificate.toString(),
            ...(entry.crlUrl !== undefined && { crlUrl: entry.crlUrl }),
            subject: certificate.subject.split('\n').filter(Boolean).join(', '),
            fingerprint: certificate.fingerprint256,
            notAfter: certificate.validToDate.toISOString(),
          });
        } catch (error) {
          if (!(error instanceof CertificateCheckError)) throw error;
          errors.push(errorObject(error.code, error.message, { pointer: field }));
        }
      }
      if (errors.length > 0) throw ApiError.many(errors);
      const record = await deps.store.caCertificates.create(request.principal!.tenantId, entries);
      void reply.code(201).type(JSONAPI_MEDIA_TYPE).header('Location', `${BASE}/${record.id}`);
      return { data: toResource(record) };
    },
  );

  registerOwnedResourceRoutes(app, {
    base: BASE,
    name: 'CA certificate',
    tags,
    resourceSchema: CaResource,
    list: (tenantId) => deps.store.caCertificates.list(tenantId),
    get: (tenantId, id) => deps.store.caCertificates.get(tenantId, id),
    delete: (tenantId, id) => deps.store.caCertificates.delete(tenantId, id),
    present: toResource,
  });
};
