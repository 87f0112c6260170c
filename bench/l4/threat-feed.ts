/**
 * Lookups per second in a threat feed of 500,000 entries (IPv4 and IPv6, mixed prefix lengths),
 * for hits and misses apart, plus the time to parse and build the set, and the same lookups on a
 * read-only view of the set in SharedArrayBuffers.
 *
 *   node bench/l4/threat-feed.ts [entries]
 */
import { performance } from 'node:perf_hooks';
import { parseFeed } from '../../src/edge/l4/threat-feed.ts';
import { IpSet } from '../../src/net/ip-set.ts';
import { uint32s } from '@tps/waf-conformance';

const entries = Number(process.argv[2] ?? 500_000);
const probeCount = 1_000_000;

const random = uint32s(0x2545f491);
const ipv4 = (ip: number) => `${ip >>> 24}.${(ip >>> 16) & 255}.${(ip >>> 8) & 255}.${ip & 255}`;
const hex = () => (random() & 0xffff).toString(16);

const lines: string[] = ['# generated feed'];
const listed: string[] = [];
for (let i = 0; i < entries; i++) {
  if (i % 10 === 9) {
    const network = `2001:db8:${hex()}:${hex()}::`;
    lines.push(`${network}/64 ; SBL${i}`);
    listed.push(`${network}1`);
  } else {
    const roll = random() % 20;
    const length = roll < 14 ? 32 : roll < 19 ? 24 : 20;
    const network = length === 32 ? random() : (random() & ~(0xffffffff >>> length)) >>> 0;
    lines.push(`${ipv4(network)}/${length}`);
    listed.push(ipv4(network));
  }
}
const text = lines.join('\n');

let started = performance.now();
const parsed = parseFeed(text);
const parseMs = performance.now() - started;
started = performance.now();
const set = new IpSet(2 * parsed.count + 2);
for (let offset = 0; offset < parsed.prefixes.length; offset += 5) set.insert(parsed.prefixes, parsed.prefixes[offset + 4]!, offset);
set.prepare();
const buildMs = performance.now() - started;

const hits: string[] = [];
const misses: string[] = [];
for (let i = 0; i < probeCount; i++) hits.push(listed[random() % listed.length]!);
// Random addresses: the IPv4 entries cover about 3 % of the IPv4 space, so nearly all miss.
for (let i = 0; i < probeCount; i++) misses.push(i % 10 === 9 ? `2001:db8:${hex()}:${hex()}::${hex()}` : ipv4(random()));

started = performance.now();
const shared = set.toShared();
const exportMs = performance.now() - started;
const view = IpSet.fromShared(shared);
const sharedMb = (shared.nodes.byteLength + shared.keys.byteLength + (shared.ipv4Start?.byteLength ?? 0)) / 1024 / 1024;

function measure(probes: string[], set: IpSet): { perSecond: number; found: number } {
  let found = 0;
  for (let i = 0; i < 100_000; i++) if (set.has(probes[i]!)) found++; // warm-up
  found = 0;
  const start = performance.now();
  for (const probe of probes) if (set.has(probe)) found++;
  const seconds = (performance.now() - start) / 1000;
  return { perSecond: probes.length / seconds, found };
}

const hit = measure(hits, set);
const miss = measure(misses, set);
// The same lookups on a read-only view over SharedArrayBuffers (what every edge worker uses).
const viewHit = measure(hits, view);
const viewMiss = measure(misses, view);
const rssMb = process.memoryUsage().rss / 1024 / 1024;
console.log(`entries: ${entries} (${parsed.count} parsed, ${set.size} disjoint prefixes stored)`);
console.log(`parse: ${parseMs.toFixed(0)} ms, build: ${buildMs.toFixed(0)} ms, process RSS: ${rssMb.toFixed(0)} MB`);
console.log(`lookups/s, listed addresses:   ${Math.round(hit.perSecond).toLocaleString('en')} (${hit.found} of ${hits.length} found)`);
console.log(`lookups/s, random addresses:   ${Math.round(miss.perSecond).toLocaleString('en')} (${miss.found} of ${misses.length} found)`);
console.log(`export to shared memory: ${exportMs.toFixed(0)} ms, ${sharedMb.toFixed(1)} MB`);
console.log(`lookups/s, shared view, listed: ${Math.round(viewHit.perSecond).toLocaleString('en')} (${viewHit.found} found)`);
console.log(`lookups/s, shared view, random: ${Math.round(viewMiss.perSecond).toLocaleString('en')} (${viewMiss.found} found)`);
