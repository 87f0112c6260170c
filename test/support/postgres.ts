/**
 * A real PostgreSQL server for the tests (Debian's postgresql package, installed by
 * scripts/setup.sh). The global test setup starts one cluster per run and hands its admin URL to
 * every test process in TPS_TEST_POSTGRES_URL; a test file run on its own starts its own cluster.
 * Each caller gets a fresh database, so tests never see each other's rows.
 */
import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './ports.ts';

export interface PostgresCluster {
  adminUrl: string;
  stop(): void;
}

function postgresBin(): string {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  if (versions.length === 0) throw new Error('PostgreSQL is not installed: run scripts/setup.sh');
  return path.join(root, versions[0]!, 'bin');
}

/** Starts a throw-away cluster as the `postgres` user (the server refuses to run as root). */
export async function startPostgresCluster(): Promise<PostgresCluster> {
  const bin = postgresBin();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-pg-'));
  const runAs = process.getuid?.() === 0 ? ['runuser', '-u', 'postgres', '--'] : [];
  if (runAs.length) execFileSync('chown', ['-R', 'postgres:postgres', dir]);
  const run = (command: string, args: string[]) =>
    execFileSync(runAs[0] ?? command, runAs.length ? [...runAs.slice(1), command, ...args] : args, { stdio: 'pipe' });

  run(path.join(bin, 'initdb'), ['-D', path.join(dir, 'data'), '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  const port = await freePort();
  const serverArgs = [
    '-D',
    path.join(dir, 'data'),
    '-p',
    String(port),
    '-k',
    dir,
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    'fsync=off',
    '-c',
    'synchronous_commit=off',
    '-c',
    'full_page_writes=off',
    '-c',
    'max_connections=200',
  ];
  const server = spawn(
    runAs[0] ?? path.join(bin, 'postgres'),
    runAs.length ? [...runAs.slice(1), path.join(bin, 'postgres'), ...serverArgs] : serverArgs,
    {
      stdio: 'ignore',
      detached: true,
    },
  );
  server.unref();
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`;
  for (let attempt = 0; ; attempt++) {
    try {
      const client = new pg.Client(adminUrl);
      await client.connect();
      await client.end();
      break;
    } catch (error) {
      if (attempt > 100) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return {
    adminUrl,
    stop() {
      try {
        process.kill(-server.pid!, 'SIGTERM');
      } catch {
        // already gone
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

let ownCluster: Promise<PostgresCluster> | undefined;

/** A URL to a new, empty database on the shared test cluster (or on one started for this process). */
export async function freshPostgresDatabase(): Promise<string> {
  let adminUrl = process.env.TPS_TEST_POSTGRES_URL;
  if (!adminUrl) {
    ownCluster ??= startPostgresCluster().then((cluster) => {
      process.once('exit', () => cluster.stop());
      return cluster;
    });
    adminUrl = (await ownCluster).adminUrl;
  }
  const name = `tps_${crypto.randomBytes(6).toString('hex')}`;
  const client = new pg.Client(adminUrl);
  await client.connect();
  await client.query(`CREATE DATABASE ${name}`);
  await client.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}
