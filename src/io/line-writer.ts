/**
 * Lines to standard output or to a file, written off the serving loop: a line goes straight into a
 * chunk of memory (formatted there in place by the JSON appenders, or copied from a string), and full
 * chunks go to the file descriptor in large writes on libuv's thread pool, one write at a time. The
 * memory is bounded: while the disk (or the pipe behind standard output) cannot keep up and
 * `maxBufferedBytes` wait, new lines are dropped and counted. A serving loop never waits for a disk.
 *
 * The JSON appenders write an access-log line without making a string of it (nor of its numbers), as
 * nginx formats its log into its buffer: at tens of thousands of lines a second per core, a string
 * per line and its garbage would cost the serving loop more than the fields themselves. They are
 * hand-written on purpose (docs/benchmarks.md, Access log); line-writer.test.ts checks them against
 * `JSON.stringify` on random input.
 *
 * Several writers (one per edge worker) may share one destination: a file is opened with O_APPEND,
 * whose writes the kernel never interleaves; a pipe or socket (standard output under systemd or a
 * container runtime) gets writes of at most PIPE_BUF bytes of whole lines, which are atomic too.
 * A line longer than that is written alone.
 */
import fs from 'node:fs';
import path from 'node:path';

/** Writes of at most this many bytes to a pipe are atomic (POSIX PIPE_BUF on Linux). */
const PIPE_BUF = 4096;
/** A file gets writes of up to this many bytes. */
const FILE_WRITE_BYTES = 256 * 1024;
/** Chunks of the usual size kept for reuse once written (fresh memory costs page faults). */
const SPARE_CHUNKS = 4;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const NEWLINE = 0x0a;
const ZERO = 0x30;

export interface LineWriterOptions {
  /** Bytes waiting for the disk beyond which lines are dropped. Default 4 MiB. */
  maxBufferedBytes?: number;
  /** How long a line may wait for more to share its write. Default 100 ms. */
  flushIntervalMs?: number;
  /** A write failed (the lines of that write are counted as dropped). */
  onError?: (error: Error) => void;
}

/** Whole lines waiting for their write. */
interface SealedChunk {
  bytes: Buffer;
  lines: number;
}

export class LineWriter {
  /** `stdout` or the file's absolute path. */
  readonly destination: string;
  /** Lines handed to the kernel. */
  written = 0;
  /** Lines dropped: the buffer was full, or their write failed. */
  dropped = 0;
  readonly #fd: number;
  readonly #ownsFd: boolean;
  readonly #chunkBytes: number;
  readonly #maxBuffered: number;
  readonly #onError: ((error: Error) => void) | undefined;
  /** The chunk lines are appended to: whole lines before `#lineStart`, the line being formatted after it. */
  #chunk: Buffer;
  #offset = 0;
  #lineStart = 0;
  #chunkLines = 0;
  readonly #sealed: SealedChunk[] = [];
  #sealedBytes = 0;
  #sealedLines = 0;
  readonly #spares: Buffer[] = [];
  #writing = false;
  #closed = false;
  readonly #timer: NodeJS.Timeout;
  #drained: (() => void)[] = [];

