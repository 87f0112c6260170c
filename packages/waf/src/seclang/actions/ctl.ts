/**
 * ctl: changes to this transaction's configuration, as ModSecurity's Ctl* actions: rules removed
 * (by id, tag, or for one target), the rule engine, body access and processor. The audit-log ones
 * and requestBodyLimit are accepted and change nothing here.
 */
import type { TransactionCollections } from '../../transaction/collections.ts';
import type { CtlAction } from '../program.ts';
import type { ActionParser } from './parsed.ts';
import { actionValue } from './parsed.ts';

export function parseCtl(value: string): CtlAction {
  const eq = value.indexOf('=');
  if (eq < 0) throw new Error(`bad ctl:${value}`);
  const name = value.slice(0, eq).toLowerCase();
  const arg = value.slice(eq + 1);
  switch (name) {
    case 'ruleremovebyid': {
      const ids: number[] = [];
      const ranges: [number, number][] = [];
      for (const part of arg.split(' ')) {
        const b = part.trim();
        if (b === '') continue;
        const dash = b.indexOf('-');
        if (dash >= 0) {
          const a = Number.parseInt(b.slice(0, dash), 10);
          const z = Number.parseInt(b.slice(dash + 1), 10);
          if (!Number.isFinite(a) || !Number.isFinite(z) || a > z) throw new Error(`bad range in ctl:ruleRemoveById: ${b}`);
          ranges.push([a, z]);
        } else {
          const n = Number.parseInt(b, 10);
          if (!Number.isFinite(n)) throw new Error(`not a number in ctl:ruleRemoveById: ${b}`);
          ids.push(n);
        }
      }
      if (ids.length === 0 && ranges.length === 0) throw new Error(`ctl:ruleRemoveById without ids`);
      return { kind: 'ruleRemoveById', ids, ranges };
    }
    case 'ruleremovebytag':
      return { kind: 'ruleRemoveByTag', tag: arg };
    case 'ruleremovetargetbyid': {
      const [id, target] = arg.split(';');
      const n = Number.parseInt(id ?? '', 10);
      if (!Number.isFinite(n) || target === undefined) throw new Error(`bad ctl:ruleRemoveTargetById=${arg}`);
      return { kind: 'ruleRemoveTargetById', id: n, target };
    }
    case 'ruleremovetargetbytag': {
      const [tag, target] = arg.split(';');
      if (tag === undefined || target === undefined) throw new Error(`bad ctl:ruleRemoveTargetByTag=${arg}`);
      return { kind: 'ruleRemoveTargetByTag', tag, target };
    }
    case 'ruleengine': {
      const v = arg.toLowerCase();
      if (v === 'on') return { kind: 'ruleEngine', value: 'On' };
      if (v === 'off') return { kind: 'ruleEngine', value: 'Off' };
      if (v === 'detectiononly') return { kind: 'ruleEngine', value: 'DetectionOnly' };
      throw new Error(`bad ctl:ruleEngine=${arg}`);
    }
    case 'requestbodyaccess': {
      const v = arg.toLowerCase();
      if (v === 'on' || v === 'true') return { kind: 'requestBodyAccess', value: true };
      if (v === 'off' || v === 'false') return { kind: 'requestBodyAccess', value: false };
      throw new Error(`bad ctl:requestBodyAccess=${arg}`);
    }
    case 'requestbodyprocessor': {
      const v = arg.toUpperCase();
      if (v === 'XML' || v === 'JSON' || v === 'URLENCODED') return { kind: 'requestBodyProcessor', value: v };
      throw new Error(`bad ctl:requestBodyProcessor=${arg}`);
    }
    case 'forcerequestbodyvariable':
      return { kind: 'forceRequestBodyVariable', value: /^on$/i.test(arg) };
    case 'requestbodylimit':
    case 'auditengine':
    case 'auditlogparts':
      return { kind: 'ignored' };
    default:
      throw new Error(`unsupported ctl:${name}`);
  }
}

export const parseCtlAction: ActionParser = (action, out) => {
  out.runtime.push({ kind: 'ctl', ctl: parseCtl(actionValue(action)) });
};

export function runCtl(tx: TransactionCollections, c: CtlAction): void {
  switch (c.kind) {
    case 'ruleRemoveById':
      for (const id of c.ids) tx.ruleRemoveById.push(id);
      for (const r of c.ranges) tx.ruleRemoveByIdRange.push([r[0], r[1]]);
      return;
    case 'ruleRemoveByTag':
      tx.ruleRemoveByTag.push(c.tag);
      return;
    case 'ruleRemoveTargetById':
      tx.ruleRemoveTargetById.push([c.id, c.target]);
      return;
    case 'ruleRemoveTargetByTag':
      tx.ruleRemoveTargetByTag.push([c.tag, c.target]);
      return;
    case 'ruleEngine':
      tx.ruleEngine = c.value;
      return;
    case 'requestBodyAccess':
      tx.requestBodyAccess = c.value;
      return;
    case 'requestBodyProcessor':
      if (c.value === 'URLENCODED') tx.requestBodyType = 'URLENCODED';
      else tx.requestBodyProcessor = c.value;
      tx.setSingle('REQBODY_PROCESSOR', c.value);
      return;
    default:
      return;
  }
}
