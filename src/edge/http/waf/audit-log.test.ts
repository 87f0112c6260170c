import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WAF_AUDIT_SCHEMA, WafAuditLog, parseWafAuditLine, wafAuditAction, wafAuditRecord } from './audit-log.ts';
import type { WafAuditInput } from './audit-log.ts';
import type { WafEngineVerdict } from '@tps/waf';

const request = {
  clientIp: '203.0.113.7',
  clientPort: 51000,
  serverIp: '192.0.2.10',
  serverPort: 443,
  method: 'GET',
  uri: "/?id=1'%20OR%20'1'='1",
  httpVersion: '1.1',
  headers: [['host', 'shop.example.com']] as [string, string][],
};
const blocked: WafEngineVerdict = {
  matchedRules: [
    {
      id: 942100,
      message: 'SQL Injection Attack Detected via libinjection',
      matchedData: "Matched Data: s&sos found within ARGS:id: 1' OR '1'='1",
      matchedVariable: 'ARGS:id',
      severity: 2,
      tags: ['attack-sqli'],
      phase: 2,
    },
    {
      id: 949110,
      message: 'Inbound Anomaly Score Exceeded (Total Score: 5)',
      matchedData: null,
      matchedVariable: 'TX:ANOMALY_SCORE',
      severity: 2,
      tags: [],
      phase: 2,
    },
  ],
  anomalyScore: 5,
  interrupt: { status: 403, ruleId: 949110, phase: 2 },
};
const input = (over: Partial<WafAuditInput> = {}): WafAuditInput => ({
  supportId: '0123456789abcdef0123456789abcdef',
  time: new Date('2025-01-02T03:04:05.678Z'),
  engine: 'modsecurity',
  mode: 'BLOCKING',
  paranoiaLevel: 1,
  request,
  requestVerdict: blocked,
  responseStatus: 403,
  ...over,
});

test('one record per request with matches: versioned schema, every rule id, no matched data by default', () => {
  const record = wafAuditRecord(input());
  assert.ok(record);
  assert.equal(record.schema, WAF_AUDIT_SCHEMA);
  assert.equal(record.time, '2025-01-02T03:04:05.678Z');
  assert.equal(record.action, 'BLOCKED');
  assert.deepEqual(record.ruleIds, [942100, 949110]);
  assert.equal(record.request.host, 'shop.example.com');
  assert.deepEqual(record.anomalyScore, { inbound: 5 });
  assert.deepEqual(record.interrupt, { status: 403, ruleId: 949110, phase: 2 });
  assert.equal('matchedData' in record.rules[0]!, false);
  assert.equal(wafAuditRecord(input({ logMatchedData: true }))?.rules[0]?.matchedData, blocked.matchedRules[0]!.matchedData);
  assert.equal(wafAuditRecord(input({ requestVerdict: { matchedRules: [] } })), null);
});

test('action: BLOCKED, LOGGED or PASSED', () => {
  assert.equal(wafAuditAction('BLOCKING', [blocked]), 'BLOCKED');
  assert.equal(wafAuditAction('LOGGING', [blocked]), 'LOGGED');
  assert.equal(wafAuditAction('BLOCKING', [{ matchedRules: blocked.matchedRules.slice(0, 1) }, undefined]), 'PASSED');
  const withResponse = wafAuditRecord(
    input({ requestVerdict: { matchedRules: [] }, responseVerdict: { ...blocked, anomalyScore: 4 }, mode: 'LOGGING' }),
  );
  assert.equal(withResponse?.action, 'LOGGED');
  assert.deepEqual(withResponse?.anomalyScore, { outbound: 4 });
});

test('the writer appends JSON lines and skips requests without matches', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'waf-audit-'));
  try {
    const path = join(dir, 'sub', 'waf-audit.jsonl');
    const log = new WafAuditLog(path);
    assert.ok(log.record(input()));
    assert.equal(log.record(input({ requestVerdict: { matchedRules: [] } })), null);
    log.record(input({ supportId: 'ffffffffffffffffffffffffffffffff', mode: 'LOGGING' }));
    await log.close();
    const lines = readFileSync(path, 'utf8')
      .split('\n')
      .filter((l) => l !== '');
    assert.equal(lines.length, 2);
    const records = lines.map(parseWafAuditLine);
    assert.deepEqual(
      records.map((r) => r?.action),
      ['BLOCKED', 'LOGGED'],
    );
    assert.equal(parseWafAuditLine('not json'), null);
    assert.equal(parseWafAuditLine('{"schema":"other"}'), null);
    assert.equal(log.written, 2);
    assert.equal(log.dropped, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
