/**
 * The rule loop of a transaction against a CompiledRuleSet: each phase's rules in order, with
 * their jumps, skips, removals and allows, their variables' values through the literal prefilter
 * and the value cache to their operators, and the actions of what matched (actions.ts). It
 * follows ModSecurity v3.0.9 (RulesSet::evaluate, RuleWithOperator::evaluate,
 * RuleWithActions::executeActions*, performLogging) step by step, because matching the reference
 * engine's verdicts is the point; what differs is how values are kept (value-cache.ts,
 * literal-cache.ts).
 *
 * Transaction is the class the engine uses: its collections and state are collections.ts's,
 * its caches literal-cache.ts's.
 */
import { compareNumeric } from '../operators/numeric.ts';
import { containsAny, runRegex } from '../operators/rx.ts';
import type { RulePrefilter } from '../prefilter/scanner.ts';
import { runSetVar } from '../seclang/actions/setvar.ts';
import { READ_FILTERED, READ_LIST, READ_NAMES, READ_SINGLE, READ_TX_KEY, READ_XML } from '../seclang/program.ts';
import type { CompiledOperator, CompiledRule, CompiledRuleSet, TxCheck, TxGate } from '../seclang/program.ts';
import { actionsAfterFullMatch, actionsOnMatch } from './actions.ts';
import { ALLOW_ALL, ALLOW_REQUEST, clearIntervention, NONE_ALLOW, takeIntervention } from './interventions.ts';
import type { Intervention } from './interventions.ts';
import { TransactionLiteralCache } from './literal-cache.ts';
import { expand } from './macros.ts';
import { newMutableMessage, pushMessage, resetMessage } from './messages.ts';
import type { MutableMessage } from './messages.ts';
import { byteKinds, transformed } from './value-cache.ts';
import type { Entry } from './value-cache.ts';

export class Transaction extends TransactionLiteralCache {
  /** Reused message of the rule being evaluated (copied when logged). */
  private readonly msg: MutableMessage = newMutableMessage();

  constructor(rs: CompiledRuleSet, id?: string) {
    super(rs, id);
  }

