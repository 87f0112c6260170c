/**
 * Worker thread of the ModSecurity engine: compiles the rule set once, then runs exchanges one at a
 * time as the main thread posts them. Protocol (all messages plain objects):
 *   main -> worker  { type: 'request', id, request, settings, keepOpen }
 *                   { type: 'response', id, exchange, response }
 *                   { type: 'end', exchange }
 *   worker -> main  { type: 'ready', ruleCount } | { type: 'loadError', message }
 *                   { type: 'result', id, verdict, exchange? } | { type: 'failure', id, message, name, code? }
 *                   { type: 'batch', messages: (result | failure)[] }   (batched-messages.ts)
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { WafRequest, WafResponse, WafSettings, WafVerdict } from './engine.ts';
import type { ModSecurityRulesOptions } from './modsecurity-config.ts';
import { ModSecurityInspector } from './modsecurity-inspect.ts';
import { batchedMessages } from './batched-messages.ts';
import type { OpenTransaction } from './modsecurity-inspect.ts';

export interface WorkerData {
  readonly options: ModSecurityRulesOptions;
  readonly exchangeTimeoutMs: number;
}

export type ToWorker =
  | { type: 'request'; id: number; request: WafRequest; settings: WafSettings; keepOpen: boolean }
  | { type: 'response'; id: number; exchange: number; response: WafResponse }
  | { type: 'end'; exchange: number };

const port = parentPort;
if (!port) throw new Error('modsecurity-worker.ts must run in a worker thread');
const data = workerData as WorkerData;

let inspector: ModSecurityInspector;
try {
  inspector = ModSecurityInspector.load(data.options);
  port.postMessage({ type: 'ready', ruleCount: inspector.ruleCount });
} catch (error) {
  port.postMessage({ type: 'loadError', message: (error as Error).message });
  process.exit(1);
}

interface Held {
  open: OpenTransaction;
  timer: NodeJS.Timeout;
}
const exchanges = new Map<number, Held>();
let nextExchange = 1;

function release(exchange: number): Held | undefined {
  const held = exchanges.get(exchange);
  if (held) {
    exchanges.delete(exchange);
    clearTimeout(held.timer);
  }
  return held;
}

type Reply = { type: 'result'; id: number; verdict: WafVerdict; exchange?: number | undefined } | { type: 'failure'; id: number; message: string; name: string; code?: string | undefined };
const reply = batchedMessages<Reply>(port);

function failure(id: number, error: unknown): void {
  const e = error as Error & { code?: string };
  reply({ type: 'failure', id, message: e?.message ?? String(error), name: e?.name ?? 'Error', code: e?.code });
}

port.on('message', (message: ToWorker) => {
  switch (message.type) {
    case 'request': {
      try {
        const { verdict, open } = inspector.inspectRequest(message.request, message.settings, message.keepOpen);
        let exchange: number | undefined;
        if (open) {
          exchange = nextExchange++;
          const id = exchange;
          const timer = setTimeout(() => {
            const held = release(id);
            if (held) inspector.endTransaction(held.open);
          }, data.exchangeTimeoutMs);
          timer.unref();
          exchanges.set(exchange, { open, timer });
        }
        reply({ type: 'result', id: message.id, verdict, exchange });
      } catch (error) {
        failure(message.id, error);
      }
      break;
    }
    case 'response': {
      const held = release(message.exchange);
      if (!held) {
        reply({ type: 'result', id: message.id, verdict: { matchedRules: [] } });
        break;
      }
      try {
        reply({ type: 'result', id: message.id, verdict: inspector.inspectResponse(held.open, message.response) });
      } catch (error) {
        failure(message.id, error);
      }
      break;
    }
    case 'end': {
      const held = release(message.exchange);
      if (held) {
        try {
          inspector.endTransaction(held.open);
        } catch {
          // already freed
        }
      }
      break;
    }
  }
});
