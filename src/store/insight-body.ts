/**
 * How an insight event is kept in the store's `body` column, and what a row costs.
 *
 * The request's headers are kept once: `messageHeader` is the request line and the headers joined
 * by line feeds, so `headers` is left out of the stored JSON and rebuilt from it when read. HTTP
 * header values cannot hold a line feed (the parsers refuse them); an event whose headers would not
 * come back identical is stored with both, so reading always gives back what was written.
 */
import type { InsightEvent } from '@tps/model';

/**
 * Bytes a stored event costs beside its JSON: its other columns and the entries of its indexes.
 * With RULE_ROW_BYTES, fitted to the pages the event tables and their indexes take on both stores
 * (SQLite's dbstat, PostgreSQL's pg_total_relation_size; docs/benchmarks.md); used for the caps
 * TPS_INSIGHT_MAX_BYTES and TPS_INSIGHT_TENANT_SHARE_PERCENT.
 */
export const EVENT_ROW_OVERHEAD_BYTES = 700;
/** Bytes of one row of insight_event_rules (a matched rule of a WAF event) with its index entries. */
export const RULE_ROW_BYTES = 400;

export function encodeEventBody(event: InsightEvent): string {
  const request = event.request;
  if (request && Array.isArray(request.headers) && headersFromMessage(request.messageHeader, request.headers)) {
    const { headers: _headers, ...rest } = request;
    return JSON.stringify({ ...event, request: rest });
  }
  return JSON.stringify(event);
}

export function decodeEventBody(body: string): InsightEvent {
  const event = JSON.parse(body) as InsightEvent;
  const request = event.request as (Omit<InsightEvent['request'], 'headers'> & { headers?: string[] }) | undefined;
  if (request && request.headers === undefined && typeof request.messageHeader === 'string') {
    // Keys in the order the event had them (headers before messageHeader).
    const { messageHeader, statusCode, ...head } = request;
    event.request = { ...head, headers: splitHeaders(messageHeader), messageHeader, statusCode };
  }
  return event;
}

/** Whether `headers` is exactly what decoding `messageHeader` gives back. */
function headersFromMessage(messageHeader: unknown, headers: string[]): boolean {
  if (typeof messageHeader !== 'string') return false;
  const split = splitHeaders(messageHeader);
  return split.length === headers.length && split.every((header, index) => header === headers[index]);
}

function splitHeaders(messageHeader: string): string[] {
  const lines = messageHeader.split('\n');
  return lines.slice(1);
}

/** What the event's row, its rule rows and index entries cost in the store, estimated. */
export function storedBytes(body: string, event: InsightEvent): number {
  const rules = event.type === 'WAF_EVENT' ? new Set((event.rules ?? []).map((rule) => rule.modSecId)).size : 0;
  return Buffer.byteLength(body) + EVENT_ROW_OVERHEAD_BYTES + rules * RULE_ROW_BYTES;
}

/** Days since 1970-01-01 (UTC) of an ISO 8601 timestamp: the partition of the event on PostgreSQL. */
export function dayOf(timestamp: string): number {
  const millis = Date.parse(timestamp);
  return Number.isFinite(millis) ? Math.floor(millis / 86_400_000) : 0;
}
