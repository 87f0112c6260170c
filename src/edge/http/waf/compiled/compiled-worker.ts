/**
 * Worker thread of the compiled engine's pool mode (compiled-engine.ts): compiles the rule set
 * once, then runs exchanges as the main thread posts them (one message, or a turn's messages as
 * one `batch`). Results go back batched the same way (batched-messages.ts). Around each request it marks
 * the shared watch slots (`RunWatch`), so that the main thread's budget counts the time a request
 * runs, not the time it waited behind others.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { resolvedLimits } from '../modsecurity-config.ts';
import type { CompiledReply, ToCompiledWorker, ToCompiledWorkerPost } from './compiled-engine.ts';
import { RunWatch, sharedRuleSet } from './compiled-engine.ts';
import { CompiledInspector } from './inspector.ts';
import { batchedMessages } from '../batched-messages.ts';
import type { CompiledRulesOptions, OpenCompiledTransaction } from './inspector.ts';

interface Data {
  readonly options: CompiledRulesOptions;
  readonly exchangeTimeoutMs: number;
  readonly watch: SharedArrayBuffer;
}

const port = parentPort;
if (!port) throw new Error('compiled-worker.ts must run in a worker thread');
const data = workerData as Data;
const watch = new RunWatch(data.watch);

let inspector: CompiledInspector;
try {
  inspector = new CompiledInspector(sharedRuleSet(data.options), resolvedLimits(data.options));
  port.postMessage({ type: 'ready', ruleCount: inspector.ruleCount });
} catch (error) {
  port.postMessage({ type: 'loadError', message: (error as Error).message });
  process.exit(1);
}

const exchanges = new Map<number, { open: OpenCompiledTransaction; timer: NodeJS.Timeout }>();
let nextExchange = 1;

function release(id: number): OpenCompiledTransaction | undefined {
  const held = exchanges.get(id);
  if (!held) return undefined;
  exchanges.delete(id);
  clearTimeout(held.timer);
  return held.open;
}

const reply = batchedMessages<CompiledReply>(port);

function failure(id: number, error: unknown): void {
  const e = error as Error & { code?: string };
  reply({ type: 'failure', id, message: e?.message ?? String(error), code: e?.code });
}

port.on('message', (m: ToCompiledWorkerPost) => {
  if (m.type === 'batch') for (const one of m.messages) handle(one);
  else handle(m);
});

function handle(m: ToCompiledWorker): void {
  switch (m.type) {
    case 'request': {
      watch.begin();
      try {
        const request = m.request.body ? { ...m.request, body: new Uint8Array(m.request.body) } : m.request;
        const { verdict, open } = inspector.inspectRequest(request, m.settings, m.keepOpen);
        let exchange: number | undefined;
        if (open) {
          exchange = nextExchange++;
          const id = exchange;
          const timer = setTimeout(() => {
            const o = release(id);
            if (o) inspector.endTransaction(o);
          }, data.exchangeTimeoutMs);
          timer.unref();
          exchanges.set(exchange, { open, timer });
        }
        reply({ type: 'result', id: m.id, verdict, exchange });
      } catch (error) {
        failure(m.id, error);
      } finally {
        watch.end();
      }
      break;
    }
    case 'response': {
      const open = release(m.exchange);
      if (!open) {
        reply({ type: 'result', id: m.id, verdict: { matchedRules: [] } });
        break;
      }
      watch.begin();
      try {
        reply({ type: 'result', id: m.id, verdict: inspector.inspectResponse(open, m.response) });
      } catch (error) {
        failure(m.id, error);
      } finally {
        watch.end();
      }
      break;
    }
    case 'end': {
      const open = release(m.exchange);
      if (open) inspector.endTransaction(open);
      break;
    }
  }
}
