// What the web view's tests share: a headless Chromium as they launch it, and the URL line a spawned
// `pi-sessiond web` prints first.
import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

/** Debian's headless Chromium (or $CHROMIUM) with a new, empty profile under `dir`. */
export function launchBrowser(dir) {
  // playwright passes the profile as --user-data-dir.
  return chromium.launchPersistentContext(mkdtempSync(join(dir, "chromium-")), {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1400, height: 860 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

/** The first line a spawned `pi-sessiond web` prints (its URL); fails if it exits first. */
export function firstLine(proc) {
  return new Promise((ok, fail) => {
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) ok(out.slice(0, out.indexOf("\n")));
    });
    proc.on("exit", (code) => fail(new Error(`pi-sessiond web exited with ${code}`)));
  });
}