  /** RulesSet::evaluate for one phase (0-5). */
  evaluatePhase(phase: number): void {
    this.currentPhase = phase;
    this.phaseRun++;
    if (this.allowType === ALLOW_ALL && phase !== 5) return;
    if (this.allowType === ALLOW_REQUEST && phase <= 2) return;
    this.allowType = NONE_ALLOW;
    const list = this.rs.phases[phase]!;
    const markerIndex = this.rs.markerIndex[phase]!;
    const rs = this.rs;
    const { at: prefilterAt, records } = rs.phasePrefilters[phase]!;
    const txChecks = rs.phaseTxChecks[phase]!;
    const txGates = rs.phaseTxGates[phase]!;
    const rules = rs.phaseRules[phase]!;
    const markers = rs.phaseMarkers[phase]!;
    const markerRunEnds = rs.phaseMarkerRunEnds[phase]!;
    for (let i = 0; i < list.length; i++) {
      // markers first: a third of a phase's entries, which then need no other look
      const marker = markers[i];
      if (this.marker !== undefined) {
        if (marker === undefined) {
          // jump to the next occurrence of the marker in this phase (or past the end)
          const idx = markerIndex.get(this.marker);
          let next = list.length;
          if (idx) {
            for (const k of idx) {
              if (k > i) {
                next = k;
                break;
              }
            }
          }
          i = next - 1;
          continue;
        }
        if (marker === this.marker) this.marker = undefined;
        continue;
      }
      // no jump pending: this marker and the markers right after it do nothing
      if (marker !== undefined) {
        i = markerRunEnds[i]!;
        continue;
      }
      // No jump or skip pending, nothing allowed, no rule removed: the rule runs as it comes, so
      // the loop may decide it from its prefilter record or run it from its TxCheck record.
      let prefiltered = false;
      if (this.skipNext === 0 && this.allowType === NONE_ALLOW && !this.removesAnyRule()) {
        const record = prefilterAt[i]!;
        // a rule that cannot match: its effect (MATCHED_VARS cleared), decided from its record alone
        if (
          record >= 0 &&
          !this.sourcesMayMatch(records, record + 3, records[record + 2]!, records[record]!, records[record + 1]!, rules[i]!)
        ) {
          this.cleanMatchedVars();
          continue;
        }
        // (the rule runs next, as it comes: its variables are read in the state just looked at)
        prefiltered = record >= 0;
        const check = txChecks[i];
        if (check !== undefined && !this.removesTargets()) {
          // a TxCheck (about 90 per request), from its record: its entry and rule are not read
          this.evaluateTxCheck(check);
          if (this.intervention.disruptive) break;
          if (this.marker !== undefined && this.marker === check.skipMarker) i = check.skipTarget - 1;
          continue;
        }
        const gate = txGates[i];
        if (gate !== undefined && !this.txGateMayMatch(gate)) {
          // its TX value is absent or fails the comparison: no match, decided from the record (TxGate)
          this.cleanMatchedVars();
          continue;
        }
      }
      const rule = rules[i]!;
      if (this.skipNext > 0) {
        this.skipNext--;
        continue;
      }
      if (this.allowType !== NONE_ALLOW) continue;
      if (rs.removesRules && this.removedByConfig(rule)) continue;
      if (this.ruleRemoveByTag.length > 0 && this.hasTag(rule, this.ruleRemoveByTag)) continue;
      // The budget counts the values operators and the prefilter scan (checkEntry, sourceBits), not
      // rules: an action, or a TxCheck on one TX value, is a short step, and a phase has a few
      // hundred rules at most.
      if (rule.type === 'action') this.evaluateUnconditional(rule);
      else if (rule.txCheck !== undefined && !this.removesTargets()) this.evaluateTxCheck(rule.txCheck);
      else this.evaluateRule(rule, resetMessage(this.msg, rule), prefiltered);
      if (this.intervention.disruptive) break;
      // the rule's own skipAfter: on to its marker (whose entry then clears it)
      if (this.marker !== undefined && this.marker === rule.skipMarker) i = rule.skipTarget - 1;
    }
  }

  /** SecRuleRemoveById / ByTag / ByMsg. */
  private removedByConfig(rule: CompiledRule): boolean {
    const rs = this.rs;
    if (rs.removedIds.has(rule.id)) return true;
    if (rs.removedRanges.some(([a, b]) => rule.id >= a && rule.id <= b)) return true;
    if (rs.removedMsgs.length > 0 && rule.msg && rs.removedMsgs.includes(expand(this, rule.msg, undefined))) return true;
    return rs.removedTags.length > 0 && this.hasTag(rule, rs.removedTags);
  }

  private hasTag(rule: CompiledRule, tags: readonly string[]): boolean {
    for (const t of rule.tags) {
      const name = expand(this, t, undefined);
      if (tags.includes(name)) return true;
    }
    return false;
  }

  /** RuleUnconditional::evaluate (SecAction). */
  private evaluateUnconditional(rule: CompiledRule): void {
    const msg = resetMessage(this.msg, rule);
    for (const sv of rule.setvars) runSetVar(this, sv, rule);
    actionsAfterFullMatch(this, rule, msg);
    // performLogging(lastLog = true, chainedParentNull = false)
    if (rule.hasBlock && !rule.multiMatch) pushMessage(this.messages, msg);
    else if (msg.save && !rule.multiMatch && msg.message !== '') pushMessage(this.messages, msg);
  }

  private isRemovedTarget(rule: CompiledRule, name: string): boolean {
    for (const [id, target] of this.ruleRemoveTargetById) if (id === rule.id && target === name) return true;
    if (this.ruleRemoveTargetByTag.length > 0) {
      for (const [tag, target] of this.ruleRemoveTargetByTag) {
        if (target === name && this.hasTag(rule, [tag])) return true;
      }
    }
    return false;
  }

