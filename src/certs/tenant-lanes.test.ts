import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TenantLanes, type LaneJob } from './tenant-lanes.ts';

/** A job that runs until released, noting when it started. */
function blocked(tenantId: string, key: string, started: string[]) {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const job: LaneJob = {
    tenantId,
    key,
    run: async () => {
      started.push(key);
      await gate;
    },
  };
  return { job, release };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('tenant lanes', () => {
  it("runs another tenant's job at once while one tenant's jobs hang, each lane bounded", async () => {
    const started: string[] = [];
    const lanes = new TenantLanes({ total: 3, perTenant: 2, onError: assert.fail });
    const slow = Array.from({ length: 50 }, (_, i) => blocked('slow', `slow-${i}`, started));
    for (const { job } of slow) void lanes.add(job);
    await tick();
    assert.deepEqual(started, ['slow-0', 'slow-1'], 'the slow tenant holds its own lane only');

    let otherDone = false;
    const other = lanes.add({ tenantId: 'other', key: 'other-0', run: async () => void started.push('other-0') }).then(() => {
      otherDone = true;
    });
    await other;
    assert.ok(otherDone, "the other tenant's job ran while the slow ones hang");
    assert.equal(lanes.running, 2);

    for (const { release } of slow) release();
    await lanes.stop();
  });

  it('holds the total bound, and gives a freed slot to the next tenant in turn', async () => {
    const started: string[] = [];
    const lanes = new TenantLanes({ total: 2, perTenant: 2, onError: assert.fail });
    const a = [blocked('a', 'a-0', started), blocked('a', 'a-1', started), blocked('a', 'a-2', started)];
    for (const { job } of a) void lanes.add(job);
    const b = blocked('b', 'b-0', started);
    void lanes.add(b.job);
    await tick();
    assert.deepEqual(started, ['a-0', 'a-1'], 'two at a time in all');
    a[0]!.release();
    await tick();
    await tick();
    assert.deepEqual(started, ['a-0', 'a-1', 'b-0'], "the freed slot goes to b, whose turn it is, not to a's third job");
    for (const { release } of [...a, b]) release();
    await lanes.stop();
  });

  it('does not add a job whose key waits; one whose key runs runs again after it, once', async () => {
    const started: string[] = [];
    const lanes = new TenantLanes({ total: 1, perTenant: 1, onError: assert.fail });
    const blocker = blocked('a', 'blocker', started);
    void lanes.add(blocker.job);
    const waits = blocked('a', 'same', started);
    const one = lanes.add(waits.job);
    const two = lanes.add(blocked('a', 'same', started).job);
    assert.equal(two, one, 'the waiting one stands for both');
    blocker.release();
    await tick();
    assert.deepEqual(started, ['blocker', 'same']);

    // Asked for while it runs: it runs again afterwards, once for both requests.
    const rerun = blocked('a', 'same', started);
    const three = lanes.add(rerun.job);
    const four = lanes.add(blocked('a', 'same', started).job);
    waits.release();
    await one;
    await tick();
    assert.deepEqual(started, ['blocker', 'same', 'same']);
    rerun.release();
    await Promise.all([three, four]);
    await lanes.stop();
  });

  it('reports a failed job and goes on; stop drops what waits', async () => {
    const errors: string[] = [];
    const lanes = new TenantLanes({
      total: 1,
      perTenant: 1,
      onError: (error, job) => errors.push(`${job.key}: ${(error as Error).message}`),
    });
    await lanes.add({
      tenantId: 'a',
      key: 'fails',
      run: async () => {
        throw new Error('boom');
      },
    });
    assert.deepEqual(errors, ['fails: boom']);
    const started: string[] = [];
    const running = blocked('a', 'running', started);
    void lanes.add(running.job);
    const dropped = lanes.add(blocked('b', 'waiting', started).job);
    await tick();
    const stopping = lanes.stop();
    await dropped;
    running.release();
    await stopping;
    assert.deepEqual(started, ['running']);
  });
});
