/**
 * The conformance target that goes through the real proxy: each stage's bytes are written to a
 * raw loopback socket of a running `HttpProxy` (our HTTP parser, limits and pipeline, as a client
 * meets them), whose WAF runs the CRS regression setup in LOGGING mode at paranoia 4 on the engine
 * it is told (ours by default, in a worker pool as the product runs it). The rule ids a request
 * matched are read from what the proxy's WAF recorded for it (request and response phases), the
 * status from the proxy's answer.
 *
 * Stages are sent one at a time: what the WAF records between two sends belongs to the stage. All
 * come from one source address, back to back: the proxy's per-source cap on new connections per
 * second is lifted for it (the suite tests the WAF, not the flood limiter).
 */
import net from 'node:net';
import http from 'node:http';
import type { WafEngine, WafEngineSettings, WafEngineVerdict, WafExchange, WafRequest, WafResponse } from '@tps/waf';
import { createWafHook } from '../../src/edge/http/waf/waf-hook.ts';
import { HttpProxy } from '../../src/edge/http/http-proxy.ts';
import { loadGeoLookup } from '../../src/edge/geo/geo-lookup.ts';
import { OriginGuard } from '../../src/net/origin-guard.ts';
import { OriginPolicy } from '../../src/net/origin-policy.ts';
import { createOriginResolver } from '../../src/net/origin-resolver.ts';
import type { HttpProxyAttributes } from '@tps/model';
import {
  CRS_REGRESSION_SETTINGS,
  crsRegressionEngine,
  logLine,
  type ConformanceTarget,
  type EngineName,
  type StageDestination,
  type StageOutcome,
} from '@tps/waf-conformance';

const PROXY_IP = '127.0.0.80';
const ORIGIN_IP = '127.0.0.81';
/** A stage the proxy does not answer within this long counts as "no answer" (go-ftw's error). */
const ANSWER_TIMEOUT_MS = 3_000;

/**
 * Remembers every verdict the proxy's WAF reaches, in order, and how many inspections are under
 * way: a stage is over only once the WAF is idle, since the proxy may answer a client (a 400 for
 * pipelined garbage) before the WAF has finished with the request before it.
 */
class RecordingEngine implements WafEngine {
  readonly name: string;
  readonly verdicts: WafEngineVerdict[] = [];
  readonly #inner: WafEngine;
  #inFlight = 0;

  constructor(inner: WafEngine) {
    this.#inner = inner;
    this.name = inner.name;
  }

