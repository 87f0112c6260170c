/**
 * SecLang parser: text (a "binary" string, one char per byte, as files are read latin1) to
 * directives. Covers what ModSecurity v3 accepts for the CRS 3.3.4, Debian's crs-setup.conf and
 * our engine settings: line continuations, comments, double-quoted arguments with \" escapes kept
 * verbatim (as ModSecurity v3 keeps them), variable lists with selectors, regex selectors,
 * exclusions and counts, operators with negation, and action lists with single-quoted values.
 *
 * Every directive is checked here; an unknown directive, variable, operator or action is a
 * SecLangError naming file and line.
 */

export class SecLangError extends Error {
  readonly file: string;
  readonly line: number;
  constructor(file: string, line: number, message: string) {
    super(`${file}:${line}: ${message}`);
    this.name = 'SecLangError';
    this.file = file;
    this.line = line;
  }
}

export interface VariableSpec {
  /** `&COLLECTION`: the number of values instead of the values. */
  readonly count: boolean;
  /** `!COLLECTION:key`: an exclusion. */
  readonly exclude: boolean;
  /** Upper-case collection or variable name (ARGS, TX, REQUEST_URI ...). */
  readonly collection: string;
  /** `COLLECTION:key` (case kept as written). */
  readonly key?: string | undefined;
  /** `COLLECTION:/regex/`. */
  readonly keyRegex?: string | undefined;
  /** As written, for messages. */
  readonly text: string;
}

export interface OperatorSpec {
  /** Lower-case name without @ (rx, pm, eq ...). */
  readonly name: string;
  readonly negated: boolean;
  /** Parameter text exactly as written (macros not expanded). */
  readonly param: string;
}

export interface ActionSpec {
  /** Lower-case action name (id, phase, t, setvar, ctl ...). */
  readonly name: string;
  /** Value after the first ':' with surrounding single quotes removed; undefined when absent. */
  readonly value?: string | undefined;
}

interface Located {
  readonly file: string;
  readonly line: number;
}

export type Directive =
  | (Located & {
      readonly kind: 'rule';
      readonly variables: VariableSpec[];
      readonly operator: OperatorSpec;
      readonly actions: ActionSpec[];
    })
  | (Located & { readonly kind: 'action'; readonly actions: ActionSpec[] })
  | (Located & { readonly kind: 'marker'; readonly name: string })
  | (Located & { readonly kind: 'defaultAction'; readonly actions: ActionSpec[] })
  | (Located & { readonly kind: 'config'; readonly name: string; readonly args: string[] });

/** Directives we understand as configuration (lower-case). Values are checked by the compiler. */
const CONFIG_DIRECTIVES = new Set([
  'secruleengine',
  'secrequestbodyaccess',
  'secrequestbodylimit',
  'secrequestbodynofileslimit',
  'secrequestbodylimitaction',
  'secrequestbodyjsondepthlimit',
  'secresponsebodyaccess',
  'secresponsebodymimetype',
  'secresponsebodymimetypesclear',
  'secresponsebodylimit',
  'secresponsebodylimitaction',
  'secpcrematchlimit',
  'secpcrematchlimitrecursion',
  'secargumentseparator',
  'secargumentslimit',
  'seccookieformat',
  'secauditengine',
  'secauditlog',
  'secauditlogparts',
  'secauditlogtype',
  'secauditlogformat',
  'secauditlogstoragedir',
  'secauditlogrelevantstatus',
  'secauditlogdirmode',
  'secauditlogfilemode',
  'secdebuglog',
  'secdebugloglevel',
  'seccollectiontimeout',
  'seccomponentsignature',
  'sectmpdir',
  'secdatadir',
  'secuploaddir',
  'secuploadkeepfiles',
  'secuploadfilemode',
  'secuploadfilelimit',
  'secwebappid',
  'secstatusengine',
  'secconnengine',
  'secruleremovebyid',
  'secruleremovebytag',
  'secruleremovebymsg',
  'secruleupdatetargetbyid',
  'secruleupdatetargetbytag',
  'secruleupdatetargetbymsg',
  'secruleupdateactionbyid',
  'secxmlexternalentity',
  'secunicodemapfile',
  'include',
]);

const KNOWN_ACTIONS = new Set([
  'accuracy',
  'allow',
  'append',
  'auditlog',
  'block',
  'capture',
  'chain',
  'ctl',
  'deny',
  'deprecatevar',
  'drop',
  'exec',
  'expirevar',
  'id',
  'initcol',
  'log',
  'logdata',
  'maturity',
  'msg',
  'multimatch',
  'noauditlog',
  'nolog',
  'pass',
  'pause',
  'phase',
  'prepend',
  'proxy',
  'redirect',
  'rev',
  'sanitisearg',
  'sanitisematched',
  'sanitisematchedbytes',
  'sanitiserequestheader',
  'sanitiseresponseheader',
  'setenv',
  'setrsc',
  'setsid',
  'setuid',
  'setvar',
  'severity',
  'skip',
  'skipafter',
  'status',
  't',
  'tag',
  'ver',
  'xmlns',
]);

