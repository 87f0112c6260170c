/** The insight export: every event exactly once, in arrival order, paged by cursor. */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTps, createTenant, openStoreOf, type Tps, type StoreKind } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { wafEvent, rateLimitEvent, type InsightEvent } from '../support/events.ts';
import type { Store } from '../../src/store/index.ts';

const EVENTS = '/api/v2/insight/http-security-events';

for (const store of ['sqlite', 'postgres'] as StoreKind[]) {
  describe(`insight export (${store} store)`, () => {
    let tps: Tps;
    let api: TenantApi;
    let storeOfTps: Store;
    const seeded: InsightEvent[] = [];

    before(async () => {
      tps = await startTps({ store });
      const credentials = await createTenant(tps);
      api = await TenantApi.connect(tps, credentials);
      const other = await createTenant(tps);
      storeOfTps = await openStoreOf(tps);
      const configId = '11111111-1111-4111-8111-111111111111';
      // 250 events of this tenant, interleaved with another tenant's, written in batches as edge nodes do.
      for (let batch = 0; batch < 5; batch++) {
        const events: InsightEvent[] = [];
        for (let i = 0; i < 50; i++) {
          const event = i % 10 === 0 ? rateLimitEvent(credentials.tenantId, configId) : wafEvent(credentials.tenantId, configId);
          events.push(event, wafEvent(other.tenantId, configId));
          seeded.push(event);
        }
        await storeOfTps.insightEvents.append(events);
      }
    });
    after(async () => {
      await storeOfTps.close();
      await tps.stop();
    });

    it('pages through every event exactly once, in order, following links.next', async () => {
      const seen: string[] = [];
      let path = `${EVENTS}?filter[tenantId]=${api.tenantId}&page[size]=100`;
      const sizes: number[] = [];
      for (let page = 0; page < 10; page++) {
        const answer = await api.get(path);
        assert.equal(answer.status, 200, JSON.stringify(answer.body));
        sizes.push(answer.body.data.length);
        seen.push(...answer.body.data.map((event: { id: string }) => event.id));
        if (answer.body.data.length === 0) break;
        path = answer.body.links.next;
      }
      assert.deepEqual(sizes, [100, 100, 50, 0]);
      assert.deepEqual(
        seen,
        seeded.map((event) => event.id),
      );
    });

    it('answers the links the spec names', async () => {
      const answer = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&page[size]=2`);
      const [, second] = answer.body.data;
      assert.equal(answer.body.links.first, `${EVENTS}?page[size]=2`);
      assert.equal(answer.body.links.self, `${EVENTS}?filter[tenantId]=${api.tenantId}&page[size]=2`);
      assert.equal(answer.body.links.next, `${EVENTS}?filter[tenantId]=${api.tenantId}&page[after]=${second.id}&page[size]=2`);
      const first = await api.get(answer.body.links.first);
      assert.deepEqual(first.body.data, answer.body.data, "`first` works without the filter: the token's tenant");
    });

    it('shows each WAF_EVENT field as the spec does', async () => {
      const answer = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=WAF_EVENT&page[size]=1`);
      const [event] = answer.body.data;
      const expected = seeded.find((candidate) => candidate.type === 'WAF_EVENT')!;
      assert.equal(event.type, 'WAF_EVENT');
      assert.equal(event.id, expected.id);
      assert.match(event.attributes.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.deepEqual(event.attributes.rules, [
        { modSecId: 942100, name: 'SQL Injection Attack Detected via libinjection', matchedData: { status: 'DISABLED', value: null } },
      ]);
      assert.match(event.attributes.supportId, /^[0-9a-f]{32}$/);
      assert.equal(event.attributes.action, 'BLOCKED');
      assert.match(event.attributes.tpc, /^[A-Z]{3}$/);
      assert.equal(event.attributes.destinationIp, '127.0.0.2');
      assert.deepEqual(event.attributes.source, { countryCode: 'DE', ip: '127.0.0.20', port: 40000 });
      assert.equal(event.attributes.request.method, 'GET');
      assert.equal(event.attributes.request.statusCode, 403);
      assert.ok(event.attributes.request.headers.every((header: string) => /^[^:]+: /.test(header)));
      assert.match(event.attributes.request.messageHeader, /^GET .* HTTP\/1\.1\nHost: /);
      assert.deepEqual(event.relationships.belongsTo.data, { type: 'TENANT', id: api.tenantId });
    });

    it('filters by event type', async () => {
      const answer = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=APP_DDOS_ATTACK&page[size]=1000`);
      assert.equal(answer.body.data.length, 25);
      assert.ok(
        answer.body.data.every(
          (event: { type: string; attributes: { rateLimit: unknown } }) => event.type === 'APP_DDOS_ATTACK' && event.attributes.rateLimit,
        ),
      );
    });

    it('refuses bad paging parameters with 400 naming the parameter', async () => {
      const cases: [string, string][] = [
        ['page[size]=1001', 'page[size]'],
        ['page[size]=0', 'page[size]'],
        ['page[size]=ten', 'page[size]'],
        ['page[after]=not-a-uuid', 'page[after]'],
        ['page[after]=00000000-0000-4000-8000-000000000000', 'page[after]'],
        ['filter[eventType]=OTHER', 'filter[eventType]'],
        ['filter[tenantId]=42', 'filter[tenantId]'],
      ];
      for (const [query, parameter] of cases) {
        const answer = await api.get(`${EVENTS}?${query}`);
        assert.equal(answer.status, 400, query);
        assert.equal(answer.body.errors[0].source.parameter, parameter, JSON.stringify(answer.body));
      }
    });
  });
}
