/**
 * Starts the real `tps` command (`node bin/tps.js serve`) as a child process, on a loopback port
 * of its own, with its own data folder, and talks to it over HTTP like a user would.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { freshPostgresDatabase } from './postgres.ts';
import { openStore, type Store } from '../../src/store/index.ts';

const execFileAsync = promisify(execFile);
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const TPS_BIN = path.join(REPO_ROOT, 'bin/tps.js');

export type StoreKind = 'sqlite' | 'postgres';

export interface TpsOptions {
  store?: StoreKind;
  env?: Record<string, string>;
  /** More arguments of `tps serve` (`--demo`). */
  args?: string[];
}

export interface Tps {
  url: string;
  /** The operators' listener (TPS_METRICS_LISTEN): /metrics and /healthz. */
  metricsUrl: string;
  store: StoreKind;
  env: Record<string, string>;
  /** Everything the process printed so far (stdout and stderr). */
  output(): string;
  /** Runs `tps <args>` against the same store; parses its --json output. */
  cli<T = Record<string, unknown>>(...args: string[]): Promise<T>;
  stop(): Promise<void>;
}

export async function startTps(options: TpsOptions = {}): Promise<Tps> {
  const store = options.store ?? 'sqlite';
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-test-'));
  const env: Record<string, string> = {
    TPS_DATA_DIR: dataDir,
    TPS_API_LISTEN: '127.0.0.1:0',
    TPS_METRICS_LISTEN: '127.0.0.1:0',
    TPS_FRONTEND_IPS: '127.0.0.2,127.0.0.3,::1',
    TPS_LOCATION: 'TST',
    TPS_EDGE: 'false',
    // Never a public CA from the tests: the ACME tests start Pebble and set their own directory.
    TPS_ACME_DIRECTORY_URL: 'off',
    // Tests run as root in the machine's own network namespace: only a test inside a namespace of
    // its own (test/e2e/flood-cost.test.ts) may let the service create its nftables table.
    TPS_KERNEL_BLOCKING: 'off',
    ...(store === 'postgres' && { TPS_DATABASE_URL: await freshPostgresDatabase() }),
    ...options.env,
  };
  const child = spawn(process.execPath, [TPS_BIN, 'serve', ...(options.args ?? [])], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const { url, metricsUrl } = await waitForReady(child, () => output);
  return {
    url,
    metricsUrl,
    store,
    env,
    output: () => output,
    async cli<T>(...args: string[]) {
      const { stdout } = await execFileAsync(process.execPath, [TPS_BIN, ...args, '--json'], { env: { ...process.env, ...env } });
      return JSON.parse(stdout) as T;
    },
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function waitForReady(child: ChildProcess, output: () => string): Promise<{ url: string; metricsUrl: string }> {
  return new Promise((resolve, reject) => {
    const deadline = setTimeout(() => fail(new Error(`tps serve did not start within 30 s:\n${output()}`)), 30_000);
    const check = () => {
      for (const line of output().split('\n')) {
        if (!line.includes('"tps ready"')) continue;
        clearTimeout(deadline);
        child.stdout!.off('data', check);
        const ready = JSON.parse(line) as { apiUrl: string; metricsUrl: string };
        resolve({ url: ready.apiUrl, metricsUrl: ready.metricsUrl });
        return;
      }
    };
    const fail = (error: Error) => {
      clearTimeout(deadline);
      reject(error);
    };
    child.stdout!.on('data', check);
    child.once('exit', (code) => fail(new Error(`tps serve exited with ${code}:\n${output()}`)));
  });
}

/**
 * An ACME directory no one answers (a closed loopback port), for tests of orders that must stay
 * PENDING: the ACME service runs, so orders are accepted, and each attempt fails at once and is
 * retried after a backoff of a minute and more. (With TPS_ACME_DIRECTORY_URL=off orders are refused.)
 */
export const ACME_DIRECTORY_UNREACHABLE = 'http://127.0.0.1:1/directory';

export interface Credentials {
  tenantId: string;
  clientId: string;
  clientSecret: string;
}

/** A new tenant with a service account, made with the operator CLI. */
export async function createTenant(tps: Tps, scopes = 'read,write,insight'): Promise<Credentials> {
  const tenant = await tps.cli<{ id: string }>('tenant', 'create', '--name', `tenant-${Math.random().toString(36).slice(2, 8)}`);
  const account = await tps.cli<{ clientId: string; clientSecret: string }>(
    'service-account',
    'create',
    '--tenant',
    tenant.id,
    '--scopes',
    scopes,
  );
  return { tenantId: tenant.id, clientId: account.clientId, clientSecret: account.clientSecret };
}

/** The store of a running `tps serve`, opened beside it (to seed events as edge nodes would write them). */
export async function openStoreOf(tps: Tps): Promise<Store> {
  return openStore({ dataDir: tps.env.TPS_DATA_DIR!, databaseUrl: tps.env.TPS_DATABASE_URL });
}
