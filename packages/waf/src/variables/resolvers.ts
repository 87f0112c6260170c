/**
 * Variable resolvers: how each SecLang variable of a rule finds its values in a transaction, with
 * ModSecurity v3's semantics: collection keys compare case-insensitively, regex selectors are
 * case-insensitive searches on the key, `!COLL:key` exclusions of the same rule remove keys
 * (case-insensitively) from whole-collection and regex reads, `&COLL` counts, and each value
 * carries the "COLLECTION:key" name that ctl:ruleRemoveTargetById compares byte for byte.
 */
import { LIST_COLLECTIONS, READ_FILTERED, READ_LIST, READ_NAMES, READ_SINGLE, READ_TX_KEY, READ_XML } from '../seclang/program.ts';
import type { DirectRead, VarResolver } from '../seclang/program.ts';
import { compileKeyRegex } from '../regex/runtime.ts';
import type { KeyRegex } from '../regex/runtime.ts';
import type { VariableSpec } from '../seclang/parser.ts';
import { lowerAscii, upperAscii } from '../ascii.ts';
import { singleSlot } from '../transaction/collections.ts';
import type { TransactionCollections } from '../transaction/collections.ts';
import { newEntry } from '../transaction/value-cache.ts';
import { someTxSlotKey, txSlot, txSlotCount } from '../transaction/tx-store.ts';
import type { DynVar } from '../transaction/dyn-var.ts';
import { ruleValue } from './rule.ts';
import type { Entry } from '../transaction/value-cache.ts';

/** Collections stored as lists of entries on the transaction (ModSecurity's AnchoredSetVariable). */
const SET_COLLECTIONS: Record<string, (tx: TransactionCollections) => readonly Entry[]> = {};
LIST_COLLECTIONS.forEach((name, index) => {
  SET_COLLECTIONS[name] = (tx) => tx.listAt(index);
});

/**
 * Lists that only grow (push) during a transaction, never lose or replace an entry: a filtered read
 * of one stays valid while its length is the same (TransactionCollections's filtered-list cache).
 */
const PUSH_ONLY_LISTS = new Set([
  'ARGS',
  'ARGS_GET',
  'ARGS_POST',
  'REQUEST_HEADERS',
  'REQUEST_HEADERS_NAMES',
  'REQUEST_COOKIES',
  'REQUEST_COOKIES_NAMES',
  'RESPONSE_HEADERS',
  'RESPONSE_HEADERS_NAMES',
]);

/** ARGS_NAMES & co: the keys of another collection (ModSecurity's translation proxy). */
const NAME_PROXIES: Record<string, string> = {
  ARGS_NAMES: 'ARGS',
  ARGS_GET_NAMES: 'ARGS_GET',
  ARGS_POST_NAMES: 'ARGS_POST',
};

/** Dynamic key/value collections (ModSecurity's in-memory collections). */
export const DYNAMIC_COLLECTIONS = new Set(['TX', 'IP', 'GLOBAL', 'SESSION', 'USER', 'RESOURCE']);

