import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DISPOSED_TX, knownTxSlot, TxStore, txSlot } from './tx-store.ts';

test("TxStore: keys with and without a slot keep a Map's insertion order through sets and deletes (random operations)", () => {
  let seed = 9;
  const random = (): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed / 2 ** 32;
  };
  // half the keys named by a "rule set" (a slot each), half made at run time (none)
  const constant = ['tx-store-test-a', 'tx-store-test-b', 'tx-store-test-c', 'tx-store-test-d'];
  for (const key of constant) txSlot(key);
  const keys = [...constant, 'tx-store-run-e', 'tx-store-run-f', 'tx-store-run-g', 'tx-store-run-h'];
  for (let round = 0; round < 200; round++) {
    const store = new TxStore();
    const model = new Map<string, string>();
    for (let op = 0; op < 40; op++) {
      const key = keys[Math.floor(random() * keys.length)]!;
      const slot = knownTxSlot(key);
      if (random() < 0.3) {
        assert.equal(store.delete(slot, key), model.delete(key));
      } else {
        const value = String(op);
        store.store(slot, key, key, value);
        model.set(key, value);
      }
      assert.deepEqual(
        store.values().map((v) => [v.lowerKey, v.value]),
        [...model],
      );
      assert.deepEqual(
        [...(store.dynamicValues() ?? [])].map((v) => v.lowerKey),
        [...model.keys()].filter((k) => knownTxSlot(k) < 0),
      );
      for (const k of keys) assert.equal(store.find(knownTxSlot(k), k)?.value, model.get(k));
      assert.equal(store.size, model.size);
    }
  }
});

test('TxStore: the disposed store throws when written, and stays empty', () => {
  assert.throws(() => DISPOSED_TX.store(-1, 'tx-store-run-x', 'tx-store-run-x', '1'), TypeError);
  assert.throws(() => DISPOSED_TX.store(txSlot('tx-store-test-a'), 'tx-store-test-a', 'tx-store-test-a', '1'), TypeError);
  assert.equal(DISPOSED_TX.size, 0);
  assert.equal(DISPOSED_TX.dynamicValues(), undefined);
  assert.equal(DISPOSED_TX.find(-1, 'tx-store-run-x'), undefined);
});
