/**
 * Insight events as the sinks send them: one JSON object per event (schema `tps.event/1`: the
 * event's own fields as the API's export has them, plus the node that stored it), in an RFC 5424
 * syslog message for the syslog sinks, framed by octet counting over TCP (RFC 6587).
 *
 *   <PRI>1 TIMESTAMP HOSTNAME tps PROCID MSGID - MSG
 *
 * - PRI: facility local0 (16) and severity warning (4) for a block, notice (5) for an event of a
 *   proxy in LOGGING mode.
 * - TIMESTAMP: the event's time (UTC, milliseconds); MSGID: the event type (WAF_EVENT,
 *   APP_DDOS_ATTACK); no structured data (`-`): everything is in the JSON of MSG, which carries no
 *   BOM (MSG-ANY), as SIEM pipelines that parse JSON expect.
 */
import type { InsightEvent } from '@tps/model';

export const EVENT_SCHEMA = 'tps.event/1';

const FACILITY_LOCAL0 = 16;
const SEVERITY_WARNING = 4;
const SEVERITY_NOTICE = 5;

/** The most a UDP message may be (a datagram over IPv4 holds 65,507 bytes of payload). */
export const MAX_DATAGRAM_BYTES = 65_000;

/** The JSON object an event is shipped as. */
export function eventRecord(event: InsightEvent, node: string): Record<string, unknown> {
  return { schema: EVENT_SCHEMA, node, ...event };
}

/** The event as a JSON line (no newline). */
export function eventJson(event: InsightEvent, node: string): string {
  return JSON.stringify(eventRecord(event, node));
}

/**
 * The event without its request headers (`request.headers`, `request.messageHeader`), marked
 * `truncated`: what a datagram carries when the whole event does not fit.
 */
export function truncatedEventJson(event: InsightEvent, node: string): string {
  const { headers: _headers, messageHeader: _messageHeader, ...request } = event.request;
  return JSON.stringify({ ...eventRecord(event, node), request, truncated: true });
}

/** RFC 5424 header fields are printable US-ASCII without spaces, of bounded length; NILVALUE when empty. */
export function headerField(value: string, maxLength: number): string {
  const cleaned = value.replace(/[^\x21-\x7e]/g, '').slice(0, maxLength);
  return cleaned === '' ? '-' : cleaned;
}

export interface SyslogOrigin {
  hostname: string;
  procId: string;
}

/** One RFC 5424 message for the event, its MSG being `json`. */
export function syslogMessage(event: InsightEvent, json: string, origin: SyslogOrigin): string {
  const severity = event.action === 'LOGGED' ? SEVERITY_NOTICE : SEVERITY_WARNING;
  const pri = FACILITY_LOCAL0 * 8 + severity;
  const timestamp = headerField(event.timestamp, 32);
  return `<${pri}>1 ${timestamp} ${headerField(origin.hostname, 255)} tps ${headerField(origin.procId, 128)} ${headerField(event.type, 32)} - ${json}`;
}

/** Octet-counting framing (RFC 6587 3.4.1): the message's length in bytes, a space, the message. */
export function octetCounted(message: string): Buffer {
  const body = Buffer.from(message);
  return Buffer.concat([Buffer.from(`${body.length} `), body]);
}
