/**
 * Reads a configuration file (`tps apply -f`): YAML (or JSON, which YAML reads too) whose
 * resources carry the API's own attributes. Every problem is reported with its place in the file
 * (line, column and path), and all of them at once, before anything is sent to the API.
 *
 * The format (docs/operations.md):
 *
 *   caCertificates:            # name -> { id?, certificates: [{ certificate, crlUrl? }] }
 *   certificates:              # name -> { id?, fingerprint? | certificate + privateKey (or *File) | domains }
 *   trafficConfigs:            # [{ type, id?, attributes }]; certificateId and caCertificateIds may name
 *                              # an entry of the sections above
 *
 * A section that is absent is not managed; a section that is present is the whole truth for that
 * kind of resource.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { LineCounter, isMap, isScalar, isSeq, parseDocument, type Document } from 'yaml';
import { Type } from '@sinclair/typebox';
import { validateBody } from '../../api/schemas/validator.ts';
import { ApiError } from '../../api/jsonapi.ts';
import { CaCertificateUploadAttributes, CertificateOrderAttributes, Enum, Uuid, HTTP_PROXY, L4_PROXY, type ProxyType } from '@tps/model';
import type {
  CertificateUpload,
  DesiredCaCertificate,
  DesiredCertificate,
  DesiredState,
  DesiredTrafficConfig,
  FilePath,
  FileProblem,
} from './types.ts';

/** Bounds on what apply reads: the file itself and each PEM file it names. */
export const MAX_CONFIG_FILE_BYTES = 16 * 1024 * 1024;
export const MAX_PEM_FILE_BYTES = 1024 * 1024;

/** A name in the file: what proxies use to refer to a certificate or CA certificate. */
export const ENTRY_KEY = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

const Fingerprint = Type.String({
  pattern: '^(?:[0-9A-Fa-f]{2}:?){31}[0-9A-Fa-f]{2}$',
  description: 'SHA-256 of the leaf certificate, hex (colons optional).',
});
const Pem = Type.String({ minLength: 1, maxLength: 262144 });
const PemFile = Type.String({ minLength: 1, maxLength: 4096, description: 'Path of a PEM file, relative to this file.' });

const caAttributes = CaCertificateUploadAttributes.properties;
const acmeAttributes = CertificateOrderAttributes.properties;

const FileSchema = Type.Object(
  {
    caCertificates: Type.Optional(
      Type.Record(
        Type.String(),
        Type.Object({ id: Type.Optional(Uuid), certificates: Type.Optional(caAttributes.certificates) }, { additionalProperties: false }),
      ),
    ),
    certificates: Type.Optional(
      Type.Record(
        Type.String(),
        Type.Object(
          {
            id: Type.Optional(Uuid),
            fingerprint: Type.Optional(Fingerprint),
            domains: Type.Optional(acmeAttributes.domains),
            certificate: Type.Optional(Pem),
            certificateFile: Type.Optional(PemFile),
            intermediateCertificates: Type.Optional(Type.String({ maxLength: 262144 })),
            intermediateCertificatesFile: Type.Optional(PemFile),
            privateKey: Type.Optional(Pem),
            privateKeyFile: Type.Optional(PemFile),
          },
          { additionalProperties: false },
        ),
      ),
    ),
    trafficConfigs: Type.Optional(
      Type.Array(
        Type.Object(
          {
            type: Enum([HTTP_PROXY, L4_PROXY] as const),
            id: Type.Optional(Uuid),
            attributes: Type.Record(Type.String(), Type.Unknown()),
          },
          { additionalProperties: false },
        ),
        { maxItems: 10000 },
      ),
    ),
  },
  { additionalProperties: false },
);

interface RawFile {
  caCertificates?: Record<string, { id?: string; certificates?: { certificate: string; crlUrl?: string }[] }>;
  certificates?: Record<string, Record<string, unknown>>;
  trafficConfigs?: { type: ProxyType; id?: string; attributes: Record<string, unknown> }[];
}

export interface ConfigFile {
  /** The file's name as given (`-` for stdin). */
  name: string;
  /** The file's state; undefined when it could not be read at all. */
  state: DesiredState | undefined;
  problems: FileProblem[];
  /** Line and column (1-based) of a place in the file: the nearest part of the path that exists. */
  locate(filePath: FilePath): { line: number; column: number } | undefined;
}

