-- pi-sessiond for Neovim: lists pi sessions and shows a session's tree, following the file live while pi writes.
--
-- One pi-sessiond process serves every buffer (started on first use). Tree buffers are named
-- `pi-session://<absolute path>` and filled by a BufReadCmd (see plugin/pi_sessiond.lua), so `:edit`, `:bwipeout`
-- and buffer switching behave as for any buffer: unloading the buffer closes the session handle.

local rpc = require("pi_sessiond.rpc")
local tree = require("pi_sessiond.tree")
local json = require("pi_sessiond.json")

local api = vim.api
local levels = vim.log.levels

local M = {}

local TREE_SCHEME = "pi-session://"
local LIST_SCHEME = "pi-sessions://"

local config = {
  binary = nil, -- path or name of the server; default: $PI_SESSIOND_BIN, the plugin's bin/, `pi-sessiond` on PATH
  args = {}, -- extra server arguments, e.g. { "--agent-dir", "/path" }
}

local client -- the running server (rpc client), or nil
local views = {} -- tree buffer → view
local lists = {} -- list buffer name → buffer
local ns = api.nvim_create_namespace("pi_sessiond")

local function notify(msg, level)
  vim.notify("pi-sessiond: " .. msg, level or levels.INFO)
end

local function define_highlights()
  vim.cmd([[
    highlight default link PiSessiondOffPath Comment
    highlight default link PiSessiondLeaf Title
    highlight default link PiSessiondLabel Special
    highlight default link PiSessiondNotLive WarningMsg
    highlight default link PiSessiondWarnings DiagnosticWarn
  ]])
end

--- Configures the plugin (optional: the defaults work when `pi-sessiond` is on PATH or $PI_SESSIOND_BIN is set).
--- @param opts table|nil { binary = string?, args = string[]? }
function M.setup(opts)
  opts = opts or {}
  local changed = false
  for _, key in ipairs({ "binary", "args" }) do
    if opts[key] ~= nil and not vim.deep_equal(opts[key], config[key]) then
      config[key] = opts[key]
      changed = true
    end
  end
  -- A server started from the old settings would keep serving new commands; stop it so the next command uses
  -- what was just configured.
  if changed and client then
    client:stop()
    client = nil
  end
end

-- The plugin's folder (the parent of lua/): a binary built into its bin/ (the lazy.nvim spec's `build` step does
-- this) is the one packaged with the plugin.
local plugin_root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h:h")

--- The server binary to run and where its name came from, or nil and a one-line message saying how to install it.
--- In order, as the other clients look: setup({ binary }), $PI_SESSIOND_BIN, the plugin's own bin/pi-sessiond,
--- `pi-sessiond` on PATH.
--- @return string|nil path, string source_or_error
function M.binary()
  local bin, source
  if config.binary and config.binary ~= "" then
    bin, source = config.binary, "setup({ binary = … })"
  elseif vim.env.PI_SESSIOND_BIN and vim.env.PI_SESSIOND_BIN ~= "" then
    bin, source = vim.env.PI_SESSIOND_BIN, "$PI_SESSIOND_BIN"
  elseif vim.fn.executable(plugin_root .. "/bin/pi-sessiond") == 1 then
    bin, source = plugin_root .. "/bin/pi-sessiond", "the plugin's bin/"
  else
    bin, source = "pi-sessiond", "the default, looked up on PATH"
  end
  if bin:sub(1, 1) == "~" then
    bin = (vim.env.HOME or "") .. bin:sub(2)
  end
  local path = vim.fn.exepath(bin)
  if path == "" then
    return nil,
      string.format(
        "cannot find the server binary '%s' (from %s); install it with `cargo install --locked pi-sessiond` "
          .. "(or `pip install pi-sessiond`, or the lazy.nvim spec's build step), or set $PI_SESSIOND_BIN",
        bin,
        source
      )
  end
  return path, source
end

--- The extra server arguments setup() was given (for :checkhealth, which reads --agent-dir from them).
--- @return string[]
function M.server_args()
  return vim.deepcopy(config.args or {})
end

local on_session_changed, on_server_exit, reopen_all -- defined with the views below