/** Splits text into logical lines (continuations joined), each with its first physical line number. */
export function logicalLines(text: string): { text: string; line: number }[] {
  const physical = text.split('\n');
  const out: { text: string; line: number }[] = [];
  let current = '';
  let startLine = 0;
  let open = false;
  for (let n = 0; n < physical.length; n++) {
    let line = physical[n]!;
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (!open) {
      startLine = n + 1;
      current = '';
      const trimmed = line.trimStart();
      if (trimmed.startsWith('#') || trimmed === '') continue;
    }
    // A line ending with a backslash (trailing blanks allowed) continues on the next one.
    const m = /\\[ \t]*$/.exec(line);
    if (m) {
      current += line.slice(0, m.index);
      open = true;
      continue;
    }
    current += line;
    open = false;
    out.push({ text: current, line: startLine });
  }
  if (open && current.trim() !== '') out.push({ text: current, line: startLine });
  return out;
}

/** Splits a directive line into its name and arguments (double-quoted or bare). */
export function splitArguments(text: string): string[] {
  const args: string[] = [];
  let i = 0;
  const n = text.length;
  while (i < n) {
    while (i < n && (text[i] === ' ' || text[i] === '\t')) i++;
    if (i >= n) break;
    if (text[i] === '"') {
      i++;
      let value = '';
      let closed = false;
      while (i < n) {
        const ch = text[i]!;
        if (ch === '\\' && i + 1 < n) {
          // keep escapes verbatim (ModSecurity v3 does), but an escaped quote does not close
          value += ch + text[i + 1];
          i += 2;
          continue;
        }
        if (ch === '"') {
          closed = true;
          i++;
          break;
        }
        value += ch;
        i++;
      }
      if (!closed) throw new Error('unterminated double-quoted argument');
      args.push(value);
    } else {
      let value = '';
      while (i < n && text[i] !== ' ' && text[i] !== '\t') value += text[i++];
      args.push(value);
    }
  }
  return args;
}

/** Splits `A|B|!C:x|D:/re|gex/` at top-level pipes. */
export function splitVariables(text: string): string[] {
  const parts: string[] = [];
  let cur = '';
  let i = 0;
  while (i < text.length) {
    const ch = text[i]!;
    if (ch === '|') {
      parts.push(cur);
      cur = '';
      i++;
      continue;
    }
    if (ch === ':' && text[i + 1] === '/' && !/^[&!]?XML$/i.test(cur.trim())) {
      // regex selector: up to the closing unescaped slash
      cur += ':/';
      i += 2;
      while (i < text.length) {
        const c = text[i]!;
        if (c === '\\' && i + 1 < text.length) {
          cur += c + text[i + 1];
          i += 2;
          continue;
        }
        cur += c;
        i++;
        if (c === '/') break;
      }
      continue;
    }
    if (ch === ':' && text[i + 1] === "'") {
      // quoted key
      const end = text.indexOf("'", i + 2);
      if (end > 0) {
        cur += text.slice(i, end + 1);
        i = end + 1;
        continue;
      }
    }
    cur += ch;
    i++;
  }
  parts.push(cur);
  return parts.map((p) => p.trim()).filter((p) => p !== '');
}

export function parseVariable(text: string): VariableSpec {
  let rest = text;
  let count = false;
  let exclude = false;
  if (rest.startsWith('&')) {
    count = true;
    rest = rest.slice(1);
  }
  if (rest.startsWith('!')) {
    exclude = true;
    rest = rest.slice(1);
  }
  if (!count && rest.startsWith('&')) {
    count = true;
    rest = rest.slice(1);
  }
  const colon = rest.indexOf(':');
  // TX.foo (dotted) is accepted in macros; in variable lists ModSecurity takes COLLECTION:key.
  const name = (colon < 0 ? rest : rest.slice(0, colon)).toUpperCase();
  if (!/^[A-Z_][A-Z0-9_]*$/.test(name)) throw new Error(`bad variable ${JSON.stringify(text)}`);
  if (colon < 0) return { count, exclude, collection: name, text };
  let key = rest.slice(colon + 1);
  if (key.startsWith("'") && key.endsWith("'") && key.length >= 2) key = key.slice(1, -1);
  if (name !== 'XML' && key.length >= 2 && key.startsWith('/') && key.endsWith('/')) {
    return { count, exclude, collection: name, keyRegex: key.slice(1, -1), text };
  }
  return { count, exclude, collection: name, key, text };
}