  private excludedByUpdate(rule: CompiledRule, e: Entry): boolean {
    for (const x of rule.exclusions) {
      if (x.re !== undefined) {
        if (x.re.test(e.key)) return true;
      } else if (x.fullName === e.full) return true;
    }
    return false;
  }

  /** Removed by ctl:ruleRemoveById (or the per-proxy exclusions): a removed rule counts as matched and does nothing. */
  private removedById(rule: CompiledRule): boolean {
    if (this.ruleRemoveById.length > 0 && this.ruleRemoveById.includes(rule.id)) return true;
    if (this.ruleRemoveByIdRange.length > 0) {
      for (const [a, b] of this.ruleRemoveByIdRange) if (a <= rule.id && b >= rule.id) return true;
    }
    return false;
  }

  /**
   * RuleWithOperator::evaluate. Returns whether the rule (and its chain) matched. `prefiltered`:
   * the loop found that some value of its variables has a literal its operator needs, just now.
   */
  private evaluateRule(rule: CompiledRule, msg: MutableMessage, prefiltered = false): boolean {
    if (this.removedById(rule)) return true;
    const globalRet = this.scan(rule, msg, prefiltered);
    if (!globalRet) {
      this.cleanMatchedVars();
      return false;
    }
    if (rule.chained) {
      const child = rule.child;
      if (child === undefined) return false;
      if (!this.evaluateRule(child, msg)) return false;
    }
    actionsAfterFullMatch(this, rule, msg);
    // performLogging(lastLog = true, chainedParentNull = true)
    if (msg.save && rule.parent === undefined && !rule.multiMatch) pushMessage(this.messages, msg);
    return true;
  }

  /**
   * evaluateRule for a TxCheck rule (program.ts), with the same effects: the operator on the TX
   * value, then MATCHED_VAR*, the setvars, the jump and `pass`; or MATCHED_VARS cleared.
   */
  private evaluateTxCheck(check: TxCheck): void {
    const rule = check.rule;
    if (this.removedById(rule)) return;
    const store = this.txStore;
    let v = store.find(check.slot, check.lowerKey);
    let matched: boolean;
    if (check.count) {
      matched = this.txCheckValue(check, v !== undefined ? '1' : '0', check.matchedName);
      if (check.valueName !== undefined) {
        // the value as it is after the count's setvars (the general loop resolves it then)
        if (check.hasSetvars) v = store.find(check.slot, check.lowerKey);
        if (v !== undefined && this.txCheckValue(check, v.value, check.valueName)) matched = true;
      }
    } else matched = v !== undefined && this.txCheckValue(check, v.value, check.matchedName);
    if (!matched) {
      this.cleanMatchedVars();
      return;
    }
    if (check.skipMarker !== undefined) this.marker = check.skipMarker;
    if (check.pass && this.engineState() === 'On') clearIntervention(this.intervention);
  }

  /** Whether the TX value of a TxGate exists and passes its comparison (then the rule runs as any other). */
  private txGateMayMatch(gate: TxGate): boolean {
    const v = this.txStore.find(gate.slot, gate.lowerKey);
    if (v === undefined) return false;
    return compareNumeric(gate.numeric, gate.operand, v.value) !== gate.negated;
  }

  /** One value of a TxCheck: the operator, and on a match MATCHED_VAR* and the rule's setvars. */
  private txCheckValue(check: TxCheck, value: string, name: string): boolean {
    const rule = check.rule;
    const passes =
      check.numeric !== 0 ? compareNumeric(check.numeric, check.operand, value) : this.runOperator(rule, rule.operator!, value);
    if (passes === check.negated) return false;
    this.matchedVar = value;
    this.matchedVarName = name;
    this.addMatched(name, value);
    if (check.hasSetvars) for (const sv of rule.setvars) runSetVar(this, sv, rule);
    return true;
  }

