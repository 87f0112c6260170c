/**
 * The exchange (upstream/exchange.ts) runs the list of response phases it is handed, as the
 * pipeline hands it RESPONSE_PHASES, over real sockets: a phase with nothing to do passes the
 * response on; the first that holds it decides before the next sees it; a later phase gets the
 * head and what the earlier one held of the body, then the rest, and may still replace the
 * response; the client gets the origin's bytes. The origin sends the second part of its body only
 * once the first phase has decided, so that a later phase takes over a response whose body is
 * half read. Here beside pipeline.ts: like it, the test wires phases to the upstream.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { request } from '../../../test/support/http-client.ts';
import { FRONT_IP, freePort, resolvedProxy, startOrigin, testDeps, type TestOrigin } from '../../../test/support/http-servers.ts';
import { RequestCtx } from './ctx.ts';
import { resolveLimits } from './limits.ts';
import { acceptPhase } from './phases/accept.ts';
import type { HeldResponse, ResponsePhase } from './phases/phase.ts';
import { requestTargetPhase } from './phases/request-target.ts';
import { loggingPhase } from './phases/logging.ts';
import { ProxySnapshot } from './snapshot.ts';
import { proxyToOrigin } from './upstream/exchange.ts';

const FIRST_PART = 'first part of the body;';
const SECOND_PART = ' second part';

/** What a test phase saw of a response: its body when it decided, and whether the origin's body had ended. */
interface Seen {
  phase: string;
  body: string;
  ended: boolean;
}

/** Holds a response until `bodyBytes` of its body (or its end), then lets it go on or replaces it when it reads `forbidden`. */
function holdingPhase(label: string, bodyBytes: number, seen: Seen[], onDecide: () => void, forbidden?: string): ResponsePhase {
  return {
    name: 'waf-response',
    onResponseHead: (_ctx, _method, status, headers) => ({ status, headers, chunks: [], length: 0, wantsBody: true, ended: false }),
    onResponseBody: (_ctx, held) => held.length >= bodyBytes,
    onResponseEnd: () => true,
    decide(_ctx, held: HeldResponse, relay) {
      const body = Buffer.concat(held.chunks, held.length).toString();
      seen.push({ phase: label, body, ended: held.ended });
      onDecide();
      queueMicrotask(() => {
        if (forbidden !== undefined && body.includes(forbidden))
          relay.replaceResponse({ phase: 'waf-response', status: 403, headers: ['content-type', 'text/plain'], body: 'replaced\n' });
        else relay.releaseHeld();
      });
    },
  };
}

const passivePhase: ResponsePhase = {
  name: 'waf-response',
  onResponseHead: () => undefined,
  onResponseBody: () => assert.fail('a phase that held nothing is fed no body'),
  onResponseEnd: () => assert.fail('a phase that held nothing is told no end'),
  decide: () => assert.fail('a phase that held nothing decides nothing'),
};

describe('response phases run by the exchange', () => {
  let origin: TestOrigin;
  let front: http.Server;
  let snapshot: ProxySnapshot;
  let url = '';
  let phases: readonly ResponsePhase[] = [];
  /** The origin waits for `sendRest` before the second part of its body (else it sends it at once). */
  let gated = false;
  let sendRest: () => void = () => {};

  before(async () => {
    origin = await startOrigin({
      handler: (req, res) => {
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(FIRST_PART.length + SECOND_PART.length) });
        res.write(FIRST_PART);
        sendRest = () => {
          sendRest = () => {};
          res.end(SECOND_PART);
        };
        if (!gated) setImmediate(sendRest);
        req.resume();
      },
    });
    const port = await freePort(FRONT_IP);
    const deps = testDeps();
    snapshot = new ProxySnapshot(resolvedProxy(port, [origin]), deps, resolveLimits(undefined), undefined, () => {});
    front = http.createServer((req, res) => {
      const ctx = new RequestCtx(snapshot, req, res);
      res.on('close', () => {
        ctx.upstreamExchange?.clientClosed();
        loggingPhase.run(ctx);
      });
      assert.equal(acceptPhase.run(ctx), undefined);
      assert.equal(requestTargetPhase.run(ctx), undefined);
      proxyToOrigin(ctx, phases);
    });
    await new Promise<void>((resolve) => front.listen({ host: FRONT_IP, port }, resolve));
    url = `http://${FRONT_IP}:${port}`;
  });
  after(async () => {
    front.closeAllConnections();
    await new Promise<void>((resolve) => front.close(() => resolve()));
    await snapshot.retire(undefined, 0);
    await origin.close();
  });

  it('passes the response by a phase with nothing to do, to one that holds it, then to the client', { timeout: 20_000 }, async () => {
    const seen: Seen[] = [];
    gated = false;
    phases = [passivePhase, holdingPhase('second', Number.POSITIVE_INFINITY, seen, () => {})];
    const res = await request(`${url}/`);
    assert.equal(res.status, 200);
    assert.equal(res.text, FIRST_PART + SECOND_PART);
    assert.deepEqual(seen, [{ phase: 'second', body: FIRST_PART + SECOND_PART, ended: true }]);
  });

  it('hands a later phase what the first held of the body, then the rest; the client gets the whole body', {
    timeout: 20_000,
  }, async () => {
    const seen: Seen[] = [];
    gated = true;
    phases = [
      holdingPhase('first', FIRST_PART.length, seen, () => sendRest()),
      holdingPhase('second', Number.POSITIVE_INFINITY, seen, () => {}),
    ];
    const res = await request(`${url}/`);
    assert.equal(res.status, 200);
    assert.equal(res.text, FIRST_PART + SECOND_PART);
    assert.deepEqual(seen, [
      { phase: 'first', body: FIRST_PART, ended: false },
      { phase: 'second', body: FIRST_PART + SECOND_PART, ended: true },
    ]);
  });

  it('lets a later phase replace the response the first let go on', { timeout: 20_000 }, async () => {
    const seen: Seen[] = [];
    gated = true;
    phases = [
      holdingPhase('first', FIRST_PART.length, seen, () => sendRest()),
      holdingPhase('second', Number.POSITIVE_INFINITY, seen, () => {}, 'second part'),
    ];
    const res = await request(`${url}/`);
    assert.equal(res.status, 403);
    assert.equal(res.text, 'replaced\n');
    assert.deepEqual(
      seen.map((s) => s.phase),
      ['first', 'second'],
    );
  });

  it('sends the response as it comes with no response phase', { timeout: 20_000 }, async () => {
    gated = false;
    phases = [];
    const res = await request(`${url}/`);
    assert.equal(res.status, 200);
    assert.equal(res.text, FIRST_PART + SECOND_PART);
  });
});
