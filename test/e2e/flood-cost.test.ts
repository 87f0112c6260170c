/**
 * Blocked sources dropped in the kernel, over real sockets against a started `tps serve` in a
 * network namespace this test creates (`unshare -n`): the service's nftables table lives and dies
 * there, never in the machine's own ruleset. The scenarios run in flood-cost/in-namespace.ts and
 * report what they saw; this file asserts on it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HELPER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'flood-cost/in-namespace.ts');

/** Why the namespace scenarios cannot run here (no user namespaces, no nft, no setpriv), or undefined. */
function unavailable(): string | undefined {
  try {
    execFileSync('unshare', ['-n', 'sh', '-c', 'ip link set lo up && nft list tables'], { stdio: 'pipe' });
  } catch (error) {
    return `network namespaces with nftables are not available here (unshare -n ... nft: ${(error as Error).message.split('\n')[0]})`;
  }
  try {
    execFileSync('setpriv', ['--version'], { stdio: 'pipe' });
  } catch {
    return 'setpriv (util-linux) is not installed';
  }
  return undefined;
}

/** Runs a scenario in a fresh network namespace with loopback up; `prefix` runs before node (capabilities dropped). */
function inNamespace(scenario: string, prefix: string[] = []): Promise<Record<string, any>> {
  return new Promise((resolve, reject) => {
    execFile(
      'unshare',
      ['-n', 'sh', '-c', 'ip link set lo up && exec "$@"', 'sh', ...prefix, process.execPath, HELPER, scenario],
      { maxBuffer: 64 * 1024 * 1024, timeout: 170_000 },
      (error, stdout, stderr) => {
        const last = stdout.trim().split('\n').at(-1) ?? '';
        try {
          const result = JSON.parse(last) as Record<string, any>;
          if (typeof result.error === 'string') reject(new Error(`${scenario}: ${result.error}`));
          else resolve(result);
        } catch {
          reject(
            new Error(`${scenario} reported nothing (${error?.message ?? 'exit 0'}):\n${stdout.slice(-4000)}\n${stderr.slice(-4000)}`),
          );
        }
      },
    );
  });
}

const skip = unavailable();

describe('flood cost: blocked sources dropped in the kernel', { skip, timeout: 180_000 }, () => {
  it('escalates a source still flooding while blocked to the kernel, for that proxy only, until its block ends', async () => {
    const seen = await inNamespace('escalation');
    await explained(seen, () => checkEscalation(seen));
  });

  it('drops an IPv6 source by the prefix the rate limiter counts it under (/64), and no other prefix', async () => {
    const seen = await inNamespace('ipv6-prefix');
    assert.equal(seen.inSet, true, JSON.stringify(seen.set));
    assert.equal(seen.neighbour, 'no answer', 'another address of the same /64 is dropped too');
    assert.equal(seen.stranger, 'connected', 'another /64 is served');
  });

  it('starts without CAP_NET_ADMIN with a warning on /healthz (auto), and refuses to start when nftables is required', async () => {
    const seen = await inNamespace('no-capability', ['setpriv', '--inh-caps=-net_admin', '--bounding-set=-net_admin', '--']);
    assert.equal(seen.health.status, 'ok', JSON.stringify(seen.health));
    const warning = seen.health.warnings?.find((candidate: { code: string }) => candidate.code === 'KERNEL_BLOCKING_UNAVAILABLE');
    assert.ok(warning, JSON.stringify(seen.health));
    assert.match(warning.detail, /CAP_NET_ADMIN/);
    assert.equal(seen.logMentionsIt, true, 'and a log line');
    assert.match(seen.requiredStart, /TPS_KERNEL_BLOCKING=nftables: the process lacks CAP_NET_ADMIN/);
  });
});

/** What the escalation scenario must have seen. */
function checkEscalation(seen: Record<string, any>): void {
  assert.equal(seen.tableAtStart, true, 'the service created its table inet tps');
  assert.deepEqual(
    seen.healthWarnings.filter((warning: { code: string }) => warning.code.startsWith('KERNEL_')),
    [],
    'no kernel-blocking warning with CAP_NET_ADMIN',
  );
  // Escalation, not surprise: the first refusals are 429s, the kernel comes after several times the limit.
  assert.equal(seen.flood.first429, 6, 'five requests pass, the sixth is refused with 429');
  assert.ok(seen.flood.statuses['429'] > 4 * 5, `more than factor x limit refusals before the kernel: ${JSON.stringify(seen.flood)}`);
  assert.equal(seen.inSet, true, `the source is in the set: ${JSON.stringify(seen.setAfterEscalation)}`);
  assert.deepEqual(seen.setAfterEscalation, [seen.element], 'only (flooder, front end, port of proxy A)');
  // The client cannot tell a reset of an idle keep-alive connection from a close (Node reports
  // both as a close): the proxy's log says it reset it.
  assert.ok(['ECONNRESET', 'end'].includes(seen.keepAliveClosedWith), `the keep-alive connection is closed: ${seen.keepAliveClosedWith}`);
  assert.ok(
    seen.kernelLog.some(
      (line: string) => line.includes('connections of a source dropped in the kernel reset') && line.includes('"reset":1'),
    ),
    `the proxy reset the flooder's keep-alive connection: ${JSON.stringify(seen.kernelLog)}`,
  );
  assert.equal(seen.escalations, 1);
  assert.equal(seen.blockedSourcesGauge, 1);
  // Dropped: connects get no answer at all, the counter rises, no request reaches the proxy.
  assert.deepEqual(seen.flooderAttempts, ['no answer', 'no answer', 'no answer']);
  assert.ok(seen.droppedAfter > seen.droppedBefore, `the nftables counter rose: ${seen.droppedBefore} -> ${seen.droppedAfter}`);
  assert.ok(seen.droppedMetric >= seen.droppedAfter, `on /metrics: ${seen.droppedMetric}`);
  assert.equal(seen.requestsOfAAfterAttempts, 1, "proxy A counted the benign request only, none of the flooder's");
  assert.deepEqual(seen.benignOnA, { status: 200 }, 'another source on the same proxy is served');
  assert.deepEqual(seen.flooderOnB, { status: 200 }, 'the same source on another proxy is served');
  // The block ends on time: the element expires with it and the flooder is served again.
  assert.deepEqual(seen.servedAgain, { status: 200 });
  assert.deepEqual(seen.setAfterBlock, []);
  // A threat-feed source that keeps connecting to a layer 4 proxy: refused (reset), then dropped.
  // Accepted by the kernel, then reset by the proxy: the client may see the connect or the reset first.
  const reached = (seen.listed.outcomes.ECONNRESET ?? 0) + (seen.listed.outcomes.connected ?? 0);
  assert.ok(reached > 20, `refused at accept first: ${JSON.stringify(seen.listed)}`);
  assert.equal(seen.listed.inSet, true, JSON.stringify(seen.listed));
  assert.equal(seen.listed.afterwards, 'no answer');
  assert.equal(seen.unlistedOnL4, 'connected', 'an unlisted source is served by the layer 4 proxy');
  assert.equal(seen.threatFeedEscalations, 1);
  assert.equal(seen.tableAfterStop, false, 'the table is gone after stop');
}

/** An assertion that fails says everything the scenario saw. */
async function explained(seen: Record<string, any>, check: () => void): Promise<void> {
  try {
    check();
  } catch (error) {
    (error as Error).message += `\nseen: ${JSON.stringify(seen)}`;
    throw error;
  }
}
