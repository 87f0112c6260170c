/**
 * WAF audit log: JSON lines, one record per request that matched any rule, for operators to ship
 * to a SIEM. Unlike ModSecurity's native multi-part audit log, each record is one self-contained
 * JSON object with a versioned schema (`schema: "tps.waf.audit/1"`); fields are only ever added
 * within a version.
 *
 * Record (schema tps.waf.audit/1):
 *   schema          "tps.waf.audit/1"
 *   time            ISO 8601 UTC with milliseconds
 *   supportId       32 hex, the id on the block page and in the WAF_EVENT
 *   tenantId?, trafficConfigId?
 *   engine          "modsecurity" | ...
 *   mode            "BLOCKING" | "LOGGING"   (the proxy's waf.mode)
 *   action          "BLOCKED"  the request (or response) was refused
 *                   "LOGGED"   the rule set asked to interrupt, the proxy is in LOGGING mode
 *                   "PASSED"   rules matched below the threshold, nothing asked to interrupt
 *   paranoiaLevel, anomalyThreshold?
 *   client {ip, port}, server {ip, port}
 *   request {method, uri, httpVersion, host?}
 *   response? {status}
 *   anomalyScore {inbound?, outbound?}
 *   interrupt? {status, ruleId?, phase?}
 *   bodyTruncated? {request?, response?}
 *   ruleIds         every matched rule id, in match order, duplicates removed
 *   rules           [{id, message, severity, phase, tags, matchedVariable, matchedData?}]
 *                   matchedData only when the proxy sets waf.logMatchedData (it may hold secrets)
 *
 * Writing never blocks nor throws into the proxy: records go to an append-mode stream; when the disk
 * cannot keep up and more than `maxBufferedBytes` are waiting, records are dropped and counted.
 */
import { createWriteStream, mkdirSync } from 'node:fs';
import type { WriteStream } from 'node:fs';
import { dirname } from 'node:path';
import type { WafMatchedRule, WafRequest, WafEngineVerdict, WafHeaders } from '@tps/waf';
import { headerPairs } from '@tps/waf';

export const WAF_AUDIT_SCHEMA = 'tps.waf.audit/1';

export type WafAuditAction = 'BLOCKED' | 'LOGGED' | 'PASSED';

export interface WafAuditRule {
  id: number;
  message: string;
  severity: number | null;
  phase: number;
  tags: readonly string[];
  matchedVariable: string | null;
  matchedData?: string | null;
}

export interface WafAuditRecord {
  schema: typeof WAF_AUDIT_SCHEMA;
  time: string;
  supportId: string;
  tenantId?: string;
  trafficConfigId?: string;
  engine: string;
  mode: 'BLOCKING' | 'LOGGING';
  action: WafAuditAction;
  paranoiaLevel: number;
  anomalyThreshold?: number;
  client: { ip: string; port: number };
  server: { ip: string; port: number };
  request: { method: string; uri: string; httpVersion: string; host?: string };
  response?: { status: number };
  anomalyScore: { inbound?: number; outbound?: number };
  interrupt?: { status: number; ruleId?: number; phase?: number };
  bodyTruncated?: { request?: boolean; response?: boolean };
  ruleIds: number[];
  rules: WafAuditRule[];
}

export interface WafAuditInput {
  supportId: string;
  time?: Date;
  tenantId?: string;
  trafficConfigId?: string;
  engine: string;
  mode: 'BLOCKING' | 'LOGGING';
  paranoiaLevel: number;
  anomalyThreshold?: number;
  logMatchedData?: boolean;
  request: Pick<WafRequest, 'clientIp' | 'clientPort' | 'serverIp' | 'serverPort' | 'method' | 'uri' | 'httpVersion' | 'headers'>;
  requestVerdict: WafEngineVerdict;
  responseVerdict?: WafEngineVerdict;
  /** Status sent to the client. */
  responseStatus?: number;
}

/** BLOCKED / LOGGED / PASSED from the mode and the verdicts. */
export function wafAuditAction(mode: 'BLOCKING' | 'LOGGING', verdicts: readonly (WafEngineVerdict | undefined)[]): WafAuditAction {
  const interrupted = verdicts.some((v) => v?.interrupt !== undefined);
  if (!interrupted) return 'PASSED';
  return mode === 'BLOCKING' ? 'BLOCKED' : 'LOGGED';
}

function auditRule(rule: WafMatchedRule, withData: boolean): WafAuditRule {
  const out: WafAuditRule = {
    id: rule.id,
    message: rule.message,
    severity: rule.severity,
    phase: rule.phase,
    tags: rule.tags,
    matchedVariable: rule.matchedVariable,
  };
  if (withData) out.matchedData = rule.matchedData;
  return out;
}

