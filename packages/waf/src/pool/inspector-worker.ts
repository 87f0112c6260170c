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
import { clock } from './clock.ts';
import type { WafEngineSettings, WafRequest, WafResponse } from '../engine.ts';
import {
  bodyBytes,
  END,
  FAILURE,
  FORGET_SETTINGS,
  packVerdict,
  REQUEST,
  RESPONSE,
  RESULT,
  type PoolInspector,
  type PoolReply,
  type PoolWorkerData,
  type RequestMessage,
  type ResponseMessage,
  type ToPoolWorker,
  type ToPoolWorkerPost,
} from './protocol.ts';
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
    const now = clock.now();
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
    exchanges.set(exchange, { open, expiresAt: clock.now() + data.exchangeTimeoutMs });
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
    reply([FAILURE, id, cpuMs, e?.message ?? String(error), e?.name ?? 'Error', e?.code]);
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

  const request = (m: RequestMessage): void => {
    const [, id, settingsId, keepOpen] = m;
    const sent = m[15];
    if (sent !== undefined) settingsById.set(settingsId, sent);
    const settings = settingsById.get(settingsId);
    if (settings === undefined) {
      // (the pool sends a thread each settings object before the requests that name it)
      failure(id, new Error(`no WAF settings ${settingsId} on this thread`), 0);
      return;
    }
    watch.begin(id);
    const start = startReading();
    try {
      const { verdict, open } = inspector.inspectRequest(engineRequest(m), settings, keepOpen, start);
      const exchange = open === undefined ? 0 : hold(open);
      reply([RESULT, id, cpuSince(start), exchange, packVerdict(verdict)]);
    } catch (error) {
      failure(id, error, cpuSince(start));
    } finally {
      watch.end();
    }
  };
  const response = (m: ResponseMessage): void => {
    const [, id, exchange] = m;
    const open = release(exchange);
    if (open === undefined) {
      // Its transaction expired (or was ended): nothing left to inspect the response with.
      reply([
        FAILURE,
        id,
        undefined,
        'the WAF transaction of this exchange expired before its response',
        'WafUnavailableError',
        'ERR_WAF_UNAVAILABLE',
      ]);
      return;
    }
    watch.begin(id);
    const start = startReading();
    try {
      const verdict = inspector.inspectResponse(open, engineResponse(m), start);
      reply([RESULT, id, cpuSince(start), 0, packVerdict(verdict)]);
    } catch (error) {
      failure(id, error, cpuSince(start));
    } finally {
      watch.end();
    }
  };

  const handle = (m: ToPoolWorker): void => {
    switch (m[0]) {
      case REQUEST:
        return request(m);
      case RESPONSE:
        return response(m);
      case FORGET_SETTINGS:
        settingsById.delete(m[1]);
        return;
      case END: {
        const open = release(m[1]);
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
    if (Array.isArray(m)) handle(m);
    else for (const one of m.messages) handle(one);
  });
}

function engineRequest(m: RequestMessage): WafRequest {
  const body = m[13];
  return {
    clientIp: m[4],
    clientPort: m[5],
    serverIp: m[6],
    serverPort: m[7],
    method: m[8],
    uri: m[9],
    path: m[10],
    httpVersion: m[11],
    headers: m[12],
    body: body === undefined ? undefined : bodyBytes(body),
    id: m[14],
  };
}

function engineResponse(m: ResponseMessage): WafResponse {
  const body = m[6];
  return { status: m[3], httpVersion: m[4], headers: m[5], body: body === undefined ? undefined : bodyBytes(body) };
}
