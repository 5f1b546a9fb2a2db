// The live page's data source: the pi-sessiond web server (same origin), which answers through an in-process
// sidecar. Every request carries the token the page was opened with.
"use strict";
(function () {
  const token = new URLSearchParams(location.search).get("token") || "";
  // This page's name on the server: the sessions it opens are its own, and are closed when it goes, even when it
  // cannot say so (a tab killed): the server closes them once the page's event stream has been gone a while.
  const page = Math.random().toString(36).slice(2) + Date.now().toString(36);
  const query = (params) => {
    const q = new URLSearchParams(params || {});
    q.set("token", token);
    return q.toString();
  };
  // Requests under way, by the handle they name: a handle is closed only once they are answered, or the server
  // could close it first (each request is a connection of its own) and answer them "no such handle".
  const underWay = new Map();
  function call(method, path, params, body) {
    const handle = params && params.handle;
    const request = send(method, path, params, body);
    if (handle !== undefined) {
      const requests = underWay.get(handle) || new Set();
      underWay.set(handle, requests);
      requests.add(request);
      const done = () => {
        requests.delete(request);
        if (!requests.size && underWay.get(handle) === requests) underWay.delete(handle);
      };
      request.then(done, done);
    }
    return request;
  }
  async function closeWhenAnswered(handle) {
    const requests = underWay.get(handle);
    if (requests) await Promise.allSettled([...requests]);
    return send("POST", "/api/close", { handle, page });
  }
  async function send(method, path, params, body) {
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
    open: (path, machine) => call("POST", "/api/open", machine === undefined ? { path, page } : { path, machine, page }),
    snapshot: (handle) => call("GET", "/api/snapshot", { handle }),
    close: (handle) => closeWhenAnswered(handle).catch(() => null),
    // The page is going (a reload, a tab closed): a beacon outlives it, where a request would be cancelled.
    leave: (handle) => navigator.sendBeacon(`/api/close?${query({ handle, page })}`),
    entries: (handle, ids) => call("POST", "/api/entries", { handle }, ids),
    transcript: (handle, ids) => call("POST", "/api/transcript", { handle }, ids),
    context: (handle) => call("GET", "/api/context", { handle }),
    usage: (handle) => call("GET", "/api/usage", { handle }),
    overview: () => call("GET", "/api/usage-overview"),
    onEvent(callback) {
      const events = new EventSource(`/api/events?${query({ page })}`);
      events.onmessage = (m) => callback(JSON.parse(m.data));
    },
  };
})();
