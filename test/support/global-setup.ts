/**
 * Runs once per `node --test` run (scripts/test.sh passes it with --test-global-setup): starts the
 * real servers the tests share and hands their addresses to every test process.
 */
import { startPostgresCluster, type PostgresCluster } from './postgres.ts';

let postgres: PostgresCluster | undefined;

export async function globalSetup(): Promise<void> {
  if (!process.env.TPS_TEST_POSTGRES_URL) {
    postgres = await startPostgresCluster();
    process.env.TPS_TEST_POSTGRES_URL = postgres.adminUrl;
  }
}

export async function globalTeardown(): Promise<void> {
  postgres?.stop();
}
