/**
 * The configuration directives of a rule set (SecRuleEngine, SecRequestBodyLimit ...), and the
 * ones that change rules loaded anywhere (SecRuleRemoveById/ByTag/ByMsg, SecRuleUpdateTargetBy*):
 * the first set the EngineConfig, the second are collected and applied once every rule is loaded
 * (compiler.ts). Directives with no effect on verdicts (audit log, debug log, directories ...)
 * are accepted; one the engine cannot honour is a load error.
 */
import { compileKeyRegex } from '../regex/runtime.ts';
import { compileVariable } from '../variables/resolvers.ts';
import type { EngineConfig } from './engine-config.ts';
import { parseVariable, splitVariables } from './parser.ts';
import type { Directive } from './parser.ts';
import type { CompiledRule, UpdateExclusion } from './program.ts';

/** What SecRuleUpdateTargetBy* reach: the rules loaded so far, by id and in order. */
export interface UpdateContext {
  rulesById: Map<number, CompiledRule>;
  allRules: CompiledRule[];
}

/** What the directives that act on rules leave for the compiler. */
export interface RuleChanges {
  removedIds: Set<number>;
  removedRanges: [number, number][];
  removedTags: string[];
  removedMsgs: string[];
  /** SecRuleUpdateTargetBy*: run once every rule is loaded. */
  updates: { directive: Directive; run: (context: UpdateContext) => void }[];
  sourceName: string;
}

export function applyConfig(d: Directive & { kind: 'config' }, config: EngineConfig, acc: RuleChanges): void {
  const arg = d.args[0] ?? '';
  const onOff = (): boolean => {
    const v = arg.toLowerCase();
    if (v === 'on') return true;
    if (v === 'off') return false;
    throw new Error(`${d.name} takes On or Off`);
  };
  const int = (): number => {
    if (!/^\d+$/.test(arg)) throw new Error(`${d.name} takes a number`);
    return Number(arg);
  };
  switch (d.name) {
    case 'secruleengine': {
      const v = arg.toLowerCase();
      if (v === 'on') config.ruleEngine = 'On';
      else if (v === 'off') config.ruleEngine = 'Off';
      else if (v === 'detectiononly') config.ruleEngine = 'DetectionOnly';
      else throw new Error('SecRuleEngine takes On, Off or DetectionOnly');
      return;
    }
    case 'secrequestbodyaccess':
      config.requestBodyAccess = onOff();
      return;
    case 'secrequestbodylimit':
      config.requestBodyLimit = int();
      return;
    case 'secrequestbodynofileslimit':
      config.requestBodyNoFilesLimit = int();
      return;
    case 'secrequestbodylimitaction':
      config.requestBodyLimitAction = /^reject$/i.test(arg) ? 'Reject' : /^processpartial$/i.test(arg) ? 'ProcessPartial' : fail();
      return;
    case 'secrequestbodyjsondepthlimit':
      config.requestBodyJsonDepthLimit = int();
      return;
    case 'secresponsebodyaccess':
      config.responseBodyAccess = onOff();
      return;
    case 'secresponsebodymimetype':
      config.responseBodyMimeTypes = d.args
        .join(' ')
        .split(/\s+/)
        .filter((s) => s !== '');
      return;
    case 'secresponsebodymimetypesclear':
      config.responseBodyMimeTypes = [];
      return;
    case 'secresponsebodylimit':
      config.responseBodyLimit = int();
      return;
    case 'secresponsebodylimitaction':
      config.responseBodyLimitAction = /^reject$/i.test(arg) ? 'Reject' : /^processpartial$/i.test(arg) ? 'ProcessPartial' : fail();
      return;
    case 'secpcrematchlimit':
    case 'secpcrematchlimitrecursion':
      config.pcreMatchLimit = int();
      return;
    case 'secargumentseparator':
      if (arg.length !== 1) throw new Error('Argument separator should be set to a single character.');
      config.argumentSeparator = arg;
      return;
    case 'secargumentslimit':
      config.argumentsLimit = int();
      return;
    case 'seccomponentsignature':
      config.components.push(arg);
      return;
    case 'seccookieformat':
      if (arg !== '0') throw new Error('only SecCookieFormat 0 is supported');
      return;
    case 'secconnengine':
      if (/^on$/i.test(arg)) throw new Error('SecConnEngine is not yet supported.');
      return;
    case 'secunicodemapfile':
      throw new Error('SecUnicodeMapFile is not supported by the compiled engine');
    case 'secruleremovebyid':
      for (const part of d.args.join(' ').split(/\s+/)) {
        if (part === '') continue;
        const m = /^(\d+)(?:-(\d+))?$/.exec(part);
        if (!m) throw new Error(`SecRuleRemoveById: bad id ${part}`);
        if (m[2] !== undefined) acc.removedRanges.push([Number(m[1]), Number(m[2])]);
        else acc.removedIds.add(Number(m[1]));
      }
      return;
    case 'secruleremovebytag':
      acc.removedTags.push(arg);
      return;
    case 'secruleremovebymsg':
      acc.removedMsgs.push(arg);
      return;
    case 'secruleupdatetargetbyid':
    case 'secruleupdatetargetbytag':
    case 'secruleupdatetargetbymsg': {
      const selector = arg;
      const targets = splitVariables(d.args[1] ?? '').map(parseVariable);
      if (targets.length === 0) throw new Error(`${d.name} needs targets`);
      const run = (ctx: UpdateContext): void => {
        let rules: CompiledRule[];
        if (d.name === 'secruleupdatetargetbyid') {
          const ids = new Set<number>();
          for (const part of selector.split(/[\s,]+/)) {
            const m = /^(\d+)(?:-(\d+))?$/.exec(part);
            if (!m) continue;
            if (m[2] === undefined) ids.add(Number(m[1]));
            else for (let k = Number(m[1]); k <= Number(m[2]); k++) ids.add(k);
          }
          rules = [...ids].map((id) => ctx.rulesById.get(id)).filter((r): r is CompiledRule => r !== undefined);
        } else if (d.name === 'secruleupdatetargetbytag') {
          rules = ctx.allRules.filter((r) => r.id !== 0 && r.tagTexts.includes(selector));
        } else {
          rules = ctx.allRules.filter((r) => r.id !== 0 && r.msg?.text === selector);
        }
        for (const rule of rules) {
          for (const t of targets) {
            if (t.exclude) {
              const ex: UpdateExclusion = {
                fullName:
                  t.keyRegex !== undefined
                    ? `${t.collection}:regex(${t.keyRegex})`
                    : t.key !== undefined
                      ? `${t.collection}:${t.key}`
                      : t.collection,
                ...(t.keyRegex !== undefined ? { re: compileKeyRegex(t.keyRegex) } : {}),
              };
              rule.exclusions.push(ex);
            } else rule.additions.push(compileVariable(t, []));
          }
        }
      };
      acc.updates.push({ directive: d, run });
      return;
    }
    case 'secruleupdateactionbyid':
      throw new Error('SecRuleUpdateActionById is not supported by the compiled engine');
    default:
      // audit log, debug log, directories, collection timeout, web app id ...: no effect here
      return;
  }
  function fail(): never {
    throw new Error(`${d.name}: bad value ${arg}`);
  }
}
