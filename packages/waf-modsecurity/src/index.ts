/**
 * @tps/waf-modsecurity (optional): ModSecurity v3 with the OWASP CRS behind @tps/waf's WafEngine
 * interface, through a Node-API addon (build.sh builds it). The reference engine, selected with
 * TPS_WAF_ENGINE=modsecurity, and the oracle of the WAF tests.
 */
export { createModSecurityEngine, ModSecurityEngine } from './engine.ts';
export type { ModSecurityEngineOptions } from './engine.ts';
export { ModSecurityInspector } from './inspector.ts';
export type { OpenTransaction } from './inspector.ts';
export { addonPath, loadModSecurity, modSecurityAddonBuilt } from './addon.ts';
export type { Bytes, ModSecurityAddon, NativeIntervention, NativeMatchedRule, NativeRuleSet, NativeTransaction } from './addon.ts';
