// What the transcript tests and the screenshot script share: a `pi-sessiond web` of an agent directory, and
// Debian's headless Chromium with a fresh profile.
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

/** Starts `pi-sessiond web` on `agentDir`; resolves to `{url, stop}` once it has printed its URL. */
export function startWeb(bin, agentDir) {
  return new Promise((ok, fail) => {
    const proc = spawn(bin, ["--agent-dir", agentDir, "web", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) ok({ url: out.slice(0, out.indexOf("\n")), stop: () => (proc.removeAllListeners("exit"), proc.kill("SIGTERM")) });
    });
    proc.on("exit", (code) => fail(new Error(`pi-sessiond web exited with ${code}`)));
  });
}

/** A headless Chromium with a new, empty profile under `dir`. */
export function launchChromium(dir, viewport = { width: 1400, height: 860 }) {
  return chromium.launchPersistentContext(mkdtempSync(join(dir, "chromium-")), {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}
