/**
 * Where the conformance runner sends a stage's request bytes, and what it learns back.
 *
 * InProcessTarget parses the bytes (raw-http.ts) and asks a WafEngine directly; the product's
 * SocketTarget (test/waf-conformance/socket-target.ts) writes them to a running proxy. The judge
 * (runner.ts) only sees a StageOutcome, so both targets are judged alike. Both run the engine they are told: ours
 * (`compiled`, the product's default) or ModSecurity.
 */
import { createCompiledEngine } from '@tps/waf';
import type { RuleSetOptions, WafEngine, WafEngineSettings, WafEngineVerdict } from '@tps/waf';
import { createModSecurityEngine } from '@tps/waf-modsecurity';
import { parseRawRequest } from './raw-http.ts';

/** The engines the targets can run. */
export type EngineName = 'compiled' | 'modsecurity';
export const ENGINE_NAMES: readonly EngineName[] = ['compiled', 'modsecurity'];

/** Starts `engine` with the CRS regression setup (worker threads: `workers`; 0 runs ours in process). */
export function crsRegressionEngine(engine: EngineName, workers: number, extra: RuleSetOptions = {}): Promise<WafEngine> {
  const options = crsRegressionEngineOptions(extra);
  return engine === 'compiled'
    ? createCompiledEngine({ ...options, workers })
    : createModSecurityEngine({ ...options, workers: Math.max(1, workers) });
}

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

export const CRS_REGRESSION_SETTINGS: WafEngineSettings = { paranoiaLevel: 4, mode: 'LOGGING' };

export function crsRegressionEngineOptions(extra: RuleSetOptions = {}): RuleSetOptions {
  return { ruleEngine: 'DetectionOnly', extraSetupRules: CRS_REGRESSION_SETUP, ...extra };
}

export function logLine(rule: WafEngineVerdict['matchedRules'][number]): string {
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
  private readonly settings: WafEngineSettings;
  private readonly ownsEngine: boolean;
  private sequence = 0;

  constructor(engine: WafEngine, settings: WafEngineSettings = CRS_REGRESSION_SETTINGS, ownsEngine = false) {
    this.engine = engine;
    this.settings = settings;
    this.ownsEngine = ownsEngine;
    this.description = `in-process ${engine.name} engine, paranoia ${settings.paranoiaLevel}`;
  }

  /** The CRS regression setup on a fresh engine: ModSecurity in `workers` threads, ours in process. */
  static async crsRegression(engine: EngineName, options: { workers?: number } = {}): Promise<InProcessTarget> {
    const started = await crsRegressionEngine(engine, engine === 'compiled' ? 0 : (options.workers ?? 2));
    return new InProcessTarget(started, CRS_REGRESSION_SETTINGS, true);
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
