/**
 * Messages between a WAF worker and the event loop (batched-messages.ts): together when several are ready in one turn, alone
 * when only one is, and never held back longer than the delay cap when a long queue drains.
 */
import assert from 'node:assert/strict';
import { MessageChannel } from 'node:worker_threads';
import { test } from 'node:test';
import { batchedMessages } from './batched-messages.ts';

async function received(send: (reply: (n: number) => void) => void, maxDelayMs?: number): Promise<unknown[]> {
  const { port1, port2 } = new MessageChannel();
  const messages: unknown[] = [];
  port2.on('message', (m) => messages.push(m));
  send(batchedMessages<number>(port1, maxDelayMs));
  await new Promise((r) => setTimeout(r, 50));
  port1.close();
  return messages;
}

const busy = (ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end);
};

test('replies ready in the same turn go back as one batch; a lone one as itself', async () => {
  assert.deepEqual(await received((reply) => [1, 2, 3].forEach(reply)), [{ type: 'batch', messages: [1, 2, 3] }]);
  assert.deepEqual(await received((reply) => reply(7)), [7]);
});

test('a reply is not held back longer than the cap while later ones are still being computed', async () => {
  const messages = await received((reply) => {
    reply(1);
    busy(15);
    reply(2); // the first has waited 15 ms >= 10: both go now
    reply(3);
  }, 10);
  assert.deepEqual(messages, [{ type: 'batch', messages: [1, 2] }, 3]);
});
