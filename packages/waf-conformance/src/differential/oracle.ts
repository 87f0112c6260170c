/**
 * The live oracle: run a small SecLang rule set on both engines (the ModSecurity addon and ours)
 * for the same request, to compare transformations, operators and body processors one at a time.
 */
import { CompiledInspector, compileRuleSet, headerPairs } from '@tps/waf';
import { SMALL_RULE_SET_PREAMBLE } from '../golden/vectors.ts';
import type { WafRequest } from '@tps/waf';
import { loadModSecurity, modSecurityAddonBuilt } from '@tps/waf-modsecurity';
import type { NativeMatchedRule } from '@tps/waf-modsecurity';

/** Whether the ModSecurity addon is built. */
export const ORACLE_AVAILABLE = modSecurityAddonBuilt();

/** The `skip` option of a test that needs the live oracle: false when it is there, else why not. */
export const SKIP_WITHOUT_ORACLE: false | string = ORACLE_AVAILABLE
  ? false
  : 'the ModSecurity addon (the live oracle) is not built: bash packages/waf-modsecurity/build.sh; the golden vectors of @tps/waf still run';

export interface SmallRuleSets {
  modsecurity(request: WafRequest): NativeMatchedRule[];
  compiled(request: WafRequest): { id: number; data: string; message: string }[];
  close(): void;
}

/** Both engines loaded with `rules` (after SMALL_RULE_SET_PREAMBLE: detection only, body access). */
export function smallRuleSets(rules: string): SmallRuleSets {
  const text = `${SMALL_RULE_SET_PREAMBLE}${rules}`;
  const addon = loadModSecurity();
  const rs = new addon.RuleSet();
  rs.addRules(text);
  const compiled = new CompiledInspector(compileRuleSet([{ text, name: 'test rules' }]), { request: 1048576, response: 524288 });
  return {
    modsecurity(request) {
      const tx = new addon.Transaction(rs);
      try {
        tx.processConnection(request.clientIp, request.clientPort, request.serverIp, request.serverPort);
        tx.processUri(request.uri, request.method, request.httpVersion);
        tx.addRequestHeaders(headerPairs(request.headers));
        tx.processRequestHeaders();
        if (request.body && request.body.length > 0) tx.appendRequestBody(request.body);
        tx.processRequestBody();
        tx.processLogging();
        return tx.matchedRules();
      } finally {
        tx.close();
      }
    },
    compiled(request) {
      const v = compiled.inspectRequest(request, { paranoiaLevel: 1, mode: 'LOGGING' }).verdict;
      return v.matchedRules.map((m) => ({ id: m.id, data: m.matchedData ?? '', message: m.message }));
    },
    close() {
      rs.close();
    },
  };
}
