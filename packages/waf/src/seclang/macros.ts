/**
 * Macros in SecLang strings (`msg:'... %{tx.anomaly_score}'`, setvar names and values, @rx
 * parameters): compiled once into literal parts and variable resolvers. transaction/macros.ts
 * expands them.
 */
import { compileVariable } from '../variables/resolvers.ts';
import type { VariableSpec } from './parser.ts';
import type { Expand, MacroVar, VarResolver } from './program.ts';

/** Compiles "text with %{VAR} macros". */
export function compileExpand(text: string): Expand {
  if (!text.includes('%{')) return { text };
  const parts: (string | MacroVar)[] = [];
  let i = 0;
  let literal = '';
  while (i < text.length) {
    const start = text.indexOf('%{', i);
    if (start < 0) {
      literal += text.slice(i);
      break;
    }
    const end = text.indexOf('}', start + 2);
    if (end < 0) {
      literal += text.slice(i);
      break;
    }
    literal += text.slice(i, start);
    const name = text.slice(start + 2, end);
    if (literal !== '') parts.push(literal);
    literal = '';
    parts.push({ resolver: macroResolver(name) });
    i = end + 1;
  }
  if (literal !== '') parts.push(literal);
  return { parts };
}

function macroResolver(name: string): VarResolver {
  // %{tx.foo}, %{TX:foo}, %{MATCHED_VAR}, %{request_headers.host}, %{rule.msg}
  const colon = name.indexOf(':');
  const dot = name.indexOf('.');
  let cut = colon;
  if (cut < 0 || (dot >= 0 && dot < cut)) cut = dot;
  const spec: VariableSpec =
    cut < 0
      ? { count: false, exclude: false, collection: name.toUpperCase(), text: name }
      : { count: false, exclude: false, collection: name.slice(0, cut).toUpperCase(), key: name.slice(cut + 1), text: name };
  return compileVariable(spec, []);
}
