// What the web view's tests and the screenshot script share: a headless Chromium as they launch it, a
// `pi-sessiond web` started on an agent directory, the URL line a spawned `pi-sessiond web` prints first, and a
// request's status with headers a browser would not send.
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { chromium } from "playwright-core";

/** Debian's headless Chromium (or $CHROMIUM) with a new, empty profile under `dir`. */
export function launchBrowser(dir, viewport = { width: 1400, height: 860 }) {
  // playwright passes the profile as --user-data-dir.
  return chromium.launchPersistentContext(mkdtempSync(join(dir, "chromium-")), {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport,
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

/** The same browser, under the name the transcript tests and the screenshot script use. */
export const launchChromium = launchBrowser;

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

/** Starts `pi-sessiond web` on `agentDir`; resolves to `{url, stop}` once it has printed its URL. */
export async function startWeb(bin, agentDir) {
  const proc = spawn(bin, ["--agent-dir", agentDir, "web", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
  const url = await firstLine(proc);
  return { url, stop: () => (proc.removeAllListeners("exit"), proc.kill("SIGTERM")) };
}

/** GET `path` on the server at `base` (its URL) with these headers; resolves to the status code. */
export function statusOf(base, path, headers = {}) {
  const { port } = new URL(base);
  return new Promise((ok, fail) => {
    const req = request({ host: "127.0.0.1", port, path, headers }, (res) => {
      res.resume();
      ok(res.statusCode);
    });
    req.on("error", fail);
    req.end();
  });
}