/** The record for one request, or null when no rule matched (nothing to log). */
export function wafAuditRecord(input: WafAuditInput): WafAuditRecord | null {
  const verdicts = [input.requestVerdict, input.responseVerdict];
  const matched = verdicts.flatMap((v) => v?.matchedRules ?? []);
  if (matched.length === 0) return null;
  const withData = input.logMatchedData === true;
  const host = hostOf(input.request.headers);
  const interrupt = input.requestVerdict.interrupt ?? input.responseVerdict?.interrupt;
  const record: WafAuditRecord = {
    schema: WAF_AUDIT_SCHEMA,
    time: (input.time ?? new Date()).toISOString(),
    supportId: input.supportId,
    ...(input.tenantId !== undefined ? { tenantId: input.tenantId } : {}),
    ...(input.trafficConfigId !== undefined ? { trafficConfigId: input.trafficConfigId } : {}),
    engine: input.engine,
    mode: input.mode,
    action: wafAuditAction(input.mode, verdicts),
    paranoiaLevel: input.paranoiaLevel,
    ...(input.anomalyThreshold !== undefined ? { anomalyThreshold: input.anomalyThreshold } : {}),
    client: { ip: input.request.clientIp, port: input.request.clientPort },
    server: { ip: input.request.serverIp, port: input.request.serverPort },
    request: {
      method: input.request.method,
      uri: input.request.uri,
      httpVersion: input.request.httpVersion,
      ...(host !== undefined ? { host } : {}),
    },
    ...(input.responseStatus !== undefined ? { response: { status: input.responseStatus } } : {}),
    anomalyScore: {
      ...(input.requestVerdict.anomalyScore !== undefined ? { inbound: input.requestVerdict.anomalyScore } : {}),
      ...(input.responseVerdict?.anomalyScore !== undefined ? { outbound: input.responseVerdict.anomalyScore } : {}),
    },
    ...(interrupt
      ? {
          interrupt: {
            status: interrupt.status,
            ...(interrupt.ruleId !== undefined ? { ruleId: interrupt.ruleId } : {}),
            ...(interrupt.phase !== undefined ? { phase: interrupt.phase } : {}),
          },
        }
      : {}),
    ruleIds: [...new Set(matched.map((r) => r.id))],
    rules: matched.map((r) => auditRule(r, withData)),
  };
  const truncatedRequest = input.requestVerdict.bodyTruncated === true;
  const truncatedResponse = input.responseVerdict?.bodyTruncated === true;
  if (truncatedRequest || truncatedResponse) {
    record.bodyTruncated = {
      ...(truncatedRequest ? { request: true } : {}),
      ...(truncatedResponse ? { response: true } : {}),
    };
  }
  return record;
}

/** Parses one line of the audit log (null for blank or foreign lines). */
export function parseWafAuditLine(line: string): WafAuditRecord | null {
  const trimmed = line.trim();
  if (trimmed === '') return null;
  try {
    const value = JSON.parse(trimmed) as { schema?: unknown };
    return value && value.schema === WAF_AUDIT_SCHEMA ? (value as WafAuditRecord) : null;
  } catch {
    return null;
  }
}

export interface WafAuditLogOptions {
  /** Records waiting for the disk beyond which new ones are dropped; default 8 MiB. */
  maxBufferedBytes?: number;
}

/** Append-only JSON-lines writer. */
export class WafAuditLog {
  readonly path: string;
  /** Records dropped because the disk could not keep up (or the stream failed). */
  dropped = 0;
  /** Records written (handed to the stream). */
  written = 0;
  private readonly stream: WriteStream;
  private readonly maxBuffered: number;
  private failed: Error | undefined;

  constructor(path: string, options: WafAuditLogOptions = {}) {
    this.path = path;
    this.maxBuffered = options.maxBufferedBytes ?? 8 * 1024 * 1024;
    mkdirSync(dirname(path), { recursive: true });
    this.stream = createWriteStream(path, { flags: 'a', mode: 0o640 });
    this.stream.on('error', (error) => {
      this.failed = error;
    });
  }

  /** Error that stopped the stream, if any. */
  get error(): Error | undefined {
    return this.failed;
  }

  /** Writes the record for this request if any rule matched; returns it (null: nothing matched, nothing written). */
  record(input: WafAuditInput): WafAuditRecord | null {
    const record = wafAuditRecord(input);
    if (record) this.write(record);
    return record;
  }

  write(record: WafAuditRecord): void {
    if (this.failed || this.stream.destroyed || this.stream.writableEnded || this.stream.writableLength > this.maxBuffered) {
      this.dropped++;
      return;
    }
    this.stream.write(`${JSON.stringify(record)}\n`);
    this.written++;
  }

  /** Flushes and closes the file. */
  close(): Promise<void> {
    return new Promise((resolve) => {
      if (this.stream.destroyed || this.stream.writableEnded) {
        resolve();
        return;
      }
      this.stream.end(() => resolve());
    });
  }
}

/** The Host header's value, the first one when repeated. */
function hostOf(headers: WafHeaders): string | undefined {
  for (const [name, value] of headerPairs(headers)) if (name.toLowerCase() === 'host') return value;
  return undefined;
}
