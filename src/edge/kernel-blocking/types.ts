/**
 * Types of kernel blocking: sources the edge has already decided to refuse, dropped by the kernel
 * (nftables) for the rest of their block so that refusing them costs the proxies nothing.
 */

/** `TPS_KERNEL_BLOCKING`: nftables when the process may (auto), nftables or fail to start, never. */
export type KernelBlockingMode = 'auto' | 'nftables' | 'off';

/** Why a source was escalated to the kernel. */
export type KernelBlockReason = 'rate-limit' | 'threat-feed';

/** One element of the service's sets: packets of `protocol` from `source` to `destination`:`port`. */
export interface KernelBlockElement {
  family: 4 | 6;
  protocol: 'tcp' | 'udp';
  /** An IPv4 address, or an IPv6 prefix in CIDR form (the rate limiter's source key). */
  source: string;
  /** The front-end address; `0.0.0.0/0` or `::/0` for a wildcard front end. */
  destination: string;
  port: number;
}

/**
 * What a worker tells the supervisor about refusals of one source on one proxy since its last
 * report: the supervisor adds up the workers' reports and decides the escalation.
 */
export interface SourceRefusals {
  proxyId: string;
  /** The source key (src/net/source-key.ts): an IPv4 address or an IPv6 prefix. */
  source: string;
  reason: KernelBlockReason;
  /** Refusals since the last report. */
  count: number;
  /** rate-limit: when the source's block ends (ms since the epoch). */
  blockedUntil: number;
}
