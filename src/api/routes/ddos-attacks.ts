/**
 * The aggregated endpoint the spec announces for DDoS attacks: the tenant's distributed
 * application-layer attacks (one per episode, proxy and edge node), oldest first, paged by cursor
 * like the insight export. An attack is listed once it has ended (its figures are final then).
 */
import { Type } from '@sinclair/typebox';
import { DdosAttackResource, type DistributedAttackEvent } from '@tps/model';
import { JSONAPI_MEDIA_TYPE } from '../jsonapi.ts';
import type { RoutePlugin } from '../types.ts';
import { DEFAULT_PAGE_SIZE, insightLinks, insightPage, insightTenant, MAX_PAGE_SIZE } from './insight.ts';

const PATH = '/api/v2/insight/ddos-attacks';

const Query = Type.Object(
  {
    'filter[tenantId]': Type.Optional(Type.String({ format: 'uuid', description: "Tenant UUID; when absent, the access token's tenant." })),
    'page[after]': Type.Optional(Type.String({ format: 'uuid', description: 'Cursor: attacks after the attack with this id.' })),
    'page[size]': Type.Integer({ minimum: 1, maximum: MAX_PAGE_SIZE, default: DEFAULT_PAGE_SIZE }),
  },
  { additionalProperties: true },
);

export function toDdosAttackResource(event: DistributedAttackEvent) {
  return {
    type: 'ddosAttack' as const,
    id: event.id,
    attributes: {
      ...event.attack,
      supportId: event.supportId,
      tpc: event.tpc,
      destinationIp: event.destinationIp,
      firstSource: event.source,
    },
    relationships: {
      belongsTo: { data: { type: 'TENANT' as const, id: event.tenantId } },
      trafficConfig: { data: { type: 'trafficConfig' as const, id: event.trafficConfigId } },
    },
  };
}

export const ddosAttackRoutes: RoutePlugin = async (app, { deps }) => {
  app.get(
    PATH,
    {
      config: { scope: 'insight' },
      schema: {
        tags: ['insight'],
        security: [{ bearer: [] }],
        summary: 'List distributed application-layer DDoS attacks',
        description:
          "Attacks on the tenant's HTTP proxies detected by appDdos (one per episode and edge node), in order of arrival " +
          '(when they ended). Each is also an APP_DDOS_ATTACK event with action CHALLENGED in the insight export, same id. ' +
          '`links.next` continues after the last attack of the page (with none newer it repeats the cursor, so it can be polled).',
        querystring: Query,
        response: {
          200: Type.Object({
            data: Type.Array(DdosAttackResource),
            links: Type.Object({ self: Type.String(), first: Type.String(), next: Type.String() }),
          }),
        },
      },
    },
    async (request, reply) => {
      const query = request.query;
      const tenantId = insightTenant(query['filter[tenantId]'], request.principal!.tenantId);
      const after = query['page[after]'];
      const size = query['page[size]'];
      const events = await insightPage(deps.store.insightEvents, { tenantId, type: 'APP_DDOS_ATTACK', action: 'CHALLENGED', after, size });
      const attacks = events.filter(
        (event): event is DistributedAttackEvent => event.type === 'APP_DDOS_ATTACK' && event.action === 'CHALLENGED',
      );
      void reply.type(JSONAPI_MEDIA_TYPE);
      return {
        data: attacks.map(toDdosAttackResource),
        links: insightLinks(PATH, { tenantId }, after, size, events.at(-1)?.id),
      };
    },
  );
};
