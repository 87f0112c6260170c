/**
 * How long a proxy worker's event loop stands still while the threat feed (500,000 entries by
 * default) is read at start and read again after a source changed:
 *
 * - per worker (as before): the worker reads, parses and builds the set itself;
 * - per node (now): the supervisor's feed thread (ThreatFeedHost) builds it in shared memory and
 *   the worker only swaps in a view. The supervisor's own loop is measured too.
 *
 * The measure is the longest gap between two ticks of a 1 ms timer, in each thread.
 *
 *   node --expose-gc bench/l4/threat-feed-refresh.ts [entries]
 */
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ThreatFeed } from '../../src/edge/l4/threat-feed.ts';
import { ThreatFeedHost, type ThreatFeedSet } from '../../src/edge/runtime/threat-feed-host.ts';
import { uint32s } from '@tps/waf-conformance';

type Role = { role: 'worker-builds'; file: string } | { role: 'worker-adopts' };

/** Longest gap between ticks of a 1 ms timer since the last `take`. */
function loopProbe(): { take(): number; stop(): void } {
  let last = performance.now();
  let longest = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  return {
    take: () => {
      const value = longest;
      longest = 0;
      last = performance.now();
      return value;
    },
    stop: () => clearInterval(timer),
  };
}

/** This thread's own ArrayBuffer memory, after a full GC when --expose-gc is given (SharedArrayBuffers count where they were made). */
function arrayBuffersMb(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().arrayBuffers / 1048576;
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

if (!isMainThread) {
  const settings = workerData as Role;
  const port = parentPort!;
  const probe = loopProbe();
  if (settings.role === 'worker-builds') {
    const feed = new ThreatFeed({ sources: [settings.file], refreshIntervalMs: 0 });
    port.on('message', async (message: string) => {
      await settle();
      probe.take();
      await feed.refresh();
      await settle();
      port.postMessage({ step: message, blockMs: probe.take(), size: feed.size, arrayBuffers: arrayBuffersMb() });
    });
  } else {
    const feed = ThreatFeed.fromShared();
    port.on('message', async (message: ThreatFeedSet | string) => {
      if (typeof message === 'string') {
        // A report request: the longest stall since the last one.
        port.postMessage({ step: message, blockMs: probe.take(), size: feed.size, arrayBuffers: arrayBuffersMb() });
        return;
      }
      feed.adopt(message.set);
    });
  }
  port.postMessage('ready');
} else {
  const entries = Number(process.argv[2] ?? 500_000);
  const dir = mkdtempSync(join(tmpdir(), 'tps-feed-bench-'));
  const file = join(dir, 'feed.netset');
  const lines: string[] = [];
  const random = uint32s(0x2545f491);
  for (let i = 0; i < entries; i++) {
    if (i % 10 === 9) lines.push(`2001:db8:${(random() & 0xffff).toString(16)}:${(random() & 0xffff).toString(16)}::/64`);
    else
      lines.push(
        `${random() >>> 24}.${(random() >>> 16) & 255}.${(random() >>> 8) & 255}.${random() & 255}/${[32, 32, 24, 20][random() % 4]}`,
      );
  }
  const writeFeed = (extra: string) => {
    writeFileSync(`${file}.tmp`, `${lines.join('\n')}\n${extra}\n`);
    renameSync(`${file}.tmp`, file);
  };
  writeFeed('');

  const start = (data: Role) =>
    new Promise<Worker>((resolve) => {
      const worker = new Worker(new URL(import.meta.url), { workerData: data });
      worker.once('message', () => resolve(worker));
    });
  const ask = (worker: Worker, step: string) =>
    new Promise<{ step: string; blockMs: number; size: number; arrayBuffers: number }>((resolve) => {
      worker.once('message', resolve);
      worker.postMessage(step);
    });

  // Before: the worker builds.
  const builder = await start({ role: 'worker-builds', file });
  const first = await ask(builder, 'start');
  writeFeed('192.0.2.0/24');
  const changed = await ask(builder, 'source changed');
  await builder.terminate();
  console.log(`entries: ${entries}, set size ${changed.size}`);
  console.log(
    `per worker:  worker loop blocked ${first.blockMs.toFixed(0)} ms at start, ${changed.blockMs.toFixed(0)} ms on a source change; ${changed.arrayBuffers.toFixed(1)} MB of array buffers in the worker`,
  );

  // Now: the node's feed thread builds; the worker adopts.
  writeFeed('');
  const adopter = await start({ role: 'worker-adopts' });
  const supervisorProbe = loopProbe();
  let sets = 0;
  let notify = () => {};
  const host = new ThreatFeedHost({
    sources: [file],
    refreshIntervalMs: 1_000,
    logger: { info: () => {}, warn: () => {}, error: console.error },
    onSet: (current) => {
      adopter.postMessage(current);
      sets++;
      notify();
    },
  });
  const nextSet = () => new Promise<void>((resolve) => (notify = resolve));
  await settle();
  await ask(adopter, 'reset');
  supervisorProbe.take();
  host.start();
  await nextSet();
  await settle();
  const adoptFirst = await ask(adopter, 'start');
  const supervisorFirst = supervisorProbe.take();
  writeFeed('192.0.2.0/24');
  supervisorProbe.take(); // writing the file is the benchmark's doing, not the supervisor's
  await nextSet();
  await settle();
  const adoptChanged = await ask(adopter, 'source changed');
  const supervisorChanged = supervisorProbe.take();
  console.log(
    `per node:    worker loop blocked ${adoptFirst.blockMs.toFixed(0)} ms at start, ${adoptChanged.blockMs.toFixed(0)} ms on a source change` +
      ` (set size ${adoptChanged.size}, ${sets} sets built); ${adoptChanged.arrayBuffers.toFixed(1)} MB of array buffers in the worker`,
  );
  console.log(
    `             supervisor loop blocked ${supervisorFirst.toFixed(0)} ms at start, ${supervisorChanged.toFixed(0)} ms on a source change`,
  );
  const shared = host.current!.set;
  console.log(
    `shared set: ${((shared.nodes.byteLength + shared.keys.byteLength + (shared.ipv4Start?.byteLength ?? 0)) / 1048576).toFixed(1)} MB once per node`,
  );
  supervisorProbe.stop();
  await host.stop();
  await adopter.terminate();
  rmSync(dir, { recursive: true, force: true });
}
