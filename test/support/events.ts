/** Insight events as the edge writes them, for tests that read them back through the API. */
import crypto from 'node:crypto';
import type { AppDdosAttackEvent, InsightEvent, WafEvent } from '@tps/model';

export function wafEvent(tenantId: string, trafficConfigId: string, overrides: Partial<WafEvent> = {}): WafEvent {
  return {
    type: 'WAF_EVENT',
    id: crypto.randomUUID(),
    tenantId,
    trafficConfigId,
    timestamp: new Date().toISOString(),
    supportId: crypto.randomBytes(16).toString('hex'),
    tpc: 'TST',
    destinationIp: '127.0.0.2',
    source: { countryCode: 'DE', ip: '127.0.0.20', port: 40000 },
    request: {
      method: 'GET',
      path: "/?id=1' OR '1'='1",
      headers: ['Host: shop.example', 'User-Agent: curl/8.0'],
      messageHeader: "GET /?id=1' OR '1'='1 HTTP/1.1\nHost: shop.example\nUser-Agent: curl/8.0",
      statusCode: 403,
    },
    action: 'BLOCKED',
    rules: [{ modSecId: 942100, name: 'SQL Injection Attack Detected via libinjection', matchedData: { status: 'DISABLED', value: null } }],
    ...overrides,
  };
}

export function rateLimitEvent(tenantId: string, trafficConfigId: string): AppDdosAttackEvent {
  const now = new Date().toISOString();
  return {
    ...wafEvent(tenantId, trafficConfigId),
    type: 'APP_DDOS_ATTACK',
    action: 'BLOCKED',
    rules: [],
    rateLimit: {
      threshold: { requests: 10, periodSeconds: 1 },
      observedRequests: 11,
      blockSeconds: 60,
      firstBlockedAt: now,
      lastBlockedAt: now,
      blockedRequests: 1,
      blockedUntil: new Date(Date.now() + 60_000).toISOString(),
    },
  };
}

export type { InsightEvent };
