/**
 * Installs what a benchmark needs from Debian when it is absent (needs root), without letting a
 * package start its service: a temporary /usr/sbin/policy-rc.d that exits 101 ("action forbidden")
 * keeps, for example, the nginx package's postinst from starting nginx on port 80.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

/** True when `command` is on the PATH. */
export function hasCommand(command: string): boolean {
  try {
    execFileSync('sh', ['-c', 'command -v "$1"', 'sh', command], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** True when the Debian package is installed. */
export function hasDebianPackage(name: string): boolean {
  try {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own format syntax, not a template
    return execFileSync('dpkg-query', ['-W', '-f=${Status}', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).includes(
      'install ok installed',
    );
  } catch {
    return false;
  }
}

/** apt-get installs the packages (none: does nothing), with services kept from starting. */
export function installDebianPackages(packages: readonly string[]): void {
  if (packages.length === 0) return;
  console.log(`installing ${packages.join(', ')} from Debian...`);
  const policy = '/usr/sbin/policy-rc.d';
  const hadPolicy = fs.existsSync(policy);
  if (!hadPolicy) fs.writeFileSync(policy, '#!/bin/sh\nexit 101\n', { mode: 0o755 });
  try {
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
    execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...packages], {
      stdio: 'inherit',
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
  } finally {
    if (!hadPolicy) fs.rmSync(policy, { force: true });
  }
}
