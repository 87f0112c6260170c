/** What a rule's action list (or a SecDefaultAction's) parses into (index.ts parseActionList()), built up by each action's module. */
import type { ActionSpec } from '../parser.ts';
import type { DisruptiveAction, Expand, RuntimeAction, SetVarAction } from '../program.ts';

export interface ParsedActions {
  id?: number;
  phase?: number;
  chain: boolean;
  multiMatch: boolean;
  capture: boolean;
  transformations: { name: string; none: boolean }[];
  setvars: SetVarAction[];
  tags: Expand[];
  tagTexts: string[];
  severity?: number;
  msg?: Expand;
  logdata?: Expand;
  /** Run-time actions in rule order (ModSecurity's m_actionsRuntimePos). */
  runtime: RuntimeAction[];
  /** The last disruptive action (the one a rule runs). */
  disruptive?: DisruptiveAction;
  /** Every disruptive action, in order (what a SecDefaultAction gives `block`). */
  disruptives: DisruptiveAction[];
  hasBlock: boolean;
  rev: string;
  ver: string;
}

/** One action's parser: adds what `action` says to `out`. */
export type ActionParser = (action: ActionSpec, out: ParsedActions, context: ActionParseContext) => void;

export interface ActionParseContext {
  /**
   * One string object per marker name in a rule set, shared by its SecMarker entries and
   * skipAfter actions (the rule loop compares a reached marker with the pending one by identity
   * first).
   */
  readonly markerName: (name: string) => string;
}

/** The action's value; an action that needs one and has none is a load error. */
export function actionValue(action: ActionSpec): string {
  if (action.value === undefined) throw new Error(`action ${action.name} needs a value`);
  return action.value;
}
