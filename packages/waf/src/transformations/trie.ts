/**
 * The rule set's transformation chains as a trie: a rule's `t:a,t:b` is a node whose parent is
 * `t:a`'s, so a value's result after a chain is computed once and shared by every rule asking for
 * the same chain (transaction/value-cache.ts keeps the results per value, by node).
 */
import { CHANGES_ON } from './byte-kinds.ts';
import { TRANSFORMATIONS } from './index.ts';

export interface TransformationNode {
  readonly id: number;
  readonly parent: number;
  readonly name: string;
  /** Index of the transformation function (nodes of the same function share a memo). */
  readonly kind: number;
  readonly fn: (s: string) => string;
  /** Byte kinds without which fn returns its input (transformations' CHANGES_ON); -1: always runs. */
  readonly changesOn: number;
  /**
   * The same for the whole chain from the root to this node (the union of its changesOn): a
   * value with none of these bytes comes out of every step as it went in. -1 when a step always runs.
   */
  readonly chainChangesOn: number;
}

export class TransformationTrie {
  /** Node 0 is the identity. */
  readonly nodes: TransformationNode[] = [{ id: 0, parent: 0, name: '', kind: -1, fn: (s) => s, changesOn: -1, chainChangesOn: 0 }];
  private readonly index = new Map<string, number>();
  readonly kinds: string[] = [];

  /** Node id for a chain of transformation names (lower-case). */
  node(chain: readonly string[]): { node: number; path: number[] } {
    let cur = 0;
    const path: number[] = [];
    for (const name of chain) {
      const key = `${cur}/${name}`;
      let id = this.index.get(key);
      if (id === undefined) {
        const fn = TRANSFORMATIONS.get(name);
        if (!fn) throw new Error(`unknown transformation t:${name}`);
        id = this.nodes.length;
        let kind = this.kinds.indexOf(name);
        if (kind < 0) kind = this.kinds.push(name) - 1;
        const changesOn = CHANGES_ON.get(name) ?? -1;
        const before = this.nodes[cur]!.chainChangesOn;
        const chainChangesOn = changesOn < 0 || before < 0 ? -1 : before | changesOn;
        this.nodes.push({ id, parent: cur, name, kind, fn, changesOn, chainChangesOn });
        this.index.set(key, id);
      }
      cur = id;
      path.push(id);
    }
    return { node: cur, path };
  }
}
