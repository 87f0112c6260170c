/** Helpers of the layer 4 access-log lines (`L4AccessLogEntry`, types.ts). */
import type { L4AnsweredBy, L4RefusalReason } from './types.ts';

export function refusalAnsweredBy(reason: L4RefusalReason): L4AnsweredBy {
  if (reason === 'THREAT_FEED') return 'threat-feed';
  if (reason === 'PROXY_HEADER') return 'error';
  return 'limit';
}

/** Milliseconds with microsecond precision, as the HTTP lines have them. */
export function roundMs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
