/**
 * The SecLang the ModSecurity engine loads: our engine settings (what modsecurity.conf is for a
 * web server), then the CRS setup, then the CRS rules. Compiled once per worker thread and
 * shared by every proxy; per-proxy settings are per-transaction data (see modsecurity-inspect.ts).
 *
 * Body limit policy (both directions), documented for operators:
 * - A body up to the limit is inspected whole.
 * - A longer body: with bodyLimitAction PROCESS_PARTIAL (default) its first `limit` bytes are
 *   inspected and the rest passes uninspected; the verdict says `bodyTruncated: true` so the proxy
 *   can log it (or refuse it: 413) if the operator wants. A truncated body that cannot be parsed
 *   (JSON, XML, multipart cut in the middle) is not itself a reason to block: the body-error rules
 *   200002-200004 below skip when INBOUND_DATA_ERROR says the body was cut.
 *   With bodyLimitAction REJECT ModSecurity interrupts the exchange instead (its status: 403).
 * - Response bodies are inspected only for the MIME types listed (text/plain, text/html,
 *   text/xml, application/json by default).
 */
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';

export const DEBIAN_CRS_SETUP = '/etc/modsecurity/crs/crs-setup.conf';
export const DEBIAN_CRS_RULES_DIR = '/usr/share/modsecurity-crs/rules';

export interface ModSecurityRulesOptions {
  /** Default 'On'. 'DetectionOnly' never interrupts (the CRS regression setup). */
  readonly ruleEngine?: 'On' | 'DetectionOnly';
  /** Bytes of request body inspected; default 1 MiB. */
  readonly requestBodyLimit?: number;
  /** Bytes of response body inspected; default 512 KiB. */
  readonly responseBodyLimit?: number;
  /** What happens past a body limit; default PROCESS_PARTIAL (see above). */
  readonly bodyLimitAction?: 'PROCESS_PARTIAL' | 'REJECT';
  /** Response MIME types whose bodies are inspected. */
  readonly responseBodyMimeTypes?: readonly string[];
  /** Set false to skip response body inspection altogether (response headers are still inspected). */
  readonly responseBodyAccess?: boolean;
  /** PCRE match limit per regex evaluation (ReDoS guard); default 100000. */
  readonly pcreMatchLimit?: number;
  /** CRS setup file; default Debian's /etc/modsecurity/crs/crs-setup.conf. */
  readonly crsSetupFile?: string;
  /** Folder of the CRS *.conf rule files; default Debian's /usr/share/modsecurity-crs/rules. */
  readonly crsRulesDir?: string;
  /** SecLang added after the CRS setup and before the CRS rules (operator tuning, test setups). */
  readonly extraSetupRules?: string;
  /** SecLang added after the CRS rules (SecRuleRemoveById ..., SecRuleUpdateTargetById ...). */
  readonly extraAfterRules?: string;
}

export const DEFAULT_REQUEST_BODY_LIMIT = 1024 * 1024;
export const DEFAULT_RESPONSE_BODY_LIMIT = 512 * 1024;

export function resolvedLimits(options: ModSecurityRulesOptions): { request: number; response: number } {
  const request = options.requestBodyLimit ?? DEFAULT_REQUEST_BODY_LIMIT;
  const response = options.responseBodyLimit ?? DEFAULT_RESPONSE_BODY_LIMIT;
  for (const [name, value] of [['requestBodyLimit', request], ['responseBodyLimit', response]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > 1024 * 1024 * 1024) {
      throw new RangeError(`${name} must be an integer from 1 to 1 GiB, got ${String(value)}`);
    }
  }
  return { request, response };
}

