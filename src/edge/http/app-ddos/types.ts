/**
 * The types the application-layer DDoS protection shares with the proxy and the edge runtime: the
 * operator's settings, what the runtime hands a proxy, and what an attack episode reports.
 */
import type { DistributedAttack } from '@tps/model';
import type { SharedTableInit } from '../../shared-counters/shared-table.ts';

/** The operator's settings (TPS_APP_DDOS_*); a proxy's `appDdos` attributes override some. */
export interface AppDdosOperatorSettings {
  /** An attack: the rate exceeds the learned normal rate times this (a proxy's `factor` overrides it). */
  factor: number;
  /** The learned-rate trigger never fires below this many requests per second. */
  minRate: number;
  /** Half-life of the learned normal rate, in seconds: how fast it follows a site's growth. */
  baselineHalfLifeSeconds: number;
  /** An attack ends after this many consecutive seconds under its trigger. */
  quietSeconds: number;
  /** Leading zero bits a solution must have when the attack is at its trigger (more as it grows, at most +2). */
  challengeBits: number;
  /** Lifetime of a clearance cookie. */
  clearanceSeconds: number;
  /** Challenges served to one source in an episode without a solution before it is blocked. */
  maxUnsolved: number;
  /** How long such a source is blocked (like a rate-limit block). */
  blockSeconds: number;
}

export const DEFAULT_APP_DDOS_SETTINGS: Readonly<AppDdosOperatorSettings> = Object.freeze({
  factor: 4,
  minRate: 50,
  baselineHalfLifeSeconds: 600,
  quietSeconds: 60,
  challengeBits: 14,
  clearanceSeconds: 1800,
  maxUnsolved: 20,
  blockSeconds: 300,
});

/** A proxy's share of the node's shared memory: the proxy-wide state, and one slot per source. */
export interface AppDdosTablesInit {
  state: SharedTableInit;
  sources: SharedTableInit;
}

/** What happened to a request the protection looked at (a metric label). */
export type AppDdosOutcome = 'challenged' | 'solved' | 'failed' | 'blocked' | 'shed' | 'cleared' | 'exempt';

export interface AppDdosDeps {
  settings?: Partial<AppDdosOperatorSettings>;
  /**
   * 32 bytes or more, the same on every node (derived from the master key): clearance cookies and
   * challenges are signed with keys derived from it. Absent: a random one for this process (a
   * single-thread edge, tests).
   */
  secret?: Buffer;
  /**
   * This edge node's name: each node detects and records its own episodes, so their event ids must
   * differ even when two nodes see an attack start in the same second.
   */
  nodeId?: string;
  /** The proxy's shared tables (several workers); absent: tables of this thread. */
  tables?: (proxyId: string) => AppDdosTablesInit | undefined;
  /**
   * Several edge nodes (Redis): each node adds its count of each closed second and reads the total
   * of all nodes for the second before, so that detection sees the proxy's whole rate. Absent: this
   * node's rate only.
   */
  cluster?: ClusterRateExchange;
  /** Counts what the protection did to requests. */
  counted?: (proxyId: string, outcome: AppDdosOutcome) => void;
  /** An attack started (true) or ended (false) on this node. */
  attackChanged?: (proxyId: string, active: boolean) => void;
}

export interface ClusterRateExchange {
  /** Adds `count` requests of this node to `second` of `proxyId`; resolves with all nodes' total of `second - 1`. */
  exchange(proxyId: string, second: number, count: number): Promise<number>;
}

/**
 * The figures of one attack episode as the detector keeps them: the APP_DDOS_ATTACK event's
 * `attack` member (@tps/model's DistributedAttack) with its times as epoch ms, and without the
 * proxy's mode, which the event takes from the proxy.
 */
export type AttackFigures = Omit<DistributedAttack, 'startedAt' | 'endedAt' | 'mode'> & { startedAt: number; endedAt: number };
