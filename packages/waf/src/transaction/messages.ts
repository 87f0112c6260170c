/** The matches a transaction logs: ModSecurity's RuleMessage, built while a rule runs and pushed when it logs. */

/** One logged match (as pushed to ModSecurity's m_rulesMessages). */
export interface LoggedMessage {
  readonly ruleId: number;
  readonly phase: number;
  readonly message: string;
  readonly data: string;
  /** Undefined when the rule has no severity action. */
  readonly severity: number | undefined;
  readonly tags: readonly string[];
  readonly disruptive: boolean;
  /** Key of the last matched value (ARGS:q ...). */
  readonly matchedVar: string | undefined;
}

/** What a message needs of its rule. */
export interface MessageRule {
  readonly id: number;
  readonly phase: number;
  readonly severity: number | undefined;
}

/** The message of the rule being evaluated (one object per transaction, reused; copied when logged). */
export interface MutableMessage {
  rule: MessageRule;
  message: string;
  data: string;
  severity: number | undefined;
  tags: string[];
  save: boolean;
  disruptive: boolean;
  matchedVar: string | undefined;
}

export function newMutableMessage(): MutableMessage {
  return {
    rule: { id: 0, phase: 0, severity: undefined },
    message: '',
    data: '',
    severity: undefined,
    tags: [],
    save: true,
    disruptive: false,
    matchedVar: undefined,
  };
}

/** Resets `m` for `rule` (a rule starts with an empty message that logs). */
export function resetMessage(m: MutableMessage, rule: MessageRule): MutableMessage {
  m.rule = rule;
  m.message = '';
  m.data = '';
  m.severity = undefined;
  if (m.tags.length > 0) m.tags = [];
  m.save = true;
  m.disruptive = false;
  m.matchedVar = undefined;
  return m;
}

/** Logs `m` into `messages`; later tags (a chain's, a multiMatch rule's) go to a new list. */
export function pushMessage(messages: LoggedMessage[], m: MutableMessage): void {
  messages.push({
    ruleId: m.rule.id,
    phase: m.rule.phase,
    message: m.message,
    data: m.data,
    severity: m.rule.severity !== undefined ? (m.severity ?? 0) : undefined,
    tags: m.tags,
    disruptive: m.disruptive,
    matchedVar: m.matchedVar,
  });
  // the message keeps the list; later tags (a chain's, a multiMatch rule's) go to a new one
  m.tags = [];
}
