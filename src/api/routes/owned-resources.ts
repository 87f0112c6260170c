/**
 * List, get and delete of a tenant-owned resource that proxies refer to (certificates, CA
 * certificates): the same three routes, answers and errors for each such resource.
 */
import { Type, type TSchema } from '@sinclair/typebox';
import { Uuid } from '@tps/model';
import type { RouteInstance } from '../types.ts';
import { ApiError, JSONAPI_MEDIA_TYPE, notFound } from '../jsonapi.ts';
import type { DeleteOutcome } from '../../store/referenced-resources.ts';

export interface OwnedResource<R> {
  base: string;
  /** How errors name it: "certificate", "CA certificate". */
  name: string;
  tags: string[];
  resourceSchema: TSchema;
  list(tenantId: string): Promise<R[]>;
  get(tenantId: string, id: string): Promise<R | undefined>;
  delete(tenantId: string, id: string): Promise<DeleteOutcome>;
  present(record: R): unknown;
}

const ErrorDocument = Type.Object({ errors: Type.Array(Type.Unknown()) });

/** Names the tenant's own configurations only (the store never hands over another tenant's). */
export function inUse(what: string, id: string, configIds: readonly string[]): ApiError {
  const users = configIds.length > 0 ? `the traffic configurations ${configIds.join(', ')}` : 'a traffic configuration';
  return new ApiError('IN_USE', `${what} ${id} is used by ${users}`);
}

export function registerOwnedResourceRoutes<R>(app: RouteInstance, resource: OwnedResource<R>): void {
  const { base, name, tags } = resource;
  const security = [{ bearer: [] }];
  const params = Type.Object({ id: Uuid });

  app.get(
    base,
    {
      config: { scope: 'read' },
      schema: {
        tags,
        security,
        summary: `List the tenant's ${name}s`,
        response: { 200: Type.Object({ data: Type.Array(resource.resourceSchema) }) },
      },
    },
    async (request, reply) => {
      void reply.type(JSONAPI_MEDIA_TYPE);
      return { data: (await resource.list(request.principal!.tenantId)).map((record) => resource.present(record)) };
    },
  );

  app.get(
    `${base}/:id`,
    {
      config: { scope: 'read' },
      schema: {
        tags,
        security,
        summary: `Get one ${name}`,
        params,
        response: { 200: Type.Object({ data: resource.resourceSchema }), 404: ErrorDocument },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const record = await resource.get(request.principal!.tenantId, id);
      if (!record) throw notFound(name, id);
      void reply.type(JSONAPI_MEDIA_TYPE);
      return { data: resource.present(record) };
    },
  );

  app.delete(
    `${base}/:id`,
    {
      config: { scope: 'write' },
      schema: {
        tags,
        security,
        summary: `Delete a ${name} (409 while a proxy uses it)`,
        params,
        response: { 204: Type.Null(), 404: ErrorDocument, 409: ErrorDocument },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const outcome = await resource.delete(request.principal!.tenantId, id);
      if (!outcome.deleted) {
        if (outcome.notFound) throw notFound(name, id);
        throw inUse(name, id, outcome.referencedBy);
      }
      void reply.code(204);
    },
  );
}