/** Reads a file from disk, or standard input for `-`. */
export function loadConfigFile(name: string): ConfigFile {
  let text: string;
  try {
    const size = name === '-' ? 0 : fs.statSync(name).size;
    if (size > MAX_CONFIG_FILE_BYTES)
      return failed(name, 'FILE_TOO_LARGE', `the file has ${size} bytes; at most ${MAX_CONFIG_FILE_BYTES} are read`);
    text = fs.readFileSync(name === '-' ? 0 : name, 'utf8');
  } catch (error) {
    return failed(name, 'FILE_UNREADABLE', `cannot read ${name}: ${(error as Error).message}`);
  }
  if (Buffer.byteLength(text) > MAX_CONFIG_FILE_BYTES)
    return failed(name, 'FILE_TOO_LARGE', `the input has more than ${MAX_CONFIG_FILE_BYTES} bytes`);
  return parseConfigFile(name, text, name === '-' ? process.cwd() : path.dirname(path.resolve(name)));
}

/** Parses and checks a file's text; PEM files it names are read relative to `folder`. */
export function parseConfigFile(name: string, text: string, folder: string): ConfigFile {
  const lineCounter = new LineCounter();
  const document = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: false });
  const locate = (filePath: FilePath) => locateIn(document, lineCounter, filePath);
  const file: ConfigFile = { name, state: undefined, problems: [], locate };
  if (document.errors.length > 0) {
    file.problems = document.errors.map((error) => {
      const position = lineCounter.linePos(error.pos[0]);
      return {
        code: 'FILE_SYNTAX',
        detail: error.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, ''),
        path: [],
        position: { line: position.line, column: position.col },
      };
    });
    return file;
  }
  let raw: unknown;
  try {
    // Aliases are bounded: a few lines of nested aliases could otherwise expand to gigabytes.
    raw = document.toJS({ maxAliasCount: 100 }) ?? {};
  } catch (error) {
    file.problems = [{ code: 'FILE_SYNTAX', detail: (error as Error).message, path: [] }];
    return file;
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    file.problems = [
      { code: 'INVALID_VALUE', detail: 'the file must be a mapping with caCertificates, certificates and/or trafficConfigs', path: [] },
    ];
    return file;
  }
  // `certificates:` with nothing under it means "none", as an empty list or mapping does.
  const content = raw as Record<string, unknown>;
  for (const [section, empty] of [
    ['caCertificates', {}],
    ['certificates', {}],
    ['trafficConfigs', []],
  ] as const) {
    if (section in content && content[section] === null) content[section] = empty;
  }
  try {
    validateBody(FileSchema, content);
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    file.problems = error.errors.map((problem) => {
      const at = pointerSegments(problem.source?.pointer ?? '/');
      return { code: problem.code, detail: detailWithoutPointer(problem.detail, problem.source?.pointer), path: at };
    });
    return file;
  }
  const checked = checkContent(content as RawFile, folder);
  file.state = checked.state;
  file.problems = checked.problems;
  return file;
}

function failed(name: string, code: string, detail: string): ConfigFile {
  return { name, state: undefined, problems: [{ code, detail, path: [] }], locate: () => undefined };
}