--- The running server, started if needed; nil (after an error message) when it cannot run. A server started here
--- also takes over every tree whose server died: each opens its session on it again.
function M.client()
  if client and client:is_alive() then
    return client
  end
  local bin, err = M.binary()
  if not bin then
    notify(err, levels.ERROR)
    return nil
  end
  local cmd = { bin }
  vim.list_extend(cmd, config.args or {})
  local c, spawn_err = rpc.start({
    cmd = cmd,
    on_exit = function(c)
      if client == c then
        client = nil
      end
      if not c.stopping then
        notify(bin .. " " .. (c.exit_description or "exited"), levels.ERROR)
      end
      on_server_exit(c)
    end,
  })
  if not c then
    notify(string.format("cannot start '%s': %s", bin, spawn_err), levels.ERROR)
    return nil
  end
  client = c
  -- Handles are the server's names: the same one may name another session on the next server.
  c:on("session/changed", function(note)
    on_session_changed(c, note)
  end)
  c:request("initialize", { clientInfo = { name = "pi_sessiond.nvim" } }, function(ierr, result)
    if ierr then
      if ierr.data and ierr.data.kind ~= "client_exited" then
        notify("initialize failed: " .. tostring(ierr.message), levels.ERROR)
      end
      return
    end
    local version = type(result) == "table" and result.protocolVersion or nil
    if type(version) ~= "string" or not version:match("^1%.") then
      notify("protocol version " .. tostring(version) .. " is not 1.x; this plugin may misread it", levels.WARN)
    end
    c:notify("initialized", {})
  end)
  reopen_all(c)
  return c
end

--- Stops the server (its sessions are closed by it, in order). Called when Neovim exits.
function M.stop()
  if client then
    client:stop()
    client = nil
  end
end

-- ---------------------------------------------------------------------------------------------------------------
-- Buffers

local function set_lines(buf, lines)
  api.nvim_buf_set_option(buf, "modifiable", true)
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  api.nvim_buf_set_option(buf, "modifiable", false)
  api.nvim_buf_set_option(buf, "modified", false)
end

local function scratch_options(buf, filetype)
  api.nvim_buf_set_option(buf, "buftype", "nofile")
  api.nvim_buf_set_option(buf, "swapfile", false)
  api.nvim_buf_set_option(buf, "filetype", filetype)
end

