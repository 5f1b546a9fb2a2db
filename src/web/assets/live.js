// The live page's data source: the pi-sessiond web server (same origin), which answers through an in-process
// sidecar. Every request carries the token the page was opened with.
"use strict";
(function () {
  const token = new URLSearchParams(location.search).get("token") || "";
  const query = (params) => {
    const q = new URLSearchParams(params || {});
    q.set("token", token);
    return q.toString();
  };
  async function call(method, path, params, body) {
    const init = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { "Content-Type": "application/json" };
    }
    const res = await fetch(`${path}?${query(params)}`, init);
    const data = await res.json().catch(() => null);
    if (!res.ok) throw new Error(data && data.error ? data.error.message : `HTTP ${res.status}`);
    return data;
  }
  window.piSource = {
    mode: "live",
    sessions: () => call("GET", "/api/sessions"),
    sessionInfo: (path) => call("GET", "/api/session-info", { path }),
    search: (text, offset) => call("GET", "/api/search", { q: text, offset: offset || 0 }),
    // A session of the team catalog (`web --catalog`) is a machine's path.
    open: (path, machine) => call("POST", "/api/open", machine === undefined ? { path } : { path, machine }),
    snapshot: (handle) => call("GET", "/api/snapshot", { handle }),
    close: (handle) => call("POST", "/api/close", { handle }).catch(() => null),
    entries: (handle, ids) => call("POST", "/api/entries", { handle }, ids),
    transcript: (handle, ids) => call("POST", "/api/transcript", { handle }, ids),
    context: (handle) => call("GET", "/api/context", { handle }),
    usage: (handle) => call("GET", "/api/usage", { handle }),
    overview: () => call("GET", "/api/usage-overview"),
    onEvent(callback) {
      const events = new EventSource(`/api/events?${query()}`);
      events.onmessage = (m) => callback(JSON.parse(m.data));
    },
  };
})();
