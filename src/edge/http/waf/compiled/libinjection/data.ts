/**
 * libinjection's SQLi word table (SQL keywords, functions, operators with their token types, and
 * the fingerprints flagged as SQLi, type 'F') is data, not algorithm: it is not part of this
 * repository. It is derived at setup time from the reference engine installed on this machine
 * (ModSecurity v3's shared library, which embeds libinjection) and written to a git-ignored file
 * next to this one:
 *
 *   node src/edge/http/waf/compiled/libinjection/derive-data.ts
 *
 * When the file is missing, the first use derives it the same way (and tries to save it). Without
 * the installed library and without the file, @detectSQLi cannot run: loading throws and says so.
 *
 * Derivation: the library's ELF image is read; the table is the one array of 16-byte
 * {const char *word, char type} records (pointers resolved through the R_X86_64_RELATIVE
 * relocations) of sorted words. The result is checked for shape (thousands of entries, sorted,
 * types from libinjection's token alphabet) before it is used.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const GENERATED_FILE = fileURLToPath(new URL('./sqli-data.generated.json', import.meta.url));
export const DEFAULT_LIBRARIES = [
  '/usr/lib/x86_64-linux-gnu/libmodsecurity.so.3',
  '/usr/lib/libmodsecurity.so.3',
  '/usr/local/modsecurity/lib/libmodsecurity.so.3',
];

export interface SqliData {
  /** Upper-case word -> token type ('k', 'f', 'o', '&', 'U', 'E', 'B', 't', 'T', 'A', 'n', 'v', '1', 'c', 'F' ...). */
  readonly words: ReadonlyMap<string, string>;
  /** Where it came from (library path and its size), for reports. */
  readonly source: string;
}

const TYPES = new Set(['k', 'U', 'B', 'E', 't', 'f', 'n', '1', 'v', 's', 'o', '&', 'c', 'A', '(', ')', '{', '}', '.', ',', ':', ';', 'T', '?', 'X', 'F', '\\']);

interface Section {
  name: string;
  type: number;
  addr: bigint;
  offset: number;
  size: number;
}

/** Reads the keyword table out of an ELF64 x86-64 shared library that embeds libinjection. */
export function deriveFromLibrary(path: string): [string, string][] {
  const f = readFileSync(path);
  if (f.readUInt32BE(0) !== 0x7f454c46 || f[4] !== 2 || f[5] !== 1) throw new Error(`${path} is not a little-endian ELF64 file`);
  const shoff = Number(f.readBigUInt64LE(0x28));
  const shentsize = f.readUInt16LE(0x3a);
  const shnum = f.readUInt16LE(0x3c);
  const shstrndx = f.readUInt16LE(0x3e);
  const raw: { nameOff: number; type: number; addr: bigint; offset: number; size: number }[] = [];
  for (let i = 0; i < shnum; i++) {
    const o = shoff + i * shentsize;
    raw.push({
      nameOff: f.readUInt32LE(o),
      type: f.readUInt32LE(o + 4),
      addr: f.readBigUInt64LE(o + 16),
      offset: Number(f.readBigUInt64LE(o + 24)),
      size: Number(f.readBigUInt64LE(o + 32)),
    });
  }
  const strtab = raw[shstrndx]!;
  const sections: Section[] = raw.map((s) => {
    const start = strtab.offset + s.nameOff;
    return { name: f.toString('latin1', start, f.indexOf(0, start)), type: s.type, addr: s.addr, offset: s.offset, size: s.size };
  });
  const byName = new Map(sections.map((s) => [s.name, s]));
  const rela = byName.get('.rela.dyn');
  const dataRelRo = byName.get('.data.rel.ro');
  if (!rela || !dataRelRo) throw new Error(`${path}: no .rela.dyn or .data.rel.ro section`);
  // R_X86_64_RELATIVE (8): *(offset) = base + addend
  const relative = new Map<bigint, bigint>();
  for (let o = rela.offset; o + 24 <= rela.offset + rela.size; o += 24) {
    const info = f.readBigUInt64LE(o + 8);
    if ((info & 0xffffffffn) === 8n) relative.set(f.readBigUInt64LE(o), f.readBigInt64LE(o + 16));
  }
  const fileOffset = (vaddr: bigint): number | undefined => {
    for (const s of sections) {
      if (s.type === 8 /* NOBITS */ || s.addr === 0n) continue;
      if (vaddr >= s.addr && vaddr < s.addr + BigInt(s.size)) return s.offset + Number(vaddr - s.addr);
    }
    return undefined;
  };
  let best: [string, string][] = [];
  let cur: [string, string][] = [];
  let a = dataRelRo.addr;
  const end = dataRelRo.addr + BigInt(dataRelRo.size);
  while (a + 16n <= end) {
    let ok = false;
    const target = relative.get(a);
    const off = fileOffset(a);
    if (target !== undefined && off !== undefined) {
      const t = f[off + 8]!;
      let pad = true;
      for (let k = 9; k < 16; k++) if (f[off + k] !== 0) pad = false;
      const so = fileOffset(target);
      if (pad && t > 32 && t < 127 && so !== undefined) {
        const nul = f.indexOf(0, so);
        if (nul > so && nul - so < 64) {
          cur.push([f.toString('latin1', so, nul), String.fromCharCode(t)]);
          ok = true;
        }
      }
    }
    if (!ok) {
      if (cur.length > best.length) best = cur;
      cur = [];
    }
    a += ok ? 16n : 8n;
  }
  if (cur.length > best.length) best = cur;
  checkTable(best, path);
  return best;
}

