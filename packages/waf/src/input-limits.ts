/**
 * Input limits (engine.ts WafInputLimits): the defaults, their bounds, and the rules that refuse a
 * request past one. ModSecurity's recommended configuration sets two of them (SecArgumentsLimit
 * 1000 with rule 200007, SecRequestBodyJsonDepthLimit 512); libxml2, ModSecurity's XML parser,
 * stops at a depth of 256; the others are ours (docs/decisions.md says why each default).
 *
 * How a limit acts: the body parser stops at it (what is past it costs nothing more) and the
 * transaction sets TX:tps_limit_<name> to the limit; a rule of the engine settings (rule-set.ts),
 * first in phase 2, matches that variable and denies. So a request past a limit is refused in
 * BLOCKING mode before any CRS rule of phase 2 runs, and logged in LOGGING mode (then its first
 * `limit` values are inspected), as ModSecurity's 200007 in On and DetectionOnly.
 *
 * The semantics are "at most": `arguments: 1000` lets 1000 arguments through and refuses 1001
 * (ModSecurity, which cannot tell 1000 from more once it stopped counting, refuses 1000 already).
 */
import type { WafInputLimits } from './engine.ts';
import { WafSettingsError } from './engine.ts';

export type InputLimitName = keyof WafInputLimits;
export type ResolvedInputLimits = { readonly [K in InputLimitName]-?: number };

export const DEFAULT_INPUT_LIMITS: ResolvedInputLimits = Object.freeze({
  arguments: 1000,
  multipartParts: 1000,
  jsonDepth: 512,
  jsonElements: 10_000,
  xmlDepth: 256,
  valueLength: 128 * 1024,
});

/** The range each limit may be set to (the model's schema says the same). */
export const INPUT_LIMIT_BOUNDS: { readonly [K in InputLimitName]: readonly [min: number, max: number] } = Object.freeze({
  arguments: [1, 100_000],
  multipartParts: [1, 100_000],
  jsonDepth: [1, 10_000],
  jsonElements: [1, 1_000_000],
  xmlDepth: [1, 10_000],
  valueLength: [1, 64 * 1024 * 1024],
});

/** The rule each limit matches: its id and message (the WAF_EVENT names both). */
export const INPUT_LIMIT_RULES: { readonly [K in InputLimitName]: { readonly id: number; readonly message: string } } = Object.freeze({
  // ModSecurity's own id and message (modsecurity.conf-recommended).
  arguments: { id: 200007, message: 'Failed to fully parse request body due to large argument count' },
  multipartParts: { id: 200110, message: 'Multipart request body has more parts than the WAF inspects' },
  jsonDepth: { id: 200111, message: 'JSON request body nested deeper than the WAF inspects' },
  jsonElements: { id: 200112, message: 'JSON request body has more values than the WAF inspects' },
  xmlDepth: { id: 200113, message: 'XML request body nested deeper than the WAF inspects' },
  valueLength: { id: 200114, message: 'Request argument longer than the WAF inspects' },
});

const NAMES = Object.keys(DEFAULT_INPUT_LIMITS) as InputLimitName[];

/** The TX variable a limit sets when a request goes past it (its value: the limit). */
export function limitTxKey(name: InputLimitName): string {
  return `tps_limit_${name.toLowerCase()}`;
}

/** The limits of one request: the settings' over the defaults; throws WafSettingsError for a value out of its bounds. */
export function resolveInputLimits(limits: WafInputLimits | undefined): ResolvedInputLimits {
  if (limits === undefined) return DEFAULT_INPUT_LIMITS;
  const out: Record<string, number> = {};
  for (const name of NAMES) {
    const value = limits[name];
    if (value === undefined) {
      out[name] = DEFAULT_INPUT_LIMITS[name];
      continue;
    }
    const [min, max] = INPUT_LIMIT_BOUNDS[name];
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new WafSettingsError(`inputLimits.${name} must be an integer from ${min} to ${max}, got ${String(value)}`);
    }
    out[name] = value;
  }
  return out as ResolvedInputLimits;
}

/** The engine-settings rules (SecLang) that refuse a request past a limit: phase 2, before everything else there. */
export function inputLimitRules(): string {
  return NAMES.map((name) => {
    const { id, message } = INPUT_LIMIT_RULES[name];
    return `SecRule TX:${limitTxKey(name)} "@gt 0" \\
  "id:${id},phase:2,t:none,log,deny,status:400,msg:'${message}',logdata:'limit %{MATCHED_VAR}',severity:2"`;
  }).join('\n');
}
