/**
 * `tps status`: what an operator checks first, read from the store every node shares: the edge
 * nodes and whether they are alive, every configuration's status, and how far each node is behind
 * the store (apply lag: configurations changed that the node does not serve yet, and since when).
 */
import type { Store } from '../store/index.ts';
import { EDGE_NODE_TIMEOUT_MS } from '../store/edge-status.ts';
import { LATEST_MIGRATION, schemaVersion } from '../store/migrations.ts';
import { sqliteFile } from '../store/db.ts';
import type { Settings } from '../config/settings.ts';

export interface NodeStatus {
  nodeId: string;
  location: string;
  live: boolean;
  /** Seconds since its last heartbeat. */
  heartbeatAgeSeconds: number;
  /** Configurations it serves at their current revision. */
  current: number;
  /** Configurations changed (or new) that it does not report serving yet. */
  behind: number;
  /** Seconds since the oldest change it has not applied; 0 when it is up to date. */
  lagSeconds: number;
  /** Configurations it cannot serve, with its reason. */
  errors: { configId: string; detail: string | null }[];
}

export interface StatusReport {
  store: { kind: 'sqlite' | 'postgres'; location: string; schemaVersion: number; latestSchemaVersion: number; revision: number };
  nodes: NodeStatus[];
  configurations: {
    total: number;
    byStatus: { ACTIVE: number; PROVISIONING: number; ERROR: number };
    /** Those not ACTIVE, with their tenant and front-end: the first NOT_ACTIVE_LISTED of them. */
    notActive: {
      id: string;
      tenantId: string;
      type: string;
      frontend: string;
      status: string;
      statusDetail: string | null;
      updatedAt: string;
    }[];
    /** How many more are not ACTIVE than listed. */
    notActiveNotListed: number;
  };
}

/** A bound on the list of configurations not ACTIVE (a store without edge nodes has all of them so). */
export const NOT_ACTIVE_LISTED = 200;

export async function storeStatus(store: Store, settings: Settings, now = Date.now()): Promise<StatusReport> {
  const configs = await store.trafficConfigs.listAll();
  const statuses = await store.edgeStatus.statusOf(configs);
  const nodes = await store.db.all<{ node_id: string; location: string; heartbeat_at: number }>(
    'SELECT node_id, location, heartbeat_at FROM edge_nodes ORDER BY node_id',
  );
  const reports = await store.db.all<{ node_id: string; config_id: string; revision: number; state: string; detail: string | null }>(
    'SELECT node_id, config_id, revision, state, detail FROM edge_status',
  );
  const byStatus = { ACTIVE: 0, PROVISIONING: 0, ERROR: 0 };
  const notActive: StatusReport['configurations']['notActive'] = [];
  let notActiveNotListed = 0;
  for (const config of configs) {
    const served = statuses.get(config.id) ?? { status: 'PROVISIONING' as const, statusDetail: null };
    byStatus[served.status]++;
    if (served.status !== 'ACTIVE' && notActive.length >= NOT_ACTIVE_LISTED) {
      notActiveNotListed++;
    } else if (served.status !== 'ACTIVE') {
      const { frontend } = config.attributes;
      const ips = [frontend.ipv4, frontend.ipv6].filter(Boolean).map((ip) => (ip!.includes(':') ? `[${ip}]` : ip));
      notActive.push({
        id: config.id,
        tenantId: config.tenantId,
        type: config.type,
        frontend: ips.map((ip) => `${ip}:${frontend.port}`).join(' '),
        status: served.status,
        statusDetail: served.statusDetail,
        updatedAt: config.updatedAt,
      });
    }
  }
  const nodeStatuses = nodes.map((node): NodeStatus => {
    const own = new Map(reports.filter((report) => report.node_id === node.node_id).map((report) => [report.config_id, report]));
    const behind = configs.filter((config) => Number(own.get(config.id)?.revision ?? -1) < config.revision);
    const oldest = Math.min(...behind.map((config) => Date.parse(config.updatedAt)));
    return {
      nodeId: node.node_id,
      location: node.location,
      live: now - Number(node.heartbeat_at) <= EDGE_NODE_TIMEOUT_MS,
      heartbeatAgeSeconds: Math.max(0, Math.round((now - Number(node.heartbeat_at)) / 1000)),
      current: configs.length - behind.length,
      behind: behind.length,
      lagSeconds: behind.length > 0 ? Math.max(0, Math.round((now - oldest) / 1000)) : 0,
      errors: [...own.values()]
        .filter((report) => report.state === 'ERROR')
        .map((report) => ({ configId: report.config_id, detail: report.detail })),
    };
  });
  return {
    store: {
      kind: store.db.dialect,
      location: store.db.dialect === 'postgres' ? redactedUrl(settings.databaseUrl ?? '') : sqliteFile(settings.dataDir),
      schemaVersion: await schemaVersion(store.db),
      latestSchemaVersion: LATEST_MIGRATION,
      revision: await store.revision(),
    },
    nodes: nodeStatuses,
    configurations: { total: configs.length, byStatus, notActive, notActiveNotListed },
  };
}

export function describeStatus(report: StatusReport): string {
  const { store, nodes, configurations } = report;
  const lines = [
    `store           ${store.kind} ${store.location}, schema ${store.schemaVersion}${store.schemaVersion === store.latestSchemaVersion ? '' : ` (this tps: ${store.latestSchemaVersion})`}, revision ${store.revision}`,
    `edge nodes      ${nodes.filter((node) => node.live).length} live${nodes.some((node) => !node.live) ? `, ${nodes.filter((node) => !node.live).length} silent` : ''}`,
  ];
  for (const node of nodes) {
    const lag = node.behind === 0 ? 'up to date' : `${node.behind} configuration(s) behind, oldest change ${node.lagSeconds} s ago`;
    lines.push(
      `  ${node.nodeId}  ${node.location}  ${node.live ? 'live' : 'silent'}, heartbeat ${node.heartbeatAgeSeconds} s ago, ${lag}${node.errors.length ? `, ${node.errors.length} in error` : ''}`,
    );
  }
  const { byStatus } = configurations;
  lines.push(
    `configurations  ${configurations.total}: ${byStatus.ACTIVE} active, ${byStatus.PROVISIONING} provisioning, ${byStatus.ERROR} in error`,
  );
  for (const config of configurations.notActive) {
    lines.push(
      `  ${config.status.padEnd(12)} ${config.id}  ${config.type} ${config.frontend}  tenant ${config.tenantId}${config.statusDetail ? `  ${config.statusDetail}` : ''}`,
    );
  }
  if (configurations.notActiveNotListed > 0) lines.push(`  ... and ${configurations.notActiveNotListed} more not active`);
  return lines.join('\n');
}

function redactedUrl(value: string): string {
  try {
    const url = new URL(value);
    url.password = '';
    return url.toString();
  } catch {
    return 'postgres';
  }
}
