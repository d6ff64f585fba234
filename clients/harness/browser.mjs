// The one browser harness: Debian's chromium (installed by
// clients/harness/ensure-chromium.sh, which `make test-clients` runs) driven
// by playwright-core. Every page's browser tests launch it from here and
// leave their screenshots in .local/screenshots (git-ignored).
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";

import { chromium } from "playwright-core";

import { root } from "./stack.mjs";

export const chromiumPath = process.env.ONEJOB_CHROMIUM ?? "/usr/bin/chromium";
export const screenshotDir = join(root, ".local", "screenshots");

// Offline and quiet: without the background-networking flags Chromium keeps
// calling home. Playwright gives every launch a fresh temporary profile.
const flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync"];

/** Launches headless Chromium, or fails naming what is missing. */
export async function launchBrowser() {
  if (!existsSync(chromiumPath)) {
    throw new Error(`Chromium is missing at ${chromiumPath}: run \`make test-clients\` (it installs Debian's chromium as root), or set ONEJOB_CHROMIUM`);
  }
  return await chromium.launch({ executablePath: chromiumPath, headless: true, args: flags });
}

/**
 * A fresh context (its own localStorage) and page; the page's uncaught
 * errors are collected so a test can insist there were none.
 */
export async function newPage(browser) {
  const context = await browser.newContext({ viewport: { width: 900, height: 900 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (err) => errors.push(err));
  return { context, page, errors };
}

/** Saves a full-page screenshot as .local/screenshots/<name>.png and returns its path. */
export async function screenshot(page, name) {
  await mkdir(screenshotDir, { recursive: true });
  const path = join(screenshotDir, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}
