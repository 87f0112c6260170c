/**
 * Where the conformance runner sends a stage's request bytes, and what it learns back.
 *
 * Today: InProcessTarget parses the bytes (raw-http.ts) and asks a WafEngine directly. Later a
 * socket target sends the same bytes over a raw loopback socket to a running proxy, reads the
 * status line, and finds the request's matched rule ids in the WAF audit log (audit-log.ts records
 * carry ruleIds and the supportId the block page / response shows). The judge (runner.ts) only sees
 * a StageOutcome, so both targets are judged alike.
 */
import type { WafEngine, WafSettings, WafVerdict } from '../edge/http/waf/engine.ts';
import { createModSecurityEngine } from '../edge/http/waf/modsecurity-engine.ts';
import { createCompiledEngine } from '../edge/http/waf/compiled/compiled-engine.ts';
import type { CompiledEngineOptions } from '../edge/http/waf/compiled/compiled-engine.ts';
import type { ModSecurityEngineOptions } from '../edge/http/waf/modsecurity-engine.ts';
import { parseRawRequest } from './raw-http.ts';

export interface StageOutcome {
  /** Status of the answer; absent when there was no HTTP answer. */
  readonly status?: number;
  /** No (parsable) answer: what go-ftw reports as an error. */
  readonly error?: string;
  /** Ids of the rules this request matched, in match order. */
  readonly matchedRuleIds: readonly number[];
  /** This request's WAF log in ModSecurity error-log form ([id "..."] [msg "..."] ...), for log_contains patterns. */
  readonly logLines: readonly string[];
  /** Why the front server answered without the WAF (400, 405 ...), for the report. */
  readonly note?: string;
}

export interface StageDestination {
  readonly destAddr: string;
  readonly port: number;
}

export interface ConformanceTarget {
  readonly description: string;
  send(request: Buffer, destination: StageDestination): Promise<StageOutcome>;
  close(): Promise<void>;
}

/**
 * Engine settings of the CRS project's own regression runs (tests/regression/README.md of CRS
 * 3.3.4 and its docker-compose): detection only, IP reputation blocking (910000) removed, UTF-8
 * validation on, argument name/value length limits 100/400, combined file size 65535; paranoia 4
 * comes with the per-request settings. tx.crs_setup_version comes from Debian's crs-setup.conf.
 */
export const CRS_REGRESSION_SETUP = `SecAction "id:900005,phase:1,nolog,pass,t:none,\\
ctl:ruleRemoveById=910000,\\
setvar:tx.crs_validate_utf8_encoding=1,\\
setvar:tx.arg_name_length=100,\\
setvar:tx.arg_length=400,\\
setvar:tx.combined_file_sizes=65535"
`;

export const CRS_REGRESSION_SETTINGS: WafSettings = { paranoiaLevel: 4, mode: 'LOGGING' };

export function crsRegressionEngineOptions(extra: ModSecurityEngineOptions = {}): ModSecurityEngineOptions {
  return { ruleEngine: 'DetectionOnly', extraSetupRules: CRS_REGRESSION_SETUP, ...extra };
}

export function logLine(rule: WafVerdict['matchedRules'][number]): string {
  const quote = (s: string): string => s.replace(/"/g, '\\"');
  const tags = rule.tags.map((t) => ` [tag "${quote(t)}"]`).join('');
  return (
    `ModSecurity: Warning. [id "${rule.id}"] [msg "${quote(rule.message)}"] [data "${quote(rule.matchedData ?? '')}"]` +
    ` [severity "${rule.severity ?? ''}"]${tags}`
  );
}

/** Parses the bytes here and asks the engine; no socket. */
export class InProcessTarget implements ConformanceTarget {
  readonly description: string;
  private readonly engine: WafEngine;
  private readonly settings: WafSettings;
  private readonly ownsEngine: boolean;
  private sequence = 0;

  constructor(engine: WafEngine, settings: WafSettings = CRS_REGRESSION_SETTINGS, ownsEngine = false) {
    this.engine = engine;
    this.settings = settings;
    this.ownsEngine = ownsEngine;
    this.description = `in-process ${engine.name} engine, paranoia ${settings.paranoiaLevel}`;
  }

  /** The CRS regression setup on a fresh ModSecurity engine. */
  static async crsRegression(options: ModSecurityEngineOptions = {}): Promise<InProcessTarget> {
    const engine = await createModSecurityEngine(crsRegressionEngineOptions(options));
    return new InProcessTarget(engine, CRS_REGRESSION_SETTINGS, true);
  }

  /** The CRS regression setup on the compiled engine (src/edge/http/waf/compiled/), in process. */
  static async crsRegressionCompiled(options: CompiledEngineOptions = {}): Promise<InProcessTarget> {
    const engine = await createCompiledEngine({ ruleEngine: 'DetectionOnly', extraSetupRules: CRS_REGRESSION_SETUP, ...options });
    return new InProcessTarget(engine, CRS_REGRESSION_SETTINGS, true);
  }

  async send(request: Buffer, destination: StageDestination): Promise<StageOutcome> {
    const parsed = parseRawRequest(request);
    if (parsed.kind === 'error') return { error: parsed.reason, matchedRuleIds: [], logLines: [] };
    if (parsed.kind === 'rejected') return { status: parsed.status, note: parsed.reason, matchedRuleIds: [], logLines: [] };
    const verdict = await this.engine.inspectRequest(
      {
        clientIp: '127.0.0.1',
        clientPort: 40000 + (this.sequence++ % 20000),
        serverIp: destination.destAddr === 'localhost' ? '127.0.0.1' : destination.destAddr,
        serverPort: destination.port,
        method: parsed.method,
        uri: parsed.uri,
        httpVersion: parsed.httpVersion,
        headers: parsed.headers,
        body: parsed.body,
      },
      this.settings,
    );
    return {
      status: verdict.interrupt?.status ?? parsed.answerStatus ?? 200,
      ...(parsed.answerReason !== undefined ? { note: parsed.answerReason } : {}),
      matchedRuleIds: verdict.matchedRules.map((r) => r.id),
      logLines: verdict.matchedRules.map(logLine),
    };
  }

  async close(): Promise<void> {
    if (this.ownsEngine) await this.engine.close();
  }
}
