/**
 * Runs the `nft` command: one process per batch of changes (`nft -f -`, the script on its standard
 * input, applied as one transaction), never one per source.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** The Linux capability that nftables needs (linux/capability.h). */
const CAP_NET_ADMIN = 12;
/** An nft that hangs (a stuck netlink socket) must not hold the supervisor's batches forever. */
const NFT_TIMEOUT_MS = 10_000;

export interface NftRunner {
  /** Applies a script as one transaction; rejects with nft's error text. */
  apply(script: string): Promise<void>;
  /** Runs `nft <args>` and resolves with its standard output. */
  run(args: readonly string[]): Promise<string>;
}

export function nftRunner(binary: string): NftRunner {
  return {
    apply: async (script) => {
      await execute(binary, ['-f', '-'], script);
    },
    run: (args) => execute(binary, args, undefined),
  };
}

function execute(binary: string, args: readonly string[], input: string | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args, { stdio: ['pipe', 'pipe', 'pipe'], timeout: NFT_TIMEOUT_MS });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve(Buffer.concat(out).toString('utf8'));
      else {
        const detail = Buffer.concat(err).toString('utf8').trim().split('\n').slice(0, 6).join(' | ');
        reject(new Error(`nft ${args.join(' ')} failed (${signal ?? `exit ${code}`}): ${detail}`));
      }
    });
    child.stdin.on('error', () => {});
    child.stdin.end(input ?? '');
  });
}

/** Whether this process holds CAP_NET_ADMIN in its effective set (root has it unless dropped). */
export function hasNetAdmin(statusText: string = readStatus()): boolean {
  const match = /^CapEff:\s*([0-9a-fA-F]+)$/m.exec(statusText);
  if (match === null) return false;
  return ((BigInt(`0x${match[1]}`) >> BigInt(CAP_NET_ADMIN)) & 1n) === 1n;
}

function readStatus(): string {
  try {
    return fs.readFileSync('/proc/self/status', 'utf8');
  } catch {
    return '';
  }
}

/** The `nft` binary: on PATH, or where Debian installs it (/usr/sbin is not on every user's PATH). */
export function findNft(searchPath: string = process.env.PATH ?? ''): string | undefined {
  const directories = [...searchPath.split(':').filter(Boolean), '/usr/sbin', '/sbin'];
  for (const directory of directories) {
    const candidate = path.join(directory, 'nft');
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}