/** The checks a schema cannot make: names, the forms of a certificate entry, PEM files and contents. */
function checkContent(raw: RawFile, folder: string): { state: DesiredState; problems: FileProblem[] } {
  const problems: FileProblem[] = [];
  const problem = (code: string, detail: string, at: FilePath) => problems.push({ code, detail, path: at });
  const state: DesiredState = {};

  const checkKey = (section: string, key: string) => {
    if (!ENTRY_KEY.test(key)) {
      problem(
        'INVALID_NAME',
        `"${key}" is not a usable name: letters, digits, ".", "_" and "-", starting with a letter or digit, at most 100`,
        [section, key],
      );
    }
  };

  if (raw.caCertificates) {
    state.caCertificates = [];
    for (const [key, entry] of Object.entries(raw.caCertificates)) {
      checkKey('caCertificates', key);
      const desired: DesiredCaCertificate = { key, ...(entry.id !== undefined && { id: entry.id }) };
      if (entry.certificates) {
        desired.certificates = entry.certificates.map((item) => ({
          certificate: item.certificate,
          ...(item.crlUrl !== undefined && { crlUrl: item.crlUrl }),
        }));
        desired.fingerprints = entry.certificates.map((item, index) => {
          const fingerprint = leafFingerprint(item.certificate);
          if (fingerprint === undefined)
            problem('INVALID_CERTIFICATE', 'is not a PEM certificate', ['caCertificates', key, 'certificates', index, 'certificate']);
          return fingerprint ?? '';
        });
      } else if (entry.id === undefined) {
        problem('INCOMPLETE_ENTRY', 'a CA certificate needs its certificates (or the id of an existing one)', ['caCertificates', key]);
      }
      state.caCertificates.push(desired);
    }
  }

  if (raw.certificates) {
    state.certificates = [];
    for (const [key, entry] of Object.entries(raw.certificates)) {
      checkKey('certificates', key);
      const at: FilePath = ['certificates', key];
      const desired: DesiredCertificate = { key, ...(typeof entry.id === 'string' && { id: entry.id }) };
      const pem: Partial<Record<'certificate' | 'intermediateCertificates' | 'privateKey', { value: string; from: string }>> = {};
      for (const attribute of ['certificate', 'intermediateCertificates', 'privateKey'] as const) {
        const inline = entry[attribute];
        const fileName = entry[`${attribute}File`];
        if (inline !== undefined && fileName !== undefined) {
          problem('CONFLICTING_ATTRIBUTES', `give ${attribute} or ${attribute}File, not both`, [...at, `${attribute}File`]);
          continue;
        }
        if (typeof inline === 'string') pem[attribute] = { value: inline, from: attribute };
        if (typeof fileName === 'string') {
          const read = readPemFile(path.resolve(folder, fileName));
          if (typeof read === 'string') pem[attribute] = { value: read, from: `${attribute}File` };
          else problem(read.code, read.detail, [...at, `${attribute}File`]);
        }
      }
      if (entry.domains !== undefined) {
        const conflicting = [
          'fingerprint',
          'certificate',
          'certificateFile',
          'privateKey',
          'privateKeyFile',
          'intermediateCertificates',
          'intermediateCertificatesFile',
        ].filter((attribute) => entry[attribute] !== undefined);
        if (conflicting.length > 0) {
          problem('CONFLICTING_ATTRIBUTES', 'domains (a service-issued certificate) goes without the attributes of an uploaded one', [
            ...at,
            conflicting[0]!,
          ]);
        }
        desired.domains = (entry.domains as string[]).map((domain) => domain.toLowerCase().replace(/\.$/, ''));
      }
      if (typeof entry.fingerprint === 'string') desired.fingerprint = normalizeFingerprint(entry.fingerprint);
      if (pem.certificate) {
        const fingerprint = leafFingerprint(pem.certificate.value);
        if (fingerprint === undefined) {
          problem('INVALID_CERTIFICATE', 'is not a PEM certificate', [...at, pem.certificate.from]);
        } else if (desired.fingerprint !== undefined && desired.fingerprint !== fingerprint) {
          problem('FINGERPRINT_MISMATCH', `is ${fingerprint}, the certificate's own fingerprint`, [...at, 'fingerprint']);
        } else {
          desired.fingerprint = fingerprint;
        }
        const upload: CertificateUpload = {
          certificate: pem.certificate.value,
          sourceAttribute: {
            certificate: pem.certificate.from,
            intermediateCertificates: pem.intermediateCertificates?.from ?? 'intermediateCertificates',
            privateKey: pem.privateKey?.from ?? 'privateKey',
          },
        };
        if (pem.intermediateCertificates) upload.intermediateCertificates = pem.intermediateCertificates.value;
        if (pem.privateKey) upload.privateKey = pem.privateKey.value;
        desired.upload = upload;
      } else if (pem.privateKey || pem.intermediateCertificates) {
        problem('INCOMPLETE_ENTRY', 'a private key or intermediates go with the certificate (certificate or certificateFile)', at);
      }
      if (desired.id === undefined && desired.fingerprint === undefined && desired.domains === undefined) {
        problem(
          'INCOMPLETE_ENTRY',
          'a certificate needs domains (service-issued), certificate and privateKey (to upload), a fingerprint or the id of an existing one',
          at,
        );
      }
      state.certificates.push(desired);
    }
  }

  if (raw.trafficConfigs) {
    state.trafficConfigs = raw.trafficConfigs.map(
      (entry, index): DesiredTrafficConfig => ({
        index,
        type: entry.type,
        ...(entry.id !== undefined && { id: entry.id }),
        attributes: entry.attributes,
      }),
    );
    const ids = new Map<string, number>();
    for (const config of state.trafficConfigs) {
      if (config.id === undefined) continue;
      const first = ids.get(config.id);
      if (first !== undefined) problem('DUPLICATE_ID', `trafficConfigs[${first}] has this id too`, ['trafficConfigs', config.index, 'id']);
      else ids.set(config.id, config.index);
    }
  }
  for (const section of ['caCertificates', 'certificates'] as const) {
    const seen = new Map<string, string>();
    for (const entry of state[section] ?? []) {
      if (entry.id === undefined) continue;
      const first = seen.get(entry.id);
      if (first !== undefined) problem('DUPLICATE_ID', `${section}.${first} has this id too`, [section, entry.key, 'id']);
      else seen.set(entry.id, entry.key);
    }
  }
  return { state, problems };
}