  /** The variables and the operator of a rule: true when some value matched. */
  private scan(rule: CompiledRule, msg: MutableMessage, prefiltered: boolean): boolean {
    // no value holds a literal the operator needs: the rule cannot match (exclusions only remove values)
    if (!prefiltered && rule.prefilter !== undefined && !this.someMayMatch(rule, rule.prefilter)) return false;
    const removals = this.removesTargets();
    const hasExclusions = rule.exclusions.length > 0;
    let globalRet = false;
    const refs = rule.refs;
    for (let vi = 0; vi < refs.length; vi++) {
      const ref = refs[vi]!;
      if (hasExclusions && ref.own && rule.exclusions.some((x) => x.fullName === ref.fullName)) continue;
      if (removals && this.isRemovedTarget(rule, ref.fullName)) continue;
      let list: readonly Entry[];
      switch (ref.kind) {
        case READ_SINGLE:
          if (this.checkEntry(rule, msg, this.singleAt(ref.index, ref.name), hasExclusions, removals)) globalRet = true;
          continue;
        case READ_TX_KEY: {
          const v = this.txStore.find(ref.index, ref.name);
          if (v !== undefined && this.checkEntry(rule, msg, this.dynamicEntry('TX', ref.key, v), hasExclusions, removals)) globalRet = true;
          continue;
        }
        case READ_LIST:
        case READ_NAMES:
        case READ_FILTERED:
          list = this.listRead(ref, rule);
          break;
        case READ_XML:
          if (this.xmlDocument === undefined) continue;
          list = this.resolved(ref, rule);
          break;
        default: {
          // &TX:name among other variables (the CRS's "exclusions for this application?" checks):
          // its constant entry, without a list
          const counted = ref.resolver.countEntries;
          if (counted !== undefined) {
            const entry = counted[this.txStore.find(ref.resolver.countedTxSlot!, ref.resolver.countedTxKey!) !== undefined ? 1 : 0];
            if (this.checkEntry(rule, msg, entry, hasExclusions, removals)) globalRet = true;
            continue;
          }
          list = this.resolved(ref, rule);
        }
      }
      const count = list.length;
      for (let k = 0; k < count; k++) {
        if (this.checkEntry(rule, msg, list[k]!, hasExclusions, removals)) globalRet = true;
      }
    }
    return globalRet;
  }

  /**
   * Whether some value of the rule's variables contains a literal its operator needs. Each
   * variable answers from the union of its values' prefilter bits, kept per source (variable and
   * chain node) and extended as a list grows, so a rule that cannot match costs a few reads
   * instead of one operator run per value.
   */
  private someMayMatch(rule: CompiledRule, prefilter: RulePrefilter): boolean {
    return this.sourcesMayMatch(prefilter.sources, 0, prefilter.sources.length, prefilter.word, prefilter.mask, rule);
  }

  /** Whether the rule set or the transaction removes rules (then each rule is looked at as evaluatePhase does). */
  private removesAnyRule(): boolean {
    return this.rs.removesRules || this.ruleRemoveByTag.length > 0 || this.ruleRemoveById.length > 0 || this.ruleRemoveByIdRange.length > 0;
  }

  /** Whether ctl:ruleRemoveTargetById/ByTag took variables from some rules in this transaction. */
  private removesTargets(): boolean {
    return this.ruleRemoveTargetById.length > 0 || this.ruleRemoveTargetByTag.length > 0;
  }

