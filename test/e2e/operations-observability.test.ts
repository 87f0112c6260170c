/**
 * What an operator sees of the traffic, over real sockets: the access log (a proxied, a blocked, a
 * rate-limited request and a layer 4 connection), the latency histograms and counters on the
 * metrics listener of `tps serve` and of a `tps edge` node, every stored event at a syslog listener
 * over UDP and over TCP and in a file (each once), /healthz (a configuration the node cannot serve,
 * a threat feed enabled without a source), and the demo: `tps serve --demo`'s printed commands, run.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startTps, createTenant, REPO_ROOT, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { waitFor } from '../support/wait.ts';
import { TestCa } from '../support/pki.ts';
import { freePort } from '../support/ports.ts';

const execFileAsync = promisify(execFile);

const FRONTEND = '127.0.7.10';
const CLIENT = '127.0.7.11';
const ORIGIN = '127.0.7.12';
const COLLECTOR = '127.0.7.13';
const FLOODER = '127.0.7.14';
const DEMO_FRONTEND = '127.0.7.20';
const EDGE_FRONTEND = '127.0.7.30';
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const EVENTS = '/api/v2/insight/http-security-events';
const ATTACK = '/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E';

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

function get(url: string, localAddress = CLIENT): Promise<Reply> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false, localAddress }, (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
      })
      .on('error', reject);
  });
}

async function metrics(url: string): Promise<string> {
  const response = await fetch(`${url}/metrics`);
  assert.equal(response.status, 200);
  return response.text();
}

/** The value of one series (the sum over series whose labels include `labels`); 0 when absent. */
function value(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (!Object.entries(labels).every(([key, wanted]) => line.includes(`${key}="${wanted}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

async function health(url: string): Promise<{ status: number; body: any }> {
  const response = await fetch(`${url}/healthz`);
  return { status: response.status, body: await response.json() };
}

function readJsonLines(file: string): any[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line));
}

/** RFC 5424: <PRI>1 TIMESTAMP HOSTNAME APP PROCID MSGID SD MSG. */
const SYSLOG = /^<(\d+)>1 (\S+) (\S+) tps (\d+) (WAF_EVENT|APP_DDOS_ATTACK) - (\{.*\})$/s;

/** A syslog collector on loopback: datagrams, and TCP frames by octet counting (RFC 6587). */
class Collector {
  readonly messages: { transport: 'udp' | 'tcp'; pri: number; msgId: string; event: any }[] = [];
  readonly malformed: string[] = [];
  udp!: dgram.Socket;
  tcp!: net.Server;

  async start(): Promise<{ udpPort: number; tcpPort: number }> {
    this.udp = dgram.createSocket('udp4');
    this.udp.on('message', (message) => this.#take('udp', message.toString()));
    await new Promise<void>((resolve) => this.udp.bind(0, COLLECTOR, resolve));
    this.tcp = net.createServer((socket) => {
      let buffer = Buffer.alloc(0);
      socket.on('data', (chunk: Buffer) => {
        buffer = Buffer.concat([buffer, chunk]);
        for (;;) {
          const space = buffer.indexOf(0x20);
          if (space === -1) return;
          const length = Number(buffer.subarray(0, space).toString());
          if (!Number.isInteger(length) || length <= 0) {
            this.malformed.push(buffer.toString());
            buffer = Buffer.alloc(0);
            return;
          }
          if (buffer.length < space + 1 + length) return;
          this.#take('tcp', buffer.subarray(space + 1, space + 1 + length).toString());
          buffer = buffer.subarray(space + 1 + length);
        }
      });
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => this.tcp.listen(0, COLLECTOR, resolve));
    return { udpPort: (this.udp.address() as net.AddressInfo).port, tcpPort: (this.tcp.address() as net.AddressInfo).port };
  }

  #take(transport: 'udp' | 'tcp', text: string): void {
    const match = SYSLOG.exec(text);
    if (!match) {
      this.malformed.push(text);
      return;
    }
    this.messages.push({ transport, pri: Number(match[1]), msgId: match[5]!, event: JSON.parse(match[6]!) });
  }

  stop(): void {
    this.udp?.close();
    this.tcp?.close();
  }
}

describe('observability on tps serve: access log, metrics, event sinks, health', () => {
  let tps: Tps;
  let api: TenantApi;
  let origin: http.Server;
  let echo: net.Server;
  let collector: Collector;
  let dir: string;
  let accessLogFile: string;
  let eventsFile: string;
  let httpProxy: { id: string; url: string };
  let l4Proxy: { id: string; port: number };

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-observability-'));
    accessLogFile = path.join(dir, 'log', 'access.log');
    eventsFile = path.join(dir, 'events', 'events.jsonl');
    origin = http.createServer((request, response) => {
      request.resume();
      response.end(`origin saw ${request.method} ${request.url}\n`);
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    echo = net.createServer((socket) => {
      socket.on('data', (chunk) => socket.write(chunk));
      socket.on('end', () => socket.end());
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => echo.listen(0, ORIGIN, resolve));
    collector = new Collector();
    const { udpPort, tcpPort } = await collector.start();
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '1',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_ACCESS_LOG: accessLogFile,
        TPS_EVENT_SINKS: `syslog+udp://${COLLECTOR}:${udpPort},syslog+tcp://${COLLECTOR}:${tcpPort},file://${eventsFile}`,
        // The origins run on loopback, which the origin policy refuses unless allowed.
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port },
          backend: { hosts: [{ address: ORIGIN, port: (origin.address() as net.AddressInfo).port }] },
          waf: { mode: 'BLOCKING', paranoiaLevel: 1 },
          rateLimiting: { thresholds: [{ requests: 5, periodSeconds: 60 }], blockSeconds: 60 },
        },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    httpProxy = { id: created.body.data.id, url: `http://${FRONTEND}:${port}` };
    const l4Port = await freePort(FRONTEND);
    const l4 = await api.call('POST', CONFIGS, {
      data: {
        type: 'l4Proxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port: l4Port },
          backend: { hosts: [{ address: ORIGIN, port: (echo.address() as net.AddressInfo).port }] },
        },
      },
    });
    assert.equal(l4.status, 201, JSON.stringify(l4.body));
    l4Proxy = { id: l4.body.data.id, port: l4Port };
    for (const id of [httpProxy.id, l4Proxy.id]) {
      await waitFor(`${id} ACTIVE`, async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE', {
        timeoutMs: 20_000,
      });
    }
  });

  after(async () => {
    await tps?.stop();
    origin?.close();
    echo?.close();
    collector?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('logs a proxied, a blocked, a rate-limited request and a layer 4 connection, one JSON line each', async () => {
    const passed = await get(`${httpProxy.url}/hello`);
    assert.equal(passed.status, 200);
    const blocked = await get(`${httpProxy.url}${ATTACK}`);
    assert.equal(blocked.status, 403);
    const supportId = blocked.headers['x-request-id'] as string;
    assert.match(supportId, /^[0-9a-f]{32}$/);
    assert.ok(blocked.body.includes(supportId), 'the block page shows the support id');
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await get(`${httpProxy.url}/flood/${i}`, FLOODER)).status);
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429]);
    const echoed = await new Promise<string>((resolve, reject) => {
      const socket = net.connect({ host: FRONTEND, port: l4Proxy.port, localAddress: CLIENT }, () => socket.end('ping'));
      let received = '';
      socket.on('data', (chunk) => (received += chunk.toString()));
      socket.on('close', () => resolve(received));
      socket.on('error', reject);
    });
    assert.equal(echoed, 'ping');

    const lines = await waitFor('the access-log lines', async () => {
      const all = readJsonLines(accessLogFile);
      const l4 = all.find((line) => line.type === 'l4' && line.proxyId === l4Proxy.id);
      return all.filter((line) => line.type === 'http').length >= 8 && l4 ? all : undefined;
    });
    const http200 = lines.find((line) => line.type === 'http' && line.url === '/hello');
    assert.equal(http200.status, 200);
    assert.equal(http200.answeredBy, 'origin');
    assert.equal(http200.waf, 'PASSED');
    assert.equal(http200.clientIp, CLIENT);
    assert.equal(typeof http200.clientPort, 'number');
    assert.equal(http200.method, 'GET');
    assert.equal(http200.host, `${FRONTEND}:${httpProxy.url.split(':').at(-1)}`);
    assert.equal(http200.proxyId, httpProxy.id);
    assert.equal(http200.bytesIn, 0);
    assert.equal(http200.bytesOut, 'origin saw GET /hello\n'.length);
    assert.equal(http200.upstream, `${ORIGIN}:${(origin.address() as net.AddressInfo).port}`);
    assert.ok(http200.durationMs >= http200.originMs && http200.originMs >= 0, JSON.stringify(http200));
    assert.match(http200.supportId, /^[0-9a-f]{32}$/);
    assert.ok(!Number.isNaN(Date.parse(http200.time)));

    const http403 = lines.find((line) => line.type === 'http' && line.supportId === supportId);
    assert.ok(http403, 'the blocked request is logged with the support id of its page');
    assert.equal(http403.status, 403);
    assert.equal(http403.answeredBy, 'waf');
    assert.equal(http403.waf, 'BLOCKED');
    assert.ok(http403.wafRules.length > 0);
    assert.equal(http403.upstream, undefined, 'the origin never saw it');
    assert.equal(http403.originMs, undefined);

    const http429 = lines.find((line) => line.type === 'http' && line.status === 429);
    assert.equal(http429.answeredBy, 'rate-limit');
    assert.equal(http429.clientIp, FLOODER);
    assert.equal(http429.waf, undefined, 'refused before the WAF');
    assert.equal(http429.url, '/flood/5');

    const l4 = lines.find((line) => line.type === 'l4' && line.proxyId === l4Proxy.id);
    assert.equal(l4.protocol, 'TCP');
    assert.equal(l4.clientIp, CLIENT);
    assert.equal(l4.serverIp, FRONTEND);
    assert.equal(l4.serverPort, l4Proxy.port);
    assert.equal(l4.answeredBy, 'origin');
    assert.equal(l4.end, 'COMPLETED');
    assert.equal(l4.bytesIn, 4);
    assert.equal(l4.bytesOut, 4);
    assert.equal(l4.upstream, `${ORIGIN}:${(echo.address() as net.AddressInfo).port}`);
    assert.ok(l4.durationMs >= l4.originMs && l4.originMs >= 0);

    // The histograms and counters moved with that traffic.
    const text = await waitFor('the counters of the requests', async () => {
      const scraped = await metrics(tps.metricsUrl);
      return value(scraped, 'tps_edge_http_request_duration_seconds_count', { proxy: httpProxy.id }) >= 8 ? scraped : undefined;
    });
    assert.ok(value(text, 'tps_edge_origin_response_seconds_count', { proxy: httpProxy.id }) >= 6);
    assert.ok(value(text, 'tps_edge_http_request_duration_seconds_bucket', { proxy: httpProxy.id, le: '+Inf' }) >= 8);
    assert.equal(value(text, 'tps_edge_http_requests_total', { proxy: httpProxy.id, answered_by: 'origin', status_class: '2xx' }), 6);
    assert.equal(value(text, 'tps_edge_http_requests_total', { proxy: httpProxy.id, answered_by: 'waf', status_class: '4xx' }), 1);
    assert.equal(value(text, 'tps_edge_http_requests_total', { proxy: httpProxy.id, answered_by: 'rate-limit', status_class: '4xx' }), 1);
    for (const rule of http403.wafRules)
      assert.ok(value(text, 'tps_edge_waf_rule_matches_total', { rule: String(rule) }) >= 1, `rule ${rule} counted`);
    assert.ok(value(text, 'tps_edge_l4_connection_duration_seconds_count', { proxy: l4Proxy.id, protocol: 'TCP' }) >= 1);
    assert.ok(value(text, 'tps_edge_config_apply_seconds_count') >= 2);
    assert.equal(value(text, 'tps_edge_configs_pending_apply'), 0);
    assert.match(text, /^tps_edge_config_apply_lag_seconds 0$/m);
    await waitFor(
      'the access-log lines counted',
      async () => value(await metrics(tps.metricsUrl), 'tps_edge_access_log_lines_total', { outcome: 'written' }) >= 9 || undefined,
    );
    assert.equal(value(text, 'tps_edge_access_log_lines_total', { outcome: 'dropped' }), 0);
  });

  it('ships every stored event to syslog over UDP and TCP and to a file, each once', async () => {
    const stored = await waitFor('the WAF and rate-limit events in the store', async () => {
      const answer = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&page[size]=1000`);
      const events = answer.body.data as { id: string; type: string; attributes: { supportId: string } }[];
      return events.some((event) => event.type === 'WAF_EVENT') && events.some((event) => event.type === 'APP_DDOS_ATTACK')
        ? events
        : undefined;
    });
    const ids = stored.map((event) => event.id).sort();
    await waitFor('every event at every sink', async () => {
      const udp = collector.messages.filter((message) => message.transport === 'udp').map((message) => message.event.id);
      const tcp = collector.messages.filter((message) => message.transport === 'tcp').map((message) => message.event.id);
      const file = readJsonLines(eventsFile).map((event) => event.id);
      return ids.every((id) => udp.includes(id) && tcp.includes(id) && file.includes(id)) || undefined;
    });
    assert.deepEqual(collector.malformed, []);
    for (const transport of ['udp', 'tcp'] as const) {
      const received = collector.messages.filter((message) => message.transport === transport);
      assert.deepEqual(received.map((message) => message.event.id).sort(), ids, `${transport}: each event once`);
      const waf = received.find((message) => message.msgId === 'WAF_EVENT')!;
      assert.equal(waf.pri, 16 * 8 + 4, 'local0.warning');
      assert.equal(waf.event.schema, 'tps.event/1');
      assert.equal(waf.event.type, 'WAF_EVENT');
      assert.equal(waf.event.trafficConfigId, httpProxy.id);
      assert.equal(waf.event.source.ip, CLIENT);
      assert.ok(waf.event.rules.length > 0);
      assert.equal(typeof waf.event.node, 'string');
      const ddos = received.find((message) => message.msgId === 'APP_DDOS_ATTACK')!;
      assert.equal(ddos.event.source.ip, FLOODER);
    }
    const file = readJsonLines(eventsFile);
    assert.deepEqual(file.map((event) => event.id).sort(), ids, 'file: each event once');
    const blocked = stored.find((event) => event.type === 'WAF_EVENT')!;
    assert.equal(file.find((event) => event.id === blocked.id).supportId, blocked.attributes.supportId);
    const text = await metrics(tps.metricsUrl);
    for (const sink of [`syslog+udp://${COLLECTOR}`, `syslog+tcp://${COLLECTOR}`, `file://${eventsFile}`]) {
      const line = text
        .split('\n')
        .find((candidate) => candidate.startsWith('tps_event_sink_sent_total{') && candidate.includes(`sink="${sink}`));
      assert.ok(line && Number(line.split(' ').at(-1)) >= ids.length, `${sink} counted: ${line}`);
    }
    assert.equal(value(text, 'tps_event_sink_dropped_total'), 0);
    assert.ok(value(text, 'tps_insight_ingest_lag_seconds_count') >= ids.length);
    assert.equal(value(text, 'tps_insight_backlog_age_seconds'), 0);
  });

  it('says a layer 4 proxy refuses no source without a threat feed: ACTIVE with a statusDetail, and a /healthz warning', async () => {
    const attributes = (await api.get(`${CONFIGS}/${l4Proxy.id}`)).body.data.attributes;
    assert.equal(attributes.status, 'ACTIVE');
    assert.match(
      attributes.statusDetail,
      /threatIntelligence is enabled but this edge node has no threat feed \(TPS_THREAT_FEEDS is empty\)/,
    );
    assert.equal((await api.get(`${CONFIGS}/${httpProxy.id}`)).body.data.attributes.statusDetail, null);
    const report = await health(tps.metricsUrl);
    assert.equal(report.status, 200);
    assert.equal(report.body.status, 'ok');
    const warning = report.body.warnings.find((candidate: { code: string }) => candidate.code === 'NO_THREAT_FEED');
    assert.ok(warning, JSON.stringify(report.body));
    assert.deepEqual(warning.configurations, [l4Proxy.id]);
  });

  it('exposes the expiry of the certificates it serves', async () => {
    const ca = await TestCa.create();
    const notAfter = new Date(Date.now() + 40 * 24 * 3600 * 1000);
    notAfter.setUTCMilliseconds(0);
    const leaf = await ca.issue({ commonName: 'shop.test', dnsNames: ['shop.test'], notAfter });
    const certificate = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
      data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
    });
    assert.equal(certificate.status, 201, JSON.stringify(certificate.body));
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port, certificateId: certificate.body.data.id },
          backend: { hosts: [{ address: ORIGIN, port: (origin.address() as net.AddressInfo).port }] },
        },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const labels = { proxy: created.body.data.id, certificate: certificate.body.data.id, use: 'frontend' };
    const expiry = await waitFor(
      'the expiry gauge',
      async () => value(await metrics(tps.metricsUrl), 'tps_edge_certificate_expiry_timestamp_seconds', labels) || undefined,
    );
    assert.equal(expiry, notAfter.getTime() / 1000);
    await api.call('DELETE', `${CONFIGS}/${created.body.data.id}`);
  });

  it('answers /healthz 503 naming a configuration the node cannot serve, and 200 again once it is gone', async () => {
    const squatter = net.createServer();
    const port = await freePort(FRONTEND);
    await new Promise<void>((resolve) => squatter.listen({ host: FRONTEND, port, exclusive: true }, resolve));
    try {
      const created = await api.call('POST', CONFIGS, {
        data: {
          type: 'l4Proxy',
          attributes: {
            frontend: { ipv4: FRONTEND, port },
            backend: { hosts: [{ address: ORIGIN, port: (echo.address() as net.AddressInfo).port }] },
          },
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.data.id as string;
      const failing = await waitFor('/healthz 503', async () => {
        const report = await health(tps.metricsUrl);
        return report.status === 503 ? report.body : undefined;
      });
      assert.equal(failing.status, 'failing');
      assert.equal(failing.store, 'ok');
      assert.equal(failing.edge.notServedCount, 1);
      assert.equal(failing.edge.notServed[0].id, id);
      assert.equal(failing.edge.notServed[0].state, 'ERROR');
      assert.match(failing.edge.notServed[0].detail, /EADDRINUSE/);
      assert.equal((await api.call('DELETE', `${CONFIGS}/${id}`)).status, 204);
      await waitFor('/healthz 200 again', async () => (await health(tps.metricsUrl)).status === 200 || undefined);
    } finally {
      squatter.close();
    }
  });
});

describe('observability on a tps edge node', () => {
  let tps: Tps;
  let node: ChildProcess;
  let nodeOutput = '';
  let nodeMetricsUrl: string;
  let origin: http.Server;

  before(async () => {
    origin = http.createServer((request, response) => {
      request.resume();
      response.end('edge origin\n');
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    // The API node runs no edge: every request is the edge node's.
    tps = await startTps({ env: { TPS_EDGE: 'false', TPS_FRONTEND_IPS: EDGE_FRONTEND, TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' } });
    node = spawn(process.execPath, [path.join(REPO_ROOT, 'bin/tps.js'), 'edge'], {
      env: {
        ...process.env,
        ...tps.env,
        TPS_NODE_ID: 'observed-edge',
        TPS_EDGE_WORKERS: '1',
        TPS_THREAT_FEEDS: path.join(REPO_ROOT, 'src/edge/l4/sample-threat-feed.txt'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    node.stdout!.on('data', (chunk: Buffer) => (nodeOutput += chunk.toString()));
    node.stderr!.on('data', (chunk: Buffer) => (nodeOutput += chunk.toString()));
    const ready = await waitFor('the edge node', async () => nodeOutput.split('\n').find((line) => line.includes('"tps edge ready"')), {
      timeoutMs: 30_000,
    });
    nodeMetricsUrl = (JSON.parse(ready) as { metricsUrl: string }).metricsUrl;
  });

  after(async () => {
    if (node && node.exitCode === null) {
      const exited = new Promise((resolve) => node.once('exit', resolve));
      node.kill('SIGTERM');
      await exited;
    }
    await tps?.stop();
    origin?.close();
  });

  it("serves its proxies' histograms and counters, and its health, on its own metrics listener", async () => {
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const port = await freePort(EDGE_FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: EDGE_FRONTEND, port },
          backend: { hosts: [{ address: ORIGIN, port: (origin.address() as net.AddressInfo).port }] },
        },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('ACTIVE on the edge node', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE', {
      timeoutMs: 20_000,
    });
    for (let i = 0; i < 3; i++) assert.equal((await get(`http://${EDGE_FRONTEND}:${port}/page/${i}`)).status, 200);
    assert.equal((await get(`http://${EDGE_FRONTEND}:${port}${ATTACK}`)).status, 403);

    const text = await waitFor('the edge node counting', async () => {
      const scraped = await metrics(nodeMetricsUrl);
      return value(scraped, 'tps_edge_http_request_duration_seconds_count', { proxy: id }) >= 4 ? scraped : undefined;
    });
    assert.equal(value(text, 'tps_edge_origin_response_seconds_count', { proxy: id }), 3);
    assert.equal(value(text, 'tps_edge_http_requests_total', { proxy: id, answered_by: 'origin', status_class: '2xx' }), 3);
    assert.equal(value(text, 'tps_edge_http_requests_total', { proxy: id, answered_by: 'waf', status_class: '4xx' }), 1);
    assert.ok(value(text, 'tps_edge_waf_rule_matches_total') >= 1);
    assert.ok(value(text, 'tps_edge_config_apply_seconds_count') >= 1);
    // The API node served none of it.
    assert.equal(value(await metrics(tps.metricsUrl), 'tps_edge_http_request_duration_seconds_count', { proxy: id }), 0);

    const report = await health(nodeMetricsUrl);
    assert.equal(report.status, 200);
    assert.equal(report.body.edge.configurations, 1);
    assert.deepEqual(report.body.edge.notServed, []);
    assert.equal(report.body.warnings, undefined, 'a threat feed is configured: nothing to warn of');
  });
});

describe('the demo (tps serve --demo)', () => {
  let tps: Tps;

  before(async () => {
    tps = await startTps({
      args: ['--demo'],
      env: { TPS_EDGE: 'true', TPS_EDGE_WORKERS: '1', TPS_FRONTEND_IPS: DEMO_FRONTEND, TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' },
    });
  });
  after(async () => {
    await tps?.stop();
  });

  it('prints commands that show a request passing, an attack blocked with its support id, a burst limited, and the event', async () => {
    const printed = await waitFor(
      'the demo commands',
      async () => (tps.output().includes('A burst the rate limit stops') ? tps.output() : undefined),
      { timeoutMs: 30_000 },
    );
    const lines = printed.split('\n');
    const after = (label: string) => {
      const index = lines.findIndex((line) => line.includes(label));
      assert.ok(index >= 0, `"${label}" printed:\n${printed}`);
      return lines[index + 1]!.trim();
    };
    const run = async (command: string) => (await execFileAsync('bash', ['-c', command], { timeout: 30_000 })).stdout;
    assert.match(printed, /TPS_ORIGIN_ALLOWED_NETWORKS=127\.0\.0\.0\/8/);

    const passes = after('A request that passes');
    assert.match(passes, /^curl /);
    assert.match(await run(passes), /^Hello from the demo origin: GET \/\n$/);

    const attack = after('An attack the WAF blocks');
    const blocked = (await run(attack)).trim();
    const match = /^403 support id ([0-9a-f]{32})$/.exec(blocked);
    assert.ok(match, blocked);
    const supportId = match[1]!;

    const burst = (await run(after('A burst the rate limit stops'))).trim().split(' ');
    assert.equal(burst.length, 25);
    assert.ok(burst.includes('200') && burst.at(-1) === '429', burst.join(' '));

    // The token line and the insight export find the blocked request's event.
    const token = JSON.parse(await run(after('Get an access token'))) as { access_token: string };
    const tenantId = /tenant id\s+([0-9a-f-]{36})/.exec(printed)![1]!;
    assert.match(printed, new RegExp(`${tps.url.replace(/[.]/g, '\\.')}/portal/waf`));
    await waitFor('the WAF event of the support id', async () => {
      const response = await fetch(`${tps.url}${EVENTS}?filter[tenantId]=${tenantId}`, {
        headers: { authorization: `Bearer ${token.access_token}` },
      });
      const body = (await response.json()) as { data: { type: string; attributes: { supportId: string } }[] };
      return body.data.some((event) => event.type === 'WAF_EVENT' && event.attributes.supportId === supportId) || undefined;
    });
  });
});
