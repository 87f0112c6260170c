/** A variable of a dynamic collection (TX, IP, GLOBAL ...). */
import type { Entry, ValueBox } from './value-cache.ts';

export interface DynVar {
  key: string;
  /** The key lower-cased (the collection's own key for it). */
  readonly lowerKey: string;
  value: string;
  /**
   * The value's box and entry, made when a rule reads the variable as a value (dynamicEntry());
   * most TX variables are only compared by TxChecks and read by macros, which need neither.
   * Setting the variable drops both.
   */
  box: ValueBox | undefined;
  entry: Entry | undefined;
}