  /** `destination`: `stdout`, or a file path (opened for appending here, its folder made; throws when it cannot be). */
  constructor(destination: string, options: LineWriterOptions = {}) {
    this.#maxBuffered = options.maxBufferedBytes ?? 4 * 1024 * 1024;
    this.#onError = options.onError;
    if (destination === 'stdout') {
      this.destination = 'stdout';
      this.#fd = 1;
      this.#ownsFd = false;
    } else {
      this.destination = path.resolve(destination);
      fs.mkdirSync(path.dirname(this.destination), { recursive: true });
      this.#fd = fs.openSync(this.destination, 'a', 0o640);
      this.#ownsFd = true;
    }
    const stat = fs.fstatSync(this.#fd);
    this.#chunkBytes = stat.isFIFO() || stat.isSocket() || stat.isCharacterDevice() ? PIPE_BUF : FILE_WRITE_BYTES;
    this.#chunk = Buffer.allocUnsafe(this.#chunkBytes);
    this.#timer = setInterval(() => this.#sealAndWrite(), options.flushIntervalMs ?? 100);
    this.#timer.unref();
  }

  /** Bytes waiting to be written. */
  get buffered(): number {
    return this.#sealedBytes + this.#lineStart;
  }

  /** Lines waiting to be written. */
  get pendingLines(): number {
    return this.#sealedLines + this.#chunkLines;
  }

  /** Queues one line (without its newline). False: dropped, the buffer is full. */
  write(line: string): boolean {
    // UTF-16 length: a close estimate of the bytes (the lines are mostly ASCII JSON).
    if (this.#closed || this.buffered + line.length + 1 > this.#maxBuffered) {
      this.dropped++;
      return false;
    }
    this.#offset = this.#lineStart;
    this.#ensure(line.length * 3 + 1);
    this.#offset += this.#chunk.write(line, this.#offset);
    this.endLine();
    return true;
  }

  /**
   * Starts a line to be formatted in place with the append methods and ended with `endLine`, all in
   * one synchronous run. False: dropped (the buffer is full); append nothing then.
   */
  startLine(): boolean {
    if (this.#closed || this.buffered >= this.#maxBuffered) {
      this.dropped++;
      return false;
    }
    // What a line left unfinished (its formatting threw) is not written.
    this.#offset = this.#lineStart;
    return true;
  }

  /** Text known to need no JSON escaping (printable ASCII without `"` or `\`): keys, punctuation, fixed words. */
  appendAscii(text: string): void {
    const length = text.length;
    this.#ensure(length);
    const chunk = this.#chunk;
    const offset = this.#offset;
    for (let i = 0; i < length; i++) chunk[offset + i] = text.charCodeAt(i);
    this.#offset = offset + length;
  }

  /** A JSON string, as `JSON.stringify(value)` writes it. */
  appendJsonString(value: string): void {
    const length = value.length;
    this.#ensure(length + 2);
    const chunk = this.#chunk;
    const start = this.#offset;
    chunk[start] = QUOTE;
    for (let i = 0; i < length; i++) {
      const code = value.charCodeAt(i);
      // Anything JSON escapes, and anything beyond ASCII (UTF-8, lone surrogates): the general path.
      if (code < 0x20 || code === QUOTE || code === BACKSLASH || code > 0x7e) return this.#appendStringified(value);
      chunk[start + 1 + i] = code;
    }
    chunk[start + 1 + length] = QUOTE;
    this.#offset = start + length + 2;
  }

  /**
   * A JSON number, as `JSON.stringify(value)` writes it (`null` for NaN and the infinities). Integers
   * and values of at most three decimals (the log's milliseconds) are written without a string.
   */
  appendJsonNumber(value: number): void {
    if (Number.isSafeInteger(value)) return this.#appendInteger(value);
    const thousandths = Math.round(value * 1000);
    // The decimal `thousandths / 1000` is the shortest text of `value` while doubles are much finer
    // than a thousandth (|value| < 2^43); JSON.stringify writes that text.
    if (thousandths / 1000 !== value || Math.abs(thousandths) >= 1e15) return this.appendAscii(JSON.stringify(value));
    const magnitude = Math.abs(thousandths);
    const fraction = magnitude % 1000;
    if (thousandths < 0) this.appendAscii('-');
    this.#appendInteger((magnitude - fraction) / 1000);
    this.#ensure(4);
    const chunk = this.#chunk;
    let offset = this.#offset;
    chunk[offset++] = 0x2e;
    chunk[offset++] = ZERO + Math.floor(fraction / 100);
    const rest = fraction % 100;
    if (rest !== 0) {
      chunk[offset++] = ZERO + Math.floor(rest / 10);
      if (rest % 10 !== 0) chunk[offset++] = ZERO + (rest % 10);
    }
    this.#offset = offset;
  }

  /** Ends the line started with `startLine` (or written by `write`). */
  endLine(): void {
    this.#ensure(1);
    this.#chunk[this.#offset++] = NEWLINE;
    this.#lineStart = this.#offset;
    this.#chunkLines++;
    // A chunk grown for one long line is written alone; a full one as soon as it can be.
    if (this.#chunk.length > this.#chunkBytes || this.#chunk.length - this.#offset < 64) this.#sealAndWrite();
  }

  /** Resolves once every line queued so far is written (or dropped). */
  flush(): Promise<void> {
    if (this.pendingLines === 0 && !this.#writing) return Promise.resolve();
    return new Promise((resolve) => {
      this.#drained.push(resolve);
      this.#sealAndWrite();
    });
  }

  /** Writes what waits, then closes the file (standard output stays open). */
  async close(): Promise<void> {
    await this.flush();
    this.#closed = true;
    clearInterval(this.#timer);
    if (this.#ownsFd) await new Promise<void>((resolve) => fs.close(this.#fd, () => resolve()));
  }

  #appendStringified(value: string): void {
    const json = JSON.stringify(value);
    // UTF-8 takes at most three bytes per UTF-16 unit (a surrogate pair: four for two).
    this.#ensure(json.length * 3);
    this.#offset += this.#chunk.write(json, this.#offset);
  }

  /** A safe integer (-0 written as 0, as JSON.stringify does). */
  #appendInteger(value: number): void {
    this.#ensure(17);
    const chunk = this.#chunk;
    let offset = this.#offset;
    let rest = value;
    if (rest < 0) {
      chunk[offset++] = 0x2d;
      rest = -rest;
    }
    let digits = 1;
    for (let power = 10; power <= rest; power *= 10) digits++;
    for (let i = offset + digits - 1; i >= offset; i--) {
      const next = Math.floor(rest / 10);
      chunk[i] = ZERO + (rest - next * 10);
      rest = next;
    }
    this.#offset = offset + digits;
  }

  /** Room for `bytes` more of the current line: else its start moves to a new chunk (larger, for a long line). */
  #ensure(bytes: number): void {
    if (this.#offset + bytes <= this.#chunk.length) return;
    const old = this.#chunk;
    const partial = this.#offset - this.#lineStart;
    const next = partial + bytes <= this.#chunkBytes ? this.#takeChunk() : Buffer.allocUnsafe(partial + bytes);
    old.copy(next, 0, this.#lineStart, this.#offset);
    if (this.#chunkLines > 0) this.#queue(old.subarray(0, this.#lineStart), this.#chunkLines);
    else this.#recycle(old);
    this.#chunk = next;
    this.#offset = partial;
    this.#lineStart = 0;
    this.#chunkLines = 0;
    this.#writeSome();
  }

  /** Between lines: the current chunk's lines join the queue, a new chunk takes its place. */
  #seal(): void {
    this.#offset = this.#lineStart;
    if (this.#chunkLines === 0) return;
    this.#queue(this.#chunk.subarray(0, this.#lineStart), this.#chunkLines);
    this.#chunk = this.#takeChunk();
    this.#offset = 0;
    this.#lineStart = 0;
    this.#chunkLines = 0;
  }

  #queue(bytes: Buffer, lines: number): void {
    this.#sealed.push({ bytes, lines });
    this.#sealedBytes += bytes.length;
    this.#sealedLines += lines;
  }

  #takeChunk(): Buffer {
    return this.#spares.pop() ?? Buffer.allocUnsafe(this.#chunkBytes);
  }

  #recycle(chunk: Buffer): void {
    if (chunk.buffer.byteLength === this.#chunkBytes && this.#spares.length < SPARE_CHUNKS)
      this.#spares.push(Buffer.from(chunk.buffer, chunk.byteOffset, this.#chunkBytes));
  }

  #sealAndWrite(): void {
    this.#seal();
    this.#writeSome();
  }

  #writeSome(): void {
    if (this.#writing) return;
    const next = this.#sealed.shift();
    if (next === undefined) return this.#settle();
    this.#writing = true;
    this.#writeFully(next.bytes, 0, (error) => {
      this.#writing = false;
      this.#sealedBytes -= next.bytes.length;
      this.#sealedLines -= next.lines;
      if (error) {
        this.dropped += next.lines;
        this.#onError?.(error);
      } else {
        this.written += next.lines;
      }
      this.#recycle(next.bytes);
      this.#writeSome();
    });
  }

  #writeFully(buffer: Buffer, offset: number, done: (error: Error | null) => void): void {
    fs.write(this.#fd, buffer, offset, buffer.length - offset, null, (error, written) => {
      // A non-blocking pipe that is full: wait for the reader rather than drop what it holds.
      if (error?.code === 'EAGAIN') return void setTimeout(() => this.#writeFully(buffer, offset, done), 10).unref();
      if (error) return done(error);
      if (offset + written < buffer.length) return this.#writeFully(buffer, offset + written, done);
      done(null);
    });
  }

  #settle(): void {
    if (this.#writing || this.pendingLines > 0 || this.#drained.length === 0) return;
    const waiting = this.#drained;
    this.#drained = [];
    for (const resolve of waiting) resolve();
  }
}
