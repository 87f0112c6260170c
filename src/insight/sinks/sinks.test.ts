import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parseSinkAddress, parseSinkAddresses, SinkAddressError } from './sink-address.ts';
import { eventJson, headerField, octetCounted, syslogMessage, truncatedEventJson } from './syslog.ts';
import type { WafEvent } from '@tps/model';

describe('event sink addresses (TPS_EVENT_SINKS)', () => {
  it('reads syslog over UDP and TCP (port 514 by default) and JSON-lines files', () => {
    assert.deepEqual(parseSinkAddresses(' syslog+udp://127.0.0.1:5514, syslog+tcp://siem.example.com ,file:///var/log/tps/events.jsonl,'), [
      { kind: 'syslog-udp', host: '127.0.0.1', port: 5514, label: 'syslog+udp://127.0.0.1:5514' },
      { kind: 'syslog-tcp', host: 'siem.example.com', port: 514, label: 'syslog+tcp://siem.example.com:514' },
      { kind: 'file', path: '/var/log/tps/events.jsonl', label: 'file:///var/log/tps/events.jsonl' },
    ]);
    assert.deepEqual(parseSinkAddress('syslog+tcp://[2001:db8::1]:6514'), {
      kind: 'syslog-tcp',
      host: '2001:db8::1',
      port: 6514,
      label: 'syslog+tcp://[2001:db8::1]:6514',
    });
    assert.deepEqual(parseSinkAddresses(''), []);
  });

  it('refuses what it cannot use, saying what is wrong', () => {
    for (const [entry, why] of [
      ['syslog://127.0.0.1', /syslog\+udp/],
      ['udp://127.0.0.1:514', /syslog\+udp/],
      ['syslog+udp://127.0.0.1:0', /port/],
      ['syslog+udp://127.0.0.1:70000', /port/],
      ['syslog+tcp://user@host:514', /no user, path or query/],
      ['syslog+tcp://host:514/path', /no user, path or query/],
      ['syslog+tcp://[not-v6]:514', /neither an IP address nor a host name/],
      ['syslog+tcp://999.1.1.1:514', /neither an IP address nor a host name/],
      ['syslog+tcp://bad_name:514', /neither/],
      ['file://relative/path', /absolute/],
      ['file:///var/log/', /must name a file/],
    ] as const) {
      assert.throws(
        () => parseSinkAddress(entry),
        (error: Error) => error instanceof SinkAddressError && why.test(error.message),
        entry,
      );
    }
    assert.throws(() => parseSinkAddresses('file:///a,file:///a'), /listed twice/);
  });

  it('never fails but with its own error, whatever the entry', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.constantFrom('syslog+udp://', 'syslog+tcp://', 'file://').chain((scheme) => fc.string().map((rest) => scheme + rest)),
        ),
        (entry) => {
          try {
            const parsed = parseSinkAddress(entry);
            if (parsed.kind !== 'file') assert.ok(parsed.port >= 1 && parsed.port <= 65535);
          } catch (error) {
            assert.ok(error instanceof SinkAddressError, String(error));
          }
        },
      ),
      { numRuns: 2000 },
    );
  });
});

const event: WafEvent = {
  id: '0b7c5c0e-3a56-4d1e-9f3c-111111111111',
  type: 'WAF_EVENT',
  action: 'BLOCKED',
  tenantId: '0b7c5c0e-3a56-4d1e-9f3c-222222222222',
  trafficConfigId: '0b7c5c0e-3a56-4d1e-9f3c-333333333333',
  timestamp: '2026-03-01T10:11:12.345Z',
  supportId: '0123456789abcdef0123456789abcdef',
  tpc: 'TST',
  destinationIp: '192.0.2.10',
  source: { countryCode: 'ZZ', ip: '198.51.100.7', port: 40000 },
  request: {
    method: 'GET',
    path: '/',
    headers: ['Host: example.com'],
    messageHeader: 'GET /?q=x HTTP/1.1\nHost: example.com',
    statusCode: 403,
  },
  rules: [
    {
      modSecId: 941100,
      name: 'XSS Attack Detected via libinjection',
      matchedData: { status: 'DISABLED', value: null },
      matchedVariable: 'ARGS:q',
    },
  ],
};

describe('syslog messages of insight events', () => {
  it('are RFC 5424 with the event as JSON, framed by octet counting over TCP', () => {
    const json = eventJson(event, 'node-1');
    assert.deepEqual(JSON.parse(json), { schema: 'tps.event/1', node: 'node-1', ...event });
    const message = syslogMessage(event, json, { hostname: 'edge 1.example', procId: '42' });
    // local0.warning = 16 * 8 + 4
    assert.equal(message, `<132>1 2026-03-01T10:11:12.345Z edge1.example tps 42 WAF_EVENT - ${json}`);
    assert.match(
      syslogMessage({ ...event, action: 'LOGGED' }, json, { hostname: '', procId: '42' }),
      /^<133>1 \S+ - tps 42 WAF_EVENT - \{/,
    );
    const framed = octetCounted('<132>1 é');
    assert.equal(framed.toString(), '9 <132>1 é'); // bytes, not characters
  });

  it('leave the request headers out of a datagram that would be too large', () => {
    const big = { ...event, request: { ...event.request, headers: [`X: ${'a'.repeat(70_000)}`] } };
    const truncated = JSON.parse(truncatedEventJson(big, 'n')) as Record<string, unknown> & { request: Record<string, unknown> };
    assert.equal(truncated.truncated, true);
    assert.equal(truncated.request.headers, undefined);
    assert.equal(truncated.request.messageHeader, undefined);
    assert.equal(truncated.request.path, '/');
  });

  it('header fields stay printable ASCII without spaces, bounded, and never empty', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.integer({ min: 1, max: 255 }), (value, max) => {
        const field = headerField(value, max);
        assert.match(field, /^[\x21-\x7e]+$/);
        assert.ok(field.length <= Math.max(1, max));
      }),
    );
  });
});
