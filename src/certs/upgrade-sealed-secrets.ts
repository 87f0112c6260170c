/**
 * At every start, before anything opens a private key: sealed values in the unbound v1 format are
 * re-sealed as v2, bound to the row that holds them (src/certs/secret-box.ts). Each row is
 * replaced only while it still holds the value read, so nodes starting together do not clash; a
 * value that does not open stays as it is (nothing stored is ever lost) and is logged.
 */
import type { Store } from '../store/index.ts';
import { SecretBox } from './secret-box.ts';

export interface UpgradeLogger {
  info(details: object, message: string): void;
  error(details: object, message: string): void;
}

export async function upgradeSealedSecrets(
  store: Store,
  secrets: SecretBox,
  logger: UpgradeLogger,
): Promise<{ upgraded: number; failed: number }> {
  let upgraded = 0;
  let failed = 0;
  for (const secret of await store.sealedSecrets.withPrefix('v1:')) {
    if (!SecretBox.isLegacy(secret.sealed)) continue;
    let next: string;
    try {
      next = secrets.upgrade(secret.sealed, secret.binding);
    } catch (error) {
      failed++;
      logger.error(
        { table: secret.binding.table, id: secret.binding.id, err: (error as Error).message },
        'a sealed private key does not open with this master key; left as it is',
      );
      continue;
    }
    if (await store.sealedSecrets.replace(secret, next)) upgraded++;
  }
  if (upgraded > 0) logger.info({ upgraded }, 'sealed private keys bound to their rows');
  return { upgraded, failed };
}
