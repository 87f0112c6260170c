/**
 * Insight export: the tenant's WAF and rate-limiting events in arrival order, paged by cursor
 * (the id of the last event seen).
 */
import { Type } from '@sinclair/typebox';
import { INSIGHT_EVENT_TYPES, InsightEventResource, type InsightEvent, type InsightEventType } from '@tps/model';
import type { RoutePlugin } from '../types.ts';
import { ApiError, JSONAPI_MEDIA_TYPE } from '../jsonapi.ts';
import { toEventResource } from '../insight-event-resource.ts';
import { type InsightEventRepository, UnknownCursorError } from '../../store/insight-events.ts';

const PATH = '/api/v2/insight/http-security-events';
export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 1000;

const Query = Type.Object(
  {
    'filter[tenantId]': Type.Optional(
      Type.String({ format: 'uuid', description: "Tenant UUID. Required by the spec; when absent, the access token's tenant." }),
    ),
    'filter[eventType]': Type.Optional(Type.String({ enum: [...INSIGHT_EVENT_TYPES] })),
    'page[after]': Type.Optional(Type.String({ format: 'uuid', description: 'Cursor: events after the event with this id.' })),
    'page[size]': Type.Integer({ minimum: 1, maximum: MAX_PAGE_SIZE, default: DEFAULT_PAGE_SIZE }),
  },
  { additionalProperties: true },
);

export const insightRoutes: RoutePlugin = async (app, { deps }) => {
  app.get(
    PATH,
    {
      config: { scope: 'insight' },
      schema: {
        tags: ['insight'],
        security: [{ bearer: [] }],
        summary: 'Export WAF and rate-limiting events',
        description:
          'Events of all proxies of the tenant, in order of arrival. `links.next` continues after the last event of ' +
          'the page (with no new events it repeats the cursor, so it can be polled). `first` carries only page[size].',
        querystring: Query,
        response: {
          200: Type.Object({
            data: Type.Array(InsightEventResource),
            links: Type.Object({ self: Type.String(), first: Type.String(), next: Type.String() }),
          }),
        },
      },
    },
    async (request, reply) => {
      const query = request.query;
      const tenantId = insightTenant(query['filter[tenantId]'], request.principal!.tenantId);
      // A string to the type system; the schema lets INSIGHT_EVENT_TYPES through only.
      const type = query['filter[eventType]'] as InsightEventType | undefined;
      const after = query['page[after]'];
      const size = query['page[size]'];
      const events = await insightPage(deps.store.insightEvents, { tenantId, type, after, size });
      void reply.type(JSONAPI_MEDIA_TYPE);
      return {
        data: events.map(toEventResource),
        links: insightLinks(PATH, { tenantId, eventType: type }, after, size, events.at(-1)?.id),
      };
    },
  );
};

/** The tenant a paged insight call reads: the access token's own (absent: that one); another's is refused. */
export function insightTenant(requested: string | undefined, tokenTenant: string): string {
  const tenantId = requested ?? tokenTenant;
  if (tenantId !== tokenTenant) {
    throw new ApiError('FOREIGN_TENANT', "the access token's service account does not belong to this tenant", {
      parameter: 'filter[tenantId]',
    });
  }
  return tenantId;
}

/** One page of the tenant's events after the cursor; a cursor the store does not know is the caller's error. */
export async function insightPage(
  events: InsightEventRepository,
  query: Parameters<InsightEventRepository['page']>[0],
): Promise<InsightEvent[]> {
  try {
    return await events.page(query);
  } catch (error) {
    if (error instanceof UnknownCursorError) throw new ApiError('UNKNOWN_CURSOR', error.message, { parameter: 'page[after]' });
    throw error;
  }
}

/**
 * A page's links: `self` (the cursor asked for), `first` (page[size] only) and `next`, after the
 * page's last event (with none, the same cursor again: the export can be polled).
 */
export function insightLinks(
  path: string,
  filter: { tenantId: string; eventType?: string | undefined },
  after: string | undefined,
  size: number,
  lastId: string | undefined,
): { self: string; first: string; next: string } {
  const link = (cursor: string | undefined) => {
    const params = new URLSearchParams();
    params.set('filter[tenantId]', filter.tenantId);
    if (filter.eventType) params.set('filter[eventType]', filter.eventType);
    if (cursor) params.set('page[after]', cursor);
    params.set('page[size]', String(size));
    return `${path}?${params.toString().replace(/%5B/g, '[').replace(/%5D/g, ']')}`;
  };
  return { self: link(after), first: `${path}?page[size]=${size}`, next: link(lastId ?? after) };
}
