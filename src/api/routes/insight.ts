/**
 * Insight export: the tenant's WAF and rate-limiting events in arrival order, paged by cursor
 * (the id of the last event seen).
 */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../server.ts';
import { ApiError, JSONAPI_MEDIA_TYPE } from '../jsonapi.ts';
import { Uuid } from '../schemas/common.ts';
import { UnknownCursorError } from '../../store/insight-events.ts';
import type { InsightEvent, InsightEventType } from '../../insight/event.ts';

const PATH = '/api/v2/insight/http-security-events';
export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 1000;

const Query = Type.Object(
  {
    'filter[tenantId]': Type.Optional(
      Type.String({ format: 'uuid', description: "Tenant UUID. Required by the spec; when absent, the access token's tenant." }),
    ),
    'filter[eventType]': Type.Optional(Type.String({ enum: ['WAF_EVENT', 'APP_DDOS_ATTACK'] })),
    'page[after]': Type.Optional(Type.String({ format: 'uuid', description: 'Cursor: events after the event with this id.' })),
    'page[size]': Type.Integer({ minimum: 1, maximum: MAX_PAGE_SIZE, default: DEFAULT_PAGE_SIZE }),
  },
  { additionalProperties: true },
);

const EventResource = Type.Object({
  type: Type.String({ enum: ['WAF_EVENT', 'APP_DDOS_ATTACK'] }),
  id: Uuid,
  attributes: Type.Object({
    timestamp: Type.String({ description: 'ISO 8601 UTC with milliseconds.' }),
    rules: Type.Array(
      Type.Object({
        modSecId: Type.Integer(),
        name: Type.String(),
        matchedData: Type.Object({ status: Type.String({ enum: ['DISABLED', 'ENABLED'] }), value: Type.Union([Type.String(), Type.Null()]) }),
        matchedVariable: Type.Optional(
          Type.Union([Type.String(), Type.Null()], { description: 'The request field that matched (ARGS:q...): what a rule exclusion names. An extension of the spec.' }),
        ),
      }),
    ),
    supportId: Type.String({ pattern: '^[0-9a-f]{32}$' }),
    action: Type.String({ enum: ['BLOCKED', 'LOGGED'] }),
    tpc: Type.String({ pattern: '^[A-Z]{3}$' }),
    destinationIp: Type.String(),
    source: Type.Object({ countryCode: Type.String(), ip: Type.String(), port: Type.Integer() }),
    request: Type.Object({
      method: Type.String(),
      path: Type.String(),
      headers: Type.Array(Type.String()),
      messageHeader: Type.String(),
      statusCode: Type.Integer(),
    }),
    rateLimit: Type.Optional(Type.Unknown({ description: 'APP_DDOS_ATTACK only: threshold, observed and blocked requests, episode times.' })),
    requestCount: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'WAF_EVENT only: how many requests this event stands for. 1 for an event stored whole. Under a flood, the first ' +
          'events of each proxy, source IP and matched rule set in a minute are stored whole and the requests after them ' +
          'are counted: a sampled event (one of those requests, with its own id, time and request) stands for all of them. ' +
          'The requestCount of the exported events adds up to the requests blocked or logged. An extension of the spec.',
      }),
    ),
    bodyTruncated: Type.Optional(
      Type.Boolean({
        description:
          'WAF_EVENT only, present when true: the request body was longer than the WAF inspects (waf.requestBodyLimit) and only ' +
          'its first part was inspected, the rest passed uninspected (waf.bodyLimitAction PROCESS_PARTIAL). An extension of the spec.',
      }),
    ),
  }),
  relationships: Type.Object({
    belongsTo: Type.Object({ data: Type.Object({ type: Type.Literal('TENANT'), id: Uuid }) }),
    trafficConfig: Type.Object({ data: Type.Object({ type: Type.Literal('trafficConfig'), id: Uuid }) }),
  }),
});

export function toEventResource(event: InsightEvent) {
  return {
    type: event.type,
    id: event.id,
    attributes: {
      timestamp: event.timestamp,
      rules: event.rules,
      supportId: event.supportId,
      action: event.action,
      tpc: event.tpc,
      destinationIp: event.destinationIp,
      source: event.source,
      request: event.request,
      ...(event.type === 'APP_DDOS_ATTACK' && { rateLimit: event.rateLimit }),
      ...(event.type === 'WAF_EVENT' && { requestCount: event.requestCount ?? 1 }),
      ...(event.type === 'WAF_EVENT' && event.bodyTruncated === true && { bodyTruncated: true }),
    },
    relationships: {
      belongsTo: { data: { type: 'TENANT' as const, id: event.tenantId } },
      trafficConfig: { data: { type: 'trafficConfig' as const, id: event.trafficConfigId } },
    },
  };
}

export function registerInsightRoutes(app: FastifyInstance, deps: ApiDeps): void {
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
            data: Type.Array(EventResource),
            links: Type.Object({ self: Type.String(), first: Type.String(), next: Type.String() }),
          }),
        },
      },
    },
    async (request, reply) => {
      const query = request.query as Record<string, string | number | undefined>;
      const tenantId = (query['filter[tenantId]'] as string | undefined) ?? request.principal!.tenantId;
      if (tenantId !== request.principal!.tenantId) {
        throw new ApiError(403, 'FOREIGN_TENANT', "the access token's service account does not belong to this tenant", {
          parameter: 'filter[tenantId]',
        });
      }
      const type = query['filter[eventType]'] as InsightEventType | undefined;
      const after = query['page[after]'] as string | undefined;
      const size = Number(query['page[size]']);
      let events: InsightEvent[];
      try {
        events = await deps.store.insightEvents.page({ tenantId, type, after, size });
      } catch (error) {
        if (error instanceof UnknownCursorError) throw new ApiError(400, 'UNKNOWN_CURSOR', error.message, { parameter: 'page[after]' });
        throw error;
      }
      const link = (cursor: string | undefined) => {
        const params = new URLSearchParams();
        params.set('filter[tenantId]', tenantId);
        if (type) params.set('filter[eventType]', type);
        if (cursor) params.set('page[after]', cursor);
        params.set('page[size]', String(size));
        return `${PATH}?${params.toString().replace(/%5B/g, '[').replace(/%5D/g, ']')}`;
      };
      void reply.type(JSONAPI_MEDIA_TYPE);
      return {
        data: events.map(toEventResource),
        links: {
          self: link(after),
          first: `${PATH}?page[size]=${size}`,
          next: link(events.at(-1)?.id ?? after),
        },
      };
    },
  );
}
