/**
 * Test helpers: run a small SecLang rule set on both engines (the ModSecurity addon and the
 * compiled engine) for the same request, to compare transformations, operators and body
 * processors one at a time.
 */
import { existsSync } from 'node:fs';
import { addonPath, loadModSecurity } from '../../../../../../native/modsecurity/index.ts';
import type { NativeMatchedRule } from '../../../../../../native/modsecurity/index.ts';
import type { WafRequest } from '../../engine.ts';
import { compileRuleSet } from '../compiler.ts';
import { CompiledInspector } from '../inspector.ts';

/** Whether the ModSecurity addon is built (oracle tests skip without it). */
export const ORACLE_AVAILABLE = existsSync(addonPath);

export interface SmallRuleSets {
  modsecurity(request: WafRequest): NativeMatchedRule[];
  compiled(request: WafRequest): { id: number; data: string; message: string }[];
  close(): void;
}

/** Both engines loaded with `rules` (SecRuleEngine On and body access are prepended). */
export function smallRuleSets(rules: string): SmallRuleSets {
  const text = `SecRuleEngine DetectionOnly\nSecRequestBodyAccess On\nSecRequestBodyLimit 1048576\n${rules}`;
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
        tx.addRequestHeaders(request.headers);
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

export function simpleRequest(partial: Partial<WafRequest> = {}): WafRequest {
  return {
    clientIp: '127.0.0.1',
    clientPort: 40000,
    serverIp: '127.0.0.1',
    serverPort: 80,
    method: 'GET',
    uri: '/',
    httpVersion: '1.1',
    headers: [['Host', 'localhost']],
    ...partial,
  };
}

/**
 * The addon returns ModSecurity's bytes as UTF-8 text when they are valid UTF-8, else latin1.
 * This gives our binary string the same form, so the two can be compared.
 */
export function asAddonString(binary: string): string {
  const bytes = Buffer.from(binary, 'latin1');
  const utf8 = bytes.toString('utf8');
  return Buffer.from(utf8, 'utf8').equals(bytes) ? utf8 : binary;
}
