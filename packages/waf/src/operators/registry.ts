/**
 * The operator registry: every SecLang operator is a module of its own that exports its
 * definition (the names it answers to and how it builds the operator of one rule), registered by
 * name (index.ts registers the built-in ones). A rule set is checked at load: an operator that is
 * not registered, or that the rule set's compile options disable, is a load error naming the
 * rule's file and line, as is a parameter the operator cannot use (each definition checks its
 * own).
 *
 * Each operator returns its raw result; negation (`!@op`) is applied by the rule loop, after the
 * operator's side effects (captures), as ModSecurity does.
 */
import type { CompiledRegex } from '../regex/runtime.ts';
import type { CompiledOperator, Expand } from '../seclang/program.ts';
import type { OperatorSpec } from '../seclang/parser.ts';
import type { TransactionCollections } from '../transaction/collections.ts';
import { numericComparison } from './numeric.ts';

/** What the compiler gives every operator. */
export interface OperatorContext {
  /** File of the rule (relative data files resolve next to it). */
  readonly file: string;
  readonly compileExpand: (text: string) => Expand;
  readonly expand: (tx: TransactionCollections, e: Expand, rule: Parameters<CompiledOperator['run']>[1] | undefined) => string;
  /** Operators this rule set may not use (CompileOptions.disabledOperators), lower-case. */
  readonly disabled?: ReadonlySet<string> | undefined;
}

/** The fields every operator object has, whatever its kind (one hidden class for the rule loop's reads). */
export type OperatorBase = Omit<CompiledOperator, 'run'>;

/** What a definition builds one rule's operator from. */
export interface OperatorOptions {
  /** The name the rule used, lower-case. */
  readonly name: string;
  /** The parameter as written. */
  readonly param: string;
  readonly base: OperatorBase;
  /** The parameter with its macros expanded for a transaction (static: the same string). */
  readonly paramOf: (tx: TransactionCollections) => string;
  readonly context: OperatorContext;
}

export interface OperatorDefinition {
  /** Lower-case names it is registered under (@pmFromFile also answers to pmf). */
  readonly names: readonly string[];
  /** The operator of one rule; throws when the parameter is not one it can use. */
  create(options: OperatorOptions): CompiledOperator;
}

const registered = new Map<string, OperatorDefinition>();

/** Registers an operator under each of its names (a later registration of a name replaces the earlier). */
export function registerOperator(definition: OperatorDefinition): void {
  for (const name of definition.names) registered.set(name, definition);
}

/** Whether operator `name` (lower-case) is registered. */
export function isOperator(name: string): boolean {
  return registered.has(name);
}

/** The operator of a rule, from its spec. Throws for an unknown, disabled or unusable operator. */
export function compileOperator(spec: OperatorSpec, context: OperatorContext): CompiledOperator {
  const name = spec.name;
  const definition = registered.get(name);
  if (definition === undefined) throw new Error(`unknown or unsupported operator @${name}`);
  if (context.disabled?.has(name)) throw new Error(`operator @${name} is disabled in this rule set`);
  const param = context.compileExpand(spec.param);
  const staticParam = param.text;
  const base: OperatorBase = {
    name,
    param: spec.param,
    negated: spec.negated,
    staticParam,
    regex: undefined as CompiledRegex | undefined,
    phrases: undefined as readonly string[] | undefined,
    ...numericComparison(name, staticParam),
    rx: undefined as CompiledRegex | undefined,
    gate: undefined as readonly string[] | undefined,
  };
  const paramOf = (tx: TransactionCollections): string => (staticParam !== undefined ? staticParam : context.expand(tx, param, undefined));
  return definition.create({ name, param: spec.param, base, paramOf, context });
}
