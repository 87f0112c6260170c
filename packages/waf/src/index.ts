/**
 * @tps/waf: our SecLang engine (the OWASP CRS compiled to JavaScript), the WAF engine interface
 * both engines implement, the rule set they load, per-proxy settings and exclusions, and the
 * worker pool they run in. Nothing native: the ModSecurity engine is the optional package
 * @tps/waf-modsecurity.
 */
export type {
  WafEngine,
  WafEngineSettings,
  WafEngineVerdict,
  WafExchange,
  WafHeaders,
  WafInputLimits,
  WafInterrupt,
  WafMatchedRule,
  WafRequest,
  WafResponse,
  WafRuleExclusion,
} from './engine.ts';
export {
  forEachHeader,
  headerPairs,
  WafBudgetExceededError,
  WafCostShareError,
  WafOverloadedError,
  WafSettingsError,
  WafUnavailableError,
} from './engine.ts';
export { isBudgetOverrun } from './budget-overrun.ts';
export { checkSettings } from './settings.ts';
export { normalizedPath, pathUnderPrefix, removalsFor, validateExclusion } from './exclusions.ts';
export type { RuleRemoval } from './exclusions.ts';
export {
  crsRuleFiles,
  DEBIAN_CRS_RULES_DIR,
  DEBIAN_CRS_SETUP,
  DEFAULT_REQUEST_BODY_LIMIT,
  DEFAULT_RESPONSE_BODY_LIMIT,
  engineSettings,
  resolvedLimits,
  ruleSetSources,
} from './rule-set.ts';
export type { RuleSetOptions, RulesSource } from './rule-set.ts';
export { CompiledEngine, createCompiledEngine, DEFAULT_REQUEST_BUDGET_MS, defaultRunawayMs, sharedRuleSet } from './compiled-engine.ts';
export { DEFAULT_INPUT_LIMITS, INPUT_LIMIT_BOUNDS, INPUT_LIMIT_RULES, resolveInputLimits } from './input-limits.ts';
export type { InputLimitName, ResolvedInputLimits } from './input-limits.ts';
export type { CompiledEngineOptions } from './compiled-engine.ts';
export { CompiledInspector, compileCrs } from './inspector.ts';
export type { CompiledRulesOptions, OpenCompiledTransaction } from './inspector.ts';
export { compileRuleSet } from './seclang/compiler.ts';
export type { CompileOptions, CompileSource } from './seclang/compiler.ts';
export { SecLangError } from './seclang/parser.ts';
export type { CompiledRuleSet } from './seclang/program.ts';
export { POOL_OPTION_NAMES, WorkerPool } from './pool/worker-pool.ts';
export type { PoolSchedulingOptions, WafThreadRestartCause, WorkerPoolOptions } from './pool/worker-pool.ts';
export { serveInspector } from './pool/inspector-worker.ts';
export type { PoolInspector } from './pool/protocol.ts';
export {
  DEFAULT_COST_WINDOW_MS,
  DEFAULT_EXPENSIVE_CLIENT_SHARE,
  DEFAULT_EXPENSIVE_REQUEST_MS,
  DEFAULT_IN_FLIGHT_PER_WORKER,
  DEFAULT_MAX_QUEUE_WAIT_MS,
  DEFAULT_QUEUE_PER_WORKER,
  FairAdmission,
} from './pool/fair-admission.ts';
export { TRANSFORMATIONS } from './transformations/index.ts';
