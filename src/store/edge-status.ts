import type { Db } from './db.ts';
import type { TrafficConfigRecord } from './traffic-configs.ts';

export type ConfigState = 'PROVISIONING' | 'ACTIVE' | 'ERROR';

/** An edge node that has not reported within this long no longer counts as serving. */
export const EDGE_NODE_TIMEOUT_MS = 15_000;

export interface ServedStatus {
  status: ConfigState;
  statusDetail: string | null;
}

/** What edge nodes report, and the status the API derives from it. */
export class EdgeStatusRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async heartbeat(nodeId: string, location: string): Promise<void> {
    await this.db.run(
      `INSERT INTO edge_nodes (node_id, location, heartbeat_at) VALUES (?, ?, ?)
       ON CONFLICT (node_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, location = excluded.location`,
      [nodeId, location, Date.now()],
    );
  }

  async leave(nodeId: string): Promise<void> {
    await this.db.run('DELETE FROM edge_status WHERE node_id = ?', [nodeId]);
    await this.db.run('DELETE FROM edge_nodes WHERE node_id = ?', [nodeId]);
  }

  /**
   * What a node serves of a configuration's `revision`: ACTIVE (with a detail when it serves it
   * differently from what the tenant may expect); ERROR (it cannot); PROVISIONING with a detail (it
   * waits, say for a certificate, and may serve the previous configuration).
   */
  async report(nodeId: string, configId: string, revision: number, state: ConfigState, detail: string | null): Promise<void> {
    await this.db.run(
      `INSERT INTO edge_status (node_id, config_id, revision, state, detail, updated_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (node_id, config_id) DO UPDATE SET revision = excluded.revision, state = excluded.state,
       detail = excluded.detail, updated_at = excluded.updated_at`,
      [nodeId, configId, revision, state, detail, new Date().toISOString()],
    );
  }

  async forget(nodeId: string, configId: string): Promise<void> {
    await this.db.run('DELETE FROM edge_status WHERE node_id = ? AND config_id = ?', [nodeId, configId]);
  }

  /**
   * ACTIVE once every live edge node serves the configuration's current revision (with the detail a
   * node gave, if any: a layer 4 proxy's threat intelligence without a threat feed there); ERROR as
   * soon as one node cannot serve it; PROVISIONING otherwise (also while no edge node runs at all),
   * with the detail a node gave for waiting, if any.
   */
  async statusOf(configs: readonly TrafficConfigRecord[]): Promise<Map<string, ServedStatus>> {
    const liveSince = Date.now() - EDGE_NODE_TIMEOUT_MS;
    const nodes = (await this.db.all<{ node_id: string }>('SELECT node_id FROM edge_nodes WHERE heartbeat_at >= ?', [liveSince])).map(
      (row) => row.node_id,
    );
    const reports = configs.length
      ? await this.db.all<{ node_id: string; config_id: string; revision: number; state: string; detail: string | null }>(
          `SELECT s.node_id, s.config_id, s.revision, s.state, s.detail FROM edge_status s
           JOIN edge_nodes n ON n.node_id = s.node_id WHERE n.heartbeat_at >= ? AND s.config_id IN (${configs.map(() => '?').join(',')})`,
          [liveSince, ...configs.map((config) => config.id)],
        )
      : [];
    const result = new Map<string, ServedStatus>();
    for (const config of configs) {
      const current = reports.filter((report) => report.config_id === config.id && Number(report.revision) >= config.revision);
      const failed = current.find((report) => report.state === 'ERROR');
      if (failed) {
        result.set(config.id, { status: 'ERROR', statusDetail: `${failed.node_id}: ${failed.detail ?? 'cannot be served'}` });
      } else if (
        nodes.length > 0 &&
        nodes.every((node) => current.some((report) => report.node_id === node && report.state === 'ACTIVE'))
      ) {
        // Served everywhere; a node may still say what it serves differently (no threat feed there).
        const noted = current.find((report) => report.state === 'ACTIVE' && report.detail !== null);
        result.set(config.id, { status: 'ACTIVE', statusDetail: noted ? `${noted.node_id}: ${noted.detail}` : null });
      } else {
        const waiting = current.find((report) => report.state === 'PROVISIONING' && report.detail !== null);
        result.set(config.id, { status: 'PROVISIONING', statusDetail: waiting?.detail ?? null });
      }
    }
    return result;
  }
}