/** Single-valued variables (AnchoredVariable: always one value, "" when unset). */
export const SINGLE_VARIABLES = new Set([
  'ARGS_COMBINED_SIZE',
  'AUTH_TYPE',
  'FILES_COMBINED_SIZE',
  'FULL_REQUEST',
  'FULL_REQUEST_LENGTH',
  'INBOUND_DATA_ERROR',
  'MATCHED_VAR',
  'MATCHED_VAR_NAME',
  'MULTIPART_BOUNDARY_QUOTED',
  'MULTIPART_BOUNDARY_WHITESPACE',
  'MULTIPART_CRLF_LF_LINES',
  'MULTIPART_DATA_AFTER',
  'MULTIPART_DATA_BEFORE',
  'MULTIPART_FILE_LIMIT_EXCEEDED',
  'MULTIPART_HEADER_FOLDING',
  'MULTIPART_INVALID_HEADER_FOLDING',
  'MULTIPART_INVALID_PART',
  'MULTIPART_INVALID_QUOTING',
  'MULTIPART_LF_LINE',
  'MULTIPART_MISSING_SEMICOLON',
  'MULTIPART_SEMICOLON_MISSING',
  'MULTIPART_STRICT_ERROR',
  'MULTIPART_UNMATCHED_BOUNDARY',
  'OUTBOUND_DATA_ERROR',
  'PATH_INFO',
  'QUERY_STRING',
  'REMOTE_ADDR',
  'REMOTE_HOST',
  'REMOTE_PORT',
  'REQBODY_ERROR',
  'REQBODY_ERROR_MSG',
  'REQBODY_PROCESSOR_ERROR',
  'REQBODY_PROCESSOR_ERROR_MSG',
  'REQBODY_PROCESSOR',
  'REQUEST_BASENAME',
  'REQUEST_BODY',
  'REQUEST_BODY_LENGTH',
  'REQUEST_FILENAME',
  'REQUEST_LINE',
  'REQUEST_METHOD',
  'REQUEST_PROTOCOL',
  'REQUEST_URI',
  'REQUEST_URI_RAW',
  'RESOURCE_ID',
  'RESPONSE_BODY',
  'RESPONSE_CONTENT_LENGTH',
  'RESPONSE_CONTENT_TYPE',
  'RESPONSE_PROTOCOL',
  'RESPONSE_STATUS',
  'SERVER_ADDR',
  'SERVER_NAME',
  'SERVER_PORT',
  'SESSIONID',
  'UNIQUE_ID',
  'URLENCODED_ERROR',
  'USERID',
  'WEBAPPID',
  'STATUS',
  // computed
  'DURATION',
  'HIGHEST_SEVERITY',
  'MODSEC_BUILD',
  'TIME',
  'TIME_DAY',
  'TIME_EPOCH',
  'TIME_HOUR',
  'TIME_MIN',
  'TIME_MON',
  'TIME_SEC',
  'TIME_WDAY',
  'TIME_YEAR',
  'REMOTE_USER',
]);

interface KeyExclusion {
  readonly text?: string | undefined;
  readonly re?: KeyRegex | undefined;
  /** The regex selector as written (identifies the exclusion with `text`). */
  readonly source?: string | undefined;
}

function excluded(key: string, exclusions: readonly KeyExclusion[]): boolean {
  for (const e of exclusions) {
    if (e.re !== undefined) {
      if (e.re.test(key)) return true;
    } else if (e.text !== undefined && e.text.length === key.length && e.text === upperAscii(key)) {
      return true;
    }
  }
  return false;
}

/** The entry's key, upper-cased once. */
function upperKey(e: Entry): string {
  let u = e.uk;
  if (u === undefined) {
    u = upperAscii(e.key);
    (e as { uk?: string }).uk = u;
  }
  return u;
}

function fullNameOf(spec: VariableSpec): string {
  if (spec.keyRegex !== undefined) return `${spec.collection}:regex(${spec.keyRegex})`;
  if (spec.key !== undefined) return `${spec.collection}:${spec.key}`;
  return spec.collection;
}

/** Key exclusions (`!COLL:key`, `!COLL:/re/`) of a rule for one collection. */
export function keyExclusionsFor(collection: string, excludes: readonly VariableSpec[]): KeyExclusion[] {
  const out: KeyExclusion[] = [];
  for (const ex of excludes) {
    if (ex.collection !== collection) continue;
    if (ex.keyRegex !== undefined) out.push({ re: compileKeyRegex(ex.keyRegex), source: ex.keyRegex });
    else if (ex.key !== undefined) out.push({ text: upperAscii(ex.key) });
  }
  return out;
}

export function variableFullName(spec: VariableSpec): string {
  return fullNameOf(spec);
}

/**
 * Builds the resolver of one (non-exclusion) variable. `exclusions`: the rule's key exclusions
 * for this variable's collection.
 */
