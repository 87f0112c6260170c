/**
 * Waiting for something to become true over real sockets: a bounded poll, never a timing
 * assertion. The probe answers a value when done, undefined or false while not yet.
 */
export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
  /** Treat a probe that throws as "not yet" (the error is reported if time runs out). Default: it fails the wait. */
  retryErrors?: boolean;
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, options: WaitOptions = {}): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 15_000;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      if (!options.retryErrors) throw error;
      lastError = error;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 100));
  }
}
