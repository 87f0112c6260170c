/**
 * Kernel blocking on an edge node (TPS_KERNEL_BLOCKING), as the supervisor runs it: which mode is
 * in force (the capability probe), the escalation of the workers' refusal reports, the nftables
 * table, and what /metrics and /healthz say about it.
 *
 * - `auto` (default): nftables when the process has CAP_NET_ADMIN and `nft` exists (and the table
 *   could be created); otherwise off, with a log line and a /healthz warning.
 * - `nftables`: the same, but the start fails when it cannot be had.
 * - `off`: nothing is asked of the kernel; blocked sources are refused by the proxies alone.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { EdgeLogger } from '../runtime/types.ts';
import { EscalationPolicy, type Threshold } from './escalation.ts';
import { KernelBlocker } from './kernel-blocker.ts';
import { findNft, hasNetAdmin, nftRunner, type NftRunner } from './nft.ts';
import type { KernelBlockElement, KernelBlockingMode, KernelBlockReason, SourceRefusals } from './types.ts';

export const DEFAULT_ESCALATION_FACTOR = 4;

/** What the supervisor knows of a proxy that kernel blocking needs. */
export interface BlockTarget {
  ipv4?: string | undefined;
  ipv6?: string | undefined;
  port: number;
  protocols: readonly ('tcp' | 'udp')[];
  /** The proxy's rate-limit thresholds (none: only threat-feed reports count). */
  thresholds: readonly Threshold[];
}

export interface KernelBlockingOptions {
  mode: KernelBlockingMode;
  /** Refusals during a block past this many times a threshold's requests within its period: escalated. */
  escalationFactor: number;
  logger: EdgeLogger;
  registry: Registry;
  /** For tests: the probe's answers and the nft runner. */
  probe?: { netAdmin: () => boolean; nft: () => string | undefined };
  runner?: (binary: string) => NftRunner;
}

export class KernelBlocking {
  readonly #options: KernelBlockingOptions;
  readonly #escalation: EscalationPolicy;
  #blocker: KernelBlocker | undefined;
  #warning: { code: string; detail: string } | undefined;
  readonly #escalations: Counter<'reason'>;

