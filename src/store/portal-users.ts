/**
 * People who sign in to the portal, their sessions and the throttling of failed sign-ins.
 *
 * Passwords are hashed with scrypt (node:crypto, memory-hard: N=2^17, r=8, p=1 uses 128 MiB and
 * is OWASP's recommended minimum), salted per user, and the parameters are kept in the hash so
 * they can be raised later. Session tokens are 256 random bits; only their SHA-256 is stored.
 */
import crypto from 'node:crypto';
import { promisify } from 'node:util';
import type { Db, Queryable } from './db.ts';
import { UniqueViolation } from './db.ts';
import { ConflictError } from './errors.ts';

const scrypt = promisify(crypto.scrypt) as (
  password: string,
  salt: Buffer,
  keylen: number,
  options: crypto.ScryptOptions,
) => Promise<Buffer>;

export interface PortalUser {
  id: string;
  tenantId: string;
  email: string;
  createdAt: string;
  disabledAt: string | null;
}

export interface PortalSession {
  userId: string;
  tenantId: string;
  email: string;
  csrfToken: string;
  expiresAt: number;
}

interface UserRow {
  id: string;
  tenant_id: string;
  email: string;
  password_hash: string;
  created_at: string;
  disabled_at: string | null;
}

const fromRow = (row: UserRow): PortalUser => ({
  id: row.id,
  tenantId: row.tenant_id,
  email: row.email,
  createdAt: row.created_at,
  disabledAt: row.disabled_at,
});

/** Sessions end 12 hours after sign-in, or after 2 hours without a request. */
export const SESSION_LIFETIME_MS = 12 * 3600_000;
export const SESSION_IDLE_MS = 2 * 3600_000;
/** Failed sign-ins counted over this window... */
export const LOGIN_WINDOW_MS = 15 * 60_000;
/** ...at most this many per email and client IP... */
export const LOGIN_MAX_FAILURES_PER_EMAIL_IP = 5;
/** ...and this many per client IP whatever the email (password spraying). */
export const LOGIN_MAX_FAILURES_PER_IP = 30;
export const MIN_PASSWORD_LENGTH = 10;

const SCRYPT = { N: 2 ** 17, r: 8, p: 1, keylen: 32 };

export async function hashPassword(password: string): Promise<string> {
  const salt = crypto.randomBytes(16);
  const hash = await scrypt(password.normalize('NFC'), salt, SCRYPT.keylen, {
    N: SCRYPT.N,
    r: SCRYPT.r,
    p: SCRYPT.p,
    maxmem: 256 * 1024 * 1024,
  });
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64'), hash.toString('base64')].join('$');
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, hash] = stored.split('$');
  if (kind !== 'scrypt' || !n || !r || !p || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const actual = await scrypt(password.normalize('NFC'), Buffer.from(salt, 'base64'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: 256 * 1024 * 1024,
  });
  return crypto.timingSafeEqual(expected, actual);
}

/** A hash of a password nobody has, checked when the email is unknown so that timing says nothing. */
let decoyHash: Promise<string> | undefined;

const sha256 = (value: string) => crypto.createHash('sha256').update(value).digest('hex');
export const normalizeEmail = (email: string) => email.trim().toLowerCase();

