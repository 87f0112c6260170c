/**
 * One configuration per front-end (ip, port, protocol), decided by the edge itself. The store's
 * unique key already refuses a second claim; this is the defence beneath it: listeners bind with
 * SO_REUSEPORT, so two configurations on one binding would split its connections between them
 * (one tenant taking part of another's traffic). A contested binding goes to the configuration
 * that has claimed it longest (store revision since which it has, then creation time, then id):
 * data every node reads alike, so every worker of every node makes the same choice. The others are
 * not served at all and are reported ERROR, without naming the holder (it may be another tenant's).
 */
import type { TrafficConfigRecord } from '../../store/traffic-configs.ts';
import { bindingKey, heldBindings } from '../../store/traffic-configs.ts';

export interface BindingArbitration {
  /** Configurations that hold every binding they claim, in the order given. */
  served: TrafficConfigRecord[];
  /** Configuration id -> why it is not served (statusDetail). */
  refused: Map<string, string>;
}

/** Orders two claims on one binding: the earlier claim first. */
function earlierClaim(key: string) {
  return (a: TrafficConfigRecord, b: TrafficConfigRecord): number => {
    const sinceA = a.bindingSince[key] ?? a.revision;
    const sinceB = b.bindingSince[key] ?? b.revision;
    if (sinceA !== sinceB) return sinceA - sinceB;
    if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? -1 : 1;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  };
}

export function arbitrateBindings(records: readonly TrafficConfigRecord[]): BindingArbitration {
  const claims = new Map<string, { binding: { ip: string; port: number; protocol: string }; claimants: TrafficConfigRecord[] }>();
  for (const record of records) {
    for (const binding of heldBindings(record)) {
      const key = bindingKey(binding);
      const claim = claims.get(key);
      if (claim) {
        if (!claim.claimants.includes(record)) claim.claimants.push(record);
      } else {
        claims.set(key, { binding, claimants: [record] });
      }
    }
  }
  const refused = new Map<string, string>();
  for (const [key, { binding, claimants }] of claims) {
    if (claimants.length < 2) continue;
    const [, ...losers] = [...claimants].sort(earlierClaim(key));
    for (const loser of losers) {
      if (refused.has(loser.id)) continue;
      const address = binding.ip.includes(':') ? `[${binding.ip}]` : binding.ip;
      refused.set(
        loser.id,
        `port ${binding.port}/${binding.protocol} on ${address} is served by another configuration; choose another port`,
      );
    }
  }
  return { served: records.filter((record) => !refused.has(record.id)), refused };
}
