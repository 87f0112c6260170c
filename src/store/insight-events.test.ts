/**
 * The export's cursor while events are being written: two writers (insight writer threads with
 * connections of their own, as two edge nodes) append at once while a reader pages by cursor; the
 * reader sees every stored event exactly once, each writer's events in the order it wrote them.
 * Also: headers are stored once and read back as they were.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { openStore, type Store } from './index.ts';
import { InsightWriter } from './insight-writer.ts';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';
import { wafEvent, rateLimitEvent } from '../../test/support/events.ts';
import type { InsightEvent } from '@tps/model';

const CONFIG = '00000000-0000-4000-8000-0000000000e1';
const LIMITS = { retentionDays: 30, maxBytes: 1024 ** 3, tenantSharePercent: 100 };

for (const kind of ['sqlite', 'postgres'] as const) {
  describe(`insight events (${kind})`, () => {
    let store: Store;
    let dataDir: string;
    let databaseUrl: string | undefined;

    before(async () => {
      dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-events-'));
      databaseUrl = kind === 'postgres' ? await freshPostgresDatabase() : undefined;
      store = await openStore({ dataDir, databaseUrl });
    });
    after(async () => {
      await store.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });

    it('pages every stored event exactly once while two writers append', async () => {
      const tenantId = crypto.randomUUID();
      const otherTenant = crypto.randomUUID();
      const writers = await Promise.all(
        ['node-a', 'node-b'].map((writer) => InsightWriter.start({ dataDir, databaseUrl, writer, limits: LIMITS })),
      );
      const written = new Map<string, string>();
      const order: Record<string, string[]> = { 'node-a': [], 'node-b': [] };
      let writing = true;
      const ingest = Promise.all(
        writers.map(async (writer, index) => {
          const name = index === 0 ? 'node-a' : 'node-b';
          for (let batch = 0; batch < 30; batch++) {
            const events: InsightEvent[] = [];
            for (let i = 0; i < 1 + ((batch * 7 + index * 3) % 40); i++) {
              const event =
                i % 9 === 8 ? rateLimitEvent(tenantId, CONFIG) : wafEvent(tenantId, CONFIG, i % 4 === 0 ? { requestCount: 1 + i } : {});
              events.push(event, wafEvent(otherTenant, CONFIG));
              written.set(event.id, name);
              order[name]!.push(event.id);
            }
            await writer.write(events, []);
          }
        }),
      ).finally(() => (writing = false));

      const seen: string[] = [];
      let after: string | undefined;
      const readPage = async () => {
        const page = await store.insightEvents.page({ tenantId, after, size: 37 });
        seen.push(...page.map((event) => event.id));
        after = page.at(-1)?.id ?? after;
        // node:sqlite answers synchronously: let the writers' replies in between pages.
        await new Promise((resolve) => setImmediate(resolve));
        return page.length;
      };
      while (writing) await readPage();
      await ingest;
      while ((await readPage()) > 0);
      await Promise.all(writers.map((writer) => writer.close()));

      assert.equal(new Set(seen).size, seen.length, 'no event twice');
      assert.deepEqual([...seen].sort(), [...written.keys()].sort(), 'every event');
      for (const name of ['node-a', 'node-b']) {
        assert.deepEqual(
          seen.filter((id) => written.get(id) === name),
          order[name],
          `${name}'s events in the order it wrote them`,
        );
      }
    });

    it('holds back events behind a write still running in this database, not in another one', { skip: kind !== 'postgres' }, async () => {
      const tenantId = crypto.randomUUID();
      const running = async (url: string) => {
        const client = new pg.Client(url);
        await client.connect();
        await client.query('BEGIN');
        await client.query('SELECT pg_current_xact_id()');
        return client;
      };
      const elsewhere = await running(await freshPostgresDatabase());
      const here = await running(databaseUrl!);
      try {
        const first = [wafEvent(tenantId, CONFIG), wafEvent(tenantId, CONFIG)];
        // `here` began before these were written: a reader must not pass them until it ends.
        await store.insightEvents.append(first);
        assert.deepEqual(await store.insightEvents.page({ tenantId, size: 10 }), [], 'held back by the older transaction of this database');
        await here.query('ROLLBACK');
        assert.deepEqual(
          await store.insightEvents.page({ tenantId, size: 10 }),
          first,
          'the transaction of another database holds nothing back',
        );
      } finally {
        await here.end();
        await elsewhere.query('ROLLBACK');
        await elsewhere.end();
      }
    });

    it('stores the headers once and reads the event back as it was written', async () => {
      const tenantId = crypto.randomUUID();
      const plain = wafEvent(tenantId, CONFIG);
      // Headers that messageHeader does not give back (not expected from the parsers): kept as they are.
      const odd = wafEvent(tenantId, CONFIG, {
        request: {
          method: 'GET',
          path: '/',
          headers: ['X-A: 1\nX-B: 2'],
          messageHeader: 'GET / HTTP/1.1\nX-A: 1\nX-B: 2',
          statusCode: 403,
        },
      });
      await store.insightEvents.append([plain, odd]);
      assert.deepEqual(await store.insightEvents.page({ tenantId, size: 10 }), [plain, odd]);
      const stored = await store.db.one<{ body: string }>('SELECT body FROM insight_events WHERE id = ?', [plain.id]);
      assert.equal(JSON.parse(stored!.body).request.headers, undefined, 'headers are not stored twice');
      assert.equal(stored!.body.split('User-Agent: curl/8.0').length - 1, 1);
    });

    it('writes rate-limit episode updates after their event, and counts the bytes they change', async () => {
      const tenantId = crypto.randomUUID();
      const episode = rateLimitEvent(tenantId, CONFIG);
      const writer = await InsightWriter.start({ dataDir, databaseUrl, writer: 'node-c', limits: LIMITS });
      try {
        const update = {
          lastBlockedAt: new Date().toISOString(),
          blockedRequests: 123456,
          blockedUntil: new Date(Date.now() + 60_000).toISOString(),
        };
        await writer.write([episode], [{ eventId: episode.id, update }]);
        const [stored] = await store.insightEvents.page({ tenantId, size: 1 });
        assert.equal(stored?.type === 'APP_DDOS_ATTACK' && stored.action === 'BLOCKED' && stored.rateLimit.blockedRequests, 123456);
        const rows = await store.db.one<{ bytes: number; usage: number }>(
          `SELECT (SELECT SUM(stored_bytes) FROM insight_events WHERE tenant_id = ?) AS bytes,
                  (SELECT SUM(bytes) FROM insight_usage WHERE tenant_id = ?) AS usage`,
          [tenantId, tenantId],
        );
        assert.equal(Number(rows!.usage), Number(rows!.bytes));
      } finally {
        await writer.close();
      }
    });
  });
}
