/**
 * Country of a client address, for geo fencing and for the `source.countryCode` of insight events.
 *
 * Source: the country MMDB of `@ip-location-db/geo-whois-asn-country-mmdb` (IPv4 and IPv6 in one
 * file; licence CC BY 4.0, attribution to the NRO, see the package's NRO_LICENSE), read once into
 * memory (about 8 MB) and shared by every proxy of the process. Before it, an operator overrides
 * file is consulted: one `CIDR,CC` per line (`#` starts a comment), the most specific network wins.
 * Operators use it for their own networks; tests use it to place loopback clients in countries.
 *
 * Unknown: an address in neither source (private, loopback, unallocated) is "ZZ", the code CLDR and
 * others use for "unknown region". It is not a country a customer can list, so BLOCK_LISTED lets it
 * through and ALLOW_LISTED refuses it.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { Reader, type Response } from 'mmdb-lib';
import { CidrTable } from './cidr-table.ts';

export const UNKNOWN_COUNTRY = 'ZZ';

export interface GeoLookup {
  /** ISO 3166-1 alpha-2 code (upper case) of `ip`, or UNKNOWN_COUNTRY. Never throws. */
  country(ip: string): string;
}

export interface GeoLookupOptions {
  /** MMDB file with a `country_code` (or MaxMind-style `country.iso_code`) record. Default: the bundled package's. */
  mmdbPath?: string;
  /** Path of an overrides file (`CIDR,CC` lines). */
  overridesPath?: string;
  /** Overrides given inline, same format as the file (read after the file, so they win ties). */
  overrides?: string;
  /** Skip the MMDB altogether (overrides only); for tests that must not depend on the database. */
  withoutMmdb?: boolean;
}

interface CountryRecord {
  country_code?: string;
  country?: { iso_code?: string };
}

/** The MMDB of the bundled package: IPv4 and IPv6 in one file. */
export function defaultMmdbPath(): string {
  const require = createRequire(import.meta.url);
  return require.resolve('@ip-location-db/geo-whois-asn-country-mmdb/geo-whois-asn-country.mmdb');
}

/** Parses overrides text; throws naming the line of the first malformed entry. */
export function parseOverrides(text: string, table = new CidrTable<string>(), source = 'overrides'): CidrTable<string> {
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = (lines[i] ?? '').replace(/#.*/, '').trim();
    if (line === '') continue;
    const match = /^([^,\s]+)\s*,\s*([A-Za-z]{2})$/.exec(line);
    if (!match) throw new Error(`${source} line ${i + 1}: expected "CIDR,CC", got "${line}"`);
    try {
      table.add(match[1]!, match[2]!.toUpperCase());
    } catch (err) {
      throw new Error(`${source} line ${i + 1}: ${(err as Error).message}`);
    }
  }
  return table;
}

class MmdbGeoLookup implements GeoLookup {
  private readonly reader: Reader<Response> | undefined;
  private readonly overrides: CidrTable<string>;

  constructor(reader: Reader<Response> | undefined, overrides: CidrTable<string>) {
    this.reader = reader;
    this.overrides = overrides;
  }

  country(ip: string): string {
    const address = ip.startsWith('::ffff:') && ip.includes('.') ? ip.slice(7) : ip;
    if (this.overrides.size > 0) {
      const override = this.overrides.lookup(address);
      if (override !== undefined) return override;
    }
    if (this.reader === undefined) return UNKNOWN_COUNTRY;
    try {
      // mmdb-lib types MaxMind's record shapes only; ip-location-db's record is `{ country_code }`.
      const record = this.reader.get(address) as CountryRecord | null;
      const code = record?.country_code ?? record?.country?.iso_code;
      return code === undefined || code.length !== 2 ? UNKNOWN_COUNTRY : code.toUpperCase();
    } catch {
      // A malformed address cannot come from a socket; treat it as unknown rather than fail the request.
      return UNKNOWN_COUNTRY;
    }
  }
}

/** Loads the database and the overrides synchronously (once, at start); throws on a bad file. */
export function loadGeoLookup(options: GeoLookupOptions = {}): GeoLookup {
  const overrides = new CidrTable<string>();
  if (options.overridesPath !== undefined) {
    parseOverrides(fs.readFileSync(options.overridesPath, 'utf8'), overrides, options.overridesPath);
  }
  if (options.overrides !== undefined) parseOverrides(options.overrides, overrides);
  const reader = options.withoutMmdb ? undefined : new Reader<Response>(fs.readFileSync(options.mmdbPath ?? defaultMmdbPath()));
  return new MmdbGeoLookup(reader, overrides);
}

let shared: { key: string; lookup: GeoLookup } | undefined;

/**
 * One lookup per process, so the MMDB is in memory once however many proxies run. Asking again
 * with other options replaces it (an operator changed the overrides file).
 */
export function sharedGeoLookup(options: GeoLookupOptions = {}): GeoLookup {
  const key = JSON.stringify(options);
  if (shared === undefined || shared.key !== key) shared = { key, lookup: loadGeoLookup(options) };
  return shared.lookup;
}
