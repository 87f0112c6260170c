/**
 * Insight retention as an operator sets it: a store holding events older than
 * TPS_INSIGHT_RETENTION_DAYS and more than the tenant's share of TPS_INSIGHT_MAX_BYTES, opened by
 * `tps serve`: the old events go, the tenant is cut to its share oldest first, and the export
 * shows what is left, in order. Both stores.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTps, type Tps, type StoreKind } from '../support/tps.ts';
import { freshPostgresDatabase } from '../support/postgres.ts';
import { TenantApi } from '../support/api-client.ts';
import { waitFor } from '../support/wait.ts';
import { wafEvent, type InsightEvent } from '../support/events.ts';
import { openStore } from '../../src/store/index.ts';

const EVENTS = '/api/v2/insight/http-security-events';
const DAY = 86_400_000;
const MAX_BYTES = 1024 * 1024;
const SHARE_PERCENT = 40;

for (const kind of ['sqlite', 'postgres'] as StoreKind[]) {
  describe(`insight retention in tps serve (${kind} store)`, () => {
    let tps: Tps;
    let dataDir: string;
    let api: TenantApi;
    const old: InsightEvent[] = [];
    const recent: InsightEvent[] = [];

    before(async () => {
      dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-retention-e2e-'));
      const databaseUrl = kind === 'postgres' ? await freshPostgresDatabase() : undefined;
      // The store as it was left: a tenant, 45-day-old events and more recent ones than its share holds.
      const store = await openStore({ dataDir, databaseUrl });
      const tenant = await store.tenants.create('retention');
      const account = await store.serviceAccounts.create(tenant.id, 'reader', ['read', 'insight']);
      const configId = '00000000-0000-4000-8000-0000000000f1';
      const now = Date.now();
      for (let i = 0; i < 50; i++)
        old.push(wafEvent(tenant.id, configId, { timestamp: new Date(now - 45 * DAY + i * 1000).toISOString() }));
      for (let i = 0; i < 800; i++)
        recent.push(wafEvent(tenant.id, configId, { timestamp: new Date(now - 3600_000 + i * 1000).toISOString() }));
      await store.insightEvents.append(old);
      for (let i = 0; i < recent.length; i += 200) await store.insightEvents.append(recent.slice(i, i + 200));
      await store.close();

      tps = await startTps({
        store: kind,
        env: {
          TPS_DATA_DIR: dataDir,
          ...(databaseUrl && { TPS_DATABASE_URL: databaseUrl }),
          TPS_INSIGHT_RETENTION_DAYS: '30',
          TPS_INSIGHT_MAX_BYTES: String(MAX_BYTES),
          TPS_INSIGHT_TENANT_SHARE_PERCENT: String(SHARE_PERCENT),
        },
      });
      api = await TenantApi.connect(tps, { tenantId: tenant.id, clientId: account.clientId, clientSecret: account.clientSecret });
    });
    after(async () => {
      await tps?.stop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });

    it('removes the expired events and cuts the tenant to its share, oldest first', async () => {
      const exported = await waitFor(
        'the retention run at start',
        async () => {
          const answer = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&page[size]=1000`);
          const ids = (answer.body.data as { id: string }[]).map((event) => event.id);
          return ids.length < recent.length && ids;
        },
        { timeoutMs: 30_000 },
      );
      assert.ok(exported.length > 0);
      assert.deepEqual(
        exported,
        recent.slice(recent.length - exported.length).map((event) => event.id),
        'the newest events, in order, none of the expired',
      );
      const store = await openStore({ dataDir, databaseUrl: tps.env.TPS_DATABASE_URL });
      try {
        const held = await store.db.one<{ bytes: number }>('SELECT SUM(stored_bytes) AS bytes FROM insight_events WHERE tenant_id = ?', [
          api.tenantId,
        ]);
        assert.ok(Number(held!.bytes) <= (MAX_BYTES * SHARE_PERCENT) / 100, `${held!.bytes} bytes kept`);
      } finally {
        await store.close();
      }
    });
  });
}
