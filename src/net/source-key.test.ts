/**
 * The counting key of a client address: property tests against Node's own IPv6 parser (the URL
 * host parser) on random addresses in random spellings.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { sourceKey, parseIpv6Groups } from './source-key.ts';

/** Eight groups from Node's parser (URL canonicalises IPv6 hosts). */
function reference(address: string): number[] | undefined {
  let host: string;
  try {
    host = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  } catch {
    return undefined;
  }
  const [head, tail] = host.includes('::') ? host.split('::') : [host, undefined];
  const left = head ? head.split(':').map((g) => parseInt(g, 16)) : [];
  const right = tail ? tail.split(':').map((g) => parseInt(g, 16)) : [];
  if (tail === undefined) return left;
  return [...left, ...Array(8 - left.length - right.length).fill(0), ...right];
}

/** An address of eight groups written in one of the spellings people and sockets use. */
const spelledAddress = fc
  .tuple(fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 }), fc.integer({ min: 0, max: 3 }), fc.boolean())
  .map(([words, style, upper]) => {
    let text: string;
    if (style === 0) text = words.map((w) => w.toString(16)).join(':');
    else if (style === 1) text = words.map((w) => w.toString(16).padStart(4, '0')).join(':');
    else if (style === 2) text = new URL(`http://[${words.map((w) => w.toString(16)).join(':')}]/`).hostname.slice(1, -1);
    else
      text = `${words
        .slice(0, 6)
        .map((w) => w.toString(16))
        .join(':')}:${words[6]! >>> 8}.${words[6]! & 255}.${words[7]! >>> 8}.${words[7]! & 255}`;
    return { words, text: upper ? text.toUpperCase() : text };
  });

describe('source key', () => {
  it('keeps IPv4 as it is and unmaps IPv4-mapped IPv6', () => {
    assert.equal(sourceKey('192.0.2.7'), '192.0.2.7');
    assert.equal(sourceKey('::ffff:192.0.2.7'), '192.0.2.7');
    assert.equal(sourceKey('::FFFF:c000:0207'), '192.0.2.7');
  });

  it('counts IPv6 by prefix: one /64 is one key, its neighbour another', () => {
    assert.equal(sourceKey('2001:db8:1:2::5'), sourceKey('2001:0db8:0001:0002:ffff:ffff:ffff:fffe'));
    assert.notEqual(sourceKey('2001:db8:1:2::5'), sourceKey('2001:db8:1:3::5'));
    assert.equal(sourceKey('2001:db8:1:2::5', 48), sourceKey('2001:db8:1:3::5', 48));
    assert.notEqual(sourceKey('2001:db8::1', 128), sourceKey('2001:db8::2', 128));
    assert.equal(sourceKey('fe80::1%eth0'), sourceKey('fe80::2'));
  });

  it('leaves text that is not an address as its own key', () => {
    for (const text of ['', 'unknown', '1::2::3', '12345::', '::1.2.3.256', '1:2:3:4:5:6:7:8:9']) assert.equal(sourceKey(text), text);
  });

  it('parses every spelling of a random address as Node does', () => {
    fc.assert(
      fc.property(spelledAddress, ({ words, text }) => {
        const out = new Uint16Array(8);
        assert.equal(parseIpv6Groups(text, out), true, text);
        assert.deepEqual([...out], words, text);
        assert.deepEqual([...out], reference(text), text);
      }),
      { numRuns: 2000 },
    );
  });

  it('gives two addresses the same key exactly when their first `prefix` bits agree', () => {
    fc.assert(
      fc.property(spelledAddress, spelledAddress, fc.integer({ min: 1, max: 128 }), (a, b, prefix) => {
        const bitsOf = (words: number[]) => words.map((w) => w.toString(2).padStart(16, '0')).join('');
        const mapped = (words: number[]) => words.slice(0, 5).every((w) => w === 0) && words[5] === 0xffff;
        fc.pre(!mapped(a.words) && !mapped(b.words));
        const same = bitsOf(a.words).slice(0, prefix) === bitsOf(b.words).slice(0, prefix);
        assert.equal(sourceKey(a.text, prefix) === sourceKey(b.text, prefix), same);
      }),
      { numRuns: 2000 },
    );
  });

  it('never throws, and refuses what Node refuses', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.stringMatching(/^[0-9a-fA-F:.]{0,45}$/),
          fc.stringMatching(/^[0-9a:.]{0,20}$/),
          fc.stringMatching(/^(?:[0-9]{1,3}|::?|[a-f0-9]{1,4}|\.){1,12}$/),
        ),
        (text) => {
          const out = new Uint16Array(8);
          const parsed = parseIpv6Groups(text, out);
          if (!text.includes(':')) return;
          const expected = reference(text);
          assert.equal(parsed, expected !== undefined, text);
          if (expected !== undefined) assert.deepEqual([...out], expected, text);
        },
      ),
      { numRuns: 5000 },
    );
  });
});