export class PortalUserRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  /** Creates a user of a tenant; an email belongs to one user (and so to one tenant) only. */
  async create(tenantId: string, email: string, password: string): Promise<PortalUser> {
    const user: PortalUser = {
      id: crypto.randomUUID(),
      tenantId,
      email: normalizeEmail(email),
      createdAt: new Date().toISOString(),
      disabledAt: null,
    };
    try {
      await this.db.run('INSERT INTO portal_users (id, tenant_id, email, password_hash, created_at) VALUES (?, ?, ?, ?, ?)', [
        user.id,
        tenantId,
        user.email,
        await hashPassword(password),
        user.createdAt,
      ]);
    } catch (error) {
      if (error instanceof UniqueViolation) throw new ConflictError('EMAIL_TAKEN', `a portal user ${user.email} exists already`);
      throw error;
    }
    return user;
  }

  async list(tenantId: string): Promise<PortalUser[]> {
    return (await this.db.all<UserRow>('SELECT * FROM portal_users WHERE tenant_id = ? ORDER BY created_at, email', [tenantId])).map(
      fromRow,
    );
  }

  async getByEmail(email: string): Promise<PortalUser | undefined> {
    const row = await this.db.one<UserRow>('SELECT * FROM portal_users WHERE email = ?', [normalizeEmail(email)]);
    return row && fromRow(row);
  }

  /** The user behind an email and password, or undefined; takes as long whether the email exists or not. */
  async authenticate(email: string, password: string): Promise<PortalUser | undefined> {
    const row = await this.db.one<UserRow>('SELECT * FROM portal_users WHERE email = ?', [normalizeEmail(email)]);
    if (!row) {
      decoyHash ??= hashPassword(crypto.randomBytes(16).toString('hex'));
      await verifyPassword(password, await decoyHash);
      return undefined;
    }
    const ok = await verifyPassword(password, row.password_hash);
    return ok && row.disabled_at === null ? fromRow(row) : undefined;
  }

  // ---- sign-in throttling -------------------------------------------------------------------
  //
  // An attempt takes its place among the failures before the password is hashed, and keeps it when
  // the password is wrong: the throttle counts attempts in flight. Checked first and recorded after
  // the slow hash, a burst of parallel wrong passwords for one email would all pass the check
  // before any of them was recorded, and all be hashed.

  /** Milliseconds until another sign-in may be tried from this IP for this email; 0 when allowed now. */
  async throttled(email: string, ip: string, now = Date.now()): Promise<number> {
    return throttleWait(this.db, email, ip, now);
  }

  /**
   * Takes a sign-in attempt's place in the throttle, or says how long to wait (`wait` > 0) when
   * there is none. One at a time across API nodes (a lock on PostgreSQL, the write queue on SQLite),
   * so a burst cannot count the same free places twice. The attempt then ends with
   * `signInSucceeded`, `signInAbandoned` (it was never checked), or nothing (a failure: the place
   * stays taken for the window).
   */
  async reserveSignIn(email: string, ip: string, now = Date.now()): Promise<{ wait: number; attempt?: SignInAttempt }> {
    return this.db.transaction(async (tx) => {
      if (tx.dialect === 'postgres') await tx.run('SELECT pg_advisory_xact_lock(7349003)');
      const wait = await throttleWait(tx, email, ip, now);
      if (wait > 0) return { wait };
      await insertFailure(tx, email, ip, now);
      return { wait: 0, attempt: { email, ip, at: now } };
    });
  }

  /** The attempt's password was right: its place is given back, and the email's failures from this IP are forgotten. */
  async signInSucceeded(attempt: SignInAttempt): Promise<void> {
    await this.db.transaction(async (tx) => {
      await tx.run('DELETE FROM portal_login_failures WHERE throttle_key = ?', [throttleKey(attempt.email, attempt.ip)]);
      await deleteOne(tx, throttleKey(null, attempt.ip), attempt.at);
    });
  }

  /** The attempt was never checked (the hashing queue was full): its places are given back. */
  async signInAbandoned(attempt: SignInAttempt): Promise<void> {
    await this.db.transaction(async (tx) => {
      await deleteOne(tx, throttleKey(attempt.email, attempt.ip), attempt.at);
      await deleteOne(tx, throttleKey(null, attempt.ip), attempt.at);
    });
  }

  async recordFailure(email: string, ip: string, now = Date.now()): Promise<void> {
    await insertFailure(this.db, email, ip, now);
  }

  async clearFailures(email: string, ip: string): Promise<void> {
    await this.db.run('DELETE FROM portal_login_failures WHERE throttle_key = ?', [throttleKey(email, ip)]);
  }

  // ---- sessions -----------------------------------------------------------------------------

  /** Opens a session; the returned token exists nowhere else (the cookie value). */
  async openSession(user: PortalUser, now = Date.now()): Promise<{ token: string; session: PortalSession }> {
    const token = crypto.randomBytes(32).toString('base64url');
    const session: PortalSession = {
      userId: user.id,
      tenantId: user.tenantId,
      email: user.email,
      csrfToken: crypto.randomBytes(32).toString('base64url'),
      expiresAt: now + SESSION_LIFETIME_MS,
    };
    await this.db.run('DELETE FROM portal_sessions WHERE expires_at < ? OR last_seen_at < ?', [now, now - SESSION_IDLE_MS]);
    await this.db.run(
      `INSERT INTO portal_sessions (token_hash, user_id, tenant_id, csrf_token, created_at, last_seen_at, expires_at)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
      [sha256(token), user.id, user.tenantId, session.csrfToken, now, now, session.expiresAt],
    );
    return { token, session };
  }

  /** The live session of a token (its user still enabled), refreshing its idle timer. */
  async session(token: string, now = Date.now()): Promise<PortalSession | undefined> {
    const row = await this.db.one<{
      user_id: string;
      tenant_id: string;
      csrf_token: string;
      last_seen_at: number;
      expires_at: number;
      email: string;
      disabled_at: string | null;
    }>(
      `SELECT s.user_id, s.tenant_id, s.csrf_token, s.last_seen_at, s.expires_at, u.email, u.disabled_at
       FROM portal_sessions s JOIN portal_users u ON u.id = s.user_id WHERE s.token_hash = ?`,
      [sha256(token)],
    );
    if (!row || row.disabled_at !== null) return undefined;
    if (Number(row.expires_at) <= now || Number(row.last_seen_at) + SESSION_IDLE_MS <= now) return undefined;
    // One write a minute at most per session, not one per request.
    if (now - Number(row.last_seen_at) > 60_000) {
      await this.db.run('UPDATE portal_sessions SET last_seen_at = ? WHERE token_hash = ?', [now, sha256(token)]);
    }
    return { userId: row.user_id, tenantId: row.tenant_id, email: row.email, csrfToken: row.csrf_token, expiresAt: Number(row.expires_at) };
  }

  async closeSession(token: string): Promise<void> {
    await this.db.run('DELETE FROM portal_sessions WHERE token_hash = ?', [sha256(token)]);
  }
}

const throttleKey = (email: string | null, ip: string) => sha256(`${email === null ? '*' : normalizeEmail(email)}\n${ip}`);

/** A sign-in attempt holding its places in the throttle (see `reserveSignIn`). */
export interface SignInAttempt {
  email: string;
  ip: string;
  at: number;
}

async function throttleWait(db: Queryable, email: string, ip: string, now: number): Promise<number> {
  const since = now - LOGIN_WINDOW_MS;
  await db.run('DELETE FROM portal_login_failures WHERE failed_at < ?', [since]);
  let wait = 0;
  for (const [key, max] of [
    [throttleKey(email, ip), LOGIN_MAX_FAILURES_PER_EMAIL_IP],
    [throttleKey(null, ip), LOGIN_MAX_FAILURES_PER_IP],
  ] as const) {
    const rows = await db.all<{ failed_at: number }>(
      'SELECT failed_at FROM portal_login_failures WHERE throttle_key = ? AND failed_at >= ? ORDER BY failed_at DESC LIMIT ?',
      [key, since, max],
    );
    // Blocked until the oldest of the last `max` failures leaves the window (at least a second).
    if (rows.length >= max) wait = Math.max(wait, Number(rows.at(-1)!.failed_at) + LOGIN_WINDOW_MS - now, 1000);
  }
  return Math.max(0, wait);
}

async function insertFailure(db: Queryable, email: string, ip: string, now: number): Promise<void> {
  await db.run('INSERT INTO portal_login_failures (throttle_key, failed_at) VALUES (?, ?), (?, ?)', [
    throttleKey(email, ip),
    now,
    throttleKey(null, ip),
    now,
  ]);
}

/** Deletes one row of `key` at `at` (another attempt of the same millisecond keeps its own). */
async function deleteOne(db: Queryable, key: string, at: number): Promise<void> {
  const rowId = db.dialect === 'postgres' ? 'ctid' : 'rowid';
  await db.run(
    `DELETE FROM portal_login_failures WHERE ${rowId} IN (SELECT ${rowId} FROM portal_login_failures WHERE throttle_key = ? AND failed_at = ? LIMIT 1)`,
    [key, at],
  );
}
