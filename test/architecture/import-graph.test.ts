/**
 * The import graph of the sources, as the modules' layering shows it: no circle. A circle of value
 * imports decides which module of it runs first by the order of the files' import lines (a value
 * read before its module ran is undefined), and whatever sits on a circle cannot be read or tested
 * on its own. Type-only imports (`import type`, or every name marked `type`) vanish at run time;
 * circles through them are checked too where the code has none, so shared types stay in `types.ts`
 * files rather than in the modules that hold code.
 *
 * The graph is read with TypeScript's parser (no type check): static `import` and `export ... from`
 * declarations with relative specifiers. Dynamic `import()` loads lazily and makes no load-order
 * circle; it is left out.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import ts from 'typescript';

const ROOT = path.resolve(import.meta.dirname, '../..');

interface ImportEdge {
  /** Absolute path of the imported file. */
  target: string;
  /** The import carries values (it loads the module at run time). */
  value: boolean;
}

function sourceFiles(dir: string): string[] {
  const files: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) files.push(...sourceFiles(full));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) files.push(full);
  }
  return files;
}

const parsed = new Map<string, ImportEdge[]>();

function importsOf(file: string): ImportEdge[] {
  const known = parsed.get(file);
  if (known !== undefined) return known;
  const source = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false);
  const edges: ImportEdge[] = [];
  const add = (specifier: ts.Expression | undefined, value: boolean): void => {
    if (specifier === undefined || !ts.isStringLiteral(specifier) || !specifier.text.startsWith('.')) return;
    edges.push({ target: path.resolve(path.dirname(file), specifier.text), value });
  };
  for (const statement of source.statements) {
    if (ts.isImportDeclaration(statement)) {
      const clause = statement.importClause;
      const onlyTypes =
        clause !== undefined &&
        (clause.isTypeOnly ||
          (clause.name === undefined &&
            clause.namedBindings !== undefined &&
            ts.isNamedImports(clause.namedBindings) &&
            clause.namedBindings.elements.length > 0 &&
            clause.namedBindings.elements.every((element) => element.isTypeOnly)));
      add(statement.moduleSpecifier, !onlyTypes);
    } else if (ts.isExportDeclaration(statement)) {
      const clause = statement.exportClause;
      const onlyTypes =
        statement.isTypeOnly || (clause !== undefined && ts.isNamedExports(clause) && clause.elements.length > 0 && clause.elements.every((element) => element.isTypeOnly));
      add(statement.moduleSpecifier, !onlyTypes);
    }
  }
  parsed.set(file, edges);
  return edges;
}

/** The circles (strongly connected components of more than one file, or a file importing itself) among `files`. */
function circles(files: readonly string[], valueOnly: boolean): string[][] {
  const inside = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    graph.set(
      file,
      importsOf(file)
        .filter((edge) => (edge.value || !valueOnly) && inside.has(edge.target))
        .map((edge) => edge.target),
    );
  }
  // Tarjan's algorithm.
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (file: string): void => {
    index.set(file, counter);
    low.set(file, counter);
    counter++;
    stack.push(file);
    onStack.add(file);
    for (const target of graph.get(file)!) {
      if (!index.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(file, Math.min(low.get(file)!, index.get(target)!));
      }
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== file);
    if (component.length > 1 || graph.get(file)!.includes(file)) found.push(component.map((f) => path.relative(ROOT, f)).sort());
  }
  for (const file of files) if (!index.has(file)) visit(file);
  return found;
}

function describeCircles(found: string[][]): string {
  return found.map((circle) => `circle of ${circle.length}: ${circle.join(', ')}`).join('\n');
}

describe('import graph: the data plane (src/edge)', () => {
  // The SecLang engine (src/edge/http/waf/compiled/) has a layering of its own, which the WAF engine's
  // package checks; here its circles are reported, not asserted.
  const engine = path.join(ROOT, 'src/edge/http/waf/compiled') + path.sep;
  const all = sourceFiles(path.join(ROOT, 'src/edge'));
  const files = all.filter((file) => !file.startsWith(engine));

  it('has no circle of value imports', () => {
    const found = circles(files, true);
    assert.equal(found.length, 0, `value imports form circles in src/edge:\n${describeCircles(found)}`);
  });

  it('has no circle even through type-only imports: shared types live in types.ts files', () => {
    const found = circles(files, false);
    assert.equal(found.length, 0, `imports (types included) form circles in src/edge:\n${describeCircles(found)}`);
  });

  it('reports the circles of the SecLang engine', (t) => {
    const engineFiles = all.filter((file) => file.startsWith(engine));
    const found = circles(engineFiles, true);
    if (found.length > 0) t.diagnostic(`value-import circles in the SecLang engine:\n${describeCircles(found)}`);
  });

  it('sees a circle when there is one (the check itself)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-import-circle-'));
    try {
      fs.writeFileSync(path.join(dir, 'a.ts'), "import { b } from './b.ts';\nexport const a = b;\n");
      fs.writeFileSync(path.join(dir, 'b.ts'), "import type { A } from './c.ts';\nexport const b = 1 as A;\n");
      fs.writeFileSync(path.join(dir, 'c.ts'), "import { a } from './a.ts';\nexport type A = typeof a;\n");
      const files = sourceFiles(dir);
      assert.equal(circles(files, true).length, 0, 'b takes only a type from c: no circle at run time');
      assert.deepEqual(circles(files, false).map((circle) => circle.length), [3]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
