/**
 * SecLang actions: each is parsed and run in one module (setvar.ts, ctl.ts, disruptive.ts ...),
 * registered here by name. parseActionList() turns a rule's actions into ParsedActions (an
 * unknown action is a load error); runRuntimeAction() runs one of the run-time actions a full
 * match runs in rule order (transaction/actions.ts says when).
 */
import type { TransactionCollections } from '../../transaction/collections.ts';
import type { MutableMessage } from '../../transaction/messages.ts';
import type { ActionSpec } from '../parser.ts';
import type { CompiledRule, DisruptiveAction, RuntimeAction } from '../program.ts';
import { parseInitcolAction, parseNoEffectAction, parseSetenvAction, runInitcol, runSetenv } from './collections.ts';
import { parseCtlAction, runCtl } from './ctl.ts';
import { parseBlockAction, parseDisruptiveAction, runBlock } from './disruptive.ts';
import { parseFlagAction } from './flags.ts';
import { parseSkipAction, parseSkipAfterAction, runSkip, runSkipAfter } from './flow.ts';
import { parseLoggingAction, runLogging } from './logging.ts';
import { parseMetadataAction } from './metadata.ts';
import type { ActionParseContext, ActionParser, ParsedActions } from './parsed.ts';
import { parseSetVarAction } from './setvar.ts';
import { parseStatusAction, runStatus } from './status.ts';
import { parseTransformationAction } from './transformation.ts';

export type { ActionParseContext, ParsedActions } from './parsed.ts';

/** The actions this engine has (lower-case names), with their parsers. */
const PARSERS: ReadonlyMap<string, ActionParser> = new Map<string, ActionParser>([
  ['id', parseMetadataAction],
  ['phase', parseMetadataAction],
  ['msg', parseMetadataAction],
  ['logdata', parseMetadataAction],
  ['severity', parseMetadataAction],
  ['tag', parseMetadataAction],
  ['rev', parseMetadataAction],
  ['ver', parseMetadataAction],
  ['maturity', parseMetadataAction],
  ['accuracy', parseMetadataAction],
  ['chain', parseFlagAction],
  ['multimatch', parseFlagAction],
  ['capture', parseFlagAction],
  ['t', parseTransformationAction],
  ['setvar', parseSetVarAction],
  ['log', parseLoggingAction],
  ['nolog', parseLoggingAction],
  ['auditlog', parseLoggingAction],
  ['noauditlog', parseLoggingAction],
  ['block', parseBlockAction],
  ['deny', parseDisruptiveAction],
  ['drop', parseDisruptiveAction],
  ['pass', parseDisruptiveAction],
  ['allow', parseDisruptiveAction],
  ['redirect', parseDisruptiveAction],
  ['status', parseStatusAction],
  ['skipafter', parseSkipAfterAction],
  ['skip', parseSkipAction],
  ['ctl', parseCtlAction],
  ['initcol', parseInitcolAction],
  ['setenv', parseSetenvAction],
  ['expirevar', parseNoEffectAction],
  ['setuid', parseNoEffectAction],
  ['setsid', parseNoEffectAction],
  ['setrsc', parseNoEffectAction],
  ['sanitisearg', parseNoEffectAction],
  ['sanitisematched', parseNoEffectAction],
  ['sanitisematchedbytes', parseNoEffectAction],
  ['sanitiserequestheader', parseNoEffectAction],
  ['sanitiseresponseheader', parseNoEffectAction],
  ['xmlns', parseNoEffectAction],
]);

/** A rule's (or a SecDefaultAction's) actions, parsed in order. */
export function parseActionList(actions: readonly ActionSpec[], context: ActionParseContext): ParsedActions {
  const out: ParsedActions = {
    chain: false,
    multiMatch: false,
    capture: false,
    transformations: [],
    setvars: [],
    tags: [],
    tagTexts: [],
    runtime: [],
    disruptives: [],
    hasBlock: false,
    rev: '',
    ver: '',
  };
  for (const action of actions) {
    const parse = PARSERS.get(action.name);
    if (parse === undefined) throw new Error(`action ${action.name} is not supported by the compiled engine`);
    parse(action, out, context);
  }
  return out;
}

/** One run-time action of a full match (`defaults`: the phase's default disruptive actions, for `block`). */
export function runRuntimeAction(
  tx: TransactionCollections,
  a: RuntimeAction,
  rule: CompiledRule,
  msg: MutableMessage,
  defaults: readonly DisruptiveAction[] | undefined,
): void {
  switch (a.kind) {
    case 'log':
    case 'auditlog':
    case 'nolog':
    case 'noauditlog':
      runLogging(msg, a.kind);
      return;
    case 'block':
      runBlock(tx, defaults, rule, msg);
      return;
    case 'skipAfter':
      runSkipAfter(tx, a.marker);
      return;
    case 'skip':
      runSkip(tx, a.count);
      return;
    case 'status':
      runStatus(tx, a.status);
      return;
    case 'ctl':
      runCtl(tx, a.ctl);
      return;
    case 'initcol':
      runInitcol(tx, a.value, rule);
      return;
    case 'setenv':
      runSetenv(tx, a.name, a.value, a.unset, rule);
      return;
    case 'noop':
      return;
  }
}
