/**
 * An HTTP request's access-log line, formatted straight into the writer's memory: the text
 * `JSON.stringify(entry)` gives for an entry built as `accessLogEntry` builds it (the same keys in the
 * same order, optional ones only when set). The serving loop writes one per request, so it makes no
 * string of the line; line-writer.test.ts compares it with `JSON.stringify` on random entries.
 */
import type { AccessLogEntry } from './types.ts';
import type { LineWriter } from '../../io/line-writer.ts';

export function appendHttpLine(out: LineWriter, entry: AccessLogEntry): void {
  appendStringField(out, '{"type":', entry.type);
  appendStringField(out, ',"time":', entry.time);
  appendStringField(out, ',"proxyId":', entry.proxyId);
  appendStringField(out, ',"tenantId":', entry.tenantId);
  appendNumberField(out, ',"revision":', entry.revision);
  appendStringField(out, ',"supportId":', entry.supportId);
  appendStringField(out, ',"requestId":', entry.requestId);
  appendStringField(out, ',"clientIp":', entry.clientIp);
  appendNumberField(out, ',"clientPort":', entry.clientPort);
  appendStringField(out, ',"serverIp":', entry.serverIp);
  appendNumberField(out, ',"serverPort":', entry.serverPort);
  appendStringField(out, ',"country":', entry.country);
  appendStringField(out, ',"protocol":', entry.protocol);
  appendStringField(out, entry.tls ? ',"tls":true,"method":' : ',"tls":false,"method":', entry.method);
  appendStringField(out, ',"host":', entry.host);
  appendStringField(out, ',"url":', entry.url);
  appendNumberField(out, ',"status":', entry.status);
  appendStringField(out, ',"answeredBy":', entry.answeredBy);
  appendNumberField(out, ',"bytesIn":', entry.bytesIn);
  appendNumberField(out, ',"bytesOut":', entry.bytesOut);
  appendNumberField(out, ',"upstreamAttempts":', entry.upstreamAttempts);
  appendNumberField(out, ',"durationMs":', entry.durationMs);
  if (entry.rawUrl !== undefined) appendStringField(out, ',"rawUrl":', entry.rawUrl);
  if (entry.clientIpSource !== undefined) appendStringField(out, ',"clientIpSource":', entry.clientIpSource);
  if (entry.peerIp !== undefined) appendStringField(out, ',"peerIp":', entry.peerIp);
  if (entry.clientCertificate !== undefined) appendStringField(out, ',"clientCertificate":', entry.clientCertificate);
  if (entry.waf !== undefined) appendStringField(out, ',"waf":', entry.waf);
  if (entry.wafRules !== undefined) {
    out.appendAscii(',"wafRules":[');
    for (let i = 0; i < entry.wafRules.length; i++) {
      if (i > 0) out.appendAscii(',');
      out.appendJsonNumber(entry.wafRules[i]!);
    }
    out.appendAscii(']');
  }
  if (entry.upstream !== undefined) appendStringField(out, ',"upstream":', entry.upstream);
  if (entry.upstreamError !== undefined) appendStringField(out, ',"upstreamError":', entry.upstreamError);
  if (entry.originMs !== undefined) appendNumberField(out, ',"originMs":', entry.originMs);
  if (entry.sample !== undefined) appendNumberField(out, ',"sample":', entry.sample);
  out.appendAscii('}');
}

/** A field: its key (with the `{` or `,` before it) and its value. */
function appendStringField(out: LineWriter, key: string, value: string): void {
  out.appendAscii(key);
  out.appendJsonString(value);
}

function appendNumberField(out: LineWriter, key: string, value: number): void {
  out.appendAscii(key);
  out.appendJsonNumber(value);
}
