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
import type { WafEngineSettings } from '../engine.ts';
import type { PoolInspector, PoolReply, PoolWorkerData, ToPoolWorker, ToPoolWorkerPost } from './protocol.ts';
import { RunWatch } from './run-watch.ts';
import { threadCpuMicros } from '../thread-cpu.ts';

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

  /**
   * Open transactions by exchange, in the order they were opened: all have the same timeout, so
   * one sweep (while any is open, every quarter of the timeout, at most a second) ends the expired
   * ones from the front, instead of a timer per exchange.
   */
  const exchanges = new Map<number, { open: Open; expiresAt: number }>();
  const sweepEveryMs = Math.max(1, Math.min(1000, Math.ceil(data.exchangeTimeoutMs / 4)));
  let sweeper: NodeJS.Timeout | undefined;
  const sweep = (): void => {
    const now = performance.now();
    for (const [exchange, held] of exchanges) {
      if (held.expiresAt > now) break;
      exchanges.delete(exchange);
      end(held.open);
      lastReading = -1;
    }
    if (exchanges.size === 0) {
      clearInterval(sweeper);
      sweeper = undefined;
    }
  };
  const hold = (open: Open): number => {
    const exchange = nextExchange++;
    exchanges.set(exchange, { open, expiresAt: performance.now() + data.exchangeTimeoutMs });
    if (sweeper === undefined) {
      sweeper = setInterval(sweep, sweepEveryMs);
      sweeper.unref();
    }
    return exchange;
  };
  /** The settings the pool sent, by its id for them (protocol.ts): one object per proxy's settings. */
  const settingsById = new Map<number, WafEngineSettings>();
  let nextExchange = 1;
  const reply = batchedMessages<PoolReply>(port);

  const release = (exchange: number): Open | undefined => {
    const held = exchanges.get(exchange);
    if (!held) return undefined;
    exchanges.delete(exchange);
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
  /**
   * This thread's CPU time at the end of the last inspection (threadCpuMicros), -1 when another
   * request's work ran since (an exchange's logging phase): the next inspection starts from it, so
   * that one reading ends one inspection and starts the next, and serves the budget's start too.
   * What the thread did in between for the requests (the replies posted, the next message read)
   * is counted in the next one; time idle is no CPU time.
   */
  let lastReading = -1;
  const startReading = (): number => (lastReading >= 0 ? lastReading : threadCpuMicros());
  /** This thread's CPU time in ms since `start`; the reading is kept for the next inspection. */
  const cpuSince = (start: number): number => {
    lastReading = threadCpuMicros();
    return (lastReading - start) / 1000;
  };

  const handle = (m: ToPoolWorker): void => {
    switch (m.type) {
      case 'request': {
        if (m.settings !== undefined) settingsById.set(m.settingsId, m.settings);
        const settings = settingsById.get(m.settingsId);
        if (settings === undefined) {
          // (the pool sends a thread each settings object before the requests that name it)
          failure(m.id, new Error(`no WAF settings ${m.settingsId} on this thread`), 0);
          return;
        }
        watch.begin(m.id);
        const start = startReading();
        try {
          const { verdict, open } = inspector.inspectRequest(m.request, settings, m.keepOpen, start);
          const exchange = open === undefined ? undefined : hold(open);
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
        const start = startReading();
        try {
          reply({ type: 'result', id: m.id, verdict: inspector.inspectResponse(open, m.response, start), cpuMs: cpuSince(start) });
        } catch (error) {
          failure(m.id, error, cpuSince(start));
        } finally {
          watch.end();
        }
        return;
      }
      case 'forgetSettings':
        settingsById.delete(m.settingsId);
        return;
      case 'end': {
        const open = release(m.exchange);
        // (its logging phase is no part of the next inspection's cost)
        if (open !== undefined) {
          end(open);
          lastReading = -1;
        }
        return;
      }
    }
  };

  port.on('message', (m: ToPoolWorkerPost) => {
    if (m.type === 'batch') for (const one of m.messages) handle(one);
    else handle(m);
  });
}
