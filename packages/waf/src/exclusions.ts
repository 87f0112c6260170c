/**
 * Per-proxy rule exclusions, applied per transaction.
 *
 * Design: the CRS is compiled once (per worker thread) and shared by every proxy; an exclusion is
 * data. For each request the engine picks the exclusions whose `pathPrefix` matches and hands them
 * to ModSecurity as the transaction's own removal lists, which is exactly what the SecLang actions
 * `ctl:ruleRemoveById=ID` and `ctl:ruleRemoveTargetById=ID;TARGET` do when a rule runs them
 * (they push onto Transaction::m_ruleRemoveById / m_ruleRemoveTargetById). So there is no rule set
 * per exclusion set, no compile step when a user adds an exclusion, and the change applies to the
 * next request. The only thing done here instead of in SecLang is the path test, done on a
 * normalized path (below) rather than on ModSecurity's REQUEST_FILENAME.
 */
import type { WafRequest, WafRuleExclusion } from './engine.ts';
import { forEachHeader, WafSettingsError } from './engine.ts';

/** One removal for one transaction: the rule, or the rule for one field only. */
export interface RuleRemoval {
  readonly ruleId: number;
  readonly target?: string;
}

const TARGET_RE =
  /^(ARGS|ARGS_GET|ARGS_POST|ARGS_NAMES|ARGS_GET_NAMES|ARGS_POST_NAMES|REQUEST_COOKIES|REQUEST_COOKIES_NAMES|REQUEST_HEADERS|REQUEST_HEADERS_NAMES|XML|FILES|FILES_NAMES)(?::([^\s].{0,255}))?$/s;

/** Throws WafSettingsError for an exclusion the engine cannot apply. */
export function validateExclusion(exclusion: WafRuleExclusion): void {
  if (!Array.isArray(exclusion.ruleIds) || exclusion.ruleIds.length === 0) {
    throw new WafSettingsError('rule exclusion needs at least one rule id');
  }
  for (const id of exclusion.ruleIds) {
    if (!Number.isInteger(id) || id < 1 || id > 999_999_999) throw new WafSettingsError(`bad rule id ${String(id)}`);
  }
  if (exclusion.pathPrefix !== undefined && (typeof exclusion.pathPrefix !== 'string' || !exclusion.pathPrefix.startsWith('/'))) {
    throw new WafSettingsError('rule exclusion pathPrefix must start with /');
  }
  if (exclusion.target !== undefined && (typeof exclusion.target !== 'string' || !TARGET_RE.test(exclusion.target))) {
    throw new WafSettingsError(`rule exclusion target ${JSON.stringify(exclusion.target)} is not COLLECTION or COLLECTION:name`);
  }
}

function percentDecode(s: string): string {
  if (!s.includes('%')) return s;
  return s.replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

/**
 * The path an origin server would serve for this request target: query and fragment cut,
 * %XX decoded (once), backslashes read as slashes, empty and "." segments dropped, ".." resolved.
 * A path-scoped exclusion matches on this, so `/api/../admin` or `/api%2F..%2Fadmin` does not get
 * the exclusions of `/api`. Absolute-form targets (http://host/path) use their path.
 */
export function normalizedPath(uri: string): string {
  let target = uri;
  const schemeMatch = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^/?#]*/.exec(target);
  if (schemeMatch) target = target.slice(schemeMatch[0].length);
  const cut = target.search(/[?#]/);
  if (cut >= 0) target = target.slice(0, cut);
  const decoded = percentDecode(target).replace(/\\/g, '/');
  const out: string[] = [];
  for (const segment of decoded.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') {
      out.pop();
      continue;
    }
    out.push(segment);
  }
  const trailing = decoded.length > 1 && decoded.endsWith('/') && out.length > 0 ? '/' : '';
  return `/${out.join('/')}${trailing}`;
}

/**
 * Whether a normalized request path lies under an exclusion's `pathPrefix`, segment by segment:
 * `/api` (or `/api/`) covers `/api`, `/api/` and `/api/x`, never `/api-admin` nor `/apix`. The
 * prefix is normalized as the path is, so `/api/./` and `/api` are the same prefix.
 */
export function pathUnderPrefix(path: string, pathPrefix: string): boolean {
  return underNormalizedPrefix(path, normalizedPrefix(pathPrefix));
}

/** The prefix as compared: normalized, without trailing slash ('' for the root). */
const normalizedPrefix = (pathPrefix: string) => normalizedPath(pathPrefix).replace(/\/+$/, '');
const underNormalizedPrefix = (path: string, prefix: string) => prefix === '' || path === prefix || path.startsWith(`${prefix}/`);

/** Normalized prefixes by exclusion: a proxy's settings objects live as long as its configuration. */
const prefixes = new WeakMap<WafRuleExclusion, string>();
function prefixOf(exclusion: WafRuleExclusion, pathPrefix: string): string {
  let prefix = prefixes.get(exclusion);
  if (prefix === undefined) {
    prefix = normalizedPrefix(pathPrefix);
    prefixes.set(exclusion, prefix);
  }
  return prefix;
}

/**
 * Removals for this request: the exclusions whose path prefix matches, expanded per rule id. With
 * `request.path` (the proxy's canonical path, the one the origin is sent) the prefixes are compared
 * as given, in the same canonical form; without it, both are normalised here.
 */
export function removalsFor(
  request: Pick<WafRequest, 'uri' | 'headers' | 'path'>,
  exclusions: readonly WafRuleExclusion[] | undefined,
): RuleRemoval[] {
  if (!exclusions || exclusions.length === 0) return [];
  const canonical = request.path;
  let path: string | undefined = canonical;
  const removals: RuleRemoval[] = [];
  for (const exclusion of exclusions) {
    if (exclusion.pathPrefix !== undefined) {
      path ??= normalizedPath(request.uri);
      const prefix = canonical !== undefined ? exclusion.pathPrefix.replace(/\/+$/, '') : prefixOf(exclusion, exclusion.pathPrefix);
      if (!underNormalizedPrefix(path, prefix)) continue;
    }
    const targets = exclusion.target === undefined ? [undefined] : expandTarget(exclusion.target, request.headers);
    for (const ruleId of exclusion.ruleIds) {
      for (const target of targets) removals.push(target === undefined ? { ruleId } : { ruleId, target });
    }
  }
  return removals;
}

/**
 * ModSecurity compares a removal target with "COLLECTION:key" byte for byte. Header names are
 * case-insensitive in HTTP, so REQUEST_HEADERS:User-Agent also covers "user-agent" as the client
 * spelled it. Argument and cookie names are case-sensitive and stay as written.
 */
function expandTarget(target: string, headers: WafRequest['headers']): string[] {
  const colon = target.indexOf(':');
  if (colon < 0) return [target];
  const collection = target.slice(0, colon);
  const key = target.slice(colon + 1);
  if (collection !== 'REQUEST_HEADERS' && collection !== 'REQUEST_HEADERS_NAMES') return [target];
  const names = new Set<string>([key]);
  const lower = key.toLowerCase();
  forEachHeader(headers, (name) => {
    if (name.toLowerCase() === lower) names.add(name);
  });
  return [...names].map((name) => `${collection}:${name}`);
}
