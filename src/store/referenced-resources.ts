/**
 * Resources that proxies refer to (certificates, CA certificates): deleted only while no traffic
 * configuration does, in one transaction with the check.
 */
import type { Db } from './db.ts';
import { bumpRevision } from './revision.ts';

/**
 * Not deleted, either because the tenant has no such resource (`notFound`, whatever another tenant
 * holds) or because configurations refer to it: `referencedBy` lists the tenant's own; a reference
 * from another tenant's configuration (which the API never lets one make) also keeps it, unnamed.
 */
export type DeleteOutcome =
  | { deleted: true }
  | { deleted: false; notFound: true }
  | { deleted: false; notFound: false; referencedBy: string[] };

export async function deleteUnreferenced(
  db: Db,
  table: 'certificates' | 'ca_certificates',
  tenantId: string,
  id: string,
): Promise<DeleteOutcome> {
  const kind = table === 'certificates' ? 'certificate' : 'caCertificate';
  return db.transaction(async (tx) => {
    // Ownership first: another tenant's id is answered exactly as an unknown one.
    const owned = await tx.one(`SELECT id FROM ${table} WHERE id = ? AND tenant_id = ?`, [id, tenantId]);
    if (!owned) return { deleted: false, notFound: true };
    const references = await tx.all<{ config_id: string; tenant_id: string }>(
      `SELECT DISTINCT r.config_id, c.tenant_id FROM config_references r JOIN traffic_configs c ON c.id = r.config_id
       WHERE r.ref_kind = ? AND r.ref_id = ? ORDER BY r.config_id`,
      [kind, id],
    );
    if (references.length > 0) {
      return {
        deleted: false,
        notFound: false,
        referencedBy: references.filter((row) => row.tenant_id === tenantId).map((row) => row.config_id),
      };
    }
    const deleted = await tx.run(`DELETE FROM ${table} WHERE id = ? AND tenant_id = ?`, [id, tenantId]);
    if (deleted === 0) return { deleted: false, notFound: true };
    await bumpRevision(tx);
    return { deleted: true };
  });
}