export function parseOperator(text: string): OperatorSpec {
  let rest = text;
  let negated = false;
  // leading blanks are kept by ModSecurity only inside the parameter
  if (rest.startsWith('!')) {
    negated = true;
    rest = rest.slice(1);
  }
  if (!rest.startsWith('@')) {
    // implicit @rx
    return { name: 'rx', negated, param: rest };
  }
  const m = /^@([A-Za-z0-9]+)/.exec(rest);
  if (!m) throw new Error(`bad operator ${JSON.stringify(text)}`);
  const name = m[1]!.toLowerCase();
  let param = rest.slice(m[0].length);
  if (param.startsWith(' ')) param = param.slice(1);
  else if (param !== '') throw new Error(`bad operator ${JSON.stringify(text)}`);
  return { name, negated, param };
}

/** Splits an action list at commas outside single quotes. */
export function parseActions(text: string): ActionSpec[] {
  const parts: string[] = [];
  let cur = '';
  let inQuote = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (inQuote) {
      if (ch === '\\' && text[i + 1] === "'") {
        cur += "\\'";
        i++;
        continue;
      }
      if (ch === "'") inQuote = false;
      cur += ch;
      continue;
    }
    if (ch === "'") {
      inQuote = true;
      cur += ch;
      continue;
    }
    if (ch === ',') {
      parts.push(cur);
      cur = '';
      continue;
    }
    cur += ch;
  }
  if (inQuote) throw new Error('unterminated single quote in actions');
  parts.push(cur);
  const actions: ActionSpec[] = [];
  for (const raw of parts) {
    const part = raw.trim();
    if (part === '') continue;
    const colon = part.indexOf(':');
    const name = (colon < 0 ? part : part.slice(0, colon)).trim().toLowerCase();
    if (!KNOWN_ACTIONS.has(name)) throw new Error(`unknown action ${JSON.stringify(name)}`);
    if (colon < 0) {
      actions.push({ name });
      continue;
    }
    let value = part.slice(colon + 1).trim();
    if (value.length >= 2 && value.startsWith("'") && value.endsWith("'")) value = value.slice(1, -1);
    actions.push({ name, value });
  }
  return actions;
}

/**
 * Parses SecLang text. `includeFile` resolves an Include directive (path relative to `file`) to
 * its directives; without it Include is a load error.
 */
export function parseSecLang(text: string, file: string, includeFile?: (path: string, from: string) => Directive[]): Directive[] {
  const directives: Directive[] = [];
  for (const { text: lineText, line } of logicalLines(text)) {
    try {
      const args = splitArguments(lineText);
      if (args.length === 0) continue;
      const name = args[0]!;
      const lower = name.toLowerCase();
      switch (lower) {
        case 'secrule': {
          if (args.length < 3 || args.length > 4) throw new Error('SecRule takes VARIABLES OPERATOR [ACTIONS]');
          const variables = splitVariables(args[1]!).map(parseVariable);
          if (variables.length === 0) throw new Error('SecRule without variables');
          const operator = parseOperator(args[2]!);
          const actions = args.length === 4 ? parseActions(args[3]!) : [];
          directives.push({ kind: 'rule', file, line, variables, operator, actions });
          break;
        }
        case 'secaction': {
          if (args.length !== 2) throw new Error('SecAction takes one argument');
          directives.push({ kind: 'action', file, line, actions: parseActions(args[1]!) });
          break;
        }
        case 'secmarker': {
          if (args.length !== 2) throw new Error('SecMarker takes one argument');
          let marker = args[1]!;
          if (marker.startsWith("'") && marker.endsWith("'") && marker.length >= 2) marker = marker.slice(1, -1);
          directives.push({ kind: 'marker', file, line, name: marker });
          break;
        }
        case 'secdefaultaction': {
          if (args.length !== 2) throw new Error('SecDefaultAction takes one argument');
          directives.push({ kind: 'defaultAction', file, line, actions: parseActions(args[1]!) });
          break;
        }
        default: {
          if (!CONFIG_DIRECTIVES.has(lower)) throw new Error(`unknown directive ${name}`);
          if (lower === 'include') {
            if (!includeFile) throw new Error('Include is not available here');
            for (const d of includeFile(args[1] ?? '', file)) directives.push(d);
            break;
          }
          directives.push({ kind: 'config', file, line, name: lower, args: args.slice(1) });
        }
      }
    } catch (error) {
      if (error instanceof SecLangError) throw error;
      throw new SecLangError(file, line, (error as Error).message);
    }
  }
  return directives;
}
