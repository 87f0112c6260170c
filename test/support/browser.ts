/**
 * Headless Chromium (Debian's `chromium`, never a downloaded build) driven by playwright-core,
 * with a fresh profile per launch, for the portal's end-to-end tests; screenshots go to
 * test-output/ (ignored by git).
 */
import { waitFor } from './wait.ts';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { REPO_ROOT } from './tps.ts';

export const CHROMIUM = process.env.TPS_CHROMIUM ?? '/usr/bin/chromium';
export const SCREENSHOTS = path.join(REPO_ROOT, 'test-output', 'portal');

export interface Browser {
  context: BrowserContext;
  page: Page;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run scripts/setup.sh (Debian package chromium)`);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
    viewport: { width: 1440, height: 960 },
    timezoneId: 'UTC',
    locale: 'en-GB',
  });
  context.setDefaultTimeout(15_000);
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    async close() {
      await context.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Writes a screenshot (the whole page unless fullPage is false) to test-output/portal/NAME.png; returns its path. */
export async function screenshot(page: Page, name: string, fullPage = true): Promise<string> {
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  // From the top, so that the sticky sidebar and fixed panels sit where a reader expects them.
  // (The callback runs in the page; the project compiles without the DOM library, hence the cast.)
  await page.evaluate(() => (globalThis as unknown as { scrollTo(x: number, y: number): void }).scrollTo(0, 0));
  const file = path.join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage });
  return file;
}

/** Polls `check` until it returns a value other than undefined/false (errors count as "not yet"). */
export const until = <T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> =>
  waitFor(what, check, { timeoutMs, intervalMs: 200, retryErrors: true });
