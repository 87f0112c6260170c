/**
 * The nftables script text of the service's own table `inet tps`. Nothing here touches another
 * table: the table is created (after deleting one left over from a crash), filled and deleted whole.
 *
 * The chain hooks `prerouting` at priority `raw` (-300): before connection tracking (-200) and
 * routing, so a dropped packet costs neither a conntrack entry nor a route lookup, and before any
 * filter chain of the host's own ruleset (0), which it cannot weaken: it only drops, and only
 * packets to a front-end address and port of ours. Loopback traffic passes prerouting too.
 *
 * The sets are keyed (protocol, source, front-end address, front-end port) with `interval`: an
 * IPv6 source is a prefix (the rate limiter's /64 by default), and a wildcard front end is
 * `0.0.0.0/0` or `::/0`. Each element carries its own timeout, the rest of its block, so the kernel
 * lets the source in again on time even if the service dies meanwhile.
 */
import net from 'node:net';
import type { KernelBlockElement } from './types.ts';

export const TABLE = 'inet tps';
export const SET_NAMES = { 4: 'blocked_ipv4', 6: 'blocked_ipv6' } as const;
export const COUNTER_NAMES = { 4: 'dropped_ipv4', 6: 'dropped_ipv6' } as const;

/** Creates the table from scratch: one left behind by a crashed process is replaced, in one transaction. */
export function createTableScript(): string {
  return [
    // `table` alone creates it when absent, so the delete that follows never fails.
    `table ${TABLE} {}`,
    `delete table ${TABLE}`,
    `table ${TABLE} {`,
    `  counter ${COUNTER_NAMES[4]} { }`,
    `  counter ${COUNTER_NAMES[6]} { }`,
    `  set ${SET_NAMES[4]} { type inet_proto . ipv4_addr . ipv4_addr . inet_service; flags interval,timeout; }`,
    `  set ${SET_NAMES[6]} { type inet_proto . ipv6_addr . ipv6_addr . inet_service; flags interval,timeout; }`,
    '  chain prerouting {',
    '    type filter hook prerouting priority raw; policy accept;',
    `    meta l4proto . ip saddr . ip daddr . th dport @${SET_NAMES[4]} counter name "${COUNTER_NAMES[4]}" drop`,
    `    meta l4proto . ip6 saddr . ip6 daddr . th dport @${SET_NAMES[6]} counter name "${COUNTER_NAMES[6]}" drop`,
    '  }',
    '}',
    '',
  ].join('\n');
}

export function deleteTableScript(): string {
  // Created first so that deleting never fails (stop after a failed start, or twice).
  return `table ${TABLE} {}\ndelete table ${TABLE}\n`;
}

/** Empties both sets (a resynchronisation after a failed update). */
export function flushSetsScript(): string {
  return `flush set ${TABLE} ${SET_NAMES[4]}\nflush set ${TABLE} ${SET_NAMES[6]}\n`;
}

/** The element's text as nft reads it (no timeout). Throws on anything that is not an address: this text becomes a command. */
export function elementText(element: KernelBlockElement): string {
  const { family, protocol, source, destination, port } = element;
  if (protocol !== 'tcp' && protocol !== 'udp') throw new Error(`not a protocol: ${String(protocol)}`);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`not a port: ${port}`);
  checkNetwork(source, family);
  checkNetwork(destination, family);
  return `${protocol} . ${source} . ${destination} . ${port}`;
}

export function addElementLine(element: KernelBlockElement, timeoutMs: number): string {
  const timeout = Math.max(1, Math.ceil(timeoutMs));
  return `add element ${TABLE} ${SET_NAMES[element.family]} { ${elementText(element)} timeout ${timeout}ms }`;
}

export function deleteElementLine(element: KernelBlockElement): string {
  return `delete element ${TABLE} ${SET_NAMES[element.family]} { ${elementText(element)} }`;
}

/** An address of `family`, or a network of it in CIDR form. */
function checkNetwork(text: string, family: 4 | 6): void {
  const slash = text.indexOf('/');
  const address = slash === -1 ? text : text.slice(0, slash);
  if (net.isIP(address) !== family) throw new Error(`not an IPv${family} address: ${JSON.stringify(text)}`);
  if (slash === -1) return;
  const bits = text.slice(slash + 1);
  const max = family === 4 ? 32 : 128;
  if (!/^\d{1,3}$/.test(bits) || Number(bits) > max) throw new Error(`not a prefix length: ${JSON.stringify(text)}`);
}

/** Packets each counter has dropped, from `nft -j list counters table inet tps`. */
export function parseCounters(json: string): { 4: number; 6: number } {
  const result = { 4: 0, 6: 0 };
  const parsed = JSON.parse(json) as { nftables?: { counter?: { name?: unknown; packets?: unknown } }[] };
  for (const item of parsed.nftables ?? []) {
    const counter = item.counter;
    if (counter === undefined || typeof counter.packets !== 'number') continue;
    if (counter.name === COUNTER_NAMES[4]) result[4] = counter.packets;
    else if (counter.name === COUNTER_NAMES[6]) result[6] = counter.packets;
  }
  return result;
}
