/**
 * Reads libinjection's SQLi keyword table out of a shared library that embeds libinjection
 * (ModSecurity v3's libmodsecurity.so.3, ELF64 x86-64): the one array of 16-byte
 * {const char *word, char type} records (pointers resolved through the R_X86_64_RELATIVE
 * relocations) of sorted words. Used once, by derive-data.ts, to make data/sqli-data.json; never
 * at run time.
 */
import { readFileSync } from 'node:fs';
import { checkTable } from '../src/data.ts';

interface Section {
  name: string;
  type: number;
  addr: bigint;
  offset: number;
  size: number;
}

/** The keyword table of the ELF64 x86-64 shared library at `path`. */
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
