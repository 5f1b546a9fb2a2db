// Tokens and cost of every session pi's listAll finds, opened with pi 1.6.0's SessionManager in path order and
// grouped by day, model or project: the entries pi's getSessionStats counts, added with pi's addUsageToTotals,
// keyed as getUsageCostBreakdown keys them (and, by model, pi's own getUsageCostBreakdown over the same entries).
// The reference for `pi-sessiond usage`: the oracle (tests/it/usage.rs) and the benchmark (bench/pi-ops.mjs).
const { createUsageTotals, addUsageToTotals, getUsageCostBreakdown } = await import(
  new URL("./node_modules/@earendil-works/pi-coding-agent/dist/core/usage-totals.js", import.meta.url)
);
export async function usageOverview(SessionManager, r) {
  process.env.PI_CODING_AGENT_DIR = r.agentDir;
  const paths = (await SessionManager.listAll()).map((s) => s.path).sort();
  const groups = new Map();
  const counted = [];
  for (const path of paths) {
    const m = SessionManager.open(path);
    for (const e of m.getEntries()) {
      // The entries getSessionStats adds, with getUsageCostBreakdown's key.
      let key, usage;
      if (e.type === "message" && e.message.role === "assistant") {
        key = `${e.message.provider}/${e.message.responseModel ?? e.message.model}`;
        usage = e.message.usage;
      } else if (e.type === "usage") {
        key = `${e.provider}/${e.model}`;
        usage = e.usage;
      } else if (e.type === "message" && e.message.role === "toolResult" && e.message.usage) {
        key = "Tools/summaries";
        usage = e.message.usage;
      } else if ((e.type === "branch_summary" || e.type === "compaction") && e.usage) {
        key = "Tools/summaries";
        usage = e.usage;
      }
      if (!key || !usage) continue;
      const time = new Date(e.timestamp).getTime();
      if (r.since != null && !(time >= r.since)) continue;
      counted.push(e);
      const group = r.by === "day" ? new Date(time).toISOString().slice(0, 10) : r.by === "model" ? key : m.getCwd();
      if (!groups.has(group)) groups.set(group, createUsageTotals());
      addUsageToTotals(groups.get(group), usage);
    }
  }
  const rows = [...groups].map(([group, t]) => ({
    [r.by]: group,
    input: t.input,
    output: t.output,
    cacheRead: t.cacheRead,
    cacheWrite: t.cacheWrite,
    totalTokens: t.input + t.output + t.cacheRead + t.cacheWrite,
    cost: t.cost,
  }));
  rows.sort((a, b) => (a[r.by] < b[r.by] ? -1 : a[r.by] > b[r.by] ? 1 : 0));
  return { rows, breakdown: r.by === "model" ? getUsageCostBreakdown(counted) : null };
}

