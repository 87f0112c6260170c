/**
 * The thread side of the worker pool (worker-pool.ts), for either engine: an engine's worker
 * module calls serveInspector() with how to load its inspector. The rule set is compiled once,
 * then exchanges run as the pool posts them (one message, or a turn's messages as one `batch`),
 * one at a time; results go back batched the same way (batched-messages.ts). Around each
 * inspection the shared watch slots are marked (RunWatch), so that the pool's budget counts the
 * time a request runs, not the time it waited behind others. Each reply says how much CPU time
 * this thread spent on it (`cpuMs`): fair admission charges it to the request's client and tenant.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { batchedMessages } from './batched-messages.ts';
import type { PoolInspector, PoolReply, PoolWorkerData, ToPoolWorker, ToPoolWorkerPost } from './protocol.ts';
import { RunWatch } from './run-watch.ts';

/** `load` gets the rule-set options and each inspection's budget (ms, 0: none) for engines that keep one themselves. */
export function serveInspector<Options, Open>(load: (options: Options, budgetMs: number) => PoolInspector<Open>): void {
  const port = parentPort;
  if (!port) throw new Error('serveInspector() must run in a worker thread');
  const data = workerData as PoolWorkerData<Options>;
  const watch = new RunWatch(data.watch);

  let inspector: PoolInspector<Open>;
  try {
    inspector = load(data.options, data.budgetMs);
    port.postMessage({ type: 'ready', ruleCount: inspector.ruleCount });
  } catch (error) {
    port.postMessage({ type: 'loadError', message: (error as Error).message });
    process.exit(1);
  }

  const exchanges = new Map<number, { open: Open; timer: NodeJS.Timeout }>();
  let nextExchange = 1;
  const reply = batchedMessages<PoolReply>(port);

  const release = (exchange: number): Open | undefined => {
    const held = exchanges.get(exchange);
    if (!held) return undefined;
    exchanges.delete(exchange);
    clearTimeout(held.timer);
    return held.open;
  };
  const end = (open: Open): void => {
    try {
      inspector.endTransaction(open);
    } catch {
      // already freed: nothing left to end
    }
  };
  const failure = (id: number, error: unknown, cpuMs: number): void => {
    const e = error as Error & { code?: string };
    reply({ type: 'failure', id, message: e?.message ?? String(error), name: e?.name ?? 'Error', code: e?.code, cpuMs });
  };
  /** This thread's CPU time in ms since `start` (a threadCpuUsage reading). */
  const cpuSince = (start: NodeJS.CpuUsage): number => {
    const used = process.threadCpuUsage(start);
    return (used.user + used.system) / 1000;
  };

  const handle = (m: ToPoolWorker): void => {
    switch (m.type) {
      case 'request': {
        watch.begin(m.id);
        const start = process.threadCpuUsage();
        try {
          const { verdict, open } = inspector.inspectRequest(m.request, m.settings, m.keepOpen);
          let exchange: number | undefined;
          if (open !== undefined) {
            exchange = nextExchange++;
            const id = exchange;
            const timer = setTimeout(() => {
              const expired = release(id);
              if (expired !== undefined) end(expired);
            }, data.exchangeTimeoutMs);
            timer.unref();
            exchanges.set(exchange, { open, timer });
          }
          reply({ type: 'result', id: m.id, verdict, exchange, cpuMs: cpuSince(start) });
        } catch (error) {
          failure(m.id, error, cpuSince(start));
        } finally {
          watch.end();
        }
        return;
      }
      case 'response': {
        const open = release(m.exchange);
        if (open === undefined) {
          // Its transaction expired (or was ended): nothing left to inspect the response with.
          reply({
            type: 'failure',
            id: m.id,
            message: 'the WAF transaction of this exchange expired before its response',
            name: 'WafUnavailableError',
            code: 'ERR_WAF_UNAVAILABLE',
          });
          return;
        }
        watch.begin(m.id);
        const start = process.threadCpuUsage();
        try {
          reply({ type: 'result', id: m.id, verdict: inspector.inspectResponse(open, m.response), cpuMs: cpuSince(start) });
        } catch (error) {
          failure(m.id, error, cpuSince(start));
        } finally {
          watch.end();
        }
        return;
      }
      case 'end': {
        const open = release(m.exchange);
        if (open !== undefined) end(open);
        return;
      }
    }
  };

  port.on('message', (m: ToPoolWorkerPost) => {
    if (m.type === 'batch') for (const one of m.messages) handle(one);
    else handle(m);
  });
}