  async #record<T>(work: () => Promise<T>, verdictOf: (result: T) => WafEngineVerdict): Promise<T> {
    this.#inFlight++;
    try {
      const result = await work();
      this.verdicts.push(verdictOf(result));
      return result;
    } finally {
      this.#inFlight--;
    }
  }

  inspectRequest(request: WafRequest, settings: WafEngineSettings): Promise<WafEngineVerdict> {
    return this.#record(
      () => this.#inner.inspectRequest(request, settings),
      (verdict) => verdict,
    );
  }

  async beginExchange(request: WafRequest, settings: WafEngineSettings): Promise<WafExchange> {
    const exchange = await this.#record(
      () => this.#inner.beginExchange!(request, settings),
      (begun) => begun.requestVerdict,
    );
    return {
      requestVerdict: exchange.requestVerdict,
      inspectResponse: (response: WafResponse) =>
        this.#record(
          () => exchange.inspectResponse(response),
          (verdict) => verdict,
        ),
      end: () => exchange.end(),
    };
  }

  /** Resolves once no inspection has been under way for `settleMs` (at most ANSWER_TIMEOUT_MS). */
  async idle(settleMs: number): Promise<void> {
    const deadline = Date.now() + ANSWER_TIMEOUT_MS;
    let quietSince = Date.now();
    for (;;) {
      if (this.#inFlight > 0) quietSince = Date.now();
      else if (Date.now() - quietSince >= settleMs) return;
      if (Date.now() > deadline) return;
      await new Promise((resolve) => setTimeout(resolve, this.#inFlight > 0 ? 1 : settleMs));
    }
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

export class SocketTarget implements ConformanceTarget {
  readonly description: string;
  readonly #engine: RecordingEngine;
  readonly #proxy: HttpProxy;
  readonly #origin: http.Server;
  readonly #port: number;

  private constructor(engine: RecordingEngine, proxy: HttpProxy, origin: http.Server, port: number) {
    this.#engine = engine;
    this.#proxy = proxy;
    this.#origin = origin;
    this.#port = port;
    this.description = `tps HTTP proxy on a socket, ${engine.name} engine, paranoia ${CRS_REGRESSION_SETTINGS.paranoiaLevel}`;
  }

  /** A proxy whose WAF runs `engine` (default ours) in `workers` threads (default 1). */
  static async start(options: { engine?: EngineName; workers?: number } = {}): Promise<SocketTarget> {
    const origin = http.createServer((request, response) => {
      request.resume();
      request.on('end', () => response.end('ok\n'));
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN_IP, resolve));
    const engine = new RecordingEngine(await crsRegressionEngine(options.engine ?? 'compiled', options.workers ?? 1));
    const attributes: HttpProxyAttributes = {
      // Port 0: the system picks a free one (`proxy.addresses`).
      frontend: { ipv4: PROXY_IP, port: 0 },
      backend: { hosts: [{ address: ORIGIN_IP, port: (origin.address() as net.AddressInfo).port }], deliveryMethod: 'LEAST_CONNECTIONS' },
      waf: {
        mode: 'LOGGING',
        paranoiaLevel: CRS_REGRESSION_SETTINGS.paranoiaLevel,
        failMode: 'CLOSED',
        logMatchedData: false,
        ruleExclusions: [],
      },
      // The runner is one source opening a connection per stage, faster than a client's fair share.
      connectionLimits: { maxConnectionsPerSource: 1_000_000, maxNewConnectionsPerSecondPerSource: 1_000_000, maxConnections: 1_000_000 },
    };
    const proxy = new HttpProxy(
      { id: '00000000-0000-4000-8000-000000000001', tenantId: '00000000-0000-4000-8000-000000000002', revision: 1, attributes },
      {
        insight: { record: () => {}, updateRateLimitEpisode: () => {} },
        geo: loadGeoLookup({ withoutMmdb: true }),
        location: 'FTW',
        waf: createWafHook(engine),
        // The conformance origin runs in this process on loopback, which the product's origin policy
        // refuses by default: this proxy may connect anywhere.
        originGuard: new OriginGuard(
          new OriginPolicy({ allowedNetworks: ['0.0.0.0/0', '::/0'], ownHosts: [], ownListeners: [] }),
          createOriginResolver([]),
        ),
      },
    );
    await proxy.start();
    return new SocketTarget(engine, proxy, origin, proxy.addresses[0]!.port);
  }

  async send(request: Buffer, _destination: StageDestination): Promise<StageOutcome> {
    await this.#engine.idle(0);
    const first = this.#engine.verdicts.length;
    const answer = await exchange(this.#port, request);
    // An answer before the WAF is done (the proxy refused the connection's next bytes) may leave the
    // request's own inspections, even its response phase, still to come: give them a moment.
    await this.#engine.idle(answer.status === undefined || answer.status >= 400 ? 25 : 0);
    const verdicts = this.#engine.verdicts.slice(first);
    const rules = verdicts.flatMap((verdict) => verdict.matchedRules);
    const seen = new Set<number>();
    const unique = rules.filter((rule) => {
      if (seen.has(rule.id)) return false;
      seen.add(rule.id);
      return true;
    });
    return {
      ...(answer.status !== undefined ? { status: answer.status } : { error: answer.error ?? 'no answer' }),
      matchedRuleIds: unique.map((rule) => rule.id),
      logLines: unique.map(logLine),
    };
  }

  async close(): Promise<void> {
    await this.#proxy.stop();
    this.#origin.close();
    await this.#engine.close();
  }
}

/** Writes the bytes on a new connection and reads the answer's status line. */
function exchange(port: number, request: Buffer): Promise<{ status?: number; error?: string }> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: PROXY_IP, port });
    let received = '';
    const finish = (result: { status?: number; error?: string }) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => finish({ error: 'no answer within 3 s' }), ANSWER_TIMEOUT_MS);
    socket.on('connect', () => socket.write(request));
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
      const status = /^HTTP\/\d(?:\.\d)? (\d{3})/.exec(received);
      if (status) finish({ status: Number(status[1]) });
      else if (received.length > 64) finish({ error: 'not an HTTP answer' });
    });
    socket.on('error', (error) => finish({ error: error.message }));
    socket.on('close', () => finish({ error: 'closed without an answer' }));
  });
}