  constructor(options: KernelBlockingOptions) {
    this.#options = options;
    this.#escalation = new EscalationPolicy({ factor: options.escalationFactor });
    const registers = [options.registry];
    this.#escalations = new Counter({
      name: 'tps_edge_kernel_escalations_total',
      help: 'Blocked sources handed to the kernel (nftables drops their packets to one proxy for the rest of the block), by reason.',
      labelNames: ['reason'],
      registers,
    });
    const blocking = () => this.#blocker;
    new Gauge({
      name: 'tps_edge_kernel_blocking_enabled',
      help: 'Whether this node drops escalated sources in the kernel (1: the nftables table inet tps is in place; 0: off).',
      registers,
      collect() {
        this.set(blocking() === undefined ? 0 : 1);
      },
    });
    new Gauge({
      name: 'tps_edge_kernel_blocked_sources',
      help: "Elements in the kernel's sets now (a source, a proxy's front-end address and port, a protocol), by reason.",
      labelNames: ['reason'],
      registers,
      collect() {
        const sizes = blocking()?.sizes() ?? { 'rate-limit': 0, 'threat-feed': 0 };
        for (const reason of Object.keys(sizes) as KernelBlockReason[]) this.set({ reason }, sizes[reason]);
      },
    });
    const reported = { applied: 0, failed: 0, full: 0, recreated: 0 };
    new Counter({
      name: 'tps_edge_kernel_blocking_updates_total',
      help: 'Batches sent to nftables (one nft process each), by outcome (applied, failed); elements not added because the sets were full (full); the table created again after it was removed from outside (recreated).',
      labelNames: ['outcome'],
      registers,
      collect() {
        const counts = blocking()?.counts;
        if (counts === undefined) return;
        for (const outcome of ['applied', 'failed', 'full', 'recreated'] as const) {
          if (counts[outcome] > reported[outcome]) this.inc({ outcome }, counts[outcome] - reported[outcome]);
          reported[outcome] = counts[outcome];
        }
      },
    });
    // Read from the kernel at scrape time: the counters of the table's drop rules.
    const logger = options.logger;
    const last = { 4: 0, 6: 0 };
    new Counter({
      name: 'tps_edge_kernel_dropped_packets_total',
      help: "Packets the kernel dropped for this node's blocked sources (the nftables counters of table inet tps), by IP family.",
      labelNames: ['family'],
      registers,
      async collect() {
        const blocker = blocking();
        if (blocker === undefined) return;
        try {
          const dropped = await blocker.droppedPackets();
          for (const family of [4, 6] as const) {
            // The table is created afresh at start: its counters only grow while this process runs.
            if (dropped[family] > last[family]) this.inc({ family: `ipv${family}` }, dropped[family] - last[family]);
            last[family] = dropped[family];
          }
        } catch (error) {
          logger.warn({ err: error }, 'kernel blocking: the nftables counters could not be read');
        }
      },
    });
  }

  /** Whether escalated sources go to the kernel (after `start`). */
  get active(): boolean {
    return this.#blocker !== undefined;
  }

  /** Set when `auto` found kernel blocking unavailable, or while the kernel's sets cannot be updated: the /healthz warning. */
  get warning(): { code: string; detail: string } | undefined {
    const failure = this.#blocker?.failure;
    if (failure !== undefined)
      return {
        code: 'KERNEL_BLOCKING_FAILING',
        detail: `the nftables sets of table inet tps cannot be updated (${failure}); blocked sources are refused by the proxies alone meanwhile`,
      };
    return this.#warning;
  }

  /** Probes and creates the table. Rejects in mode `nftables` when that cannot be done. */
  async start(): Promise<void> {
    const { mode, logger } = this.#options;
    if (mode === 'off') return;
    const probe = this.#options.probe ?? { netAdmin: () => hasNetAdmin(), nft: () => findNft() };
    const binary = probe.nft();
    let unavailable: string | undefined;
    if (!probe.netAdmin()) unavailable = 'the process lacks CAP_NET_ADMIN (run as root, or grant it: AmbientCapabilities=CAP_NET_ADMIN)';
    else if (binary === undefined) unavailable = 'the nft command is not installed (Debian package nftables)';
    else {
      const blocker = new KernelBlocker({ nft: (this.#options.runner ?? nftRunner)(binary), logger });
      try {
        await blocker.start();
        this.#blocker = blocker;
      } catch (error) {
        unavailable = `the nftables table inet tps could not be created: ${(error as Error).message}`;
      }
    }
    if (unavailable === undefined) {
      logger.info({ table: 'inet tps', escalationFactor: this.#options.escalationFactor }, 'kernel blocking on (nftables)');
      return;
    }
    if (mode === 'nftables') throw new Error(`TPS_KERNEL_BLOCKING=nftables: ${unavailable}`);
    this.#warning = {
      code: 'KERNEL_BLOCKING_UNAVAILABLE',
      detail: `kernel blocking is off (TPS_KERNEL_BLOCKING=auto): ${unavailable}; blocked sources are refused by the proxies alone`,
    };
    logger.warn({ reason: unavailable }, 'kernel blocking off: blocked sources are refused by the proxies alone');
  }

  /**
   * A worker's refusal reports: each source that this takes over the bar goes to the kernel for
   * the proxy's front end. Returns those escalated (their connections on that proxy are to be closed).
   */
  onRefusals(refusals: readonly SourceRefusals[], targetOf: (proxyId: string) => BlockTarget | undefined): SourceRefusals[] {
    const blocker = this.#blocker;
    if (blocker === undefined) return [];
    const escalated: SourceRefusals[] = [];
    for (const report of refusals) {
      const target = targetOf(report.proxyId);
      if (target === undefined) continue;
      const until = this.#escalation.note(report, target.thresholds);
      if (until === undefined) continue;
      let added = false;
      for (const element of elementsFor(report.source, target)) added = blocker.block(element, until, report.reason) || added;
      if (!added) continue;
      this.#escalations.inc({ reason: report.reason });
      this.#options.logger.warn(
        { proxyId: report.proxyId, source: report.source, reason: report.reason, blockedUntil: new Date(until).toISOString() },
        'source dropped in the kernel for the rest of its block',
      );
      escalated.push(report);
    }
    return escalated;
  }

  /** Resolves once the escalations so far are in the kernel (tests). */
  async settled(): Promise<void> {
    await this.#blocker?.settled();
  }

  /** Removes the table. */
  async stop(): Promise<void> {
    const blocker = this.#blocker;
    this.#blocker = undefined;
    try {
      await blocker?.stop();
    } catch (error) {
      this.#options.logger.error({ err: error }, 'kernel blocking: the nftables table inet tps could not be removed');
    }
  }
}

/** The set elements of a source on a proxy: its family's front-end address, the port, each protocol. */
export function elementsFor(source: string, target: BlockTarget): KernelBlockElement[] {
  const family = source.includes(':') ? 6 : 4;
  const frontend = family === 4 ? target.ipv4 : target.ipv6;
  if (frontend === undefined) return [];
  const destination = isWildcard(frontend) ? (family === 4 ? '0.0.0.0/0' : '::/0') : frontend;
  return target.protocols.map((protocol) => ({ family, protocol, source, destination, port: target.port }));
}

function isWildcard(address: string): boolean {
  return address === '0.0.0.0' || address === '::' || /^[0:]+$/.test(address);
}
