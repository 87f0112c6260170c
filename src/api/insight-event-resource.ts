/** An insight event as the API shows it (InsightEventResource of @tps/model): the export and the portal's event views. */
import type { InsightEvent } from '@tps/model';

export function toEventResource(event: InsightEvent) {
  return {
    type: event.type,
    id: event.id,
    attributes: {
      timestamp: event.timestamp,
      rules: event.rules,
      supportId: event.supportId,
      action: event.action,
      tpc: event.tpc,
      destinationIp: event.destinationIp,
      source: event.source,
      request: event.request,
      ...(event.type === 'APP_DDOS_ATTACK' && event.action === 'BLOCKED' && { rateLimit: event.rateLimit }),
      ...(event.type === 'APP_DDOS_ATTACK' && event.action === 'CHALLENGED' && { attack: event.attack }),
      ...(event.type === 'WAF_EVENT' && { requestCount: event.requestCount ?? 1 }),
      ...(event.type === 'WAF_EVENT' && event.bodyTruncated === true && { bodyTruncated: true }),
    },
    relationships: {
      belongsTo: { data: { type: 'TENANT' as const, id: event.tenantId } },
      trafficConfig: { data: { type: 'trafficConfig' as const, id: event.trafficConfigId } },
    },
  };
}
