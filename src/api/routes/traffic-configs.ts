/**
 * Traffic configurations (proxies): create, list, get, replace (PUT), merge (PATCH), delete.
 * A request is checked whole (schema, then references to IPs, certificates and CA certificates)
 * before anything is written, so a rejected request changes nothing.
 */
import type { FastifyBaseLogger } from 'fastify';
import { Type } from '@sinclair/typebox';
import { HTTP_PROXY, TrafficConfigDocument, TrafficConfigPatchDocument, Uuid, type HttpProxyAttributes, type ProxyType } from '@tps/model';
import type { ApiDeps, RoutePlugin } from '../types.ts';
import { ApiError, JSONAPI_MEDIA_TYPE, checkAccount, errorObject, notFound, type JsonApiErrorObject } from '../jsonapi.ts';
import type { ApiErrorCode } from '../error-catalogue.ts';
import { validateBody } from '../schemas/validator.ts';
import type { StoredAttributes, TrafficConfigRecord } from '../../store/traffic-configs.ts';
import type { ServedStatus } from '../../store/edge-status.ts';
import { canonicalIp } from '../../net/ip.ts';
import { originError, originPolicyOf } from '../origin-checks.ts';

const BASE = '/api/v2/traffic-mgmt/traffic-configs';
const READ_ONLY = ['status', 'statusDetail', 'createdAt', 'updatedAt'] as const;

const IdParams = Type.Object({ id: Uuid });
const ResourceDocument = Type.Object({
  data: Type.Unknown({ description: 'The traffic configuration, as in the request plus id, status, statusDetail, createdAt, updatedAt.' }),
});
const ErrorDocument = Type.Object({ errors: Type.Array(Type.Unknown()) });

