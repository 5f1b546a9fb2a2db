// Opens a session with pi 1.6.0's own SessionManager and reports the time and peak memory, for comparison with
// `pi-sessiond stats`. Usage: node bench/pi-open.mjs FILE
const { SessionManager } = await import(
  new URL("../tests/conformance/node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js", import.meta.url)
);
const file = process.argv[2];
const t0 = performance.now();
const m = SessionManager.open(file);
const openMs = performance.now() - t0;
const result = {
  entryCount: m.getEntryCount(),
  branchLength: m.getBranch().length,
  openMs: Math.round(openMs * 10) / 10,
  peakRssKiB: process.resourceUsage().maxRSS,
};
console.log(JSON.stringify(result));