export function compileVariable(spec: VariableSpec, exclusions: readonly KeyExclusion[]): VarResolver {
  const base = compileBase(spec, exclusions);
  if (!spec.count) return base;
  const fullName = base.fullName;
  const direct =
    spec.key === undefined && spec.keyRegex === undefined && exclusions.length === 0 ? SET_COLLECTIONS[spec.collection] : undefined;
  if (direct) {
    return {
      fullName,
      collection: spec.collection,
      key: undefined,
      keyRegex: undefined,
      count: true,
      resolve(tx, _rule, out) {
        out.push(newEntry(fullName, fullName, String(direct(tx).length)));
      },
    };
  }
  const txKey = base.direct?.kind === READ_TX_KEY ? base.direct.lowerKey : undefined;
  if (txKey !== undefined) {
    const slot = txSlot(txKey);
    // &TX:name (the CRS's "is this setting set?" checks, ~50 per request): present or not, two
    // constant entries (an entry's value never changes; its cached transformations are pure)
    const zero = newEntry(fullName, fullName, '0');
    const one = newEntry(fullName, fullName, '1');
    return {
      fullName,
      collection: spec.collection,
      key: spec.key,
      keyRegex: undefined,
      count: true,
      countedTxKey: txKey,
      countedTxSlot: slot,
      countEntries: [zero, one],
      resolve(tx, _rule, out) {
        out.push(tx.txStore.find(slot, txKey) !== undefined ? one : zero);
      },
    };
  }
  return {
    fullName,
    collection: spec.collection,
    key: spec.key,
    keyRegex: spec.keyRegex,
    count: true,
    resolve(tx, rule, out) {
      const values: Entry[] = [];
      base.resolve(tx, rule, values);
      out.push(newEntry(fullName, fullName, String(values.length)));
    },
  };
}

/**
 * Reads of FULL_REQUEST or FULL_REQUEST_LENGTH compiled so far (rules, SecRuleUpdateTarget*
 * additions and macros all compile their variables here): compileRuleSet compares the count
 * before and after, and a rule set that compiled none never has a transaction build them (the
 * CRS reads neither; building them would join every header and the body on each request).
 */
let fullRequestReads = 0;

export function fullRequestReadsCompiled(): number {
  return fullRequestReads;
}

