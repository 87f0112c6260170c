/** The configuration file of `tps apply`: what it accepts, and where its problems are reported. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { formatPath, normalizeFingerprint, parseConfigFile, pointerSegments } from './file.ts';
import { selfSigned } from '../../../test/support/pki.ts';

const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-config-file-'));
const parse = (text: string) => parseConfigFile('proxies.yaml', text, folder);
const placeOf = (text: string, code: string) => {
  const file = parse(text);
  const problem = file.problems.find((item) => item.code === code);
  assert.ok(problem, `a ${code} problem in ${JSON.stringify(file.problems)}`);
  return { problem, position: problem.position ?? file.locate(problem.path), path: formatPath(problem.path) };
};

const { certificatePem, privateKeyPem: keyPem } = await selfSigned({ commonName: 'www.example.com', dnsNames: ['www.example.com'] });
const fingerprint = new crypto.X509Certificate(certificatePem).fingerprint256;

describe('config file: form', () => {
  it('reads the three sections; an absent section is not managed, an empty one is', () => {
    const file = parse('trafficConfigs:\ncertificates: {}\n');
    assert.deepEqual(file.problems, []);
    assert.deepEqual(file.state, { certificates: [], trafficConfigs: [] });
    assert.equal('caCertificates' in file.state!, false);
  });

  it('reports YAML syntax errors at their line and column', () => {
    const file = parse('trafficConfigs:\n  - type: httpProxy\n    attributes: [\n');
    assert.equal(file.problems[0]?.code, 'FILE_SYNTAX');
    assert.equal(file.problems[0]?.position?.line, 4);
  });

  it('refuses duplicate keys (a second definition would silently win)', () => {
    const { problem } = placeOf('certificates:\n  www: { domains: [a.example] }\n  www: { domains: [b.example] }\n', 'FILE_SYNTAX');
    assert.match(problem.detail, /unique/);
  });

  it('points at unknown sections and attributes, and at wrong types, by line and path', () => {
    const text = 'trafficConfig:\n  - type: httpProxy\n';
    const unknown = placeOf(text, 'INVALID_VALUE');
    assert.equal(unknown.path, 'trafficConfig');
    assert.deepEqual(unknown.position, { line: 1, column: 1 });

    const wrongType = placeOf('trafficConfigs:\n  - type: tcpProxy\n    attributes: {}\n', 'INVALID_VALUE');
    assert.equal(wrongType.path, 'trafficConfigs[0].type');
    assert.deepEqual(wrongType.position, { line: 2, column: 11 });
  });

  it('refuses names that proxies could not refer to', () => {
    const { path: at } = placeOf('certificates:\n  "my cert": { domains: [a.example] }\n', 'INVALID_NAME');
    assert.equal(at, 'certificates["my cert"]');
  });

  it('refuses two entries with one id', () => {
    const id = crypto.randomUUID();
    const { path: at } = placeOf(`caCertificates:\n  a: { id: ${id} }\n  b: { id: ${id} }\n`, 'DUPLICATE_ID');
    assert.equal(at, 'caCertificates.b.id');
  });
});

describe('config file: certificates', () => {
  it('takes a service-issued certificate by its domains, lower case and without the final dot', () => {
    const file = parse('certificates:\n  api: { domains: [API.Example.com.] }\n');
    assert.deepEqual(file.problems, []);
    assert.deepEqual(file.state?.certificates, [{ key: 'api', domains: ['api.example.com'] }]);
  });

  it('reads an upload from PEM files beside the config file, and its fingerprint from the leaf', () => {
    fs.writeFileSync(path.join(folder, 'www.pem'), certificatePem);
    fs.writeFileSync(path.join(folder, 'www.key'), keyPem);
    const file = parse('certificates:\n  www:\n    certificateFile: www.pem\n    privateKeyFile: www.key\n');
    assert.deepEqual(file.problems, []);
    const [entry] = file.state!.certificates!;
    assert.equal(entry?.fingerprint, fingerprint);
    assert.equal(entry?.upload?.certificate, certificatePem);
    assert.equal(entry?.upload?.sourceAttribute.privateKey, 'privateKeyFile');
  });

  it('says which PEM file cannot be read', () => {
    const { path: at, problem } = placeOf('certificates:\n  www:\n    certificateFile: missing.pem\n', 'FILE_UNREADABLE');
    assert.equal(at, 'certificates.www.certificateFile');
    assert.match(problem.detail, /ENOENT/);
  });

  it("refuses a fingerprint that is not the certificate's, a key without a certificate, and domains beside an upload", () => {
    const wrong = `certificates:\n  www:\n    fingerprint: "${'00:'.repeat(31)}00"\n    certificate: |\n${certificatePem.replace(/^/gm, '      ')}`;
    assert.equal(placeOf(wrong, 'FINGERPRINT_MISMATCH').path, 'certificates.www.fingerprint');
    assert.equal(placeOf('certificates:\n  www: { privateKey: x }\n', 'INCOMPLETE_ENTRY').path, 'certificates.www');
    assert.equal(
      placeOf(`certificates:\n  www: { domains: [a.example], fingerprint: "${'AB'.repeat(32)}" }\n`, 'CONFLICTING_ATTRIBUTES').path,
      'certificates.www.fingerprint',
    );
  });

  it('writes fingerprints one way: upper case with colons', () => {
    assert.equal(normalizeFingerprint('ab'.repeat(32)), Array(32).fill('AB').join(':'));
    assert.equal(normalizeFingerprint(fingerprint.toLowerCase()), fingerprint);
  });
});

describe('config file: paths', () => {
  it('turns JSON pointers into paths and paths into text', () => {
    assert.deepEqual(pointerSegments('/data/attributes/backend/hosts/0/address'), ['data', 'attributes', 'backend', 'hosts', 0, 'address']);
    assert.deepEqual(pointerSegments('/a~1b/c~0d'), ['a/b', 'c~d']);
    assert.equal(formatPath(['trafficConfigs', 2, 'attributes', 'frontend', 'port']), 'trafficConfigs[2].attributes.frontend.port');
    assert.equal(formatPath(['certificates', 'www.example.com', 'id']), 'certificates["www.example.com"].id');
  });

  it('locates a missing attribute at the nearest part that exists', () => {
    const file = parse('trafficConfigs:\n  - type: l4Proxy\n    attributes:\n      frontend: { ipv4: 127.0.0.2 }\n');
    assert.deepEqual(file.locate(['trafficConfigs', 0, 'attributes', 'frontend', 'port']), { line: 4, column: 7 });
  });
});

describe('config file: bounds', () => {
  it('refuses aliases that would expand beyond a bound (a few lines that would make gigabytes)', () => {
    let text = 'a: &a [x, x, x, x, x, x, x, x, x, x]\n';
    for (let level = 0, previous = 'a'; level < 10; level++, previous = `b${level - 1}`) {
      text += `b${level}: &b${level} [${Array(10).fill(`*${previous}`).join(', ')}]\n`;
    }
    const file = parse(text);
    assert.equal(file.problems[0]?.code, 'FILE_SYNTAX');
    assert.match(file.problems[0]!.detail, /alias/i);
  });
});
