// The session view: a list of sessions grouped by project, kept live, with search; one session's tree (pi's /tree
// filters, folding at branch points, the leaf, labels, entries off the active branch dimmed) beside its transcript
// (the path to the leaf or to the selected entry, read as a conversation; the entry selected in one is shown in the
// other), the context the model sees, and tokens and cost; across sessions, a usage overview (tokens and cost by
// day, stacked by model). Data comes from `window.piSource` (the live server or the embedded export); live changes
// arrive as events and are applied in place.
//
// Large sessions stay fast: the tree works on skeleton rows only and draws just the rows in view; the
// transcript's pieces are fetched a page at a time as they come near the view. What the page writes itself from
// a session is put on the page as text (textContent), never as markup, with its bidirectional controls shown as
// what they are (`visible`) and each text isolated from the text around it (app.css), so "invoice\u202Efdp.exe"
// cannot pass for "invoiceexe.pdf" nor reorder what stands beside it; the transcript's pieces are HTML the
// server made and sanitised (transcript.rs), which does the same.
"use strict";
(function () {
  const source = window.piSource;
  const ROW = 22;
  // Search hits fetched at a time (SEARCH_SHOWN in view.rs).
  const SEARCH_PAGE = 100;
  const $ = (id) => document.getElementById(id);
  // Unicode's explicit directional marks, embeddings, overrides and isolates (UAX #9).
  const BIDI_CONTROLS = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
  // Control characters (a tool's ESC, BEL, backspace), which a browser drops or draws as nothing, are shown as
  // their pictures, as the command line and the transcript show them; tab, newline and carriage return stay.
  const CONTROLS = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F\u0080-\u009F]/g;
  const picture = (c) => {
    const code = c.charCodeAt(0);
    return code < 0x20 ? String.fromCharCode(0x2400 + code) : code === 0x7f ? "\u2421" : "\uFFFD";
  };
  const visible = (text) =>
    String(text)
      .replace(CONTROLS, picture)
      .replace(BIDI_CONTROLS, (c) => `⟨U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = visible(text);
    return e;
  };

  const state = {
    sessions: [],
    current: null, // {handle, state, seq, rows, byId, children, roots, labels, leafId, path}
    filter: "default",
    folded: new Set(),
    selected: null,
    treeMark: null, // the tree row marked for the selection: the entry, or its nearest drawn ancestor
    lines: [],
    tab: "tree",
    overview: false,
    zone: "list", // which part the keys move in: "list" or "tree"
    openedAt: 0,
  };

  // ---------------------------------------------------------------------------------------------------------
  // Formatting

  function ago(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return "";
    const s = Math.max(0, (Date.now() - t) / 1000);
    if (s < 60) return "just now";
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    if (s < 7 * 86400) return `${plural(Math.floor(s / 86400), "day")} ago`;
    return new Date(t).toISOString().slice(0, 10);
  }
  // A time in full, in the reader's own zone and in UTC, for the hover text of a relative age.
  function absolute(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return "";
    return `${new Date(t).toLocaleString()} (${new Date(t).toISOString().replace("T", " ").slice(0, 19)} UTC)`;
  }
  const num = (n) => Math.round(n || 0).toLocaleString("en-US");
  const plural = (n, one, many = `${one}s`) => `${num(n)} ${n === 1 ? one : many}`;
  const money = (n) => `$${(n || 0).toFixed(4)}`;
  const kindClass = (what) =>
    ({ user: "k-user", assistant: "k-assistant", toolResult: "k-tool", bashExecution: "k-tool", compaction: "k-summary", branch_summary: "k-summary" })[what] || "k-other";

  // `text` as one word for a POSIX shell: in single quotes, each of its own quotes closed, escaped and reopened.
  const shellWord = (text) => `'${String(text).replace(/'/g, "'\\''")}'`;

  // How to go on with the open session in pi 1.6.0: `--session` takes a file path (anything with a slash is
  // read as one), and pi runs in the session's own cwd, whatever the shell's is.
  function showResume() {
    const cur = state.current;
    // Another machine's session (the team catalog) has no file here to resume, nor has a deleted one.
    $("resume").hidden = !cur || cur.machine !== undefined || cur.deleted;
    const code = $("resume-command");
    code.replaceChildren();
    if (cur) code.append(...pathPieces(`pi --session ${shellWord(cur.path)}`));
  }

  /** `text` (a path, or a command holding one) as nodes that show its pieces in the path's order: each piece
   * between slashes isolated (<bdi>), or a right-to-left directory name would take the pieces after it (a
   * date, a file name) and the slashes between into its own run and show them before itself. */
  function pathPieces(text) {
    const nodes = [];
    visible(text).split("/").forEach((piece, i) => {
      if (i) nodes.push(document.createTextNode("/"));
      const isolated = document.createElement("bdi");
      isolated.dir = "ltr";
      isolated.textContent = piece;
      nodes.push(isolated);
    });
    return nodes;
  }

  /** An element of class `cls` showing the path `text` in its order (see pathPieces). */
  function pathEl(tag, cls, text) {
    const e = el(tag, cls);
    e.append(...pathPieces(text));
    return e;
  }

  async function copyResume() {
    const command = `pi --session ${shellWord(state.current.path)}`;
    const button = $("resume-copy");
    try {
      await navigator.clipboard.writeText(command);
      button.textContent = "Copied";
    } catch {
      // No clipboard for this page (a file:// export, a browser that refuses): the command is selected instead.
      getSelection().selectAllChildren($("resume-command"));
      button.textContent = "Selected: press Ctrl-C";
    }
    setTimeout(() => (button.textContent = "Copy resume command"), 2000);
  }

  function notice(text) {
    const n = $("notice");
    n.hidden = !text;
    n.textContent = visible(text || "");
  }

  /** What the page says of the open session's file: deleted, or what reading it found, or nothing. */
  function noticeFile(cur, deleted) {
    if (deleted) return notice("The session file was deleted, or no longer holds a session: what was read of it is shown.");
    const found = (cur.warnings || []).filter((w) => w.kind !== "legacy_version" && w.kind !== "missing_final_newline");
    if (!found.length) return notice("");
    const first = found[0];
    const more = found.length > 1 ? ` (and ${plural(found.length - 1, "more", "more")})` : "";
    notice(`Reading this file found ${plural(found.length, "problem")}: line ${first.line}: ${first.message}${more}. Nothing is dropped: such lines stay in the file as they are.`);
  }

  // ---------------------------------------------------------------------------------------------------------
  // The session list and search

  // A title is one line, cut: a first message can be pages long, and each list item would carry all of it.
  const TITLE_CHARS = 300;
  function sessionTitle(s) {
    const title = (s.name && String(s.name).trim()) || s.firstMessage || s.path;
    return title.length > TITLE_CHARS ? `${Array.from(title.slice(0, TITLE_CHARS + 1)).slice(0, TITLE_CHARS).join("")}…` : title;
  }

  // A session of the team catalog (`web --catalog`) is a machine's path: paths repeat across machines.
  const isCurrent = (s) => !!state.current && state.current.path === s.path && state.current.machine === s.machine;

  // The list: sessions grouped by project (their cwd), the group with the newest activity first and, in each,
  // newest first (pi's listAll order); what is typed in the filter box keeps the sessions whose title, project
  // or id contain it. It is kept current by the server's `sessions` events (a session file created, appended
  // to or deleted by any process), each answered by asking for that one session's listing entry, never the list.
  function renderList() {
    const list = $("list");
    if ($("search").value.trim()) return markOpen();
    list.replaceChildren();
    if (!state.sessions.length) {
      list.append(el("p", "hint", "No sessions yet."));
      return;
    }
    const words = $("list-filter").value.toLowerCase().split(/\s+/).filter(Boolean);
    const wanted = (s) => {
      const hay = `${sessionTitle(s)} ${s.cwd || ""} ${s.id || ""} ${s.machine || ""}`.toLowerCase();
      return words.every((w) => hay.includes(w));
    };
    // Over the team catalog a group is a machine's project, the machines in name order, each under its name.
    const team = state.sessions.some((s) => s.machine !== undefined);
    const groups = new Map();
    for (const s of state.sessions) {
      if (!wanted(s)) continue;
      const cwd = typeof s.cwd === "string" && s.cwd ? s.cwd : "(no project)";
      const key = team ? `${s.machine}\n${cwd}` : cwd;
      if (!groups.has(key)) groups.set(key, { machine: s.machine, cwd, sessions: [] });
      groups.get(key).sessions.push(s);
    }
    if (!groups.size) list.append(el("p", "hint", "No session matches the filter."));
    const ordered = [...groups.entries()];
    if (team) ordered.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    let machine = null;
    for (const [, { machine: of, cwd, sessions }] of ordered) {
      if (team && of !== machine) list.append(el("div", "machine", (machine = of)));
      const group = el("div", "group");
      group.dataset.cwd = cwd;
      if (team) group.dataset.machine = of;
      group.setAttribute("role", "group");
      const head = el("div", "g-head");
      head.append(pathEl("span", team ? "g-cwd project" : "g-cwd", cwd), el("span", "g-count", plural(sessions.length, "session")));
      head.title = cwd;
      group.append(head);
      for (const s of sessions) {
        const item = el("div", "session");
        item.setAttribute("role", "listitem");
        item.dataset.path = s.path;
        if (team) item.dataset.machine = s.machine;
        if (isCurrent(s)) item.classList.add("on");
        item.append(el("div", "s-title", sessionTitle(s)));
        const meta = el("div", "s-meta");
        meta.append(el("span", "s-count", plural(s.messageCount, "message")));
        if (ago(s.modified)) {
          const age = el("span", "s-age", ago(s.modified));
          age.dataset.at = s.modified;
          age.title = absolute(s.modified);
          meta.append(" · ", age);
        }
        item.append(meta);
        item.onclick = () => openSession(s.path, undefined, s.machine);
        group.append(item);
      }
      list.append(group);
    }
  }

  // The open session marked in whatever the list shows (sessions or search hits).
  function markOpen() {
    for (const item of document.querySelectorAll("#list .session")) {
      item.classList.toggle("on", !!state.current && item.dataset.path === state.current.path && item.dataset.machine === state.current.machine);
    }
  }

  // Relative ages drift as time passes: they are written again from the times they were drawn with.
  function refreshAges() {
    for (const age of document.querySelectorAll("#list .s-age")) age.textContent = ago(age.dataset.at);
  }

  // pi's listAll order: newest activity first (unknown times last).
  function bySessionOrder(a, b) {
    const t = (s) => {
      const v = Date.parse(s.modified);
      return Number.isNaN(v) ? -Infinity : v;
    };
    return t(b) - t(a);
  }

  // A session of the team catalog is the push it was opened from; this is what a newer push changes in its row.
  const pushedAs = (s) => (s ? `${s.modified} ${s.messageCount} ${s.name}` : "");
  const listedCurrent = () => state.sessions.find(isCurrent);

  async function loadSessions() {
    try {
      state.sessions = await source.sessions();
      const cur = state.current;
      if (cur && cur.machine !== undefined && document.body.dataset.state === "ready" && pushedAs(listedCurrent()) !== cur.pushed) {
        openSession(cur.path, $("follow").checked ? undefined : state.selected, cur.machine);
      }
      renderList();
    } catch (e) {
      notice(`Cannot list sessions: ${e.message}`);
    }
  }

  // A session file another process created, appended to or deleted: its listing entry is asked for once the
  // burst of writes settles (pi writes a turn as several appends), and put in its place.
  const pendingInfo = new Map();
  function onSessionsEvent(ev) {
    clearTimeout(pendingInfo.get(ev.path));
    pendingInfo.set(
      ev.path,
      setTimeout(async () => {
        pendingInfo.delete(ev.path);
        let info = null;
        try {
          info = await source.sessionInfo(ev.path);
        } catch (e) {
          if (!/no such session/.test(e.message)) return notice(`Cannot read ${ev.path}: ${e.message}`);
        }
        const others = state.sessions.filter((s) => s.path !== ev.path);
        state.sessions = info ? [...others, info].sort(bySessionOrder) : others;
        renderList();
        if (state.current && state.current.path === ev.path) summarize();
      }, 150),
    );
  }

  let searchTimer = 0;
  function onSearchInput() {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(runSearch, 250);
  }

  // The search shown: its query, the hits fetched so far (pages of them, best first), and the true totals.
  let searched = null;

  async function runSearch() {
    const q = $("search").value.trim();
    if (!q) {
      searched = null;
      $("list").replaceChildren();
      return renderList();
    }
    let page;
    try {
      page = await source.search(q, 0);
    } catch (e) {
      $("list").replaceChildren(el("p", "hint", e.message));
      return;
    }
    // An answer to a query typed over since is dropped.
    if ($("search").value.trim() !== q) return;
    searched = { q, hits: page.hits, total: page.total, sessions: page.sessions };
    renderHits();
  }

  // The next page of the search's hits, after those shown.
  async function moreHits() {
    const s = searched;
    let page;
    try {
      page = await source.search(s.q, s.hits.length);
    } catch (e) {
      return notice(`Cannot search: ${e.message}`);
    }
    if (searched !== s) return;
    s.hits = s.hits.concat(page.hits);
    s.total = page.total;
    s.sessions = page.sessions;
    renderHits();
  }

  function renderHits() {
    const { q, hits, total, sessions } = searched;
    const list = $("list");
    const keep = list.scrollTop;
    list.replaceChildren();
    const marks = matcher(q);
    // Hits of the team catalog name their machine: paths repeat across machines, so a session is both.
    const groups = new Map();
    for (const h of hits) {
      const key = `${h.machine ?? ""}\n${h.path}`;
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(h);
    }
    const counted = `${plural(total, "match", "matches")} in ${plural(sessions, "session")}`;
    const head = el("p", "hint search-count", !total ? "No matches" : hits.length < total ? `${counted}, best first: the first ${num(hits.length)} shown` : `${counted}, best first`);
    list.append(head);
    // Grouped as the list is: by project (a machine's project over the team catalog), then by session, each in
    // the rank order of its best hit.
    const projects = new Map();
    for (const group of groups.values()) {
      const { path, machine } = group[0];
      const info = state.sessions.find((s) => s.path === path && s.machine === machine);
      const cwd = info && typeof info.cwd === "string" && info.cwd ? info.cwd : "(no project)";
      const key = machine === undefined ? cwd : `${machine}\n${cwd}`;
      if (!projects.has(key)) projects.set(key, { machine, cwd, sessions: [] });
      projects.get(key).sessions.push([path, info, group]);
    }
    for (const { machine, cwd, sessions } of projects.values()) {
      const project = el("div", "group");
      project.dataset.cwd = cwd;
      if (machine !== undefined) project.dataset.machine = machine;
      const head = el("div", "g-head");
      head.append(pathEl("span", "g-cwd", machine === undefined ? cwd : `${machine} · ${cwd}`), el("span", "g-count", plural(sessions.reduce((n, [, , g]) => n + g.length, 0), "match", "matches")));
      head.title = cwd;
      project.append(head);
      for (const [path, info, group] of sessions) {
        const item = el("div", "session");
        item.dataset.path = path;
        if (machine !== undefined) item.dataset.machine = machine;
        if (isCurrent({ path, machine })) item.classList.add("on");
        item.append(el("div", "s-title", info ? sessionTitle(info) : path));
        item.append(el("div", "s-meta", plural(group.length, "match", "matches")));
        item.onclick = () => openSession(path, undefined, machine);
        project.append(item);
        for (const h of group) {
          const hit = el("div", "hit");
          hit.append(el("span", `kind ${kindClass(h.role)}`, h.role), " ", marked(h.snippet, marks));
          hit.onclick = () => openSession(path, h.entryId, machine);
          project.append(hit);
        }
      }
      list.append(project);
    }
    if (hits.length < total) {
      const more = el("button", "more", `Show ${num(Math.min(SEARCH_PAGE, total - hits.length))} more of ${num(total - hits.length)}`);
      more.id = "more-hits";
      more.onclick = moreHits;
      list.append(more);
    }
    list.scrollTop = keep;
  }

  // Where the query matches a text, as pi's /resume language reads it: words and "phrases" anywhere, any case,
  // or re:PATTERN (JavaScript's reading of the pattern; one it cannot read marks nothing).
  function matcher(q) {
    if (q.startsWith("re:")) {
      try {
        return new RegExp(q.slice(3), "g");
      } catch {
        return null;
      }
    }
    const needles = [...q.matchAll(/"([^"]+)"|(\S+)/g)].map((m) => (m[1] || m[2]).trim().split(/\s+/).join(" ")).filter(Boolean);
    if (!needles.length) return null;
    const escaped = needles.map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/ /g, "\\s+"));
    return new RegExp(escaped.join("|"), "gi");
  }

  // `text` as a span with what `re` matches in <mark>s; all of it as text, never markup.
  function marked(text, re) {
    const span = el("span", "snippet");
    const t = String(text);
    let at = 0;
    if (re) {
      for (const m of t.matchAll(re)) {
        if (!m[0]) continue;
        span.append(visible(t.slice(at, m.index)), el("mark", "", m[0]));
        at = m.index + m[0].length;
      }
    }
    span.append(visible(t.slice(at)));
    return span;
  }

  // ---------------------------------------------------------------------------------------------------------
  // One session: its tree

  function index(snapshot, path) {
    const cur = {
      handle: snapshot.state.handle,
      state: snapshot.state,
      seq: snapshot.state.seq || 0,
      path: path || snapshot.state.sessionFile,
      rows: [],
      byId: new Map(),
      children: new Map(),
      roots: [],
      labels: new Map(),
      leafId: snapshot.state.leafId ?? null,
      warnings: snapshot.warnings || [],
    };
    for (const r of snapshot.rows) addRow(cur, r, r.label);
    return cur;
  }

  function addRow(cur, r, label) {
    if (cur.byId.has(r.id)) return false;
    cur.rows.push(r);
    cur.byId.set(r.id, r);
    cur.children.set(r.id, []);
    if (r.parentId !== null && r.parentId !== undefined && cur.byId.has(r.parentId) && r.parentId !== r.id) {
      cur.children.get(r.parentId).push(r.id);
    } else {
      cur.roots.push(r.id);
    }
    if (label !== undefined && label !== null) cur.labels.set(r.id, label);
    if (r.type === "label" && r.targetId !== undefined) {
      if (r.setsLabel === null || r.setsLabel === undefined || r.setsLabel === "") cur.labels.delete(r.targetId);
      else cur.labels.set(r.targetId, r.setsLabel);
    }
    return true;
  }

  function shown(cur, r) {
    const f = state.filter;
    if (f === "all") return true;
    if (r.type === "usage") return false;
    if (r.type === "message" && r.role === "assistant" && r.id !== cur.leafId) {
      const stop = r.stopReason;
      if (!r.hasText && !(stop && stop !== "stop" && stop !== "toolUse")) return false;
    }
    const settings = ["label", "context_edit", "custom", "model_change", "thinking_level_change", "session_info"].includes(r.type);
    if (f === "user-only") return r.type === "message" && r.role === "user";
    if (f === "no-tools") return !settings && !(r.type === "message" && r.role === "toolResult");
    if (f === "labeled-only") return cur.labels.has(r.id);
    return !settings;
  }

  function activePath(cur) {
    const on = new Set();
    let id = cur.leafId;
    while (id !== null && id !== undefined && cur.byId.has(id) && !on.has(id)) {
      on.add(id);
      id = cur.byId.get(id).parentId;
    }
    return on;
  }

  // The lines to draw: shown entries in tree order, a single line of conversation straight down, branches
  // indented (as pi's /tree and `pi-sessiond tree` draw them), folded branch points closed.
  function layout(cur, onPath) {
    // pi's /tree puts the branch holding the leaf first among its siblings (and among the roots): a node holds
    // it exactly when it is on the leaf's path (`onPath`). The other branches keep getTree's order.
    const leafFirst = (ids) => [...ids.filter((id) => onPath.has(id)), ...ids.filter((id) => !onPath.has(id))];
    const visibleChildren = new Map();
    const visibleRoots = [];
    const seen = new Set();
    const stack = cur.roots.slice().reverse().map((id) => [id, null]);
    while (stack.length) {
      const [id, anchor] = stack.pop();
      if (seen.has(id)) continue;
      seen.add(id);
      let here = anchor;
      if (shown(cur, cur.byId.get(id))) {
        if (anchor === null) visibleRoots.push(id);
        else visibleChildren.get(anchor).push(id);
        visibleChildren.set(id, []);
        here = id;
      }
      const kids = cur.children.get(id) || [];
      for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], here]);
    }
    const lines = [];
    const work = leafFirst(visibleRoots).reverse().map((id) => ({ id, prefix: "", last: true, straight: true, level: 0 }));
    while (work.length) {
      const w = work.pop();
      const kids = leafFirst(visibleChildren.get(w.id) || []);
      const connector = w.straight ? "" : w.last ? "└─ " : "├─ ";
      const folded = kids.length > 1 && state.folded.has(w.id);
      lines.push({ id: w.id, gutter: w.prefix + connector, branch: kids.length > 1 ? kids.length : 0, folded, level: w.level });
      if (folded) continue;
      const childPrefix = w.straight ? w.prefix : w.prefix + (w.last ? "   " : "│  ");
      for (let i = kids.length - 1; i >= 0; i--) {
        if (kids.length === 1) work.push({ id: kids[i], prefix: childPrefix, last: true, straight: true, level: w.level });
        else work.push({ id: kids[i], prefix: childPrefix, last: i === kids.length - 1, straight: false, level: w.level + 1 });
      }
    }
    return lines;
  }

  let active = new Set();
  // Where the leaf is drawn: the leaf itself, or, when the filter hides it (pi appends a label, name or
  // thinking-level change whenever it resumes), its nearest drawn ancestor, as pi's /tree selects it.
  let shownLeaf = null;
  function relayout() {
    const cur = state.current;
    active = cur ? activePath(cur) : new Set();
    state.lines = cur ? layout(cur, active) : [];
    shownLeaf = null;
    if (cur) {
      const drawn = new Set(state.lines.map((l) => l.id));
      const seen = new Set();
      let id = cur.leafId;
      while (id !== null && id !== undefined && cur.byId.has(id) && !seen.has(id) && !drawn.has(id)) {
        seen.add(id);
        id = cur.byId.get(id).parentId;
      }
      if (drawn.has(id)) shownLeaf = id;
    }
    $("tree-inner").style.height = `${state.lines.length * ROW}px`;
    drawRows(true);
    summarize();
  }

  function drawRows(force) {
    const scroll = $("tree-scroll");
    const inner = $("tree-inner");
    // A relayout that shortened the tree (a filter, a fold) leaves scrollTop past the new end until the browser's
    // next layout clamps it; drawing from it would draw no row at all until a scroll event came.
    const most = Math.max(0, state.lines.length * ROW - scroll.clientHeight);
    if (scroll.scrollTop > most) scroll.scrollTop = most;
    const first = Math.max(0, Math.floor(Math.min(scroll.scrollTop, most) / ROW) - 20);
    const last = Math.min(state.lines.length, first + Math.ceil(scroll.clientHeight / ROW) + 40);
    if (!force && inner.dataset.first === String(first) && inner.dataset.last === String(last)) return;
    inner.dataset.first = String(first);
    inner.dataset.last = String(last);
    const cur = state.current;
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const line = state.lines[i];
      const r = cur.byId.get(line.id);
      const row = el("div", "row");
      row.style.top = `${i * ROW}px`;
      row.dataset.id = r.id;
      if (!active.has(r.id)) row.classList.add("off");
      if (r.id === (state.treeMark ?? state.selected)) row.classList.add("sel");
      if (r.fresh) row.classList.add("fresh");
      // Deeply nested branches would push the text off the row: past 4 levels the gutter keeps its last ones.
      const gutter = line.gutter.length > 12 ? line.gutter.slice(-12) : line.gutter;
      row.append(el("span", "gutter", gutter));
      if (line.branch) {
        const fold = el("span", "fold", line.folded ? `▸ ${line.branch}` : `▾ ${line.branch}`);
        fold.title = line.folded ? "Unfold this branch point" : "Fold this branch point";
        fold.onclick = (ev) => {
          ev.stopPropagation();
          if (state.folded.has(r.id)) state.folded.delete(r.id);
          else state.folded.add(r.id);
          relayout();
        };
        row.append(fold);
      }
      row.append(el("span", `kind ${kindClass(r.what)}`, r.what));
      row.append(el("span", "preview", r.preview));
      const label = cur.labels.get(r.id);
      if (label !== undefined) row.append(el("span", "label", String(label)));
      if (r.id === shownLeaf) {
        const hidden = r.id !== cur.leafId ? cur.byId.get(cur.leafId).what : null;
        const mark = el("span", "leaf", hidden === null ? "◀ leaf" : "◀ leaf below");
        if (hidden !== null) mark.title = `The leaf, ${cur.leafId} (${hidden}), is below this entry, hidden by the filter or a folded branch`;
        row.append(mark);
      }
      row.onclick = () => select(r.id);
      frag.append(row);
    }
    inner.replaceChildren(frag);
  }

  function summarize() {
    const cur = state.current;
    if (!cur) return;
    let tips = 0;
    let points = 0;
    for (const kids of cur.children.values()) {
      if (kids.length === 0) tips++;
      if (kids.length > 1) points++;
    }
    const info = state.sessions.find((s) => s.path === cur.path);
    $("title").textContent = visible(cur.state.sessionName || (info ? sessionTitle(info) : cur.path));
    $("title").title = visible(cur.path);
    $("summary").textContent = `${plural(cur.rows.length, "entry", "entries")} · ${plural(tips, "branch tip")} · ${plural(points, "branch point")} · ${plural(cur.labels.size, "label")}`;
  }

  function scrollToId(id) {
    const i = state.lines.findIndex((l) => l.id === id);
    if (i < 0) return;
    const scroll = $("tree-scroll");
    const top = i * ROW;
    if (top < scroll.scrollTop || top > scroll.scrollTop + scroll.clientHeight - ROW) {
      scroll.scrollTop = Math.max(0, top - scroll.clientHeight / 2);
    }
    drawRows(true);
  }

  // ---------------------------------------------------------------------------------------------------------
  // The transcript: the path from the root to a tip (the leaf, or the entry selected off it), as a conversation.
  // Every entry of the path has its place at once, holding its one-line preview; the server's rendered piece
  // (sanitised HTML: markdown, tool calls, folded output) replaces it when the place comes near the view, a
  // page of places at a time, so a session of any size costs what is looked at. A tool result goes under the
  // call it answers as soon as both are there; images and code are loaded and highlighted as they scroll into
  // view.

  const TRANSCRIPT_PAGE = 48;
  const WINDOW = 40;
  const MORE = 60;
  // Code longer than this is left plain: highlighting it would hold the page up.
  const HIGHLIGHT_MAX = 100000;

  /** Mounts a transcript in `pane` (a scrolling element); returns its controller. */
  function transcriptIn(pane, onPick) {
    // `focus`: the entry to keep in view as pieces arrive; `marked`: whether it is the selection (highlighted).
    const t = { pane, tip: undefined, path: [], places: new Map(), calls: new Map(), waiting: new Map(), focus: null, marked: false };
    let pending = new Set();
    let timer = 0;
    let loading = false;
    const lazy = new IntersectionObserver((seen) => {
      for (const e of seen) {
        if (!e.isIntersecting) continue;
        lazy.unobserve(e.target);
        if (e.target.tagName === "IMG" && e.target.dataset.src) {
          e.target.src = e.target.dataset.src;
          e.target.removeAttribute("data-src");
        } else if (e.target.tagName === "CODE") highlight(e.target);
      }
    }, { root: pane, rootMargin: "300px" });
    const near = new IntersectionObserver((seen) => {
      for (const e of seen) {
        if (e.isIntersecting && e.target.dataset.more) {
          grow(MORE, e.target.dataset.more);
          continue;
        }
        if (!e.isIntersecting || e.target.dataset.state !== "place") continue;
        e.target.dataset.state = "asked";
        pending.add(e.target.dataset.entry);
      }
      clearTimeout(timer);
      timer = setTimeout(flush, 20);
    }, { root: pane, rootMargin: "800px" });

    async function flush() {
      if (loading || !pending.size || !state.current) return;
      loading = true;
      const cur = state.current;
      const ids = [...pending].slice(0, TRANSCRIPT_PAGE);
      for (const id of ids) pending.delete(id);
      let pieces = [];
      let failed = false;
      try {
        pieces = await source.transcript(cur.handle, ids);
      } catch (e) {
        failed = true;
        // A file deleted or emptied is said already, and is why.
        if (state.current === cur && !cur.deleted) notice(`Cannot read the transcript: ${e.message}`);
      }
      loading = false;
      if (state.current !== cur) return;
      const got = new Set();
      for (const p of pieces) {
        got.add(p.id);
        fill(p);
      }
      // A page ends early when its pieces are large: the rest are asked for again while still near the view. A
      // refused request is not asked again (a file emptied under the page refused it 25 times a second): the
      // transcript is shown anew, and asked again, once the session changes.
      for (const id of ids) {
        const place = t.places.get(id);
        if (place && !got.has(id) && place.dataset.state === "asked") {
          place.dataset.state = failed ? "failed" : "place";
          if (failed) continue;
          near.unobserve(place);
          near.observe(place);
        }
      }
      if (failed) return;
      if (t.focus !== null && got.has(t.focus)) reveal();
      if (pending.size) flush();
    }

    function fill(p) {
      const place = t.places.get(p.id);
      if (!place) return;
      place.dataset.state = "filled";
      place.className = `entry t-${p.kind}${place.classList.contains("sel") ? " sel" : ""}`;
      // Sanitised by the server (transcript.rs): markup it made, session text only ever as text in it.
      place.innerHTML = p.html;
      const label = state.current.labels.get(p.id);
      const who = place.querySelector(".who");
      if (label !== undefined && who) who.append(" ", el("span", "label", String(label)));
      for (const img of place.querySelectorAll("img[data-src]")) lazy.observe(img);
      for (const code of place.querySelectorAll("pre code")) lazy.observe(code);
      for (const call of place.querySelectorAll("[data-call]")) {
        const slot = call.querySelector(".call-result");
        t.calls.set(call.dataset.call, slot);
        const result = t.waiting.get(call.dataset.call);
        if (result) {
          t.waiting.delete(call.dataset.call);
          slot.append(result);
        }
      }
      if (p.kind === "toolResult" && p.toolCallId !== undefined) {
        const slot = t.calls.get(p.toolCallId);
        if (slot && !slot.contains(place)) slot.append(place);
        else if (!slot) t.waiting.set(p.toolCallId, place);
      }
    }

    function highlight(code) {
      const hljs = window.hljs;
      const lang = [...code.classList].find((c) => c.startsWith("language-"));
      if (!hljs || !lang || code.dataset.highlighted || code.textContent.length > HIGHLIGHT_MAX) return;
      if (!hljs.getLanguage(lang.slice(9))) return;
      hljs.highlightElement(code);
    }

    function reveal(scroll = true) {
      const place = t.places.get(t.focus);
      if (!place) return;
      for (const old of pane.querySelectorAll(".entry.sel")) old.classList.remove("sel");
      if (t.marked) place.classList.add("sel");
      if (!scroll) return;
      const tall = place.offsetHeight > pane.clientHeight;
      place.scrollIntoView({ block: t.marked ? (tall ? "start" : "center") : "end" });
    }

    /** Shows the path to `tip`, and `focus` (an entry of it) scrolled to and highlighted; with no focus, the
     * path's end is in view. */
    t.show = function (tip, focus) {
      const cur = state.current;
      t.marked = focus !== null && focus !== undefined;
      t.focus = t.marked ? focus : tip;
      const fresh = tip !== t.tip || t.path.length === 0;
      if (fresh) {
        t.tip = tip;
        t.path = pathTo(cur, tip);
        t.at = new Map(t.path.map((id, i) => [id, i]));
      }
      const i = t.at.get(t.focus) ?? t.path.length - 1;
      if (fresh || i < t.lo || i >= t.hi) draw(Math.max(0, i - WINDOW), Math.min(t.path.length, i + WINDOW + 1));
      reveal();
    };

    /** Marks `id`, an entry in view (the reader clicked it), as the selection, without scrolling. */
    t.mark = function (id) {
      t.focus = id;
      t.marked = true;
      reveal(false);
    };

    /** The path grew at its end (entries appended after its tip): their places are added if the end is drawn. */
    t.extend = function (tip) {
      const cur = state.current;
      const path = pathTo(cur, tip);
      const n = t.path.length;
      if (n === 0 || path.length < n || path[n - 1] !== t.path[n - 1]) return t.show(tip);
      t.tip = tip;
      t.path = path;
      for (let i = n; i < path.length; i++) t.at.set(path[i], i);
      t.pane.querySelector(".t-head .hint").textContent = `${plural(path.length, "entry", "entries")} from the root to the leaf`;
      if (t.hi === n) grow(path.length - n, "down");
      else edges();
    };

    // Only a window of the path has places (WINDOW each side of the focus at first); reaching either edge of it
    // adds MORE. A path of 100,000 entries costs what a path of 100 does until it is scrolled through.
    let up = null;
    let down = null;
    function draw(lo, hi) {
      const cur = state.current;
      near.disconnect();
      lazy.disconnect();
      pending = new Set();
      t.places.clear();
      t.calls.clear();
      t.waiting.clear();
      up = el("div", "t-more");
      up.dataset.more = "up";
      down = el("div", "t-more");
      down.dataset.more = "down";
      pane.replaceChildren(head(cur, t.path.length, t.tip === cur.leafId), up, down);
      t.lo = t.hi = lo;
      grow(hi - lo, "down");
    }

    function grow(n, where) {
      const cur = state.current;
      const ids = where === "down" ? t.path.slice(t.hi, t.hi + n) : t.path.slice(Math.max(0, t.lo - n), t.lo);
      const frag = document.createDocumentFragment();
      for (const id of ids) {
        const r = cur.byId.get(id);
        const place = el("article", "entry place");
        place.dataset.entry = id;
        place.dataset.state = "place";
        place.append(el("div", "who", r.what), el("div", "t-pre", r.preview));
        t.places.set(id, place);
        frag.append(place);
        near.observe(place);
      }
      if (where === "down") {
        down.before(frag);
        t.hi += ids.length;
      } else {
        up.after(frag);
        t.lo -= ids.length;
      }
      edges();
    }

    // An edge still in view after growing is reported again, so the window grows until it fills the view.
    function edges() {
      for (const [edge, more] of [[up, t.lo > 0], [down, t.hi < t.path.length]]) {
        near.unobserve(edge);
        edge.hidden = !more;
        if (more) near.observe(edge);
      }
    }

    pane.addEventListener("click", (ev) => {
      if (ev.target.closest("a, summary, img")) return;
      const place = ev.target.closest("[data-entry]");
      if (place && pane.contains(place)) onPick(place.dataset.entry);
    });
    return t;
  }

  /** The ids from the root to `tip`, in order. */
  function pathTo(cur, tip) {
    const path = [];
    const seen = new Set();
    let id = tip;
    while (id !== null && id !== undefined && cur.byId.has(id) && !seen.has(id)) {
      seen.add(id);
      path.push(id);
      id = cur.byId.get(id).parentId;
    }
    return path.reverse();
  }

  // The transcript's head: the session's models, tokens and cost (pi's count, as the Tokens & cost tab has it).
  function head(cur, n, toLeaf) {
    const box = el("header", "t-head");
    box.append(el("div", "hint", `${plural(n, "entry", "entries")} from the root to ${toLeaf ? "the leaf" : "the selected entry"}`));
    const line = el("div", "t-usage", "");
    box.append(line);
    usageLines.add(line);
    fillUsage(line, cur);
    return box;
  }

  // The heads' lines of the whole session's usage: filled again when the session changes.
  const usageLines = new Set();
  function fillUsage(line, cur) {
    usageOf(cur).then((u) => {
      if (state.current !== cur || !u.models.length) return;
      const sum = (k) => u.models.reduce((s, m) => s + (m[k] || 0), 0);
      const models = u.models.map((m) => m.model).join(", ");
      // The totals are the whole session's, branches off this path included (pi's count), not the path's above.
      line.textContent = visible(`whole session: ${models} · ${plural(sum("responses"), "response")} · ${num(sum("input"))} in · ${num(sum("output"))} out · ${num(sum("cacheRead"))} cache read · ${num(sum("cacheWrite"))} cache write · ${money(sum("cost"))}`);
    }, () => {});
  }
  function refreshUsageLines() {
    for (const line of [...usageLines]) {
      if (!line.isConnected) usageLines.delete(line);
      else if (state.current) fillUsage(line, state.current);
    }
  }

  // A session's usage, asked for once per state of it (reading it costs a pass over the whole session).
  let usageMemo = { key: null, answer: null };
  function usageOf(cur) {
    const key = `${cur.handle}\n${cur.seq}`;
    if (usageMemo.key !== key) usageMemo = { key, answer: source.usage(cur.handle) };
    usageMemo.answer.catch(() => (usageMemo = { key: null, answer: null }));
    return usageMemo.answer;
  }

  let transcript = null;
  let branchView = null;

  /** The tip whose path shows `id`: the path already shown if it holds it, else the leaf's if that does, else
   * the path to `id` itself. */
  function tipFor(t, id) {
    const cur = state.current;
    if (t.tip !== undefined && t.at && t.at.has(id) && cur.byId.has(t.tip)) return t.tip;
    if (activePath(cur).has(id)) return cur.leafId;
    return id;
  }

  // An entry picked in the transcript is selected in the tree; one the tree's filter hides shows as its nearest
  // drawn ancestor there.
  function pick(id) {
    state.selected = id;
    showAddress();
    const cur = state.current;
    const drawn = new Set(state.lines.map((l) => l.id));
    let shownAs = id;
    const seen = new Set();
    while (shownAs !== null && shownAs !== undefined && !drawn.has(shownAs) && !seen.has(shownAs) && cur.byId.has(shownAs)) {
      seen.add(shownAs);
      shownAs = cur.byId.get(shownAs).parentId;
    }
    state.treeMark = drawn.has(shownAs) ? shownAs : null;
    if (state.treeMark !== null) scrollToId(state.treeMark);
    drawRows(true);
    transcript.mark(id);
  }

  function select(id) {
    state.selected = id;
    state.treeMark = id;
    showAddress();
    drawRows(true);
    transcript.show(tipFor(transcript, id), id);
    if (state.tab === "branch") renderBranch();
  }

  // ---------------------------------------------------------------------------------------------------------
  // The branch: the same transcript, the whole width, from the root to the selected entry (or the leaf)

  function renderBranch() {
    const cur = state.current;
    if (!branchView) branchView = transcriptIn($("branch-pane"), (id) => select(id));
    const tip = state.selected && !activePath(cur).has(state.selected) ? state.selected : cur.leafId;
    branchView.tip = undefined;
    branchView.show(tip, state.selected);
  }

  // ---------------------------------------------------------------------------------------------------------
  // Context and usage

  // A tab made again as the session changes: the last one asked for is shown, an older answer dropped; `again`
  // leaves what is shown in place until the new answer comes (no placeholder flashing at every append).
  let tabTicket = 0;
  async function renderContext(again = false) {
    const pane = $("context-pane");
    const ticket = ++tabTicket;
    const cur = state.current;
    if (!again) pane.replaceChildren(el("p", "hint", "Building the context…"));
    try {
      const ctx = await source.context(cur.handle);
      if (ticket !== tabTicket || state.current !== cur) return;
      const model = ctx.model ? `${ctx.model.provider}/${ctx.model.modelId}` : "no model recorded";
      pane.replaceChildren(el("p", "hint", `What the model sees: ${plural(ctx.messages.length, "message")} · ${model} · thinking ${ctx.thinkingLevel}`));
      for (const m of ctx.messages) {
        const card = el("div", "card");
        const extra = [m.title, m.images ? plural(m.images, "image") : "", m.toolCalls.length ? `calls ${m.toolCalls.join(", ")}` : ""].filter(Boolean).join(" · ");
        card.append(el("div", "c-head", extra ? `${m.role} · ${extra}` : m.role));
        card.append(el("pre", "text", m.text));
        pane.append(card);
      }
    } catch (e) {
      if (ticket === tabTicket) pane.replaceChildren(el("p", "hint", e.message));
    }
  }

  async function renderUsage(again = false) {
    const pane = $("usage-pane");
    const ticket = ++tabTicket;
    const cur = state.current;
    if (!again) pane.replaceChildren(el("p", "hint", "Adding up…"));
    try {
      const u = await usageOf(cur);
      if (ticket !== tabTicket || state.current !== cur) return;
      pane.replaceChildren();
      const table = el("table", "usage-table");
      const head = el("tr");
      for (const h of ["model", "responses", "input", "output", "cache read", "cache write", "cost"]) head.append(el("th", "", h));
      table.append(head);
      const total = { responses: 0, input: 0, output: 0, cacheRead: 0, cacheWrite: 0, cost: 0 };
      for (const m of u.models) {
        const tr = el("tr");
        tr.append(el("td", "", m.model), el("td", "n", num(m.responses)), el("td", "n", num(m.input)), el("td", "n", num(m.output)), el("td", "n", num(m.cacheRead)), el("td", "n", num(m.cacheWrite)), el("td", "n", money(m.cost)));
        table.append(tr);
        for (const k of Object.keys(total)) total[k] += m[k] || 0;
      }
      const tr = el("tr", "total");
      tr.append(el("td", "", "total"), el("td", "n", num(total.responses)), el("td", "n", num(total.input)), el("td", "n", num(total.output)), el("td", "n", num(total.cacheRead)), el("td", "n", num(total.cacheWrite)), el("td", "n", money(total.cost)));
      table.append(tr);
      pane.append(table);
      const kinds = Object.entries(u.kinds).sort((a, b) => b[1] - a[1]).map(([k, n]) => `${num(n)} ${k}`).join(", ");
      pane.append(el("p", "hint", kinds ? `Entries: ${kinds}` : "No entries yet."));
    } catch (e) {
      if (ticket === tabTicket) pane.replaceChildren(el("p", "hint", e.message));
    }
  }

  // The usage overview: every session's tokens and cost by day, one bar a day stacked by model (plain SVG).
  const PALETTE = ["#0550ae", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#cf222e", "#116329", "#6e7781"];
  // SVG's namespace as the HTML parser assigns it: the page holds no address, not even one that is only a name.
  const SVG = (() => {
    const box = document.createElement("div");
    box.innerHTML = "<svg></svg>";
    return box.firstChild.namespaceURI;
  })();
  const svg = (tag, attrs) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  };

  /** Days without usage between two that have some are drawn one slot each up to this many; a longer pause is
   * one slot marked "…", so that months without usage neither squeeze the bars nor push the newest off-screen. */
  const MAX_GAP_DAYS = 14;

  /** The chart's slots: the days of `days` (sorted, with usage) and the calendar days between them, a day without
   * usage showing as a gap; a pause longer than MAX_GAP_DAYS is one `{gap: n}` slot. */
  function calendarDays(days) {
    const DAY = 86400000;
    const slots = [];
    days.forEach((day, i) => {
      if (i) {
        const from = Date.parse(`${days[i - 1]}T00:00:00Z`);
        const missing = Math.round((Date.parse(`${day}T00:00:00Z`) - from) / DAY) - 1;
        if (missing > MAX_GAP_DAYS) slots.push({ gap: missing });
        else for (let k = 1; k <= missing; k++) slots.push(new Date(from + k * DAY).toISOString().slice(0, 10));
      }
      slots.push(day);
    });
    return slots;
  }

  /** The chart in a box that scrolls sideways when it is wider than the page, scrolled to its newest day. */
  function scrolledToEnd(chart) {
    const box = el("div", "chart-box");
    box.append(chart);
    requestAnimationFrame(() => (box.scrollLeft = box.scrollWidth));
    return box;
  }

  function stackedBars(kind, days, models, value, label) {
    const height = 200;
    const top = 16, bottom = 24, left = 64;
    // Wide slots while they fit 1,100 px; at least 6 px each beyond that (the box then scrolls).
    const slot = Math.max(6, Math.min(32, (1100 - left - 10) / Math.max(days.length, 1)));
    const width = Math.max(320, left + 10 + days.length * slot);
    const totals = days.map((d) => (typeof d === "string" ? models.reduce((sum, m) => sum + value(d, m), 0) : 0));
    const most = Math.max(...totals, 0) || 1;
    const bar = Math.max(3, Math.min(40, slot - 4));
    const chart = svg("svg", { class: "chart", "data-kind": kind, width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
    chart.append(svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width, y2: height - bottom }));
    const peak = svg("text", { x: left - 6, y: top + 4, "text-anchor": "end" });
    peak.textContent = label(most);
    chart.append(peak);
    const scale = (height - top - bottom) / most;
    days.forEach((day, i) => {
      const x = left + 4 + i * slot;
      if (typeof day !== "string") {
        const t = svg("text", { x: x + bar / 2, y: height - bottom - 6, "text-anchor": "middle", class: "gap" });
        t.textContent = "…";
        const tip = svg("title");
        tip.textContent = `${num(day.gap)} days without usage`;
        t.append(tip);
        chart.append(t);
        return;
      }
      let y = height - bottom;
      models.forEach((model, k) => {
        const v = value(day, model);
        if (!(v > 0)) return;
        const h = v * scale;
        y -= h;
        const rect = svg("rect", { x, y, width: bar, height: Math.max(h, 0.5), fill: PALETTE[k % PALETTE.length], "data-day": day, "data-model": model, "data-value": v });
        const tip = svg("title");
        tip.textContent = `${day} · ${model}: ${label(v)}`;
        rect.append(tip);
        chart.append(rect);
      });
      if (days.length <= 16 || i % Math.ceil(days.length / 16) === 0) {
        const t = svg("text", { x: x + bar / 2, y: height - 8, "text-anchor": "middle" });
        t.textContent = day.slice(5);
        chart.append(t);
      }
    });
    return chart;
  }

  // The colours of a chart's series, in the order its bars stack them.
  function legendOf(names) {
    const legend = el("div", "legend");
    names.forEach((name, k) => {
      const item = el("span");
      const swatch = el("span", "swatch");
      swatch.style.background = PALETTE[k % PALETTE.length];
      item.append(swatch, el("span", "", name));
      legend.append(item);
    });
    return legend;
  }

  // The overview on screen follows the sessions: a change to any is added up again, once things settle.
  let overviewTicket = 0;
  let overviewTimer = 0;
  function overviewAgainSoon() {
    if (!state.overview) return;
    clearTimeout(overviewTimer);
    overviewTimer = setTimeout(() => state.overview && showOverview(true), 1500);
  }

  /** Shows the usage overview; `again`: it is on screen already, and is replaced when the new sums come. */
  async function showOverview(again = false) {
    const ticket = ++overviewTicket;
    const pane = $("overview-pane");
    if (!again) {
      state.overview = true;
      showAddress();
      $("overview-button").classList.add("on");
      $("tabs").hidden = true;
      for (const t of ["tree", "branch", "context", "usage"]) $(`${t}-pane`).hidden = true;
      $("empty").hidden = true;
      pane.hidden = false;
      pane.replaceChildren(el("p", "hint", "Adding up every session…"));
    }
    try {
      const o = await source.overview();
      if (ticket !== overviewTicket || !state.overview) return;
      const days = [...new Set(o.rows.map((r) => r.day))].sort();
      const byModel = new Map();
      for (const r of o.rows) byModel.set(r.model, (byModel.get(r.model) || 0) + r.cost);
      // The costliest models at the bottom of each bar, where they are easiest to compare.
      const models = [...byModel.keys()].sort((a, b) => byModel.get(b) - byModel.get(a) || (a < b ? -1 : 1));
      // The team catalog's rows are also by machine: a day and model's cell adds its machines up.
      const cell = new Map();
      const byMachine = new Map();
      for (const r of o.rows) {
        for (const [map, key] of [[cell, `${r.day}\n${r.model}`], [byMachine, `${r.day}\n${r.machine}`]]) {
          const c = map.get(key) || map.set(key, {}).get(key);
          for (const f of ["input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"]) c[f] = (c[f] || 0) + r[f];
        }
      }
      const value = (field) => (day, model) => (cell.get(`${day}\n${model}`) || {})[field] || 0;
      pane.replaceChildren(el("p", "hint", `Every session (${plural(o.sessions, "session")}${o.unreadable ? `, ${num(o.unreadable)} unreadable and not counted` : ""}), by day (UTC) and model`));
      if (!o.rows.length) return pane.append(el("p", "hint", "No tokens recorded."));
      const legend = legendOf(models);
      const chartDays = calendarDays(days);
      pane.append(el("h3", "hint", "Tokens"), scrolledToEnd(stackedBars("tokens", chartDays, models, value("totalTokens"), num)));
      pane.append(el("h3", "hint", "Cost"), scrolledToEnd(stackedBars("cost", chartDays, models, value("cost"), money)), legend);
      const machines = [...new Set(o.rows.map((r) => r.machine).filter((m) => m !== undefined))].sort();
      if (machines.length) {
        const perMachine = (field) => (day, m) => (byMachine.get(`${day}\n${m}`) || {})[field] || 0;
        pane.append(el("h3", "hint", "Tokens by machine (person)"), scrolledToEnd(stackedBars("machine-tokens", chartDays, machines, perMachine("totalTokens"), num)));
        pane.append(el("h3", "hint", "Cost by machine (person)"), scrolledToEnd(stackedBars("machine-cost", chartDays, machines, perMachine("cost"), money)), legendOf(machines));
      }
      // The days' sums and the total as the server added them, in the order `pi-sessiond usage` adds them, so
      // that the two show the same figures to the last digit.
      const table = el("table", "usage-table");
      const head = el("tr");
      for (const h of ["day", "input", "output", "cache read", "cache write", "total tokens", "cost"]) head.append(el("th", "", h));
      table.append(head);
      const cells = (first, u) => [el("td", "", first), el("td", "n", num(u.input)), el("td", "n", num(u.output)), el("td", "n", num(u.cacheRead)), el("td", "n", num(u.cacheWrite)), el("td", "n", num(u.totalTokens)), el("td", "n", money(u.cost))];
      for (const u of o.days.slice().reverse()) {
        const tr = el("tr");
        tr.dataset.day = u.day;
        tr.dataset.cost = String(u.cost);
        tr.append(...cells(u.day, u));
        table.append(tr);
      }
      const total = el("tr", "total");
      total.dataset.cost = String(o.total.cost);
      total.append(...cells("total", o.total));
      table.append(total);
      pane.append(table);
    } catch (e) {
      if (ticket === overviewTicket) pane.replaceChildren(el("p", "hint", e.message));
    }
  }

  function hideOverview() {
    state.overview = false;
    $("overview-button").classList.remove("on");
    $("overview-pane").hidden = true;
    $("tabs").hidden = false;
    showAddress();
  }

  function showTab(tab) {
    if (state.overview) hideOverview();
    state.tab = tab;
    for (const b of document.querySelectorAll("#tabs button[data-tab]")) b.classList.toggle("on", b.dataset.tab === tab);
    for (const t of ["tree", "branch", "context", "usage"]) $(`${t}-pane`).hidden = !state.current || t !== tab;
    $("tools").hidden = tab !== "tree";
    $("empty").hidden = !!state.current;
    if (!state.current) return;
    if (tab === "tree") drawRows(true);
    if (tab === "branch") renderBranch();
    if (tab === "context") renderContext();
    if (tab === "usage") renderUsage();
  }

  // ---------------------------------------------------------------------------------------------------------
  // Addresses and keys: `?token=T&session=<id or path>&entry=<id>` opens a session at an entry (`&overview=1`:
  // the usage overview over it), and the address bar always says what is open, so it can be bookmarked or shared
  // with whoever has the token. Each session opened and the overview are a step of the browser's history, so
  // Back returns to the one before; moving from entry to entry is not (it replaces the step).

  /** Above 0 while the page follows the history (Back, Forward) rather than making a step of it: a count, since
   * Back pressed again starts another before the first is done. */
  let followingHistory = 0;

  function showAddress() {
    if (source.mode !== "live") return;
    const q = new URLSearchParams(location.search);
    const step = (params) => `${params.get("session") ?? ""}\n${params.has("overview")}`;
    const before = step(q);
    q.delete("session");
    q.delete("entry");
    q.delete("overview");
    const cur = state.current;
    if (cur) {
      const info = state.sessions.find((s) => s.path === cur.path && s.machine === cur.machine);
      q.set("session", info && typeof info.id === "string" && info.id ? info.id : cur.path);
      if (state.selected) q.set("entry", state.selected);
    }
    if (state.overview) q.set("overview", "1");
    const address = `${location.pathname}?${q}`;
    if (step(q) !== before && !followingHistory) history.pushState(null, "", address);
    else history.replaceState(null, "", address);
  }

  /** Shows what the address says (at start, and after Back or Forward). */
  async function showAddressed() {
    const q = new URLSearchParams(location.search);
    // An address of an older page named the session by path after `#session=`.
    const wanted = q.get("session") || new URLSearchParams(location.hash.slice(1)).get("session");
    const found = wanted && findSession(wanted);
    const cur = state.current;
    followingHistory++;
    try {
      if (source.mode === "export") await openSession(state.sessions[0].path, q.get("entry"), undefined, true);
      else if (found && cur && found.path === cur.path && found.machine === cur.machine) {
        // The session shown is the one the address names: an open still under way (of the step Back left) is
        // dropped, or it would take the page over when it is answered.
        openTicket++;
        document.body.dataset.state = "ready";
        const entry = q.get("entry");
        if (entry && cur.byId.has(entry)) select(entry);
      } else if (found) await openSession(found.path, q.get("entry"), found.machine, true);
      else if (!wanted && cur) closeSession();
      else {
        if (wanted) notice(ambiguity(wanted));
        document.body.dataset.state = "ready";
      }
      if (source.overview && q.has("overview") && !state.overview) await showOverview();
      else if (!q.has("overview") && state.overview) showTab(state.tab);
    } finally {
      followingHistory--;
    }
  }

  /** What to say of an address's session that names no listed session, or more than one. */
  function ambiguity(wanted) {
    const some = state.sessions.filter((s) => typeof s.id === "string" && s.id.startsWith(wanted));
    if (some.length < 2) return `No listed session is ${wanted}`;
    return `${some.length} sessions match ${wanted}: ${some.map((s) => s.id).join(", ")}; give more of the id`;
  }

  /** The listed session an address names: its path, its id, or a prefix of exactly one id. */
  function findSession(wanted) {
    const exact = state.sessions.find((s) => s.path === wanted || s.id === wanted);
    if (exact) return exact;
    const some = state.sessions.filter((s) => typeof s.id === "string" && s.id.startsWith(wanted));
    return some.length === 1 ? some[0] : null;
  }

  // The keys move a cursor in the list (sessions or search hits) or the selection in the tree, whichever has
  // the keys ("zone"): j/k or the arrows move, Enter opens, h/← goes back to the list, / searches, ? lists them.
  const KEYS = [
    ["j  ↓", "next session, hit or entry"],
    ["k  ↑", "previous one"],
    ["Enter", "open the session or hit under the cursor"],
    ["h  ←", "back to the list"],
    ["l  →", "into the open session's tree"],
    ["/", "search"],
    ["Esc", "leave the search box, close this sheet"],
    ["?", "this sheet"],
  ];

  function toggleSheet(show) {
    let sheet = $("keys");
    if (!sheet) {
      sheet = el("div", "keys");
      sheet.id = "keys";
      sheet.hidden = true;
      sheet.setAttribute("role", "dialog");
      sheet.append(el("h3", "", "Keyboard"));
      const table = el("table");
      for (const [k, what] of KEYS) {
        const tr = el("tr");
        tr.append(el("td", "key", k), el("td", "", what));
        table.append(tr);
      }
      sheet.append(table);
      document.body.append(sheet);
    }
    sheet.hidden = show === undefined ? !sheet.hidden : !show;
  }

  function listItems() {
    return [...document.querySelectorAll("#list .session, #list .hit")];
  }

  function moveCursor(step) {
    const items = listItems();
    if (!items.length) return;
    let at = items.findIndex((i) => i.classList.contains("cur"));
    if (at < 0) at = Math.max(-1, items.findIndex((i) => i.classList.contains("on")));
    const next = Math.min(items.length - 1, Math.max(0, at < 0 ? 0 : at + step));
    items.forEach((item, i) => item.classList.toggle("cur", i === next));
    items[next].scrollIntoView({ block: "nearest" });
  }

  function moveSelection(step) {
    if (!state.lines.length) return;
    let at = state.lines.findIndex((l) => l.id === state.selected);
    if (at < 0) at = Math.max(0, state.lines.findIndex((l) => l.id === shownLeaf));
    else at = Math.min(state.lines.length - 1, Math.max(0, at + step));
    scrollToId(state.lines[at].id);
    select(state.lines[at].id);
  }

  function onKey(ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const typing = ev.target instanceof Element && ev.target.matches("input, select, textarea");
    if (ev.key === "Escape") {
      toggleSheet(false);
      if (typing) ev.target.blur();
      return;
    }
    if (typing) return;
    const key = { ArrowDown: "j", ArrowUp: "k", ArrowLeft: "h", ArrowRight: "l" }[ev.key] || ev.key;
    if (!["j", "k", "h", "l", "Enter", "/", "?"].includes(key)) return;
    ev.preventDefault();
    if (key === "/") return $("search").focus();
    if (key === "?") return toggleSheet();
    if (key === "h") return (state.zone = "list");
    if (key === "l") return state.current && !state.overview && (state.zone = "tree");
    const inTree = state.zone === "tree" && state.current && !state.overview && state.tab === "tree";
    if (key === "Enter") {
      const cur = listItems().find((i) => i.classList.contains("cur"));
      if (cur && !inTree) cur.click();
      return;
    }
    if (inTree) moveSelection(key === "j" ? 1 : -1);
    else moveCursor(key === "j" ? 1 : -1);
  }

  // ---------------------------------------------------------------------------------------------------------
  // Opening and following

  // The last session asked for: an open answered after a later one was asked for is dropped, so the session
  // clicked last is the one shown, however long the one before takes to read.
  let openTicket = 0;

  /** `fromHistory`: opened to show what Back or Forward reached (its address is replaced, not pushed); a click's
   * open answered while such an open is under way is a step of its own all the same. */
  async function openSession(path, entryId, machine, fromHistory = false) {
    const ticket = ++openTicket;
    state.openedAt = performance.now();
    document.body.dataset.state = "opening";
    notice("");
    let snap;
    try {
      snap = await source.open(path, machine);
    } catch (e) {
      if (ticket !== openTicket) return;
      notice(`Cannot open ${path}: ${e.message}`);
      document.body.dataset.state = "error";
      return;
    }
    // Each open is one reference on the server (the same session opened again gives the same handle): one close
    // for each, whether the open was overtaken or its session is replaced below.
    if (ticket !== openTicket) return source.close(snap.state.handle);
    // What follows runs at once (no await): the history counter says what this open is for, while it runs.
    const following = followingHistory;
    followingHistory = fromHistory ? 1 : 0;
    try {
      showOpened(snap, path, entryId, machine);
    } finally {
      followingHistory = following;
    }
  }

  function showOpened(snap, path, entryId, machine) {
    const previous = state.current;
    if (previous) source.close(previous.handle);
    state.current = index(snap, path);
    state.current.machine = machine;
    state.current.pushed = pushedAs(listedCurrent());
    noticeFile(state.current, false);
    showResume();
    state.folded.clear();
    state.selected = null;
    state.treeMark = null;
    $("empty").hidden = true;
    if (!transcript) transcript = transcriptIn($("detail"), pick);
    transcript.tip = undefined;
    $("tree-scroll").scrollTop = 0;
    state.zone = "tree";
    // The lines are laid out for this session before anything draws them: the tab's first draw would otherwise
    // look up the previous session's lines in this one.
    relayout();
    showTab(state.tab);
    // An entry asked for by address is shown even when the current filter hides it.
    if (entryId && state.current.byId.has(entryId) && !state.lines.some((l) => l.id === entryId)) {
      state.filter = $("filter").value = "all";
      relayout();
    }
    scrollToId(entryId || shownLeaf);
    if (entryId && state.current.byId.has(entryId)) select(entryId);
    else {
      transcript.show(state.current.leafId, null);
      showAddress();
    }
    renderList();
    document.body.dataset.treeMs = String(Math.round(performance.now() - state.openedAt));
    document.body.dataset.state = "ready";
  }

  /** Back to no session open (an address that names none, after Back). */
  function closeSession() {
    openTicket++;
    source.close(state.current.handle);
    state.current = null;
    state.selected = null;
    showResume();
    notice("");
    $("title").textContent = "Sessions";
    $("title").title = "";
    $("summary").textContent = "";
    showTab(state.tab);
    renderList();
  }

  /** Loads the open session again. */
  // The last resync asked for is the one applied: a file rewritten twice is reported `reset` twice, and the
  // snapshot asked after the first may be answered after the second's.
  let resyncTicket = 0;
  async function resync() {
    const ticket = ++resyncTicket;
    const cur = state.current;
    try {
      const snap = await source.snapshot(cur.handle);
      // Overtaken by a later resync, or another session was opened meanwhile.
      if (ticket !== resyncTicket || !state.current || state.current.handle !== cur.handle) return;
      state.current = index(snap, cur.path);
      state.current.machine = cur.machine;
      state.current.pushed = cur.pushed;
      state.current.deleted = false;
      showResume();
      noticeFile(state.current, false);
      relayout();
      transcript.tip = undefined;
      if (state.selected && state.current.byId.has(state.selected)) select(state.selected);
      else transcript.show(state.current.leafId, null);
      refreshTab();
    } catch (e) {
      if (ticket === resyncTicket && state.current === cur) notice(`Cannot read the session file now (${e.message}); it is read again when it changes.`);
    }
  }

  /** The open session's file was deleted, or emptied: the page keeps what it shows (what was read of it) and
   * asks nothing of the file until it is back (a `reset`, which resyncs). A file emptied and written again is
   * reported `deleted`, then `reset`: a snapshot asked before the deletion is of the file as it was, dropped. */
  function fileGone() {
    resyncTicket++;
    state.current.deleted = true;
    showResume();
    noticeFile(state.current, true);
  }

  function onEvent(ev) {
    const cur = state.current;
    // A push changed the team catalog (no path): the list is loaded again.
    if (ev.kind === "sessions") overviewAgainSoon();
    if (ev.kind === "sessions" && ev.path === undefined) return loadSessions();
    // The server dropped events this page was too slow to take: what it shows is loaded again.
    if (ev.kind === "lagged") {
      loadSessions();
      if (cur) resync();
      return;
    }
    if (ev.kind === "sessions") return onSessionsEvent(ev);
    if (!cur || ev.handle !== cur.handle || ev.seq <= cur.seq) return;
    if (ev.seq !== cur.seq + 1) return resync();
    cur.seq = ev.seq;
    const leafBefore = cur.leafId;
    // A line that was incomplete when the file was read is whole now: what reading found is asked again.
    if (ev.kind === "append" && cur.warnings.some((w) => w.kind === "torn_tail")) return resync();
    if (ev.kind === "append") {
      for (const r of ev.rows) {
        r.fresh = true;
        addRow(cur, r);
      }
      cur.leafId = ev.leafId ?? cur.leafId;
    } else if (ev.kind === "leaf") {
      cur.leafId = ev.leafId ?? null;
    } else if (ev.kind === "deleted") {
      return fileGone();
    } else {
      return resync();
    }
    relayout();
    if ($("follow").checked) scrollToId(shownLeaf);
    // A transcript of the leaf's path follows the leaf.
    if (transcript.tip === leafBefore && cur.leafId !== leafBefore) {
      transcript.extend(cur.leafId);
      if ($("follow").checked && !state.selected) transcript.show(cur.leafId, null);
    }
    if (state.tab === "branch" && !state.selected) renderBranch();
    refreshTab();
    refreshUsageLines();
  }

  /** What the model sees and what the session cost change with every append, leaf move or rewrite: the tab
   * showing either is made again. */
  function refreshTab() {
    if (state.tab === "context") renderContext(true);
    if (state.tab === "usage") renderUsage(true);
  }

  // ---------------------------------------------------------------------------------------------------------

  function start() {
    $("search").oninput = onSearchInput;
    $("list-filter").oninput = () => renderList();
    $("resume-copy").onclick = copyResume;
    $("tree-scroll").onscroll = () => drawRows(false);
    window.onresize = () => drawRows(true);
    $("filter").onchange = (e) => {
      state.filter = e.target.value;
      relayout();
    };
    $("to-leaf").onclick = () => shownLeaf !== null && (scrollToId(shownLeaf), select(shownLeaf));
    for (const b of document.querySelectorAll("#tabs button[data-tab]")) b.onclick = () => showTab(b.dataset.tab);
    if (source.overview) $("overview-button").onclick = () => (state.overview ? showTab(state.tab) : showOverview());
    else $("overview-button").hidden = true;
    showTab("tree");
    // An exported page is a moment of the session: nothing is appended to follow.
    $("follow-label").hidden = source.mode !== "live";
    source.onEvent(onEvent);
    document.addEventListener("keydown", onKey);
    loadSessions().then(showAddressed);
    window.addEventListener("popstate", () => showAddressed());
    // A reload or a tab closed gives the open session back to the server now (the server would, a while later).
    window.addEventListener("pagehide", () => state.current && source.leave && source.leave(state.current.handle));
    setInterval(refreshAges, 30000);
  }
  start();
})();
