import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { LineWriter } from './line-writer.ts';

const tempFile = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tps-lines-')), 'sub', 'access.log');

describe('line writer', () => {
  it('appends whole lines to a file, creating its folder, and counts them', async () => {
    const file = tempFile();
    const writer = new LineWriter(file);
    for (let i = 0; i < 1000; i++) assert.equal(writer.write(JSON.stringify({ i })), true);
    await writer.close();
    const lines = fs.readFileSync(file, 'utf8').trimEnd().split('\n');
    assert.equal(lines.length, 1000);
    assert.deepEqual(JSON.parse(lines[999]!), { i: 999 });
    assert.equal(writer.written, 1000);
    assert.equal(writer.dropped, 0);
  });

  it('keeps what is there: two writers on one file interleave whole lines only', async () => {
    const file = tempFile();
    const a = new LineWriter(file);
    const b = new LineWriter(file);
    for (let i = 0; i < 2000; i++) {
      a.write(`a${i}-${'x'.repeat(200)}`);
      b.write(`b${i}-${'y'.repeat(200)}`);
    }
    await Promise.all([a.close(), b.close()]);
    const lines = fs.readFileSync(file, 'utf8').trimEnd().split('\n');
    assert.equal(lines.length, 4000);
    for (const line of lines) assert.match(line, /^(a\d+-x{200}|b\d+-y{200})$/);
  });

  it('writes to standard output (a pipe here) in whole lines', () => {
    const script = `import { LineWriter } from ${JSON.stringify(new URL('./line-writer.ts', import.meta.url).href)};
      const writer = new LineWriter('stdout');
      for (let i = 0; i < 3000; i++) writer.write(JSON.stringify({ i, pad: 'p'.repeat(100) }));
      await writer.close();`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    const lines = out.trimEnd().split('\n');
    assert.equal(lines.length, 3000);
    assert.deepEqual(
      lines.map((line) => (JSON.parse(line) as { i: number }).i),
      Array.from({ length: 3000 }, (_, i) => i),
    );
  });

  it('drops and counts lines past its buffer instead of growing', async () => {
    const file = tempFile();
    const writer = new LineWriter(file, { maxBufferedBytes: 1000, flushIntervalMs: 60_000 });
    let accepted = 0;
    // Synchronously: no write can complete in between, so the buffer fills.
    for (let i = 0; i < 100; i++) if (writer.write('z'.repeat(99))) accepted++;
    assert.equal(accepted, 10);
    assert.equal(writer.dropped, 90);
    await writer.close();
    assert.equal(fs.readFileSync(file, 'utf8').split('\n').length - 1, 10);
  });
});
