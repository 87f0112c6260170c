/** @ipMatch: the value is an IPv4/IPv6 address inside one of the listed addresses or CIDR networks (checked at load). */
import { BlockList, isIP } from 'node:net';
import type { CompiledOperator } from '../seclang/program.ts';
import type { OperatorDefinition, OperatorOptions } from './registry.ts';

/** The addresses and networks of a list (comma or blank separated); a bad one is a load error. */
export function ipList(param: string): BlockList {
  const list = new BlockList();
  for (const raw of param.split(/[,\s]+/)) {
    const item = raw.trim();
    if (item === '') continue;
    const [addr, bits] = item.split('/');
    const family = isIP(addr ?? '');
    if (family === 0) throw new Error(`@ipMatch: bad address ${item}`);
    const type = family === 4 ? 'ipv4' : 'ipv6';
    if (bits === undefined) list.addAddress(addr!, type);
    else {
      const n = Number(bits);
      if (!Number.isInteger(n) || n < 0 || n > (family === 4 ? 32 : 128)) throw new Error(`@ipMatch: bad mask ${item}`);
      list.addSubnet(addr!, n, type);
    }
  }
  return list;
}

/** The operator matching the addresses of `list` (@ipMatch, @ipMatchFromFile). */
export function addressOperator(base: OperatorOptions['base'], list: BlockList): CompiledOperator {
  return {
    ...base,
    run(_tx, _r, input) {
      const family = isIP(input);
      if (family === 0) return false;
      return list.check(input, family === 4 ? 'ipv4' : 'ipv6');
    },
  };
}

export const ipMatchOperator: OperatorDefinition = {
  names: ['ipmatch'],
  create: ({ base, param }) => addressOperator(base, ipList(param)),
};