export const trafficConfigRoutes: RoutePlugin = async (app, { deps }) => {
  const { store } = deps;
  const tags = ['traffic configurations'];
  const security = [{ bearer: [] }];

  const present = async (records: TrafficConfigRecord[]) => {
    const statuses = await store.edgeStatus.statusOf(records);
    return records.map((record) => toResource(record, statuses.get(record.id)));
  };

  app.get(
    BASE,
    {
      config: { scope: 'read' },
      schema: {
        tags,
        security,
        summary: "List the tenant's traffic configurations",
        response: { 200: Type.Object({ data: Type.Array(Type.Unknown()) }) },
      },
    },
    async (request, reply) => {
      void reply.type(JSONAPI_MEDIA_TYPE);
      return { data: await present(await store.trafficConfigs.list(request.principal!.tenantId)) };
    },
  );

  app.get(
    `${BASE}/:id`,
    {
      config: { scope: 'read' },
      schema: {
        tags,
        security,
        summary: 'Get one traffic configuration',
        params: IdParams,
        response: { 200: ResourceDocument, 404: ErrorDocument },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const record = await store.trafficConfigs.get(request.principal!.tenantId, id);
      if (!record) throw notFound('traffic configuration', id);
      void reply.type(JSONAPI_MEDIA_TYPE);
      return { data: (await present([record]))[0] };
    },
  );

  app.post(
    BASE,
    {
      config: { scope: 'write', jsonApiBody: true },
      schema: {
        tags,
        security,
        summary: 'Create a proxy (httpProxy or l4Proxy)',
        description: 'The proxy is served on its front-end IP and port within about a second; `status` turns ACTIVE.',
        body: TrafficConfigDocument,
        response: { 201: ResourceDocument, 409: ErrorDocument, 415: ErrorDocument, 422: ErrorDocument },
      },
    },
    async (request, reply) => {
      const tenantId = request.principal!.tenantId;
      const { data } = request.body;
      checkAccount(data.relationships, tenantId);
      const attributes = withoutReadOnly(data.attributes);
      await checkReferences(deps, request.log, tenantId, data.type, attributes);
      const record = await store.trafficConfigs.create(tenantId, data.type, attributes);
      void reply.code(201).type(JSONAPI_MEDIA_TYPE).header('Location', `${BASE}/${record.id}`);
      return { data: (await present([record]))[0] };
    },
  );

  app.put(
    `${BASE}/:id`,
    {
      config: { scope: 'write', jsonApiBody: true },
      schema: {
        tags,
        security,
        summary: 'Replace a proxy whole',
        description:
          'A front-end certificateId of a service-issued certificate still PENDING may be given at once (the procedure of ' +
          'the spec): until it is ISSUED the proxy keeps serving its previous configuration, and holds its ports (port 80 ' +
          'answers the CA), with status PROVISIONING and statusDetail saying what it waits for; then the new configuration ' +
          'is served. When the certificate FAILED, the previous configuration stays served and status is ERROR with the ' +
          "CA's reason in statusDetail. PATCH alike.",
        params: IdParams,
        body: TrafficConfigDocument,
        response: { 200: ResourceDocument, 404: ErrorDocument, 409: ErrorDocument, 422: ErrorDocument },
      },
    },
    async (request, reply) => {
      const tenantId = request.principal!.tenantId;
      const { id } = request.params;
      const { data } = request.body;
      const current = await loadForChange(deps, tenantId, id, data);
      checkAccount(data.relationships, tenantId);
      const attributes = withoutReadOnly(data.attributes);
      await checkReferences(deps, request.log, tenantId, data.type, attributes);
      const record = await store.trafficConfigs.replace(tenantId, current, attributes);
      void reply.type(JSONAPI_MEDIA_TYPE);
      return { data: (await present([record]))[0] };
    },
  );

  app.patch(
    `${BASE}/:id`,
    {
      config: { scope: 'write', jsonApiBody: true },
      schema: {
        tags,
        security,
        summary: 'Change some attributes of a proxy',
        description:
          'Objects are merged into the stored configuration; arrays and scalars replace; null removes an optional ' +
          'attribute (RFC 7386). The merged configuration is validated as a whole.',
        params: IdParams,
        body: TrafficConfigPatchDocument,
        response: { 200: ResourceDocument, 404: ErrorDocument, 409: ErrorDocument, 422: ErrorDocument },
      },
    },
    async (request, reply) => {
      const tenantId = request.principal!.tenantId;
      const { id } = request.params;
      const { data } = request.body;
      const current = await loadForChange(deps, tenantId, id, data);
      const merged = mergePatch(structuredClone(current.attributes), data.attributes) as Record<string, unknown>;
      const document = validateBody(TrafficConfigDocument, { data: { type: current.type, attributes: withoutReadOnly(merged) } });
      const attributes = withoutReadOnly(document.data.attributes);
      await checkReferences(deps, request.log, tenantId, current.type, attributes);
      const record = await store.trafficConfigs.replace(tenantId, current, attributes);
      void reply.type(JSONAPI_MEDIA_TYPE);
      return { data: (await present([record]))[0] };
    },
  );

  app.delete(
    `${BASE}/:id`,
    {
      config: { scope: 'write' },
      schema: {
        tags,
        security,
        summary: 'Delete a proxy and free its port',
        params: IdParams,
        response: { 204: Type.Null(), 404: ErrorDocument },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      if (!(await store.trafficConfigs.delete(request.principal!.tenantId, id))) throw notFound('traffic configuration', id);
      void reply.code(204);
    },
  );
};

function toResource(record: TrafficConfigRecord, served: ServedStatus | undefined) {
  return {
    type: record.type,
    id: record.id,
    attributes: {
      ...record.attributes,
      status: served?.status ?? 'PROVISIONING',
      statusDetail: served?.statusDetail ?? null,
      createdAt: record.createdAt,
      updatedAt: record.updatedAt,
    },
    relationships: { belongsTo: { data: { type: 'account', id: record.tenantId } } },
    links: { self: `${BASE}/${record.id}` },
  };
}

async function loadForChange(deps: ApiDeps, tenantId: string, id: string, data: { type: string; id?: string | undefined }) {
  const current = await deps.store.trafficConfigs.get(tenantId, id);
  if (!current) throw notFound('traffic configuration', id);
  if (data.id !== undefined && data.id !== id) {
    throw new ApiError('ID_MISMATCH', `data.id ${data.id} is not the id in the path`, { pointer: '/data/id' });
  }
  if (data.type !== current.type) {
    throw new ApiError('TYPE_MISMATCH', `this traffic configuration is a ${current.type}; its type cannot change`, {
      pointer: '/data/type',
    });
  }
  return current;
}

function withoutReadOnly<T extends object>(attributes: T): StoredAttributes {
  const copy = { ...attributes } as Record<string, unknown>;
  for (const key of READ_ONLY) delete copy[key];
  return copy as unknown as StoredAttributes;
}

/** RFC 7386 JSON merge patch: objects merge, everything else replaces, null removes. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const result: Record<string, unknown> =
    target !== null && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = mergePatch(result[key], value);
  }
  return result;
}

/**
 * The checks a schema cannot make: addresses from the tenant's pool, origins the origin policy
 * allows (literal addresses; names are checked at connect time), and ids of the tenant's certificates.
 */
async function checkReferences(
  deps: ApiDeps,
  log: FastifyBaseLogger,
  tenantId: string,
  type: ProxyType,
  attributes: StoredAttributes,
): Promise<void> {
  const errors: JsonApiErrorObject[] = [];
  const fail = (code: ApiErrorCode, pointer: string, detail: string) =>
    errors.push(errorObject(code, detail, { pointer: `/data/attributes/${pointer}` }));

  const pool = new Set(deps.settings.frontendIps.map(canonicalIp));
  const { frontend } = attributes;
  if (frontend.ipv4 === undefined && frontend.ipv6 === undefined) {
    fail('FRONTEND_IP_REQUIRED', 'frontend', 'frontend needs ipv4, ipv6 or both');
  }
  for (const family of ['ipv4', 'ipv6'] as const) {
    const ip = frontend[family];
    if (ip !== undefined && !pool.has(canonicalIp(ip))) {
      fail('UNKNOWN_FRONTEND_IP', `frontend/${family}`, `${ip} is not one of the account's available front-end IPs`);
    }
  }
  const policy = originPolicyOf(deps);
  for (const [index, host] of attributes.backend.hosts.entries()) {
    const refused = originError(policy, host.address, host.port, `/data/attributes/backend/hosts/${index}/address`, log);
    if (refused !== undefined) errors.push(refused);
  }

  if (type === HTTP_PROXY) {
    const http = attributes as HttpProxyAttributes;
    const certificate = async (id: string, pointer: string, purpose: 'frontend' | 'origin client') => {
      const record = await deps.store.certificates.get(tenantId, id);
      if (!record) return fail('UNKNOWN_CERTIFICATE', pointer, `certificate ${id} does not exist`);
      if (purpose === 'origin client' && record.source !== 'CUSTOMER') {
        fail('CUSTOMER_CERTIFICATE_REQUIRED', pointer, 'the certificate presented to the origin must be a customer-uploaded one');
      }
    };
    const caCertificates = async (ids: readonly string[], pointer: string) => {
      for (const [index, id] of ids.entries()) {
        if (!(await deps.store.caCertificates.get(tenantId, id))) {
          fail('UNKNOWN_CA_CERTIFICATE', `${pointer}/${index}`, `CA certificate ${id} does not exist`);
        }
      }
    };

    if (http.frontend.certificateId) await certificate(http.frontend.certificateId, 'frontend/certificateId', 'frontend');
    const verification = http.frontend.clientCertificateVerification;
    if (verification) {
      if (!http.frontend.certificateId) {
        fail(
          'TLS_REQUIRED',
          'frontend/clientCertificateVerification',
          'client certificate verification needs HTTPS: set frontend.certificateId',
        );
      }
      await caCertificates(verification.caCertificateIds, 'frontend/clientCertificateVerification/caCertificateIds');
    }
    const tls = http.backend.tlsSettings;
    if (tls?.clientCertificateId) await certificate(tls.clientCertificateId, 'backend/tlsSettings/clientCertificateId', 'origin client');
    const verify = tls?.verifyCertificate;
    if (verify?.mode === 'CUSTOM_TRUSTSTORE') {
      if (!verify.caCertificateIds?.length) {
        fail(
          'CA_CERTIFICATES_REQUIRED',
          'backend/tlsSettings/verifyCertificate/caCertificateIds',
          'CUSTOM_TRUSTSTORE needs at least one CA certificate ID',
        );
      } else {
        await caCertificates(verify.caCertificateIds, 'backend/tlsSettings/verifyCertificate/caCertificateIds');
      }
    } else if (verify?.mode === 'SYSTEM_TRUSTSTORE' && verify.caCertificateIds?.length) {
      fail(
        'UNEXPECTED_CA_CERTIFICATES',
        'backend/tlsSettings/verifyCertificate/caCertificateIds',
        'caCertificateIds go with CUSTOM_TRUSTSTORE only',
      );
    }
  }
  if (errors.length > 0) throw ApiError.many(errors);
}