/** Our engine settings: what a web server's modsecurity.conf holds, tuned for a proxy. */
export function engineSettings(options: ModSecurityRulesOptions): string {
  const limits = resolvedLimits(options);
  const limitAction = options.bodyLimitAction === 'REJECT' ? 'Reject' : 'ProcessPartial';
  const mimeTypes = (options.responseBodyMimeTypes ?? ['text/plain', 'text/html', 'text/xml', 'application/json'])
    .filter((type) => /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/i.test(type));
  const pcreLimit = options.pcreMatchLimit ?? 100_000;
  if (!Number.isInteger(pcreLimit) || pcreLimit < 1000) throw new RangeError('pcreMatchLimit must be an integer >= 1000');
  return `# tps: ModSecurity engine settings (generated, src/edge/http/waf/modsecurity-config.ts)
SecRuleEngine ${options.ruleEngine === 'DetectionOnly' ? 'DetectionOnly' : 'On'}
SecRequestBodyAccess On
SecRequestBodyLimit ${limits.request}
SecRequestBodyNoFilesLimit ${limits.request}
SecRequestBodyLimitAction ${limitAction}
SecResponseBodyAccess ${options.responseBodyAccess === false || mimeTypes.length === 0 ? 'Off' : 'On'}
${mimeTypes.length > 0 ? `SecResponseBodyMimeType ${mimeTypes.join(' ')}` : ''}
SecResponseBodyLimit ${limits.response}
SecResponseBodyLimitAction ${limitAction}
SecPcreMatchLimit ${pcreLimit}
SecPcreMatchLimitRecursion ${pcreLimit}
SecArgumentSeparator &
SecCookieFormat 0
SecAuditEngine Off
SecDebugLogLevel 0

# Body processors for XML and JSON (as modsecurity.conf-recommended).
SecRule REQUEST_HEADERS:Content-Type "^(?:application(?:/soap\\+|/)|text/)xml" \\
  "id:200000,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=XML"
SecRule REQUEST_HEADERS:Content-Type "^application/json" \\
  "id:200001,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON"

# A body that could not be parsed cannot be inspected: refuse it, unless it was only cut at the
# body limit (the documented PROCESS_PARTIAL policy).
SecRule REQBODY_ERROR "!@eq 0" \\
  "id:200002,phase:2,t:none,log,deny,status:400,msg:'Failed to parse request body.',logdata:'%{reqbody_error_msg}',severity:2,chain"
  SecRule INBOUND_DATA_ERROR "!@eq 1" "t:none"
SecRule MULTIPART_STRICT_ERROR "!@eq 0" \\
  "id:200003,phase:2,t:none,log,deny,status:400,msg:'Multipart request body failed strict validation: PE %{REQBODY_PROCESSOR_ERROR}, BQ %{MULTIPART_BOUNDARY_QUOTED}, BW %{MULTIPART_BOUNDARY_WHITESPACE}, DB %{MULTIPART_DATA_BEFORE}, DA %{MULTIPART_DATA_AFTER}, HF %{MULTIPART_HEADER_FOLDING}, LF %{MULTIPART_LF_LINE}, SM %{MULTIPART_MISSING_SEMICOLON}, IQ %{MULTIPART_INVALID_QUOTING}, IP %{MULTIPART_INVALID_PART}, IH %{MULTIPART_INVALID_HEADER_FOLDING}, FL %{MULTIPART_FILE_LIMIT_EXCEEDED}',chain"
  SecRule INBOUND_DATA_ERROR "!@eq 1" "t:none"
SecRule MULTIPART_UNMATCHED_BOUNDARY "@eq 1" \\
  "id:200004,phase:2,t:none,log,deny,status:400,msg:'Multipart parser detected a possible unmatched boundary.',chain"
  SecRule INBOUND_DATA_ERROR "!@eq 1" "t:none"
`;
}

/** The CRS rule files in load order (REQUEST-9xx ..., RESPONSE-9xx ...). */
export function crsRuleFiles(dir: string = DEBIAN_CRS_RULES_DIR): string[] {
  return readdirSync(dir)
    .filter((name) => name.endsWith('.conf'))
    .sort()
    .map((name) => join(dir, name));
}

/** One piece of SecLang to load: text (addRules) or a file (addFile, paths inside resolve next to it). */
export type RulesSource = { readonly text: string; readonly name: string } | { readonly file: string };

/** Everything the engine loads, in order. */
export function modsecurityRulesSources(options: ModSecurityRulesOptions): RulesSource[] {
  const setup = options.crsSetupFile ?? DEBIAN_CRS_SETUP;
  const sources: RulesSource[] = [{ text: engineSettings(options), name: 'tps engine settings' }];
  sources.push({ file: setup });
  // Debian's owasp-crs.load includes these two operator files (empty templates by default).
  const before = join(dirname(setup), 'REQUEST-900-EXCLUSION-RULES-BEFORE-CRS.conf');
  const after = join(dirname(setup), 'RESPONSE-999-EXCLUSION-RULES-AFTER-CRS.conf');
  if (existsSync(before)) sources.push({ file: before });
  if (options.extraSetupRules) sources.push({ text: options.extraSetupRules, name: 'extra setup rules' });
  for (const file of crsRuleFiles(options.crsRulesDir ?? DEBIAN_CRS_RULES_DIR)) sources.push({ file });
  if (existsSync(after)) sources.push({ file: after });
  if (options.extraAfterRules) sources.push({ text: options.extraAfterRules, name: 'extra rules after the CRS' });
  return sources;
}
