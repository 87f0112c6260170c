/**
 * The insight writer thread (see insight-writer.ts): its own connection to the store, the edge
 * node's event batches in order, and the retention work on a timer and past a cap.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { openDb } from './db.ts';
import { InsightEventRepository } from './insight-events.ts';
import { enforceInsightRetention, firstKeptDay, tenantTargets, tenantUsage, type RetentionReport } from './insight-retention.ts';
import { dayOf } from './insight-body.ts';
import {
  writeInChunks,
  InsightWriteError,
  type FromWriterThread,
  type ToWriterThread,
  type WriterThreadSettings,
} from './insight-writer.ts';

/** How often, at most, a write checks the caps (one small query). */
const CAP_CHECK_MS = 2_000;

const port = parentPort!;
const settings = workerData as WriterThreadSettings;
const send = (message: FromWriterThread) => port.postMessage(message);

// Two connections at most on PostgreSQL: writes and retention take turns on one queue.
const db = await openDb({ dataDir: settings.dataDir, databaseUrl: settings.databaseUrl, poolSize: 2 });
const repository = new InsightEventRepository(db, { writer: settings.writer });
let queue: Promise<void> = Promise.resolve();
let lastCapCheck = 0;
let closing = false;

const enqueue = (work: () => Promise<void>) => {
  queue = queue.then(work, work);
};

async function maintain(now = Date.now()): Promise<RetentionReport> {
  const report = await enforceInsightRetention(db, settings.limits, now);
  if (report.droppedPartitions > 0) repository.forgetPartitions();
  // Today's and tomorrow's partitions before their first event: the append path rarely makes one.
  if (db.dialect === 'postgres')
    await repository.ensurePartitions([dayOf(new Date(now).toISOString()), dayOf(new Date(now + 86_400_000).toISOString())]);
  return report;
}

async function overCap(): Promise<boolean> {
  const usage = await tenantUsage(db);
  const targets = tenantTargets(new Map([...usage].map(([tenant, held]) => [tenant, held.bytes])), settings.limits);
  return [...usage].some(([tenant, held]) => held.bytes > (targets.get(tenant) ?? 0));
}

async function write(message: ToWriterThread & { kind: 'write' }): Promise<void> {
  // An event older than the retention would be removed at the next run: it is not written at all.
  const keepFrom = firstKeptDay(Date.now(), settings.limits.retentionDays);
  const events = message.events.filter((event) => dayOf(event.timestamp) >= keepFrom);
  try {
    await writeInChunks(repository, events, message.updates);
  } catch (error) {
    const written = error instanceof InsightWriteError ? error.written : 0;
    // Positions in the batch the caller sent (late events count as handled).
    let handled = 0;
    for (let stored = 0; handled < message.events.length; handled++) {
      if (dayOf(message.events[handled]!.timestamp) >= keepFrom) {
        if (stored === written) break;
        stored++;
      }
    }
    send({ kind: 'failed', id: message.id, message: (error as Error).message, written: handled });
    return;
  }
  send({ kind: 'done', id: message.id, expired: message.events.length - events.length });
  if (Date.now() - lastCapCheck < CAP_CHECK_MS) return;
  lastCapCheck = Date.now();
  try {
    if (await overCap()) send({ kind: 'retention', report: await maintain() });
  } catch (error) {
    send({ kind: 'retention-failed', message: (error as Error).message });
  }
}

port.on('message', (message: ToWriterThread) => {
  switch (message.kind) {
    case 'write':
      enqueue(() => write(message));
      break;
    case 'maintain':
      enqueue(async () => {
        try {
          send({ kind: 'done', id: message.id, report: await maintain(message.now) });
        } catch (error) {
          send({ kind: 'failed', id: message.id, message: (error as Error).message, written: 0 });
        }
      });
      break;
    case 'close':
      closing = true;
      clearInterval(timer);
      enqueue(async () => {
        await db.close().catch(() => undefined);
        send({ kind: 'done', id: message.id });
      });
      break;
  }
});

const runRetention = () => {
  if (closing) return;
  enqueue(async () => {
    if (closing) return;
    try {
      send({ kind: 'retention', report: await maintain() });
    } catch (error) {
      send({ kind: 'retention-failed', message: (error as Error).message });
    }
  });
};
const timer = setInterval(runRetention, settings.maintenanceIntervalMs);
runRetention();
send({ kind: 'ready' });