  /** The operator on one value (each changed transformation result with multiMatch). */
  private checkEntry(rule: CompiledRule, msg: MutableMessage, entry: Entry, hasExclusions: boolean, removals: boolean): boolean {
    if (hasExclusions && this.excludedByUpdate(rule, entry)) return false;
    if (removals && this.isRemovedTarget(rule, entry.full)) return false;
    const op = rule.operator!;
    let matched = false;
    // a value is one unit, and one more per KiB: its transformations and operator scan it whole
    const units = 1 + (entry.box.v.length >>> 10);
    this.work(units);
    if (!rule.multiMatch) {
      // the union of the variable's values let the rule through; this value may lack the literals
      const prefilter = rule.prefilter;
      if (prefilter !== undefined) {
        const at = this.boxBits(entry.box, prefilter.node);
        if ((this.scannedBits![at + prefilter.word]! & prefilter.mask) === 0) return false;
      }
      const value = transformed(this.nodes, entry.box, rule.tnode);
      if (this.runOperator(rule, op, value) !== op.negated) {
        this.onMatch(rule, msg, entry, value);
        matched = true;
      }
      return matched;
    }
    // a value no step can give a gate literal: no match at any step (CompiledRule.gateKinds)
    if (rule.gateKinds >= 0 && (byteKinds(entry.box) & rule.gateKinds) === 0 && !containsAny(entry.box.v, op.gate!)) return false;
    // the union of the variable's values at some step let the rule through; this value may have
    // the literals at none (its bits were scanned for the union: looked up, not scanned again)
    const prefilter = rule.prefilter;
    if (prefilter !== undefined) {
      let may = false;
      for (const node of prefilter.steps) {
        // (boxBits first: a scan may grow scannedBits)
        const at = this.boxBits(entry.box, node);
        if ((this.scannedBits![at + prefilter.word]! & prefilter.mask) !== 0) {
          may = true;
          break;
        }
      }
      if (!may) return false;
    }
    // the original value, then each transformation result that changed the value
    let prev = entry.box.v;
    if (this.runOperator(rule, op, prev) !== op.negated) {
      this.onMatch(rule, msg, entry, prev);
      matched = true;
    }
    for (const node of rule.tpath) {
      this.work(units);
      const value = transformed(this.nodes, entry.box, node);
      if (value === prev) continue;
      prev = value;
      if (this.runOperator(rule, op, value) !== op.negated) {
        this.onMatch(rule, msg, entry, value);
        matched = true;
      }
    }
    return matched;
  }

  /** op.run(), with the commonest operators run here (CompiledOperator.numeric, .rx). */
  private runOperator(rule: CompiledRule, op: CompiledOperator, value: string): boolean {
    if (op.numeric !== 0) return compareNumeric(op.numeric, op.operand, value);
    const re = op.rx;
    if (re === undefined) return op.run(this, rule, value);
    return runRegex(this, rule, re, op.gate, value);
  }

  /** A value matched (ModSecurity's updateMatchedVars + independent actions + per-match logging). */
  private onMatch(rule: CompiledRule, msg: MutableMessage, entry: Entry, value: string): void {
    // updateMatchedVars
    const key = entry.full;
    this.matchedVar = value;
    this.matchedVarName = key;
    this.addMatched(key, value);
    msg.matchedVar = key;
    // executeActionsIndependentOfChainedRuleResult
    actionsOnMatch(this, rule, msg);
    // performLogging(lastLog = false)
    if (rule.multiMatch && msg.save) pushMessage(this.messages, msg);
  }

  /** Reads and clears the pending intervention (what the addon's intervention() does). */
  takeIntervention(): Intervention | undefined {
    return takeIntervention(this.intervention);
  }

  /**
   * Lets go of everything the transaction holds, once its results are read (the inspector's last
   * step for an exchange that was held open): its collections, caches and messages. A transaction held open while the origin answers
   * can end up in V8's old generation, and a dead old object still pointing at young ones keeps
   * them alive through every scavenge until the next full collection. Measured in the WAF worker
   * with 16 exchanges open, 20,000 exchanges: 455 MB survived the scavenges without this, 53-72 MB
   * with it (GC pauses 584 -> ~175 ms). The transaction is not to be used afterwards (its list
   * collections are frozen: adding to them throws).
   */
  dispose(): void {
    this.release();
    this.msg.tags = [];
  }
}
