import crypto from 'node:crypto';
import type { Db } from './db.ts';

export interface Tenant {
  id: string;
  name: string;
  createdAt: string;
}

interface TenantRow {
  id: string;
  name: string;
  created_at: string;
}

const fromRow = (row: TenantRow): Tenant => ({ id: row.id, name: row.name, createdAt: row.created_at });

export class TenantRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async create(name: string): Promise<Tenant> {
    const tenant = { id: crypto.randomUUID(), name, createdAt: new Date().toISOString() };
    await this.db.run('INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)', [tenant.id, name, tenant.createdAt]);
    return tenant;
  }

  async get(id: string): Promise<Tenant | undefined> {
    const row = await this.db.one<TenantRow>('SELECT * FROM tenants WHERE id = ?', [id]);
    return row && fromRow(row);
  }

  async findByName(name: string): Promise<Tenant | undefined> {
    const row = await this.db.one<TenantRow>('SELECT * FROM tenants WHERE name = ? ORDER BY created_at LIMIT 1', [name]);
    return row && fromRow(row);
  }

  async list(): Promise<Tenant[]> {
    return (await this.db.all<TenantRow>('SELECT * FROM tenants ORDER BY created_at')).map(fromRow);
  }
}
