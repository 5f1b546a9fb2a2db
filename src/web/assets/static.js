// The exported page's data source: everything was embedded by `pi-sessiond export --html`, so the page needs
// nothing from anywhere.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("pi-sessiond-data").textContent);
  const snapshot = async () => ({ state: data.state, rows: data.rows });
  // The text of a transcript piece: its markup dropped, the five escapes transcript.rs writes undone.
  const ENTITIES = { "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'", "&amp;": "&" };
  const plainText = (html) => html.replace(/<[^>]*>/g, " ").replace(/&(lt|gt|quot|#39|amp);/g, (e) => ENTITIES[e]);
  window.piSource = {
    mode: "export",
    sessions: async () => [data.session],
    async search(text, offset = 0) {
      const words = text.toLowerCase().split(/\s+/).filter(Boolean);
      const hits = [];
      for (const row of data.rows) {
        const piece = data.transcript[row.id];
        // The entry's words as the transcript shows them (its markup aside).
        const haystack = (piece ? plainText(piece.html) : row.preview).toLowerCase();
        if (words.length && words.every((w) => haystack.includes(w))) {
          hits.push({ path: data.session.path, sessionId: data.session.id, entryId: row.id, role: row.what, snippet: row.preview, timestamp: row.timestamp });
        }
      }
      return { hits: hits.slice(offset, offset + 100), total: hits.length, sessions: hits.length ? 1 : 0, offset };
    },
    open: snapshot,
    snapshot,
    close: async () => null,
    transcript: async (handle, ids) => ids.map((id) => data.transcript[id]).filter(Boolean),
    context: async () => data.context,
    usage: async () => data.usage,
    onEvent() {},
  };
})();