function checkTable(table: [string, string][], where: string): void {
  if (table.length < 5000) throw new Error(`${where}: no libinjection keyword table found (largest candidate has ${table.length} entries)`);
  let fingerprints = 0;
  for (let i = 0; i < table.length; i++) {
    const [word, type] = table[i]!;
    if (!TYPES.has(type)) throw new Error(`${where}: unexpected token type ${JSON.stringify(type)} for ${JSON.stringify(word)}`);
    if (word !== word.toUpperCase()) throw new Error(`${where}: keyword ${JSON.stringify(word)} is not upper case`);
    if (i > 0 && table[i - 1]![0] >= word) throw new Error(`${where}: keyword table is not sorted at ${JSON.stringify(word)}`);
    if (type === 'F') {
      fingerprints++;
      if (!/^0.{1,5}$/.test(word)) throw new Error(`${where}: bad fingerprint entry ${JSON.stringify(word)}`);
    }
  }
  if (fingerprints < 1000) throw new Error(`${where}: only ${fingerprints} fingerprints in the keyword table`);
}

interface GeneratedFile {
  readonly source: string;
  readonly words: [string, string][];
}

/** Derives the table and writes the generated file. Returns what was written. */
export function writeGenerated(libraryPath?: string, file: string = GENERATED_FILE): GeneratedFile {
  const lib = libraryPath ?? DEFAULT_LIBRARIES.find((p) => existsSync(p));
  if (!lib) throw new Error(`no installed libmodsecurity found (looked at ${DEFAULT_LIBRARIES.join(', ')})`);
  const words = deriveFromLibrary(lib);
  const data: GeneratedFile = { source: `${lib} (${readFileSync(lib).length} bytes)`, words };
  writeFileSync(file, JSON.stringify(data) + '\n');
  return data;
}

let cached: SqliData | undefined;

export function loadSqliData(): SqliData {
  if (cached) return cached;
  let data: GeneratedFile | undefined;
  if (existsSync(GENERATED_FILE)) {
    data = JSON.parse(readFileSync(GENERATED_FILE, 'utf8')) as GeneratedFile;
    checkTable(data.words, GENERATED_FILE);
  } else {
    const lib = DEFAULT_LIBRARIES.find((p) => existsSync(p));
    if (!lib) {
      throw new Error(
        `libinjection data missing: ${GENERATED_FILE} does not exist and no installed libmodsecurity was found to derive it from ` +
          '(run node src/edge/http/waf/compiled/libinjection/derive-data.ts on a machine with libmodsecurity3, or place the file)',
      );
    }
    try {
      data = writeGenerated(lib);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EACCES' && (error as NodeJS.ErrnoException).code !== 'EROFS') throw error;
      data = { source: lib, words: deriveFromLibrary(lib) };
    }
  }
  cached = { words: new Map(data.words), source: data.source };
  return cached;
}