function readPemFile(file: string): string | { code: string; detail: string } {
  try {
    const size = fs.statSync(file).size;
    if (size > MAX_PEM_FILE_BYTES)
      return { code: 'FILE_TOO_LARGE', detail: `${file} has ${size} bytes; at most ${MAX_PEM_FILE_BYTES} are read` };
    return fs.readFileSync(file, 'utf8');
  } catch (error) {
    return { code: 'FILE_UNREADABLE', detail: `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}` };
  }
}

/** The SHA-256 fingerprint of the first certificate of a PEM text, as the API writes it (AB:CD:...). */
export function leafFingerprint(pem: string): string | undefined {
  const block = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/.exec(pem)?.[0];
  if (!block) return undefined;
  try {
    return new crypto.X509Certificate(block).fingerprint256;
  } catch {
    return undefined;
  }
}

export function normalizeFingerprint(value: string): string {
  const hex = value.replace(/:/g, '').toUpperCase();
  return hex.match(/../g)!.join(':');
}

// ---------------------------------------------------------------------------------------------
// Places in the file.

function locateIn(document: Document.Parsed, lineCounter: LineCounter, filePath: FilePath): { line: number; column: number } | undefined {
  for (let length = filePath.length; length >= 0; length--) {
    const range = rangeOf(document, filePath.slice(0, length));
    if (range) {
      const position = lineCounter.linePos(range[0]!);
      return { line: position.line, column: position.col };
    }
  }
  return undefined;
}

/** A scalar's own place; for a mapping or list under a key, the key's (the value starts on the next line). */
function rangeOf(document: Document.Parsed, filePath: FilePath): readonly number[] | undefined {
  if (filePath.length === 0) return (document.contents as { range?: number[] } | null)?.range;
  const parent = filePath.length === 1 ? document.contents : document.getIn(filePath.slice(0, -1), true);
  const last = filePath.at(-1);
  if (isMap(parent)) {
    const pair = parent.items.find((item) => isScalar(item.key) && String(item.key.value) === String(last));
    if (!pair) return undefined;
    if (isScalar(pair.value) && pair.value.range) return pair.value.range;
    return (pair.key as { range?: number[] }).range;
  }
  if (isSeq(parent) && typeof last === 'number') return (parent.items[last] as { range?: number[] } | undefined)?.range;
  return undefined;
}

/** `trafficConfigs[0].attributes.frontend.port`, `certificates["www.example.com"].privateKey`. */
export function formatPath(filePath: FilePath): string {
  let text = '';
  for (const segment of filePath) {
    if (typeof segment === 'number') text += `[${segment}]`;
    else if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(segment)) text += text === '' ? segment : `.${segment}`;
    else text += `[${JSON.stringify(segment)}]`;
  }
  return text;
}

/** The segments of a JSON pointer; those that are array indexes as numbers. */
export function pointerSegments(pointer: string): FilePath {
  return pointer
    .split('/')
    .slice(1)
    .filter((segment, index, all) => !(segment === '' && index === all.length - 1))
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((segment) => (/^(0|[1-9][0-9]*)$/.test(segment) ? Number(segment) : segment));
}

/** The API's validation details start with the pointer; the file's errors carry their own place. */
export function detailWithoutPointer(detail: string, pointer: string | undefined): string {
  return pointer && detail.startsWith(`${pointer} `) ? detail.slice(pointer.length + 1) : detail;
}