local function windows_of(buf)
  local wins = {}
  for _, w in ipairs(api.nvim_list_wins()) do
    if api.nvim_win_get_buf(w) == buf then
      wins[#wins + 1] = w
    end
  end
  return wins
end

local function map(buf, lhs, fn, desc)
  vim.keymap.set("n", lhs, fn, { buffer = buf, nowait = true, silent = true, desc = desc })
end

-- ---------------------------------------------------------------------------------------------------------------
-- Tree views

-- The views of a handle on a server (a handle is only the server's name for it: the next server may give the same
-- one to another session).
local function views_of_handle(c, handle)
  local out = {}
  if handle == nil then
    return out
  end
  for _, v in pairs(views) do
    if v.client == c and v.handle == handle then
      out[#out + 1] = v
    end
  end
  return out
end

-- The width a tree is drawn to: the text area of the narrowest window showing it, so that in every window each
-- line ends in view, with its label and leaf marker.
local function text_width(wins)
  local width
  for _, w in ipairs(wins) do
    local info = vim.fn.getwininfo(w)[1]
    local cols = api.nvim_win_get_width(w) - (info and info.textoff or 0)
    width = width and math.min(width, cols) or cols
  end
  return width
end

-- Tree lines are cut to the window instead: a wrapped line would go on at column 0, under the guides (│ ├─) of
-- the lines around it. Local to the window and buffer, as :setlocal is, so other buffers keep the user's 'wrap'.
local function no_wrap(win)
  if api.nvim_win_get_option(win, "wrap") then
    api.nvim_win_call(win, function()
      vim.cmd("setlocal nowrap")
    end)
  end
end

-- What `session/getWarnings` reports that a reader of the tree should know: a line pi skips, a torn last line, a
-- broken parent link. An older format version (migrated in memory) and a missing final newline (added before
-- the next append) lose nothing, so they are not reported, as the web view does not.
local function problems(view)
  local found = {}
  for _, w in ipairs(view.warnings or {}) do
    if type(w) == "table" and w.kind ~= "legacy_version" and w.kind ~= "missing_final_newline" then
      found[#found + 1] = w
    end
  end
  return found
end

-- The one line above the entries that says what reading the file found: how many problems, the first of them,
-- cut to the window with its closing bracket in view. nil when nothing was found.
local function problems_line(view, width)
  local found = problems(view)
  if #found == 0 then
    return nil
  end
  local first = found[1]
  local where = (type(first.line) == "number" and first.line > 0) and ("line " .. first.line .. ": ") or ""
  local text = string.format("reading the file found %d %s: %s%s", #found, #found == 1 and "problem" or "problems",
    where, tree.one_line(type(first.message) == "string" and first.message or tostring(first.kind)))
  if #found > 1 then
    text = text .. "; and " .. (#found - 1) .. " more"
  end
  return "[" .. tree.fit(text, math.max(width - 2, 1)) .. "]"
end

local function render(view)
  local buf = view.buf
  if not api.nvim_buf_is_loaded(buf) or not (view.loaded or view.dead) then
    return -- nothing to draw over "Loading …" yet
  end
  local wins = windows_of(buf)
  if #wins == 0 then
    -- Nobody sees it: draw once it is shown again (BufWinEnter), not on every append pi makes.
    view.dirty = true
    return
  end
  view.dirty = false
  for _, w in ipairs(wins) do
    no_wrap(w)
  end
  view.width = text_width(wins)
  local out = view.model:render(view.width)
  local lines = {}
  -- A tree whose server died says so above the entries: it shows what it held then, and follows nothing.
  if view.dead then
    -- Cut in its middle, so what to press stays in view however narrow the window.
    local head, tail = "[not live: ", "; R reconnects]"
    local room = math.max(view.width - vim.fn.strdisplaywidth(head .. tail), 1)
    lines[#lines + 1] = head .. tree.fit(tree.one_line(view.dead), room) .. tail
  end
  local problems_at = nil
  local found = problems_line(view, view.width)
  if found then
    lines[#lines + 1] = found
    problems_at = #lines
  end
  local top = #lines
  vim.list_extend(lines, out.lines)
  if #out.lines == 0 and view.loaded then
    lines[#lines + 1] = "(no entries)"
  end

  -- Keep each window's cursor on the entry it was on; a cursor on the leaf follows the leaf as pi appends.
  local saved = {}
  for _, w in ipairs(wins) do
    local row, col = unpack(api.nvim_win_get_cursor(w))
    saved[w] = { id = view.ids[row], on_leaf = view.leaf_line ~= nil and row == view.leaf_line, row = row, col = col }
  end

  set_lines(buf, lines)
  view.ids = {}
  local line_of = {}
  for line, id in pairs(out.ids) do
    view.ids[line + top] = id
    if line_of[id] == nil or line + top < line_of[id] then
      line_of[id] = line + top
    end
  end
  view.leaf_line = out.leaf_line and out.leaf_line + top

  api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  if view.dead then
    api.nvim_buf_add_highlight(buf, ns, "PiSessiondNotLive", 0, 0, -1)
  end
  if problems_at then
    api.nvim_buf_add_highlight(buf, ns, "PiSessiondWarnings", problems_at - 1, 0, -1)
  end
  for _, line in ipairs(out.off_path) do
    api.nvim_buf_add_highlight(buf, ns, "PiSessiondOffPath", line + top - 1, 0, -1)
  end
  for _, l in ipairs(out.labels) do
    api.nvim_buf_add_highlight(buf, ns, "PiSessiondLabel", l[1] + top - 1, l[2], l[3])
  end
  if view.leaf_line then
    api.nvim_buf_add_highlight(buf, ns, "PiSessiondLeaf", view.leaf_line - 1, 0, -1)
  end

  local first = not view.rendered
  view.rendered = true
  local count = api.nvim_buf_line_count(buf)
  for w, s in pairs(saved) do
    local row
    if (first or s.on_leaf) and view.leaf_line then
      row = view.leaf_line
    elseif s.id ~= nil and line_of[s.id] then
      row = line_of[s.id]
    else
      row = math.min(s.row, count)
    end
    api.nvim_win_set_cursor(w, { row, first and 0 or s.col })
  end
end

local function show_error(view, msg)
  if api.nvim_buf_is_loaded(view.buf) then
    set_lines(view.buf, { "Error: " .. msg })
  end
  notify(msg, levels.ERROR)
end

-- How a tree view keeps up with the session: it is a skeleton mirror (see tree.lua), and never reads the tree.
--
-- * The open asks for `snapshot: "skeleton"`: the answer holds every entry's skeleton at a `seq`, and the handle's
--   notifications carry skeletons from then on. `view.seq` is the `seq` of the last change the model holds.
-- * Each `session/changed` with the next `seq` is applied to the model (an append adds its entries, a leaf move
--   moves the leaf, a reset or rebind replaces everything with the snapshot it carries) and drawn; one with a
--   lower or equal `seq` is already held and ignored.
-- * One that skips a number means some were missed: `session/changesSince` with the view's `seq` answers the
--   missed changes (applied in order) or a fresh snapshot. Notifications that arrive while a repair or a load is
--   out are held, then applied as above.
-- * A hidden tree applies changes but draws only when it is shown again.

local apply_change -- defined below; repairs and loads call it for the notifications they held

-- True while a request of generation `gen` may still change the view (a load starts a new generation).
local function current(view, gen)
  return views[view.buf] == view and view.gen == gen
end

local function fail(view, what, err)
  view.gen = view.gen + 1 -- every other request still out for this view is ignored
  view.held = nil
  show_error(view, what .. " " .. view.path .. ": " .. tostring(err.message))
end

-- Applies the notifications held while a request was out.
local function release_held(view)
  local held = view.held or {}
  view.held = nil
  for _, note in ipairs(held) do
    apply_change(view, note) -- may start another request; later notes are then held for it
  end
end

local function has_torn_tail(warnings)
  for _, w in ipairs(warnings or {}) do
    if type(w) == "table" and w.kind == "torn_tail" then
      return true
    end
  end
  return false
end

-- Asks what reading the file found (`session/getWarnings`), and draws it above the entries. The warnings shown
-- until the answer are the previous read's: a reload that finds the same problems does not make the line blink.
local function ask_warnings(view)
  view.warnings_gen = (view.warnings_gen or 0) + 1
  local gen, c, handle, appends = view.warnings_gen, view.client, view.handle, view.appends or 0
  c:request("session/getWarnings", { handle = handle }, function(err, result)
    if views[view.buf] ~= view or view.warnings_gen ~= gen or view.client ~= c or view.handle ~= handle then
      return -- asked again since, or the tree went away or to another server
    end
    if err or type(result) ~= "table" then
      return -- an older server, or a handle closed meanwhile: nothing more to say than the tree does
    end
    local before = problems(view)
    view.warnings = result
    if not vim.deep_equal(before, problems(view)) then
      render(view)
    end
    -- Reads run beside the server's following of the file: an answer that still has the torn line may have been
    -- read before the append that finished it, which no longer asks again (it saw the old warnings).
    if (view.appends or 0) ~= appends and has_torn_tail(result) then
      ask_warnings(view)
    end
  end)
end

-- Starts from a state carrying a skeleton snapshot (an open's, a reset's, a fresh getState's).
local function start_from(view, state, snapshot)
  view.model:set_entries(type(snapshot.entries) == "table" and snapshot.entries or {})
  view.model:set_leaf(state.leafId)
  view.seq = type(snapshot.seq) == "number" and snapshot.seq or 0
  view.loaded = true
  render(view)
  ask_warnings(view) -- this is a new read of the file
end

-- Reads the session's skeletons again (a reset that came without a snapshot, or `R`).
local function load(view)
  view.gen = view.gen + 1
  local gen = view.gen
  view.held = view.held or {}
  view.client:request("session/getState", { handle = view.handle, snapshot = "skeleton" }, function(err, result)
    if not current(view, gen) then
      return
    end
    if err or type(result) ~= "table" or type(result.snapshot) ~= "table" then
      return fail(view, "cannot read", err or { message = "session/getState answered no snapshot" })
    end
    start_from(view, result, result.snapshot)
    release_held(view)
  end)
end

--- Reads the whole session again (`R`).
function M._reload(view)
  if view.handle and views[view.buf] == view and view.client:is_alive() then
    load(view)
  end
end

-- After a gap: what changed since the view's seq, or a fresh snapshot when the server no longer holds it all.
local function repair(view)
  view.gen = view.gen + 1
  local gen = view.gen
  view.held = view.held or {}
  view.client:request("session/changesSince", { handle = view.handle, seq = view.seq }, function(err, result)
    if not current(view, gen) then
      return
    end
    if err or type(result) ~= "table" then
      return fail(view, "cannot catch up with", err or { message = "session/changesSince answered " .. vim.inspect(result) })
    end
    local held = view.held or {}
    view.held = nil
    if type(result.changes) == "table" then
      for _, note in ipairs(result.changes) do
        apply_change(view, note)
      end
    elseif type(result.state) == "table" and type(result.snapshot) == "table" then
      start_from(view, result.state, result.snapshot)
    else
      return fail(view, "cannot catch up with", { message = "session/changesSince answered neither changes nor a snapshot" })
    end
    -- Changes that arrived meanwhile come after what was held before the answer. One that still skips a number
    -- numbers a change the server never made (it answered everything it had): dropped, not repaired again.
    local more = view.held or {}
    view.held = nil
    view.repaired = true
    for _, note in ipairs(held) do
      apply_change(view, note)
    end
    for _, note in ipairs(more) do
      apply_change(view, note)
    end
    view.repaired = nil
  end)
end

-- One `session/changed` for one view.
apply_change = function(view, note)
  if view.held then
    view.held[#view.held + 1] = note
    return
  end
  local seq = note.seq
  if type(seq) ~= "number" or view.seq == nil then
    return
  end
  if seq <= view.seq then
    return -- already held
  end
  if seq ~= view.seq + 1 then
    if view.repaired then
      return
    end
    view.held = { note }
    return repair(view) -- some were missed
  end
  local change = type(note.change) == "table" and note.change or {}
  local kind = change.kind
  if kind == "append" then
    view.seq = seq
    view.appends = (view.appends or 0) + 1
    view.model:add_entries(type(change.entries) == "table" and change.entries or {})
    view.model:set_leaf(note.leafId)
    render(view)
    -- A line that was incomplete when the file was read may be whole now: only then can an append change what
    -- reading found (the server drops the torn line's warning), so only then is it asked again.
    if has_torn_tail(view.warnings) then
      ask_warnings(view)
    end
  elseif kind == "leaf" then
    view.seq = seq
    view.model:set_leaf(note.leafId)
    render(view)
  elseif kind == "deleted" then
    view.seq = seq
    -- The server also says so of a file that is empty for a moment (rewritten in place: a reset follows).
    if not vim.loop.fs_stat(view.path) then
      notify(view.path .. " was deleted; the tree shows what it held", levels.WARN)
    end
  elseif (kind == "reset" or kind == "rebind") and type(change.snapshot) == "table" then
    -- The file was truncated or replaced (or the handle now holds another session): start again from the
    -- snapshot the notification carries.
    start_from(view, type(change.state) == "table" and change.state or { leafId = note.leafId }, change.snapshot)
    view.seq = seq
  else
    -- A reset without a snapshot (the file changed again while the server read it), or a kind this plugin does
    -- not know: read again rather than guess.
    view.seq = seq
    load(view)
  end
end

on_session_changed = function(c, note)
  if type(note) ~= "table" then
    return
  end
  for _, view in ipairs(views_of_handle(c, note.handle)) do
    apply_change(view, note)
  end
end

-- Opens the view's session on `view.client`: the skeletons, and a handle whose notifications keep them.
local function open(view)
  local c, buf, path = view.client, view.buf, view.path
  view.gen = view.gen + 1
  local gen = view.gen
  c:request("session/open", { path = path, watch = true, snapshot = "skeleton" }, function(err, state)
    if not current(view, gen) then
      -- The buffer went away, was read again or its server died before the answer: give the reference back.
      if not err and type(state) == "table" then
        c:request("session/close", { handle = state.handle }, function() end)
      end
      return
    end
    if err then
      views[buf] = nil
      return show_error(view, "cannot open " .. path .. ": " .. tostring(err.message))
    end
    view.handle = state.handle
    api.nvim_buf_set_var(buf, "pi_sessiond_handle", state.handle)
    if type(state.snapshot) ~= "table" then
      views[buf] = nil
      return show_error(view, "cannot open " .. path .. ": this pi-sessiond sends no snapshot (too old)")
    end
    view.dead = nil
    start_from(view, state, state.snapshot)
  end)
end

-- True when the view's server is gone (died or stopped), so that what it shows follows nothing.
local function orphaned(view)
  return not view.client:is_alive()
end

-- Moves a view whose server is gone to `c`: its session is opened there again. The tree it shows (and each cursor
-- on its entry) stays until the new snapshot replaces it.
local function reopen(view, c)
  view.handle = nil
  view.held = nil
  if not vim.loop.fs_stat(view.path) then
    -- session/open would start a new, empty session at the path. The view keeps its dead server, so that the next
    -- server (or R) tries again.
    view.dead = view.path .. " no longer exists"
    render(view)
    return
  end
  view.client = c
  open(view)
end

reopen_all = function(c)
  for _, v in pairs(views) do
    if v.client ~= c and orphaned(v) then
      reopen(v, c)
    end
  end
end

-- Every tree of a server that is gone shows that it is no longer live, or moves at once to the server that
-- already replaced it.
on_server_exit = function(c)
  local how = c.stopping and "pi-sessiond was stopped" or ("pi-sessiond " .. (c.exit_how or "exited"))
  local live = client and client:is_alive() and client or nil
  for _, v in pairs(views) do
    if v.client == c then
      v.gen = v.gen + 1 -- the requests still out on it are failed next, and ignored
      v.handle = nil
      v.held = nil
      v.dead = how
      if live then
        reopen(v, live)
      else
        render(v)
      end
    end
  end
end

local function detach(view)
  views[view.buf] = nil
  view.gen = view.gen + 1
  if view.handle and view.client:is_alive() then
    -- The handle is reference-counted by the server: this gives back the one reference this buffer took.
    view.client:request("session/close", { handle = view.handle }, function() end)
  end
end

-- The entry window of a tree view: reused while it is open, otherwise split below the tree window.
local function entry_window(view, tree_win)
  local buf = view.entry_buf
  if not (buf and api.nvim_buf_is_valid(buf)) then
    buf = api.nvim_create_buf(false, true)
    scratch_options(buf, "json")
    api.nvim_buf_set_option(buf, "bufhidden", "wipe")
    pcall(api.nvim_buf_set_name, buf, "pi-entry://" .. view.path)
    map(buf, "q", "<cmd>close<cr>", "Close the entry")
    view.entry_buf = buf
  end
  local win = windows_of(buf)[1]
  if not win then
    local target = api.nvim_win_is_valid(tree_win) and tree_win or api.nvim_get_current_win()
    api.nvim_win_call(target, function()
      vim.cmd("belowright split")
      win = api.nvim_get_current_win()
      api.nvim_win_set_buf(win, buf)
    end)
  end
  return buf, win
end

--- Shows the entry under the cursor, as stored, in a split below the tree (the cursor stays in the tree).
function M.show_entry()
  local buf = api.nvim_get_current_buf()
  local view = views[buf]
  if view and (view.dead or orphaned(view)) then
    -- Said once, by the exit: not the server's stderr again.
    return notify("this tree is not live (" .. (view.dead or "its pi-sessiond is gone") .. "); R reconnects it",
      levels.WARN)
  end
  if not (view and view.handle) then
    return
  end
  local tree_win = api.nvim_get_current_win()
  local id = view.ids[api.nvim_win_get_cursor(tree_win)[1]]
  if id == nil then
    return
  end
  if type(id) ~= "string" then
    notify("this entry's id is not a string, so session/getEntry cannot name it", levels.WARN)
    return
  end
  view.client:request("session/getEntry", { handle = view.handle, id = id }, function(err, _, raw)
    if err then
      return notify("cannot read entry " .. id .. ": " .. tostring(err.message), levels.ERROR)
    end
    local text = json.member(raw, "result")
    local lines = (text == nil or text == "null") and { "(no entry " .. id .. ")" } or json.pretty(text)
    local ebuf = entry_window(view, tree_win)
    set_lines(ebuf, lines)
    api.nvim_buf_set_var(ebuf, "pi_sessiond_entry_id", id)
  end, { raw = true })
end

-- Fills a `pi-session://PATH` buffer (the BufReadCmd).
function M._read_tree(buf)
  local path = api.nvim_buf_get_name(buf):sub(#TREE_SCHEME + 1)
  if views[buf] then
    detach(views[buf])
  end
  scratch_options(buf, "pisessiontree")
  api.nvim_buf_set_option(buf, "modifiable", false)
  set_lines(buf, { "Loading " .. path .. " …" })

  -- session/open starts a new, empty session at a path that does not exist; a viewer must say "no such file".
  if not vim.loop.fs_stat(path) then
    set_lines(buf, { "Error: no such file: " .. path })
    return notify("no such file: " .. path, levels.ERROR)
  end
  local c = M.client()
  if not c then
    set_lines(buf, { "Error: pi-sessiond is not available (see :messages)" })
    return
  end

  local view = { buf = buf, path = path, client = c, model = tree.new_model(), ids = {}, gen = 0 }
  views[buf] = view
  map(buf, "<CR>", M.show_entry, "Show the entry")
  map(buf, "R", function()
    local v = views[buf]
    if v and (v.dead or orphaned(v)) then
      -- Its server is gone: the server started here (or already running) takes this tree and every other that
      -- lost its own.
      local c = M.client()
      if c and views[buf] == v and v.client ~= c then
        reopen(v, c)
      end
    elseif v and v.handle then
      M._reload(v)
    else
      M._read_tree(buf) -- the open failed (or is still out): open the file again
    end
  end, "Read the session again")
  map(buf, "q", "<cmd>bwipeout<cr>", "Close the session")
  local group = api.nvim_create_augroup("pi_sessiond_view_" .. buf, { clear = true })
  api.nvim_create_autocmd("BufUnload", {
    group = group,
    buffer = buf,
    callback = function()
      if views[buf] then
        detach(views[buf])
      end
    end,
  })
  api.nvim_create_autocmd("BufWinEnter", {
    group = group,
    buffer = buf,
    callback = function()
      local v = views[buf]
      if not v then
        return
      end
      local wins = windows_of(buf)
      for _, w in ipairs(wins) do
        no_wrap(w)
      end
      if v.dirty or v.width ~= text_width(wins) then
        render(v) -- changes came while it was hidden, or this window is narrower
      end
    end,
  })
  open(view)
end

local function open_tree(path)
  vim.cmd("edit " .. vim.fn.fnameescape(TREE_SCHEME .. path))
end

--- `:PiSessionTree [file]`: the tree of `file`, or of the most recent session of the current directory.
function M.tree(file)
  -- First the server: :edit only shows a tree that is already open, without reading it, so a tree whose server
  -- died is reopened by the server started here (with every other tree that lost its own).
  local c = M.client()
  if not c then
    return
  end
  if file and file ~= "" then
    if file:match("^[%%#<]") or file:sub(1, 1) == "~" then
      file = vim.fn.expand(file)
    end
    open_tree(vim.fn.fnamemodify(file, ":p"))
    local v = views[api.nvim_get_current_buf()]
    if v and v.client ~= c and orphaned(v) then
      reopen(v, c) -- a tree the new server could not take when it started (its file was gone then)
    end
    return
  end
  local cwd = vim.fn.getcwd()
  c:request("sessions/list", { cwd = cwd, includeAllMessagesText = false }, function(err, result)
    if err then
      return notify("cannot list sessions: " .. tostring(err.message), levels.ERROR)
    end
    if #result == 0 then
      return notify("no pi sessions for " .. cwd, levels.WARN)
    end
    open_tree(result[1].path) -- newest activity first, as pi's list orders them
  end)
end

-- ---------------------------------------------------------------------------------------------------------------
-- Session lists

--- Seconds since the epoch of a session's `modified` (an ISO 8601 time, `toISOString()` in pi: UTC with `Z`; an
--- offset is understood too), or nil.
local function parse_time(iso)
  if type(iso) ~= "string" then
    return nil
  end
  local y, mo, d, h, mi, s, zone = string.match(iso, "^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)%.?%d*(.*)$")
  if not y then
    return nil
  end
  local offset = 0
  if zone ~= "Z" then
    local sign, oh, om = string.match(zone, "^([+-])(%d%d):(%d%d)$")
    if not sign then
      return nil
    end
    offset = (tonumber(oh) * 60 + tonumber(om)) * 60 * (sign == "+" and 1 or -1)
  end
  return tree.days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 86400
    + (tonumber(h) * 60 + tonumber(mi)) * 60
    + tonumber(s)
    - offset
end

local function format_time(iso)
  local seconds = parse_time(iso)
  if not seconds then
    return string.rep(" ", 16)
  end
  return os.date("%Y-%m-%d %H:%M", seconds)
end

--- One line of the session list: when it was last active, how many messages, its name or first message, and
--- with `with_cwd` its directory. With `width`, the title is cut so that the line takes at most `width` screen
--- cells with the directory, which tells sessions of different projects apart.
--- @param width integer|nil
function M.list_line(info, with_cwd, width)
  local title = info.name
  if type(title) ~= "string" or title == "" then
    title = info.firstMessage
  end
  local head = string.format("%s  %4d msgs  ", format_time(info.modified), tonumber(info.messageCount) or 0)
  local tail = with_cwd and ("  (" .. tostring(info.cwd) .. ")") or ""
  title = tree.one_line(type(title) == "string" and title or "")
  if width then
    local strdisplaywidth = vim.fn.strdisplaywidth
    title = tree.fit(title, math.max(width - strdisplaywidth(head) - strdisplaywidth(tail), 1))
  end
  return head .. title .. tail
end

-- What each list buffer was last answered, kept to draw it again to a new width without asking again.
local listed = {} -- list buffer → { infos, all, empty, width }

-- Draws a list to the width of its narrowest window; each cursor stays on its line.
local function render_list(buf)
  local data = listed[buf]
  if not (data and api.nvim_buf_is_valid(buf)) then
    return
  end
  local wins = windows_of(buf)
  data.width = text_width(wins) or vim.o.columns
  local lines = {}
  for i, info in ipairs(data.infos) do
    lines[i] = M.list_line(info, data.all, data.width)
  end
  if #lines == 0 then
    lines = { data.empty }
  end
  local cursors = {}
  for _, w in ipairs(wins) do
    cursors[w] = api.nvim_win_get_cursor(w)
  end
  set_lines(buf, lines)
  for w, pos in pairs(cursors) do
    api.nvim_win_set_cursor(w, { math.min(pos[1], #lines), pos[2] })
  end
end

--- `:PiSessions` (`all`: `:PiSessions!`): the sessions of the current directory (or every session).
function M.sessions(all)
  local c = M.client()
  if not c then
    return
  end
  local cwd = vim.fn.getcwd()
  local name = LIST_SCHEME .. (all and "all" or cwd)
  local buf = lists[name]
  if not (buf and api.nvim_buf_is_valid(buf)) then
    buf = api.nvim_create_buf(true, true)
    scratch_options(buf, "pisessions")
    api.nvim_buf_set_option(buf, "bufhidden", "wipe")
    api.nvim_buf_set_option(buf, "modifiable", false)
    pcall(api.nvim_buf_set_name, buf, name)
    lists[name] = buf
    map(buf, "<CR>", function()
      local ok, paths = pcall(api.nvim_buf_get_var, buf, "pi_sessiond_paths")
      local path = ok and paths[api.nvim_win_get_cursor(0)[1]] or nil
      if path then
        open_tree(path)
      end
    end, "Open the session's tree")
    map(buf, "R", function()
      M.sessions(all)
    end, "List again")
    map(buf, "q", "<cmd>bwipeout<cr>", "Close the list")
    api.nvim_create_autocmd("BufWipeout", {
      buffer = buf,
      callback = function()
        listed[buf] = nil
      end,
    })
  end
  api.nvim_win_set_buf(0, buf)
  listed[buf] = nil -- a resize while listing again leaves "Listing …" alone
  set_lines(buf, { all and "Listing every pi session …" or ("Listing pi sessions of " .. cwd .. " …") })
  local method = all and "sessions/listAll" or "sessions/list"
  -- allMessagesText (every message of every session) is most of a listing's size and is not shown here.
  local params = all and { includeAllMessagesText = false } or { cwd = cwd, includeAllMessagesText = false }
  c:request(method, params, function(err, result)
    if not api.nvim_buf_is_valid(buf) then
      return
    end
    if err then
      set_lines(buf, { "Error: " .. tostring(err.message) })
      return notify("cannot list sessions: " .. tostring(err.message), levels.ERROR)
    end
    local paths = {}
    for i, info in ipairs(result) do
      paths[i] = info.path
    end
    local empty = all and "No pi sessions." or ("No pi sessions for " .. cwd .. ".")
    listed[buf] = { infos = result, all = all, empty = empty }
    render_list(buf)
    api.nvim_buf_set_var(buf, "pi_sessiond_paths", paths)
  end)
end

-- Trees and lists are drawn to the width of their windows: drawn again when it changes. WinResized is Neovim
-- 0.9's; before it, WinScrolled is also sent for a window that changed size.
local function refit()
  for _, v in pairs(views) do
    local wins = windows_of(v.buf)
    if #wins > 0 and v.width ~= text_width(wins) then
      render(v)
    end
  end
  for buf, data in pairs(listed) do
    local wins = windows_of(buf)
    if #wins > 0 and data.width ~= text_width(wins) then
      render_list(buf)
    end
  end
end
api.nvim_create_autocmd({ "VimResized", vim.fn.exists("##WinResized") == 1 and "WinResized" or "WinScrolled" }, {
  group = api.nvim_create_augroup("pi_sessiond_resize", { clear = true }),
  callback = refit,
})

define_highlights()
M._define_highlights = define_highlights

return M
