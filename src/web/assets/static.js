// The exported page's data source: everything was embedded by `pi-sessiond export --html`, so the page needs
// nothing from anywhere.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("pi-sessiond-data").textContent);
  const snapshot = async () => ({ state: data.state, rows: data.rows });
  window.piSource = {
    mode: "export",
    sessions: async () => [data.session],
    async search(text, offset = 0) {
      const words = text.toLowerCase().split(/\s+/).filter(Boolean);
      const hits = [];
      for (const row of data.rows) {
        const entry = data.entries[row.id];
        const haystack = JSON.stringify(entry || row).toLowerCase();
        if (words.length && words.every((w) => haystack.includes(w))) {
          hits.push({ path: data.session.path, sessionId: data.session.id, entryId: row.id, role: row.what, snippet: row.preview, timestamp: row.timestamp });
        }
      }
      return { hits: hits.slice(offset, offset + 100), total: hits.length, sessions: hits.length ? 1 : 0, offset };
    },
    open: snapshot,
    snapshot,
    close: async () => null,
    entries: async (handle, ids) => Object.fromEntries(ids.map((id) => [id, data.entries[id] ?? null])),
    context: async () => data.context,
    usage: async () => data.usage,
    onEvent() {},
  };
})();
