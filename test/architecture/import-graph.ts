/**
 * The import graph of the repository's TypeScript modules, read with TypeScript's own parser (no
 * module is loaded): every static import and export-from, `import type` included, and dynamic
 * import() with a literal specifier. Workspace packages (`@tps/name`) resolve to their
 * package's entry (packages/name/src/index.ts). The architecture tests check rules on it.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

export const REPOSITORY = resolve(import.meta.dirname, '../..');

export interface Import {
  /** The specifier as written. */
  readonly specifier: string;
  /** The file it resolves to (a module of this repository), when it is one. */
  readonly target: string | undefined;
  /**
   * `import type` / `export type`: erased at run time. (`import { type X }` is not: type stripping
   * leaves `import {} from`, which still loads the module.)
   */
  readonly typeOnly: boolean;
  /** import(...) */
  readonly dynamic: boolean;
}

/** The .ts and .tsx files under `dir` (node_modules and build output left out). */
export function typeScriptFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      if (name === 'node_modules' || name === 'build' || name === 'dist' || name.startsWith('.')) continue;
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (/\.tsx?$/.test(name) && !name.endsWith('.d.ts')) out.push(path);
    }
  };
  walk(dir);
  return out.sort();
}

/** Where a specifier of `from` points inside the repository, if it does. */
function resolveSpecifier(from: string, specifier: string): string | undefined {
  if (specifier.startsWith('.')) return resolve(dirname(from), specifier);
  const workspace = /^@tps\/([a-z0-9-]+)$/.exec(specifier);
  if (workspace) return join(REPOSITORY, 'packages', workspace[1]!, 'src', 'index.ts');
  return undefined;
}

/** Every import of one module. */
export function importsOf(file: string): Import[] {
  const kind = file.endsWith('.tsx') ? ts.ScriptKind.TSX : ts.ScriptKind.TS;
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true, kind);
  const out: Import[] = [];
  const add = (specifier: string, typeOnly: boolean, dynamic: boolean): void => {
    out.push({ specifier, target: resolveSpecifier(file, specifier), typeOnly, dynamic });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      add(node.moduleSpecifier.text, node.importClause?.isTypeOnly === true, false);
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier !== undefined && ts.isStringLiteral(node.moduleSpecifier)) {
      add(node.moduleSpecifier.text, node.isTypeOnly, false);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      add(node.arguments[0].text, false, true);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      add(node.argument.literal.text, true, false);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** The graph of `files`: each file's imports. */
export function importGraph(files: readonly string[]): Map<string, Import[]> {
  return new Map(files.map((file) => [file, importsOf(file)]));
}

/**
 * The import circles among the graph's modules (strongly connected components of more than one
 * module, or a module importing itself), as repository-relative paths. `typeImports`: whether
 * type-only imports count (they are erased at run time, but a circle of types is a circle of
 * design all the same).
 */
export function importCircles(graph: ReadonlyMap<string, readonly Import[]>, typeImports: boolean): string[][] {
  const edges = new Map<string, string[]>();
  for (const [file, imports] of graph) {
    edges.set(
      file,
      imports.filter((i) => i.target !== undefined && graph.has(i.target) && (typeImports || !i.typeOnly)).map((i) => i.target!),
    );
  }
  // Tarjan's strongly connected components
  let index = 0;
  const indexOf = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[][] = [];
  const connect = (v: string): void => {
    indexOf.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!indexOf.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, indexOf.get(w)!));
    }
    if (low.get(v) !== indexOf.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (edges.get(v) ?? []).includes(v)) circles.push(component.map((f) => relative(REPOSITORY, f)).sort());
  };
  for (const v of edges.keys()) if (!indexOf.has(v)) connect(v);
  return circles;
}
