/**
 * The sampler keeps the first events of each group and window whole and counts every other
 * request into one sampled event: whole events plus the samples' requestCount always add up to the
 * requests offered, whatever the order, the groups, the stages and the bounds.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { InsightSampler, requestsOf } from './sampler.ts';
import type { InsightEvent, WafEvent } from '@tps/model';
import { wafEvent, rateLimitEvent } from '../../test/support/events.ts';

const TENANT = '00000000-0000-4000-8000-000000000001';
const PROXY = '00000000-0000-4000-8000-000000000002';
const MINUTE = 60_000;
const T0 = Date.UTC(2026, 0, 5, 9, 0, 0);

function attack(at: number, ip = '198.51.100.1', ruleIds = [942100], proxy = PROXY): WafEvent {
  return wafEvent(TENANT, proxy, {
    timestamp: new Date(at).toISOString(),
    source: { countryCode: 'DE', ip, port: 40000 },
    rules: ruleIds.map((modSecId) => ({ modSecId, name: `rule ${modSecId}`, matchedData: { status: 'DISABLED', value: null } })),
  });
}

const total = (events: readonly InsightEvent[]) => events.reduce((sum, event) => sum + requestsOf(event), 0);

describe('insight sampler', () => {
  it('keeps the first events of a group whole and one sample for the rest, per minute', () => {
    const sampler = new InsightSampler({ wholePerWindow: 3, maxGroups: 100 });
    const kept: InsightEvent[] = [];
    for (let i = 0; i < 1000; i++) {
      const event = attack(T0 + i * 50);
      if (sampler.admit(event, T0 + i * 50) === 'whole') kept.push(event);
    }
    // 1000 requests over 50 s, one group: 3 whole, the other 997 in one sample.
    assert.equal(kept.length, 3);
    const samples = sampler.takeSamples(T0 + 50_000);
    assert.equal(samples.length, 1);
    assert.equal(samples[0]!.requestCount, 997);
    assert.equal(total([...kept, ...samples]), 1000);
    assert.equal(sampler.takeSamples(T0 + 50_000).length, 0, 'a sample goes out once');
    // The next minute starts again with whole events; the ended minute's group is forgotten.
    assert.equal(sampler.admit(attack(T0 + MINUTE + 1), T0 + MINUTE + 1), 'whole');
    sampler.takeSamples(T0 + MINUTE + 2);
    assert.equal(sampler.size, 1);
  });

  it('groups by proxy, source IP, action and the matched rule set (in any order)', () => {
    const sampler = new InsightSampler({ wholePerWindow: 1, maxGroups: 100 });
    const outcomes = [
      sampler.admit(attack(T0, '198.51.100.1', [942100, 949110]), T0),
      sampler.admit(attack(T0 + 1, '198.51.100.1', [949110, 942100, 942100]), T0),
      sampler.admit(attack(T0 + 2, '198.51.100.2', [942100, 949110]), T0),
      sampler.admit(attack(T0 + 3, '198.51.100.1', [942100]), T0),
      sampler.admit({ ...attack(T0 + 4, '198.51.100.1', [942100]), action: 'LOGGED' }, T0),
      sampler.admit(attack(T0 + 5, '198.51.100.1', [942100], '00000000-0000-4000-8000-000000000003'), T0),
    ];
    assert.deepEqual(outcomes, ['whole', 'counted', 'whole', 'whole', 'whole', 'whole']);
  });

  it('passes APP_DDOS_ATTACK events whole: one per episode already', () => {
    const sampler = new InsightSampler({ wholePerWindow: 1, maxGroups: 1 });
    for (let i = 0; i < 5; i++) assert.equal(sampler.admit(rateLimitEvent(TENANT, PROXY)), 'whole');
  });

  it('merges the samples of an earlier stage into one, keeping their counts', () => {
    const workers = [new InsightSampler({ wholePerWindow: 2, maxGroups: 10 }), new InsightSampler({ wholePerWindow: 2, maxGroups: 10 })];
    const node = new InsightSampler({ wholePerWindow: 2, maxGroups: 10 });
    const stored: InsightEvent[] = [];
    for (let i = 0; i < 500; i++) {
      const event = attack(T0 + i);
      if (workers[i % 2]!.admit(event, T0) === 'whole' && node.admit(event, T0) === 'whole') stored.push(event);
    }
    for (const worker of workers)
      for (const sample of worker.takeSamples(T0 + 1000)) assert.equal(node.admit(sample, T0 + 1000), 'counted');
    stored.push(...node.takeSamples(T0 + 1000));
    assert.equal(stored.length, 3, 'two whole for the node, one sample');
    assert.equal(total(stored), 500);
  });

  it('counts new groups into one group per proxy past maxGroups, then drops (and says so)', () => {
    const sampler = new InsightSampler({ wholePerWindow: 1, maxGroups: 2 });
    assert.equal(sampler.admit(attack(T0, '198.51.100.1'), T0), 'whole');
    assert.equal(sampler.admit(attack(T0, '198.51.100.2'), T0), 'whole');
    assert.equal(sampler.admit(attack(T0, '198.51.100.3'), T0), 'overflow');
    assert.equal(sampler.admit(attack(T0, '198.51.100.4'), T0), 'overflow');
    assert.equal(sampler.admit(attack(T0, '198.51.100.5', [942100], '00000000-0000-4000-8000-000000000003'), T0), 'overflow');
    assert.equal(sampler.admit(attack(T0, '198.51.100.6', [942100], '00000000-0000-4000-8000-000000000004'), T0), 'dropped');
    assert.equal(sampler.size, 4);
    const samples = sampler.takeSamples(T0 + MINUTE);
    assert.equal(total(samples), 3);
    assert.equal(sampler.size, 0, 'every group of the ended minute is forgotten');
  });

  it('holds back samples past `max` and gives them later, counts intact', () => {
    const sampler = new InsightSampler({ wholePerWindow: 0, maxGroups: 100 });
    for (let i = 0; i < 30; i++) sampler.admit(attack(T0, `198.51.100.${i % 10}`), T0);
    const first = sampler.takeSamples(T0 + MINUTE, 4);
    const rest = sampler.takeSamples(T0 + MINUTE);
    assert.equal(first.length, 4);
    assert.equal(rest.length, 6);
    assert.equal(total([...first, ...rest]), 30);
  });

  it('chooses each counted request as the sample with the same chance', () => {
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const chosen = new Map<string, number>();
    for (let round = 0; round < 4000; round++) {
      const sampler = new InsightSampler({ wholePerWindow: 0, maxGroups: 10, random });
      for (let i = 0; i < 4; i++) sampler.admit({ ...attack(T0 + i), id: `r${i}` }, T0);
      const [sample] = sampler.takeSamples(T0);
      chosen.set(sample!.id, (chosen.get(sample!.id) ?? 0) + 1);
    }
    for (let i = 0; i < 4; i++) assert.ok(Math.abs(chosen.get(`r${i}`)! - 1000) < 150, JSON.stringify([...chosen]));
  });

  it('accounts for every request, whatever the order, groups, stages and bounds (property)', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            at: fc.integer({ min: 0, max: 3 * MINUTE }),
            ip: fc.integer({ min: 0, max: 6 }),
            rules: fc.integer({ min: 0, max: 2 }),
          }),
          {
            maxLength: 300,
          },
        ),
        fc.integer({ min: 0, max: 4 }),
        fc.integer({ min: 1, max: 8 }),
        (requests, wholePerWindow, maxGroups) => {
          const worker = new InsightSampler({ wholePerWindow, maxGroups });
          const node = new InsightSampler({ wholePerWindow, maxGroups: maxGroups * 2 });
          const stored: InsightEvent[] = [];
          let dropped = 0;
          const toNode = (event: InsightEvent, now: number) => {
            const outcome = node.admit(event, now);
            if (outcome === 'whole') stored.push(event);
            if (outcome === 'dropped') dropped += requestsOf(event);
          };
          const sorted = [...requests].sort((a, b) => a.at - b.at);
          for (const [index, request] of sorted.entries()) {
            const now = T0 + request.at;
            const event = attack(now, `198.51.100.${request.ip}`, [942100 + request.rules]);
            const outcome = worker.admit(event, now);
            if (outcome === 'whole') toNode(event, now);
            if (outcome === 'dropped') dropped++;
            if (index % 17 === 0) for (const sample of worker.takeSamples(now)) toNode(sample, now);
            if (index % 41 === 0) stored.push(...node.takeSamples(now));
          }
          const end = T0 + 4 * MINUTE;
          for (const sample of worker.takeSamples(end)) toNode(sample, end);
          stored.push(...node.takeSamples(end));
          assert.equal(total(stored) + dropped, requests.length);
          assert.equal(worker.size + node.size, 0);
        },
      ),
    );
  });
});
