/**
 * An HTTP request's access-log line, formatted straight into the writer's memory: the text
 * `JSON.stringify(entry)` gives for an entry built as `accessLogEntry` builds it (the same keys in the
 * same order, optional ones only when set). The serving loop writes one per request, so it makes no
 * string of the line; line-writer.test.ts compares it with `JSON.stringify` on random entries.
 */
import type { AccessLogEntry } from '../http/types.ts';
import type { LineWriter } from './line-writer.ts';

export function appendHttpLine(out: LineWriter, entry: AccessLogEntry): void {
  out.appendAscii('{"type":');
  out.appendJsonString(entry.type);
  out.appendAscii(',"time":');
  out.appendJsonString(entry.time);
  out.appendAscii(',"proxyId":');
  out.appendJsonString(entry.proxyId);
  out.appendAscii(',"tenantId":');
  out.appendJsonString(entry.tenantId);
  out.appendAscii(',"revision":');
  out.appendJsonNumber(entry.revision);
  out.appendAscii(',"supportId":');
  out.appendJsonString(entry.supportId);
  out.appendAscii(',"requestId":');
  out.appendJsonString(entry.requestId);
  out.appendAscii(',"clientIp":');
  out.appendJsonString(entry.clientIp);
  out.appendAscii(',"clientPort":');
  out.appendJsonNumber(entry.clientPort);
  out.appendAscii(',"serverIp":');
  out.appendJsonString(entry.serverIp);
  out.appendAscii(',"serverPort":');
  out.appendJsonNumber(entry.serverPort);
  out.appendAscii(',"country":');
  out.appendJsonString(entry.country);
  out.appendAscii(',"protocol":');
  out.appendJsonString(entry.protocol);
  out.appendAscii(entry.tls ? ',"tls":true,"method":' : ',"tls":false,"method":');
  out.appendJsonString(entry.method);
  out.appendAscii(',"host":');
  out.appendJsonString(entry.host);
  out.appendAscii(',"url":');
  out.appendJsonString(entry.url);
  out.appendAscii(',"status":');
  out.appendJsonNumber(entry.status);
  out.appendAscii(',"answeredBy":');
  out.appendJsonString(entry.answeredBy);
  out.appendAscii(',"bytesIn":');
  out.appendJsonNumber(entry.bytesIn);
  out.appendAscii(',"bytesOut":');
  out.appendJsonNumber(entry.bytesOut);
  out.appendAscii(',"upstreamAttempts":');
  out.appendJsonNumber(entry.upstreamAttempts);
  out.appendAscii(',"durationMs":');
  out.appendJsonNumber(entry.durationMs);
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

/** A field after the first: its key (with the comma before it) and its value. */
function appendStringField(out: LineWriter, key: string, value: string): void {
  out.appendAscii(key);
  out.appendJsonString(value);
}

function appendNumberField(out: LineWriter, key: string, value: number): void {
  out.appendAscii(key);
  out.appendJsonNumber(value);
}
