/**
 * Lines to standard output or to a file, written off the serving loop: `write` only appends to a
 * buffer in memory; the buffer goes to the file descriptor in large writes on libuv's thread pool,
 * one write at a time. The buffer is bounded: while the disk (or the pipe behind standard output)
 * cannot keep up and `maxBufferedBytes` wait, new lines are dropped and counted. A serving loop
 * never waits for a disk.
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

export interface LineWriterOptions {
  /** Bytes waiting for the disk beyond which lines are dropped. Default 4 MiB. */
  maxBufferedBytes?: number;
  /** How long a line may wait for more to share its write. Default 100 ms. */
  flushIntervalMs?: number;
  /** A write failed (the lines of that write are counted as dropped). */
  onError?: (error: Error) => void;
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
  #pending: string[] = [];
  #pendingBytes = 0;
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
    this.#timer = setInterval(() => this.#writeSome(), options.flushIntervalMs ?? 100);
    this.#timer.unref();
  }

  /** Bytes waiting to be written. */
  get buffered(): number {
    return this.#pendingBytes;
  }

  /** Lines waiting to be written. */
  get pendingLines(): number {
    return this.#pending.length;
  }

  /** Queues one line (without its newline). False: dropped, the buffer is full. */
  write(line: string): boolean {
    // UTF-16 length: a close estimate of the bytes (the lines are mostly ASCII JSON).
    const size = line.length + 1;
    if (this.#closed || this.#pendingBytes + size > this.#maxBuffered) {
      this.dropped++;
      return false;
    }
    this.#pending.push(line);
    this.#pendingBytes += size;
    if (this.#pendingBytes >= this.#chunkBytes) this.#writeSome();
    return true;
  }

  /** Resolves once every line queued so far is written (or dropped). */
  flush(): Promise<void> {
    if (this.#pending.length === 0 && !this.#writing) return Promise.resolve();
    return new Promise((resolve) => {
      this.#drained.push(resolve);
      this.#writeSome();
    });
  }

  /** Writes what waits, then closes the file (standard output stays open). */
  async close(): Promise<void> {
    await this.flush();
    this.#closed = true;
    clearInterval(this.#timer);
    if (this.#ownsFd) await new Promise<void>((resolve) => fs.close(this.#fd, () => resolve()));
  }

  #writeSome(): void {
    if (this.#writing || this.#pending.length === 0) {
      if (!this.#writing) this.#settle();
      return;
    }
    // Whole lines up to the chunk size (a longer line alone).
    let bytes = 0;
    let count = 0;
    while (count < this.#pending.length) {
      const size = this.#pending[count]!.length + 1;
      if (count > 0 && bytes + size > this.#chunkBytes) break;
      bytes += size;
      count++;
    }
    const lines = this.#pending.splice(0, count);
    this.#pendingBytes -= bytes;
    const buffer = Buffer.from(`${lines.join('\n')}\n`);
    this.#writing = true;
    this.#writeFully(buffer, 0, (error) => {
      this.#writing = false;
      if (error) {
        this.dropped += lines.length;
        this.#onError?.(error);
      } else {
        this.written += lines.length;
      }
      // The next chunk follows at once while lines wait; else the timer picks up new ones.
      if (this.#pending.length > 0 && (this.#pendingBytes >= this.#chunkBytes || this.#drained.length > 0)) this.#writeSome();
      else this.#settle();
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
    if (this.#writing || this.#pending.length > 0 || this.#drained.length === 0) return;
    const waiting = this.#drained;
    this.#drained = [];
    for (const resolve of waiting) resolve();
  }
}
