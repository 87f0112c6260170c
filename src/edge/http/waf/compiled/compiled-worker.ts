/**
 * Worker thread of the compiled engine's pool mode (compiled-engine.ts): compiles the rule set
 * once, then runs exchanges as the main thread posts them. Same protocol as the ModSecurity
 * worker.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { resolvedLimits } from '../modsecurity-config.ts';
import type { ToCompiledWorker } from './compiled-engine.ts';
import { sharedRuleSet } from './compiled-engine.ts';
import { CompiledInspector } from './inspector.ts';
import type { CompiledRulesOptions, OpenCompiledTransaction } from './inspector.ts';

interface Data {
  readonly options: CompiledRulesOptions;
  readonly exchangeTimeoutMs: number;
}

const port = parentPort;
if (!port) throw new Error('compiled-worker.ts must run in a worker thread');
const data = workerData as Data;

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

function failure(id: number, error: unknown): void {
  const e = error as Error & { code?: string };
  port!.postMessage({ type: 'failure', id, message: e?.message ?? String(error), code: e?.code });
}

port.on('message', (m: ToCompiledWorker) => {
  switch (m.type) {
    case 'request': {
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
        port!.postMessage({ type: 'result', id: m.id, verdict, exchange });
      } catch (error) {
        failure(m.id, error);
      }
      break;
    }
    case 'response': {
      const open = release(m.exchange);
      if (!open) {
        port!.postMessage({ type: 'result', id: m.id, verdict: { matchedRules: [] } });
        break;
      }
      try {
        port!.postMessage({ type: 'result', id: m.id, verdict: inspector.inspectResponse(open, m.response) });
      } catch (error) {
        failure(m.id, error);
      }
      break;
    }
    case 'end': {
      const open = release(m.exchange);
      if (open) inspector.endTransaction(open);
      break;
    }
  }
});