function compileBase(spec: VariableSpec, exclusions: readonly KeyExclusion[]): VarResolver {
  const collection = spec.collection;
  if (collection === 'FULL_REQUEST' || collection === 'FULL_REQUEST_LENGTH') fullRequestReads++;
  const fullName = fullNameOf(spec);
  // what a filtered read depends on besides the list: rules with the same filter share its result
  const filter = [fullName, ...exclusions.map((e) => (e.text !== undefined ? `=${e.text}` : `~${e.source ?? ''}`))].join('\0');
  const common = { fullName, collection, key: spec.key, keyRegex: spec.keyRegex, count: false };
  const keyRe = spec.keyRegex !== undefined ? compileKeyRegex(spec.keyRegex) : undefined;
  const keyUpper = spec.key !== undefined ? upperAscii(spec.key) : undefined;

  const fromList = (list: readonly Entry[], out: Entry[], map?: (e: Entry) => Entry): void => {
    if (keyUpper !== undefined) {
      for (const e of list) if (e.key.length === keyUpper.length && upperKey(e) === keyUpper) out.push(map ? map(e) : e);
      return;
    }
    if (keyRe !== undefined) {
      for (const e of list) {
        if (!keyRe.test(e.key)) continue;
        if (exclusions.length > 0 && excluded(e.key, exclusions)) continue;
        out.push(map ? map(e) : e);
      }
      return;
    }
    if (exclusions.length === 0 && !map) {
      for (const e of list) out.push(e);
      return;
    }
    for (const e of list) {
      if (exclusions.length > 0 && excluded(e.key, exclusions)) continue;
      out.push(map ? map(e) : e);
    }
  };

  /**
   * How the rule loop reads a list (`kind`: its entries or their names) from the transaction's list
   * `listed`: in place when unfiltered; filtered once per transaction while the list only grows.
   */
  const listRead = (kind: typeof READ_LIST | typeof READ_NAMES, listed: string): DirectRead | undefined => {
    const list = LIST_COLLECTIONS.indexOf(listed);
    if (keyUpper === undefined && keyRe === undefined && exclusions.length === 0) return { kind, list, collection };
    return PUSH_ONLY_LISTS.has(listed) ? { kind: READ_FILTERED, list, filter } : undefined;
  };

  const setGetter = SET_COLLECTIONS[collection];
  if (setGetter) {
    return { ...common, direct: listRead(READ_LIST, collection), resolve: (tx, _rule, out) => fromList(setGetter(tx), out) };
  }
  const proxied = NAME_PROXIES[collection];
  if (proxied) {
    const getter = SET_COLLECTIONS[proxied]!;
    // the names are those of the proxied list: filtered names last while that list does not grow
    return {
      ...common,
      direct: listRead(READ_NAMES, proxied),
      resolve: (tx, _rule, out) => fromList(tx.namesOf(collection, getter(tx)), out),
    };
  }
  if (DYNAMIC_COLLECTIONS.has(collection)) {
    const keyLower = spec.key !== undefined ? lowerAscii(spec.key) : undefined;
    const isTx = collection === 'TX';
    const slot = isTx && keyLower !== undefined ? txSlot(keyLower) : -1;
    const push = (tx: TransactionCollections, out: Entry[], v: DynVar): void => {
      if (keyRe !== undefined && !(keyRe.testLowerCase !== undefined ? keyRe.testLowerCase(v.lowerKey) : keyRe.test(v.key))) return;
      if (exclusions.length > 0 && excluded(v.key, exclusions)) return;
      out.push(tx.dynamicEntry(collection, v.key, v));
    };
    // A plain-word selector (TX:/^header_name_/) that no constant key passes can only select keys
    // made at run time, which the TxStore keeps apart: those are read, not every TX variable (in
    // the same order among themselves). Looked at again when more keys got a slot.
    const testLowerCase = isTx ? keyRe?.testLowerCase : undefined;
    let slotsLookedAt = -1;
    let dynamicOnly = false;
    return {
      ...common,
      direct:
        isTx && keyLower !== undefined && exclusions.length === 0
          ? { kind: READ_TX_KEY, lowerKey: keyLower, key: spec.key!, slot }
          : undefined,
      resolve(tx, _rule, out) {
        if (keyLower !== undefined) {
          const v = isTx ? tx.txStore.find(slot, keyLower) : tx.collection(collection).get(keyLower);
          // ModSecurity names the value with the key as the rule wrote it.
          if (v !== undefined && !(exclusions.length > 0 && excluded(spec.key!, exclusions)))
            out.push(tx.dynamicEntry(collection, spec.key!, v));
          return;
        }
        if (isTx) {
          if (testLowerCase !== undefined) {
            if (slotsLookedAt !== txSlotCount()) {
              slotsLookedAt = txSlotCount();
              dynamicOnly = !someTxSlotKey(testLowerCase);
            }
            if (dynamicOnly) {
              const dynamic = tx.txStore.dynamicValues();
              if (dynamic !== undefined) for (const v of dynamic) push(tx, out, v);
              return;
            }
          }
          const all = tx.txStore.values();
          for (let k = 0; k < all.length; k++) push(tx, out, all[k]!);
          return;
        }
        // the values only: a for-of over entries() makes a [key, value] pair per entry
        for (const v of tx.collection(collection).values()) push(tx, out, v);
      },
    };
  }
  if (collection === 'ENV') {
    return {
      ...common,
      resolve(tx, _rule, out) {
        for (const [k, v] of tx.env) {
          if (keyUpper !== undefined ? upperAscii(k) !== keyUpper : keyRe !== undefined && !keyRe.test(k)) continue;
          out.push(newEntry(k, `ENV:${k}`, v));
        }
      },
    };
  }
  if (collection === 'RULE') {
    const what = (spec.key ?? '').toLowerCase();
    return {
      ...common,
      resolve(tx, rule, out) {
        const v = ruleValue(tx, rule, what);
        if (v !== undefined) out.push(newEntry(what, `RULE:${what}`, v));
      },
    };
  }
  if (collection === 'XML') {
    const xpath = spec.key ?? '';
    if (xpath !== '/*' && xpath !== '//@*') throw new Error(`XML:${xpath}: only XML:/* and XML://@* are supported`);
    return {
      ...common,
      direct: { kind: READ_XML },
      resolve(tx, _rule, out) {
        const doc = tx.xmlDocument;
        if (doc === undefined) return;
        if (xpath === '/*') {
          if (doc.rootText !== undefined) out.push(tx.xmlEntry(fullName, doc.rootText));
        } else {
          for (const value of doc.attributes) out.push(newEntry(fullName, fullName, value));
        }
      },
    };
  }
  if (SINGLE_VARIABLES.has(collection)) {
    if (spec.key !== undefined || spec.keyRegex !== undefined) {
      // ModSecurity accepts e.g. REQUEST_URI:foo and ignores the key for single variables.
    }
    const slot = singleSlot(collection);
    return {
      ...common,
      direct: { kind: READ_SINGLE, slot, name: collection },
      resolve: (tx, _rule, out) => out.push(tx.singleAt(slot, collection)),
    };
  }
  throw new Error(`unknown variable ${spec.text}`);
}
