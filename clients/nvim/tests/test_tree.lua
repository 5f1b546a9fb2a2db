-- Headless tests of the pi-sessiond Neovim plugin against the real server binary.
--
--   PI_SESSIOND_BIN=/path/to/pi-sessiond clients/nvim/tests/run.sh
--
-- Every test asserts on what a user sees (buffer lines, cursor, highlights, messages) or on what the server
-- answers; the process exits non-zero, after listing what failed, if any assertion fails.

local api = vim.api

local plugin_dir = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
if not vim.tbl_contains(vim.opt.runtimepath:get(), plugin_dir) then
  vim.opt.runtimepath:append(plugin_dir)
end

-- Timestamps in the session list are shown in local time; pin the zone so the expected lines are exact.
vim.env.TZ = "UTC"

local results = { passed = 0, failed = {} }

-- A watchdog: a hung RPC must fail the run, not hang it.
local watchdog = vim.loop.new_timer()
watchdog:start(60000, 0, function()
  io.stderr:write("tests timed out after 60 s\n")
  os.exit(2)
end)

local function fmt(v)
  return vim.inspect(v)
end

local function eq(actual, expected, what)
  if not vim.deep_equal(actual, expected) then
    error(string.format("%s\n  expected: %s\n  actual:   %s", what or "values differ", fmt(expected), fmt(actual)), 2)
  end
end

local function truthy(v, what)
  if not v then
    error(what or "expected a true value", 2)
  end
end

local function lines_of(buf)
  return api.nvim_buf_get_lines(buf, 0, -1, false)
end

local function wait_for(what, cond, timeout)
  if not vim.wait(timeout or 5000, cond, 10) then
    error("timed out waiting for " .. what, 2)
  end
end

-- Waits until the buffer shows exactly `expected`; on timeout, shows both.
local function wait_lines(buf, expected, what)
  local ok = vim.wait(5000, function()
    return api.nvim_buf_is_valid(buf) and vim.deep_equal(lines_of(buf), expected)
  end, 10)
  if not ok then
    error(
      string.format(
        "%s: buffer lines differ\n  expected:\n    %s\n  actual:\n    %s",
        what or "buffer",
        table.concat(expected, "\n    "),
        api.nvim_buf_is_valid(buf) and table.concat(lines_of(buf), "\n    ") or "(buffer gone)"
      ),
      2
    )
  end
end

-- print() in a headless Neovim goes through the message machinery (to stderr, newlines placed before each
-- message); the report is written to stdout directly.
local function say(text)
  io.stdout:write(text .. "\n")
  io.stdout:flush()
end

local cleanups = {} -- run after each test, passed or failed (a spy left on the client would skew the next)

local function test(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  for i = #cleanups, 1, -1 do
    cleanups[i]()
    cleanups[i] = nil
  end
  if ok then
    results.passed = results.passed + 1
    say("ok    " .. name)
  else
    results.failed[#results.failed + 1] = name
    say("FAIL  " .. name .. "\n" .. tostring(err))
  end
end

-- Captures vim.notify while `fn` runs.
local function capture_notify(fn)
  local seen = {}
  local orig = vim.notify
  vim.notify = function(msg, level)
    seen[#seen + 1] = { msg = msg, level = level }
  end
  local ok, err = pcall(fn, seen)
  vim.notify = orig
  if not ok then
    error(err, 0)
  end
  return seen
end

local function write_file(path, lines, mode)
  local f = assert(io.open(path, mode or "w"))
  f:write(table.concat(lines, "\n") .. "\n")
  f:close()
end

-- What pi does: append one complete JSON line and its newline.
local function append_line(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line .. "\n")
  f:close()
end

-- ---------------------------------------------------------------------------------------------------------------
-- Fixtures: a temporary pi agent directory with two sessions for a project directory.

local root = vim.fn.tempname()
local agent_dir = root .. "/agent"
local project = root .. "/project"
-- pi's session directory for a cwd: the path without its leading "/", "/" turned into "-", wrapped in "--".
local session_dir = agent_dir .. "/sessions/--" .. (project:sub(2):gsub("/", "-")) .. "--"
vim.fn.mkdir(session_dir, "p")
vim.fn.mkdir(project, "p")
vim.env.PI_CODING_AGENT_DIR = agent_dir

local path_a = session_dir .. "/2025-01-01T10-00-00-000Z_0195a1b2-0000-7000-8000-00000000000a.jsonl"
local path_b = session_dir .. "/2025-01-02T09-00-00-000Z_0195a1b2-0000-7000-8000-00000000000b.jsonl"

-- Session A: a model change, a user message with two later branches (one of them written last to the file but
-- earlier in time, so it sorts first), a label, a name, a tool call, an image and a long tool output.
local lines_a = {
  [[{"type":"session","version":3,"id":"0195a1b2-0000-7000-8000-00000000000a","timestamp":"2025-01-01T10:00:00.000Z","cwd":"]]
    .. project
    .. [["}]],
  [[{"type":"model_change","id":"m1","parentId":null,"timestamp":"2025-01-01T10:00:00.100Z","provider":"anthropic","modelId":"claude-sonnet-4"}]],
  [[{"type":"message","id":"u1","parentId":"m1","timestamp":"2025-01-01T10:00:01.000Z","message":{"role":"user","content":"Hello there,\n  please   fix the bug in main.rs","timestamp":1735725601000}}]],
  [[{"type":"message","id":"a1","parentId":"u1","timestamp":"2025-01-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"toolCall","id":"t1","name":"read","arguments":{"path":"main.rs","flags":[]}}],"timestamp":1735725602000}}]],
  [[{"type":"message","id":"r1","parentId":"a1","timestamp":"2025-01-01T10:00:03.000Z","message":{"role":"toolResult","toolCallId":"t1","toolName":"read","content":[{"type":"text","text":"fn main() {\n    println!(\"hello, world — this line is long enough to be cut\");\n}"}],"isError":false,"timestamp":1735725603000}}]],
  [[{"type":"label","id":"l1","parentId":"r1","timestamp":"2025-01-01T10:00:04.000Z","targetId":"a1","label":"checkpoint"}]],
  [[{"type":"session_info","id":"n1","parentId":"l1","timestamp":"2025-01-01T10:00:04.500Z","name":"Fix the parser"}]],
  [[{"type":"message","id":"a2","parentId":"u1","timestamp":"2025-01-01T10:00:05.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Other branch"},{"type":"image","data":"aGk=","mimeType":"image/png"}],"timestamp":1735725605000}}]],
  [[{"type":"message","id":"b2","parentId":"u1","timestamp":"2025-01-01T10:00:01.500Z","message":{"role":"user","content":"Try again, differently","timestamp":1735725601500}}]],
}
write_file(path_a, lines_a)

write_file(path_b, {
  [[{"type":"session","version":3,"id":"0195a1b2-0000-7000-8000-00000000000b","timestamp":"2025-01-02T09:00:00.000Z","cwd":"]]
    .. project
    .. [["}]],
  [[{"type":"message","id":"x1","parentId":null,"timestamp":"2025-01-02T09:00:01.000Z","message":{"role":"user","content":"Add a README","timestamp":1735808401000}}]],
  [[{"type":"message","id":"x2","parentId":"x1","timestamp":"2025-01-02T09:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Done."}],"timestamp":1735808402000}}]],
})

local tree_a = {
  "m1 model → anthropic/claude-sonnet-4",
  "u1 user: Hello there, please fix the bug in main.rs",
  "├─ b2 user: Try again, differently ◀ leaf",
  "├─ a1 assistant: Looking. → read [checkpoint]",
  '│  r1 toolResult: fn main() { println!("hello, world — this line is long enough…', -- cut at 80 columns
  "│  l1 label a1 → checkpoint",
  "│  n1 name: Fix the parser",
  "└─ a2 assistant: Other branch [image]",
}

-- ---------------------------------------------------------------------------------------------------------------

local bin = vim.env.PI_SESSIOND_BIN
if not bin or bin == "" or vim.fn.executable(bin) == 0 then
  say("FAIL  setup\nPI_SESSIOND_BIN must name a built pi-sessiond (got " .. tostring(bin) .. ")")
  vim.cmd("cquit 1")
end

vim.cmd("runtime plugin/pi_sessiond.lua")
local pi = require("pi_sessiond")
local rpc = require("pi_sessiond.rpc")
local json = require("pi_sessiond.json")
vim.cmd("cd " .. vim.fn.fnameescape(project))

-- A synchronous request through the plugin's own client, for asserting on server state.
local function call(method, params)
  local done, err, result = false, nil, nil
  pi.client():request(method, params, function(e, r)
    done, err, result = true, e, r
  end)
  wait_for(method, function()
    return done
  end)
  return err, result
end

-- Wraps the plugin client's `request` while a test runs: every request is recorded in `requests`, and
-- `answers[method]` counts the answers the plugin's callbacks have finished handling. `fake(method, params,
-- answer)`, if given and returning true, takes the request over: the server is not asked, and the test calls
-- `answer(err, result)` when it likes.
local function spy(fake)
  local c = pi.client()
  -- answers: by method; answers_of: by handle, then method (trees of earlier tests may still be reopening on the
  -- same server, so a test about one tree counts that tree's).
  local s = { requests = {}, answers = {}, answers_of = {} }
  c.request = function(self, method, params, cb, opts)
    s.requests[#s.requests + 1] = { method = method, params = params }
    local function done(...)
      cb(...)
      s.answers[method] = (s.answers[method] or 0) + 1
      local handle = type(params) == "table" and params.handle or ""
      local of = s.answers_of[handle] or {}
      s.answers_of[handle] = of
      of[method] = (of[method] or 0) + 1
    end
    if fake and fake(method, params, done) then
      return nil
    end
    return getmetatable(self).request(self, method, params, done, opts)
  end
  s.restore = function()
    c.request = nil -- the method of the metatable again
  end
  cleanups[#cleanups + 1] = s.restore
  return s
end

-- Delivers a session/changed notification as if the server had sent it.
local function deliver(note)
  for _, fn in ipairs(pi.client().handlers["session/changed"]) do
    fn(note)
  end
end

-- Waits until the plugin has handled `n` answers to `method` (counted by a spy), about `handle` if given.
local function wait_answers(s, method, n, handle)
  wait_for(n .. " answers to " .. method, function()
    local answers = handle and (s.answers_of[handle] or {}) or s.answers
    return (answers[method] or 0) >= n
  end)
end

-- The requests a spy saw about one handle.
local function requests_of(s, handle)
  return vim.tbl_filter(function(r)
    return type(r.params) == "table" and r.params.handle == handle
  end, s.requests)
end

-- Kills the plugin's server as `kill -9` would, and waits until the plugin has handled its exit; returns the
-- dead client and what was notified meanwhile.
local function kill_server()
  local old = pi.client()
  local seen = capture_notify(function()
    vim.loop.kill(old.pid, "sigkill")
    wait_for("the server's exit", function()
      return old.finished
    end)
  end)
  return old, seen
end

-- What a tree whose server was killed shows above its entries.
local NOT_LIVE = "[not live: pi-sessiond was killed by signal 9; R reconnects]"

local function with_not_live(lines)
  return vim.list_extend({ NOT_LIVE }, lines)
end

-- An executable shell script (for a server that writes to stderr before it runs or dies).
local function script(name, body)
  local path = root .. "/" .. name
  write_file(path, { "#!/bin/sh", body })
  vim.loop.fs_chmod(path, 493) -- 0755
  return path
end

test("framing: frames split across chunks, several in one chunk, CRLF, UTF-8 cut mid-character", function()
  local got = {}
  local feed = rpc.framer(function(line)
    got[#got + 1] = line
  end)
  local frame = '{"text":"h€llo\\u2028 — ok"}'
  local cut = frame:find("€") + 1 -- inside the three bytes of €
  feed(frame:sub(1, cut))
  eq(got, {}, "nothing is delivered before the newline")
  feed(frame:sub(cut + 1) .. "\n" .. '{"a":1}\r\n{"b"')
  feed(":2}\n\n")
  eq(got, { frame, '{"a":1}', '{"b":2}' }, "frames")
  eq(vim.json.decode(got[1]).text, "h€llo\u{2028} — ok", "the cut frame decodes whole")
end)

test("json: pretty keeps member order and bytes; member finds the top-level result", function()
  local raw = '{"jsonrpc":"2.0","id":7,"result":{"z":1,"a":[1,{"s":"x,\\"y\\":{]"}],"e":{},"n":[],"k":null}}'
  local result = json.member(raw, "result")
  eq(result, '{"z":1,"a":[1,{"s":"x,\\"y\\":{]"}],"e":{},"n":[],"k":null}', "result member")
  eq(json.pretty(result), {
    "{",
    '  "z": 1,',
    '  "a": [',
    "    1,",
    "    {",
    '      "s": "x,\\"y\\":{]"',
    "    }",
    "  ],",
    '  "e": {},',
    '  "n": [],',
    '  "k": null',
    "}",
  }, "pretty")
  eq(json.member('{"jsonrpc":"2.0","id":1,"error":{"result":1}}', "result"), nil, "a nested member is not the result")
end)

test(":PiSessions lists the sessions of the current directory, newest first, without allMessagesText", function()
  local s = spy()
  vim.cmd("PiSessions")
  local buf = api.nvim_get_current_buf()
  eq(api.nvim_buf_get_name(buf), "pi-sessions://" .. project, "buffer name")
  wait_lines(buf, {
    "2025-01-02 09:00     2 msgs  Add a README",
    "2025-01-01 10:00     5 msgs  Fix the parser",
  }, ":PiSessions")
  s.restore()
  eq(s.requests, { { method = "sessions/list", params = { cwd = project, includeAllMessagesText = false } } },
    "the request")
  -- What that asks of the server: the listing without every message's text.
  local _, listed = call("sessions/list", { cwd = project, includeAllMessagesText = false })
  eq(#listed, 2, "two sessions")
  eq(listed[1].allMessagesText, nil, "no allMessagesText")
  local _, full = call("sessions/list", { cwd = project })
  eq(type(full[1].allMessagesText), "string", "allMessagesText by default")
end)

test(":PiSessions! lists every session with its directory", function()
  local s = spy()
  vim.cmd("PiSessions!")
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, {
    "2025-01-02 09:00     2 msgs  Add a README  (" .. project .. ")",
    "2025-01-01 10:00     5 msgs  Fix the parser  (" .. project .. ")",
  }, ":PiSessions!")
  s.restore()
  eq(s.requests, { { method = "sessions/listAll", params = { includeAllMessagesText = false } } }, "the request")
end)

test(":PiSessions lists a project whose session's first message holds a lone surrogate", function()
  local lone = root .. "/lone"
  local dir = agent_dir .. "/sessions/--" .. (lone:sub(2):gsub("/", "-")) .. "--"
  vim.fn.mkdir(lone, "p")
  vim.fn.mkdir(dir, "p")
  write_file(dir .. "/2025-01-03T09-00-00-000Z_0195a1b2-0000-7000-8000-00000000000c.jsonl", {
    [[{"type":"session","version":3,"id":"0195a1b2-0000-7000-8000-00000000000c","timestamp":"2025-01-03T09:00:00.000Z","cwd":"]]
      .. lone
      .. [["}]],
    [[{"type":"message","id":"s1","parentId":null,"timestamp":"2025-01-03T09:00:01.000Z","message":{"role":"user","content":"half \ud83d of a pair, \ud83d\ude00 whole, \\ud800 as text","timestamp":1735894801000}}]],
  })
  vim.cmd("cd " .. vim.fn.fnameescape(lone))
  vim.cmd("PiSessions")
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, {
    "2025-01-03 09:00     1 msgs  half \u{FFFD} of a pair, \u{1F600} whole, \\ud800 as text",
  }, ":PiSessions with a lone surrogate")
  vim.cmd("bwipeout!")
  vim.cmd("cd " .. vim.fn.fnameescape(project))
  eq(json.mend_lone_surrogates([["\udc00\ud800x\\ud800\ud83d\ude00"]]), [["\ufffd\ufffdx\\ud800\ud83d\ude00"]],
    "mended: a lone low and a lone high half; kept: escaped text and a pair")
end)

local tree_buf

test("<CR> in the list opens that session's tree: branches, labels, leaf, previews", function()
  vim.cmd("PiSessions")
  local list = api.nvim_get_current_buf()
  wait_for("the list", function()
    return #lines_of(list) == 2 and lines_of(list)[2]:find("Fix the parser", 1, true) ~= nil
  end)
  api.nvim_win_set_cursor(0, { 2, 0 })
  vim.cmd([[execute "normal \<CR>"]])
  tree_buf = api.nvim_get_current_buf()
  eq(api.nvim_buf_get_name(tree_buf), "pi-session://" .. path_a, "tree buffer name")
  wait_lines(tree_buf, tree_a, "tree of A")
  eq(api.nvim_win_get_cursor(0), { 3, 0 }, "the cursor starts on the leaf")
  eq(api.nvim_buf_is_valid(list), false, "the list buffer was replaced and wiped")
end)

test("the leaf's path is drawn normally, other branches dimmed, labels highlighted", function()
  local ns = api.nvim_create_namespace("pi_sessiond")
  local by_group = {}
  for _, m in ipairs(api.nvim_buf_get_extmarks(tree_buf, ns, 0, -1, { details = true })) do
    local group = m[4].hl_group
    by_group[group] = by_group[group] or {}
    table.insert(by_group[group], m[2] + 1)
  end
  eq(by_group.PiSessiondOffPath, { 4, 5, 6, 7, 8 }, "dimmed lines (not on m1 → u1 → b2)")
  eq(by_group.PiSessiondLeaf, { 3 }, "leaf line")
  eq(by_group.PiSessiondLabel, { 4 }, "label")
end)

test(":PiSessionTree FILE shows the same buffer", function()
  vim.cmd("enew")
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path_a))
  eq(api.nvim_get_current_buf(), tree_buf, "the open tree buffer is reused")
  wait_lines(tree_buf, tree_a, "tree of A")
end)

test("the tree drawn from skeletons is getTree's (timestamp order, orphans, labels), the leaf's branch first as in pi's /tree", function()
  -- c1's children, in file order c2 c3 c4 c10 c11, are in time order c10 (a date alone: midnight UTC), c3
  -- (11:00:01Z, written with an offset), c11, then c2 and c4 (a tie: file order); c11 is the leaf, and pi's
  -- /tree draws the branch holding it first. Labels: c2's is set, then cleared; c3's is kept. c5's parent does
  -- not exist and c6 is its own parent: both roots.
  local path_c = root .. "/c.jsonl"
  write_file(path_c, {
    [[{"type":"session","version":3,"id":"0195a1b2-0000-7000-8000-00000000000c","timestamp":"2025-03-01T12:00:00.000Z","cwd":"/c"}]],
    [[{"type":"message","id":"c1","parentId":null,"timestamp":"2025-03-01T12:00:00.000Z","message":{"role":"user","content":"root","timestamp":1}}]],
    [[{"type":"message","id":"c2","parentId":"c1","timestamp":"2025-03-01T12:00:05.000Z","message":{"role":"user","content":"late","timestamp":2}}]],
    [[{"type":"message","id":"c3","parentId":"c1","timestamp":"2025-03-01T13:00:01.000+02:00","message":{"role":"user","content":"early, with an offset","timestamp":3}}]],
    [[{"type":"message","id":"c4","parentId":"c1","timestamp":"2025-03-01T12:00:05.000Z","message":{"role":"user","content":"tie with c2","timestamp":4}}]],
    [[{"type":"message","id":"c5","parentId":"gone","timestamp":"2025-03-01T12:00:06.000Z","message":{"role":"user","content":"orphan","timestamp":5}}]],
    [[{"type":"message","id":"c6","parentId":"c6","timestamp":"2025-03-01T12:00:07.000Z","message":{"role":"user","content":"own parent","timestamp":6}}]],
    [[{"type":"label","id":"c7","parentId":"c4","timestamp":"2025-03-01T12:00:08.000Z","targetId":"c2","label":"first"}]],
    [[{"type":"label","id":"c8","parentId":"c7","timestamp":"2025-03-01T12:00:09.000Z","targetId":"c2","label":""}]],
    [[{"type":"label","id":"c9","parentId":"c8","timestamp":"2025-03-01T12:00:10.000Z","targetId":"c3","label":"kept"}]],
    [[{"type":"message","id":"c10","parentId":"c1","timestamp":"2025-03-01","message":{"role":"user","content":"date only","timestamp":7}}]],
    [[{"type":"message","id":"c11","parentId":"c1","timestamp":"2025-03-01T11:59:59.999Z","message":{"role":"user","content":"ms","timestamp":8}}]],
  })
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path_c))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, {
    -- c5 and c6 are roots because their parent links are broken: reading the file says so (cut at 80 columns).
    "[reading the file found 2 problems: line 6: parent gone does not exist; the en…]",
    "c1 user: root",
    "├─ c11 user: ms ◀ leaf",
    "├─ c10 user: date only",
    "├─ c3 user: early, with an offset [kept]",
    "├─ c2 user: late",
    "└─ c4 user: tie with c2",
    "   c7 label c2 → first",
    "   c8 label c2 → (cleared)",
    "   c9 label c3 → kept",
    "c5 user: orphan",
    "c6 user: own parent",
  }, "tree of C")

  -- The same tree as the server's: getTreeFlat, and getTree (nested; decodable for a file this small) walked in
  -- pre-order.
  local handle = api.nvim_buf_get_var(buf, "pi_sessiond_handle")
  local _, flat = call("session/getTreeFlat", { handle = handle })
  local _, nested = call("session/getTree", { handle = handle })
  local function row(id, parent, depth, label)
    return { id = id, parent = parent, depth = depth, label = label }
  end
  local from_flat = {}
  for _, n in ipairs(flat) do
    from_flat[#from_flat + 1] = row(n.entry.id, n.parentIndex, n.depth, n.label)
  end
  local from_nested = {}
  local function walk(nodes, parent, depth)
    for _, n in ipairs(nodes) do
      from_nested[#from_nested + 1] = row(n.entry.id, parent, depth, n.label)
      walk(n.children, #from_nested - 1, depth + 1)
    end
  end
  walk(nested, vim.NIL, 0)
  eq(from_flat, from_nested, "getTreeFlat is getTree in pre-order")
  local drawn = {}
  for _, line in ipairs(vim.list_slice(lines_of(buf), 2)) do
    local id = line:match("(c%d+) ")
    local label = line:match(" %[([^%]]+)%]")
    drawn[#drawn + 1] = { id = id, label = label }
  end
  local served = vim.tbl_map(function(r)
    return { id = r.id, label = r.label }
  end, from_flat)
  -- getTree's order, but for the branch holding the leaf (c11), which pi's /tree draws first among c1's children.
  eq(served[4], { id = "c11" }, "getTree puts c11 third among c1's children")
  table.insert(served, 2, table.remove(served, 4))
  eq(drawn, served, "the drawn entries and labels, in the server's order, the leaf's branch first")
  vim.cmd("bwipeout")
  vim.cmd("buffer " .. tree_buf)
end)

test("the tree says what the server's skeletons say: bash commands, tool calls, images, names on one line", function()
  local path_d = root .. "/d.jsonl"
  write_file(path_d, {
    [[{"type":"session","version":3,"id":"0195a1b2-0000-7000-8000-00000000000d","timestamp":"2025-03-02T12:00:00.000Z","cwd":"/d"}]],
    [[{"type":"message","id":"d1","parentId":null,"timestamp":"2025-03-02T12:00:01.000Z","message":{"role":"user","content":"a  b\nc","timestamp":1}}]],
    [[{"type":"message","id":"d2","parentId":"d1","timestamp":"2025-03-02T12:00:02.000Z","message":{"role":"bashExecution","command":"git  status\n","output":"clean","exitCode":0,"timestamp":2}}]],
    [[{"type":"message","id":"d3","parentId":"d2","timestamp":"2025-03-02T12:00:03.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"t","name":"read","arguments":{}},{"type":"image","data":"AAAA","mimeType":"image/png"}],"timestamp":3}}]],
    [[{"type":"custom","id":"d4","parentId":"d3","timestamp":"2025-03-02T12:00:04.000Z","customType":"  my\n ext ","data":{}}]],
    [[{"type":"session_info","id":"d5","parentId":"d4","timestamp":"2025-03-02T12:00:05.000Z","name":"two   words"}]],
    [[{"type":"compaction","id":"d6","parentId":"d5","timestamp":"2025-03-02T12:00:06.000Z","summary":"sum\nmary","firstKeptEntryId":"d1","tokensBefore":5}]],
  })
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path_d))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, {
    "d1 user: a b c",
    "d2 bashExecution: $ git status",
    "d3 assistant: → read [image]",
    "d4 custom (my ext)",
    "d5 name: two words",
    "d6 compaction: sum mary ◀ leaf",
  }, "tree of D")
  vim.cmd("bwipeout")
  vim.cmd("buffer " .. tree_buf)
end)

test("live: entries pi appends show up, the cursor follows the leaf", function()
  local win = api.nvim_get_current_win()
  eq(api.nvim_win_get_cursor(win)[1], 3, "cursor on the leaf before the append")
  append_line(
    path_a,
    [[{"type":"message","id":"b3","parentId":"b2","timestamp":"2025-01-01T10:01:00.000Z","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"Second try worked"}],"timestamp":1735725660000}}]]
  )
  local expected = vim.deepcopy(tree_a)
  expected[3] = "├─ b2 user: Try again, differently"
  table.insert(expected, 4, "│  b3 assistant: Second try worked ◀ leaf")
  wait_lines(tree_buf, expected, "after one append")
  eq(api.nvim_win_get_cursor(win)[1], 4, "cursor on the new leaf")

  append_line(
    path_a,
    [[{"type":"label","id":"l2","parentId":"b3","timestamp":"2025-01-01T10:01:01.000Z","targetId":"b2","label":"retry"}]]
  )
  expected[3] = "├─ b2 user: Try again, differently [retry]"
  expected[4] = "│  b3 assistant: Second try worked"
  table.insert(expected, 5, "│  l2 label b2 → retry ◀ leaf")
  wait_lines(tree_buf, expected, "after a label")
end)

test("live: a line still being written is not shown until its newline arrives", function()
  local before = lines_of(tree_buf)
  local line =
    [[{"type":"message","id":"b4","parentId":"l2","timestamp":"2025-01-01T10:01:02.000Z","message":{"role":"user","content":"Thanks","timestamp":1735725662000}}]]
  local f = assert(io.open(path_a, "a"))
  f:write(line:sub(1, 40))
  f:flush()
  vim.wait(400)
  eq(lines_of(tree_buf), before, "unchanged while the line is incomplete")
  f:write(line:sub(41) .. "\n")
  f:close()
  local expected = vim.deepcopy(before)
  expected[5] = "│  l2 label b2 → retry"
  table.insert(expected, 6, "│  b4 user: Thanks ◀ leaf")
  wait_lines(tree_buf, expected, "after the newline")
end)

test("live: a cursor away from the leaf stays on its entry", function()
  local win = api.nvim_get_current_win()
  local a1_line
  for i, l in ipairs(lines_of(tree_buf)) do
    if l:find("a1 assistant", 1, true) then
      a1_line = i
    end
  end
  api.nvim_win_set_cursor(win, { a1_line, 3 })
  -- A new branch from u1, earlier in time than every other child: drawn first, above the cursor.
  append_line(
    path_a,
    [[{"type":"message","id":"b0","parentId":"u1","timestamp":"2025-01-01T10:00:01.100Z","message":{"role":"user","content":"An early branch","timestamp":1735725601100}}]]
  )
  wait_for("the new branch", function()
    return lines_of(tree_buf)[3] == "├─ b0 user: An early branch ◀ leaf"
  end)
  local row = api.nvim_win_get_cursor(win)[1]
  eq(row, a1_line + 1, "cursor moved down with its entry")
  truthy(lines_of(tree_buf)[row]:find("a1 assistant", 1, true), "cursor still on a1")
end)

test("<CR> shows the entry as stored, in a split, and the cursor stays in the tree", function()
  local win = api.nvim_get_current_win()
  local wins_before = #api.nvim_list_wins()
  vim.cmd([[execute "normal \<CR>"]])
  local entry_buf
  wait_for("the entry window", function()
    for _, w in ipairs(api.nvim_list_wins()) do
      local b = api.nvim_win_get_buf(w)
      local ok, id = pcall(api.nvim_buf_get_var, b, "pi_sessiond_entry_id")
      if ok and id == "a1" then
        entry_buf = b
        return true
      end
    end
    return false
  end)
  eq(#api.nvim_list_wins(), wins_before + 1, "one split opened")
  eq(api.nvim_get_current_win(), win, "focus stays in the tree")
  eq(lines_of(entry_buf), {
    "{",
    '  "type": "message",',
    '  "id": "a1",',
    '  "parentId": "u1",',
    '  "timestamp": "2025-01-01T10:00:02.000Z",',
    '  "message": {',
    '    "role": "assistant",',
    '    "content": [',
    "      {",
    '        "type": "text",',
    '        "text": "Looking."',
    "      },",
    "      {",
    '        "type": "toolCall",',
    '        "id": "t1",',
    '        "name": "read",',
    '        "arguments": {',
    '          "path": "main.rs",',
    '          "flags": []',
    "        }",
    "      }",
    "    ],",
    '    "timestamp": 1735725602000',
    "  }",
    "}",
  }, "entry a1")

  -- Another entry reuses the same window.
  api.nvim_win_set_cursor(win, { 1, 0 })
  vim.cmd([[execute "normal \<CR>"]])
  wait_for("entry m1", function()
    return lines_of(entry_buf)[3] == '  "id": "m1",'
  end)
  eq(#api.nvim_list_wins(), wins_before + 1, "still one split")
  vim.cmd("only")
end)

test("live: a hidden tree is brought up to date when shown again", function()
  local notified = false
  local off = pi.client():on("session/changed", function(note)
    notified = notified or (note.change.kind == "append" and note.change.entries[1].id == "b5")
  end)
  vim.cmd("enew")
  local before = lines_of(tree_buf)
  local s = spy()
  append_line(
    path_a,
    [[{"type":"message","id":"b5","parentId":"b0","timestamp":"2025-01-01T10:02:00.000Z","message":{"role":"user","content":"Later","timestamp":1735725720000}}]]
  )
  -- The plugin's handler was registered first, so it has seen the append once this one has.
  wait_for("the append notification", function()
    return notified
  end)
  off()
  vim.wait(50)
  local lines_hidden, reads_hidden = lines_of(tree_buf), vim.deepcopy(s.requests)
  s.restore()
  vim.cmd("buffer " .. tree_buf)
  local expected = vim.deepcopy(before)
  expected[3] = "├─ b0 user: An early branch"
  table.insert(expected, 4, "│  b5 user: Later ◀ leaf")
  wait_lines(tree_buf, expected, "drawn on showing")
  eq(lines_hidden, before, "not redrawn while hidden")
  eq(reads_hidden, {}, "the tree is not read while hidden")
  eq(api.nvim_win_get_cursor(0)[1], 1, "the cursor stays on m1, where it was")
end)

test("live: a file replaced by another process is read again", function()
  local seen = capture_notify(function()
    -- Truncated, then written: the server reports the empty file as deleted (this server does, within a few
    -- milliseconds), then the new content as a reset.
    local deleted = false
    local off = pi.client():on("session/changed", function(note)
      deleted = deleted or note.change.kind == "deleted"
    end)
    io.open(path_a, "w"):close()
    vim.wait(1000, function()
      return deleted
    end, 10)
    off()
    write_file(path_a, {
      lines_a[1],
      [[{"type":"message","id":"z1","parentId":null,"timestamp":"2025-01-01T11:00:00.000Z","message":{"role":"user","content":"Replaced","timestamp":1}}]],
    })
    wait_lines(tree_buf, { "z1 user: Replaced ◀ leaf" }, "after the rewrite")
  end)
  eq(seen, {}, "no message (the file was never gone)")
  append_line(
    path_a,
    [[{"type":"message","id":"z2","parentId":"z1","timestamp":"2025-01-01T11:00:01.000Z","message":{"role":"assistant","content":"And followed","timestamp":2}}]]
  )
  wait_lines(tree_buf, { "z1 user: Replaced", "z2 assistant: And followed ◀ leaf" }, "following after the rewrite")
end)

test("wiping the tree buffer closes the session handle", function()
  local handle = api.nvim_buf_get_var(tree_buf, "pi_sessiond_handle")
  local err = call("session/getState", { handle = handle })
  eq(err, nil, "the handle is open while the buffer is")
  vim.cmd("bwipeout " .. tree_buf)
  -- Poll with one request at a time: a vim.wait nested in the condition of another never timed out here (0.7.2).
  local deadline = vim.loop.hrtime() + 5e9
  local closed = false
  while not closed and vim.loop.hrtime() < deadline do
    local e = call("session/getState", { handle = handle })
    closed = e ~= nil and type(e.data) == "table" and e.data.kind == "handle_not_found"
    if not closed then
      vim.wait(20)
    end
  end
  truthy(closed, "session/getState still answers for " .. handle .. " after the buffer was wiped")
end)

test(":PiSessionTree without a file opens the newest session of the directory", function()
  vim.cmd("PiSessionTree")
  wait_for("the tree buffer", function()
    return api.nvim_buf_get_name(0) == "pi-session://" .. path_b
  end)
  wait_lines(api.nvim_get_current_buf(), { "x1 user: Add a README", "x2 assistant: Done. ◀ leaf" }, "tree of B")
end)

test("a long linear session (deeper than any JSON decoder nests) renders whole", function()
  local path = root .. "/long.jsonl"
  local lines = {
    [[{"type":"session","version":3,"id":"0195a1b2-0000-7000-8000-00000000000d","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/long"}]],
  }
  local parent = "null"
  for i = 1, 1500 do
    local id = string.format("e%04d", i)
    lines[#lines + 1] = string.format(
      [[{"type":"message","id":"%s","parentId":%s,"timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"message %d","timestamp":%d}}]],
      id,
      parent,
      i,
      i
    )
    parent = '"' .. id .. '"'
  end
  write_file(path, lines)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  wait_for("1500 lines", function()
    return api.nvim_buf_line_count(buf) == 1500
  end)
  eq(lines_of(buf)[1], "e0001 user: message 1", "first line")
  eq(lines_of(buf)[1500], "e1500 user: message 1500 ◀ leaf", "last line")
  -- Why getTreeFlat: the nested getTree of this session cannot be decoded here, and the request fails cleanly.
  local err = call("session/getTree", { handle = api.nvim_buf_get_var(buf, "pi_sessiond_handle") })
  eq(type(err) == "table" and type(err.data) == "table" and err.data.kind, "decode_error", "getTree's answer")
end)

-- A linear session s1 → … → sN for the tests of following.
local function linear_session(name, n)
  local path = root .. "/" .. name .. ".jsonl"
  local lines = {
    [[{"type":"session","version":3,"id":"0195a1b2-0000-7000-8000-0000000000ee","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/s"}]],
  }
  for i = 1, n do
    lines[#lines + 1] = string.format(
      [[{"type":"message","id":"s%d","parentId":%s,"timestamp":"2025-01-01T00:00:%02d.000Z","message":{"role":"user","content":"m%d","timestamp":%d}}]],
      i,
      i == 1 and "null" or ('"s' .. (i - 1) .. '"'),
      i,
      i,
      i
    )
  end
  write_file(path, lines)
  return path
end

local function s_entry(i)
  return string.format(
    [[{"type":"message","id":"s%d","parentId":"s%d","timestamp":"2025-01-01T00:00:%02d.000Z","message":{"role":"user","content":"m%d","timestamp":%d}}]],
    i,
    i - 1,
    i,
    i,
    i
  )
end

-- The lines of s1 … sN with the leaf on `leaf`.
local function s_lines(n, leaf)
  local out = {}
  for i = 1, n do
    out[i] = "s" .. i .. " user: m" .. i .. (i == leaf and " ◀ leaf" or "")
  end
  return out
end

-- Sends what Neovim sends after a resize: from inside this script the main loop, which sends it, never runs.
local function resized()
  vim.cmd("doautocmd VimResized")
end

-- One window, the screen `columns` wide, for this test; the width is put back after it.
local function one_window_of(columns)
  vim.cmd("silent! only")
  local before = vim.o.columns
  cleanups[#cleanups + 1] = function()
    vim.o.columns = before
    resized()
  end
  vim.o.columns = columns
  resized()
end

test("a tree fills its window: previews are cut to its width in screen cells, label and leaf in view, again on resize", function()
  one_window_of(160)
  local digits = string.rep("0123456789", 20)
  local wide = string.rep("日本語", 60)
  local path = root .. "/wide.jsonl"
  write_file(path, {
    [[{"type":"session","version":3,"id":"0195a1b2-0000-7000-8000-0000000000f1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}]],
    [[{"type":"message","id":"w1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"]] .. digits .. [[","timestamp":1}}]],
    [[{"type":"label","id":"w2","parentId":"w1","timestamp":"2025-01-01T00:00:02.000Z","targetId":"w1","label":"keep"}]],
    [[{"type":"message","id":"w3","parentId":"w2","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"user","content":"]] .. wide .. [[","timestamp":3}}]],
  })
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  -- "w1 user: " and " [keep]" take 16 cells of 160, "…" one: 143 digits. Each 日 takes two cells: 71 of them.
  wait_lines(buf, {
    "w1 user: " .. digits:sub(1, 143) .. "… [keep]",
    "w2 label w1 → keep",
    "w3 user: " .. vim.fn.strcharpart(wide, 0, 71) .. "… ◀ leaf",
  }, "at 160 columns")
  eq(vim.fn.strdisplaywidth(lines_of(buf)[1]), 160, "the first line fills the window")

  vim.o.columns = 100
  resized()
  wait_lines(buf, {
    "w1 user: " .. digits:sub(1, 83) .. "… [keep]",
    "w2 label w1 → keep",
    "w3 user: " .. vim.fn.strcharpart(wide, 0, 41) .. "… ◀ leaf",
  }, "at 100 columns")
  vim.cmd("bwipeout")
end)

test("a tree's window does not wrap, and the window's other buffers keep 'wrap'", function()
  vim.cmd("silent! only")
  local wrap = vim.o.wrap
  cleanups[#cleanups + 1] = function()
    vim.o.wrap = wrap
  end
  vim.o.wrap = true
  local path = linear_session("nowrap", 2)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf, win = api.nvim_get_current_buf(), api.nvim_get_current_win()
  wait_lines(buf, s_lines(2, 2), "the tree")
  eq(api.nvim_win_get_option(win, "wrap"), false, "the tree's window")
  vim.cmd("enew")
  eq(api.nvim_win_get_option(win, "wrap"), true, "another buffer in that window")
  vim.cmd("buffer " .. buf)
  eq(api.nvim_win_get_option(win, "wrap"), false, "the tree shown again")
  vim.cmd("bwipeout")
end)

test(":PiSessions fits titles to the window in screen cells, the directory of :PiSessions! in view, again on resize", function()
  one_window_of(160)
  cleanups[#cleanups + 1] = function()
    vim.cmd("cd " .. vim.fn.fnameescape(project))
  end
  local digits = string.rep("0123456789", 20)
  local wide = string.rep("日本語", 60)
  local dir = root .. "/titles"
  local sessions = agent_dir .. "/sessions/--" .. (dir:sub(2):gsub("/", "-")) .. "--"
  vim.fn.mkdir(dir, "p")
  vim.fn.mkdir(sessions, "p")
  -- The list's time is that of the last message (its own timestamp, in ms).
  for i, title in ipairs({ digits, wide }) do
    local id = "0195a1b2-0000-7000-8000-0000000001f" .. i
    write_file(sessions .. "/2025-01-0" .. (6 - i) .. "T09-00-00-000Z_" .. id .. ".jsonl", {
      [[{"type":"session","version":3,"id":"]] .. id .. [[","timestamp":"2025-01-0]] .. (6 - i) .. [[T09:00:00.000Z","cwd":"]] .. dir .. [["}]],
      [[{"type":"message","id":"t1","parentId":null,"timestamp":"2025-01-0]] .. (6 - i) .. [[T09:00:01.000Z","message":{"role":"user","content":"]] .. title .. [[","timestamp":]]
        .. (1736067601000 - (i - 1) * 86400000) .. [[}}]],
    })
  end
  vim.cmd("cd " .. vim.fn.fnameescape(dir))
  vim.cmd("PiSessions")
  local buf = api.nvim_get_current_buf()
  -- "2025-01-05 09:00     1 msgs  " takes 29 cells of 160, "…" one: 130 digits. Each 日 takes two cells: 65.
  wait_lines(buf, {
    "2025-01-05 09:00     1 msgs  " .. digits:sub(1, 130) .. "…",
    "2025-01-04 09:00     1 msgs  " .. vim.fn.strcharpart(wide, 0, 65) .. "…",
  }, "at 160 columns")
  eq(vim.fn.strdisplaywidth(lines_of(buf)[1]), 160, "the first line fills the window")

  vim.o.columns = 100
  resized()
  wait_lines(buf, {
    "2025-01-05 09:00     1 msgs  " .. digits:sub(1, 70) .. "…",
    "2025-01-04 09:00     1 msgs  " .. vim.fn.strcharpart(wide, 0, 35) .. "…",
  }, "at 100 columns")

  -- Every session, each with its directory: the title gives way to it.
  vim.cmd("PiSessions!")
  buf = api.nvim_get_current_buf()
  local tail = "  (" .. dir .. ")"
  local room = 100 - 29 - vim.fn.strdisplaywidth(tail) - 1
  wait_for("the list of every session", function()
    return lines_of(buf)[1]:find("msgs", 1, true) ~= nil
  end)
  eq(vim.list_slice(lines_of(buf), 1, 2), {
    "2025-01-05 09:00     1 msgs  " .. digits:sub(1, room) .. "…" .. tail,
    "2025-01-04 09:00     1 msgs  " .. vim.fn.strcharpart(wide, 0, math.floor(room / 2)) .. "…" .. tail,
  }, ":PiSessions! at 100 columns")
  vim.cmd("bwipeout")
end)

test("live: an external append redraws the tree from its notification alone, with no request", function()
  local path = linear_session("nofetch", 3)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(3, 3), "initial tree")
  local s = spy()
  append_line(path, s_entry(4))
  wait_lines(buf, s_lines(4, 4), "after pi's append")
  append_line(path, s_entry(5))
  wait_lines(buf, s_lines(5, 5), "after another")
  s.restore()
  eq(s.requests, {}, "nothing was read: the skeletons came with the notifications")
  vim.cmd("bwipeout")
end)

test("reload: R reads the skeletons again; notifications the state already includes are skipped, later ones applied (seq)", function()
  local path = linear_session("seq", 3)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(3, 3), "initial tree")
  append_line(path, s_entry(4))
  wait_lines(buf, s_lines(4, 4), "after the first append (seq 1)")
  append_line(path, s_entry(5))
  wait_lines(buf, s_lines(5, 5), "after the second append (seq 2)")
  local handle = api.nvim_buf_get_var(buf, "pi_sessiond_handle")
  local _, state = call("session/getState", { handle = handle })
  eq(state.seq, 2, "the server's seq")
  local function leaf_note(seq, leaf)
    return { handle = handle, sessionId = state.sessionId, seq = seq, leafId = leaf,
      change = { kind = "leaf", leafId = leaf } }
  end

  -- R reads the state again; a notification that arrives before its answer but is already in it (seq 1 ≤ 2)
  -- must not move the leaf back.
  local s = spy()
  vim.cmd("normal R")
  deliver(leaf_note(1, "s1"))
  wait_answers(s, "session/getState", 1)
  s.restore()
  eq(lines_of(buf), s_lines(5, 5), "the leaf of the state, not of the older notification")
  local reads = vim.tbl_map(function(r)
    return r.method
  end, s.requests)
  eq(reads, { "session/getState", "session/getWarnings" }, "one read (an old notification is no gap), and what it found")
  eq(s.requests[1].params.snapshot, "skeleton", "of skeletons")

  -- One that is newer than the state (seq 3 > 2) is applied.
  s = spy()
  vim.cmd("normal R")
  deliver(leaf_note(3, "s2"))
  wait_answers(s, "session/getState", 1)
  s.restore()
  eq(lines_of(buf), s_lines(5, 2), "the leaf of the newer notification")
  vim.cmd("bwipeout")
end)

test("live: a lost notification is made up with session/changesSince, and following goes on", function()
  local path = linear_session("gap", 2)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(2, 2), "initial tree")
  -- The plugin's handler loses the next notification, as a host that dropped it would.
  local handlers = pi.client().handlers["session/changed"]
  local plugin_handler = handlers[1]
  local lost = 0
  handlers[1] = function(note)
    if lost == 0 then
      lost = 1
      return
    end
    plugin_handler(note)
  end
  cleanups[#cleanups + 1] = function()
    handlers[1] = plugin_handler
  end
  local seen = 0
  local off = pi.client():on("session/changed", function()
    seen = seen + 1
  end)
  local s = spy()
  append_line(path, s_entry(3))
  wait_for("the lost notification", function()
    return seen == 1
  end)
  eq(lines_of(buf), s_lines(2, 2), "the lost append is not drawn")
  append_line(path, s_entry(4))
  wait_lines(buf, s_lines(4, 4), "both appends, after the repair")
  off()
  s.restore()
  handlers[1] = plugin_handler
  local reads = vim.tbl_map(function(r)
    return r.method .. " " .. tostring(r.params.seq)
  end, s.requests)
  eq(reads, { "session/changesSince 0" }, "one request for what was missed after seq 0")
  append_line(path, s_entry(5))
  wait_lines(buf, s_lines(5, 5), "following goes on")
  vim.cmd("bwipeout")
end)

test("live: a notification from beyond what the server holds is not taken at its word", function()
  local path = linear_session("beyond", 2)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(2, 2), "initial tree")
  local handle = api.nvim_buf_get_var(buf, "pi_sessiond_handle")
  -- seq 5 after 0, of which the server knows nothing: the repair finds no change and the leaf stays.
  local s = spy()
  deliver({ handle = handle, sessionId = "x", seq = 5, leafId = "s1", change = { kind = "leaf", leafId = "s1" } })
  wait_answers(s, "session/changesSince", 1)
  s.restore()
  eq(lines_of(buf), s_lines(2, 2), "the leaf the server has")
  append_line(path, s_entry(3))
  wait_lines(buf, s_lines(3, 3), "the append after it")
  vim.cmd("bwipeout")
end)

test("live: a deleted file is reported, and the tree keeps what it held", function()
  local path = linear_session("deleted", 2)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(2, 2), "initial tree")
  local seen = capture_notify(function(seen)
    os.remove(path)
    wait_for("a message", function()
      return #seen > 0
    end)
  end)
  local msg = "pi-sessiond: " .. path .. " was deleted; the tree shows what it held"
  eq(seen, { { msg = msg, level = vim.log.levels.WARN } }, "the message")
  eq(lines_of(buf), s_lines(2, 2), "the tree")
  vim.cmd("bwipeout")
end)

-- What a tree says above its entries of a file whose reading found problems.
local function problems_marks(buf)
  local ns = api.nvim_create_namespace("pi_sessiond")
  local by_line = {}
  for _, m in ipairs(api.nvim_buf_get_extmarks(buf, ns, { 0, 0 }, { 1, -1 }, { details = true })) do
    by_line[m[2] + 1] = m[4].hl_group
  end
  return by_line
end

test("a tree says on a highlighted line above its entries what reading its file found, each cursor kept on its entry, dead or alive", function()
  one_window_of(200)
  -- Line 3 is not JSON (pi skips it) and s3's parent does not exist; the old version (migrated in memory) and
  -- the missing final newline lose nothing, and are not counted.
  local path = root .. "/problems.jsonl"
  local f = assert(io.open(path, "w"))
  f:write(table.concat({
    [[{"type":"session","version":2,"id":"0195a1b2-0000-7000-8000-0000000000f2","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}]],
    [[{"type":"message","id":"s1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"m1","timestamp":1}}]],
    "{not json",
    [[{"type":"message","id":"s2","parentId":"s1","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"user","content":"m2","timestamp":2}}]],
    [[{"type":"message","id":"s3","parentId":"gone","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"user","content":"m3","timestamp":3}}]],
    [[{"type":"message","id":"s4","parentId":"s2","timestamp":"2025-01-01T00:00:04.000Z","message":{"role":"user","content":"m4","timestamp":4}}]],
  }, "\n"))
  f:close()
  local entries = { "s1 user: m1", "s2 user: m2", "s4 user: m4 ◀ leaf", "s3 user: m3" }
  local found = "[reading the file found 2 problems: line 3: line is not valid JSON (expected a string key at byte 1); "
    .. "pi skips it; it is kept; and 1 more]"

  -- The answer to getWarnings is held back until a cursor is away from the leaf.
  local c = pi.client()
  local release
  local s = spy(function(method, params, answer)
    if method == "session/getWarnings" and not release then
      release = function()
        getmetatable(c).request(c, method, params, answer)
      end
      return true
    end
  end)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf, win = api.nvim_get_current_buf(), api.nvim_get_current_win()
  wait_lines(buf, entries, "the tree, before what reading found")
  wait_for("the question", function()
    return release ~= nil
  end)
  api.nvim_win_set_cursor(win, { 2, 3 })
  release()
  wait_lines(buf, vim.list_extend({ found }, entries), "what reading found, above the entries")
  s.restore()
  eq(api.nvim_win_get_cursor(win), { 3, 3 }, "the cursor stays on s2")
  eq(problems_marks(buf)[1], "PiSessiondWarnings", "the line is highlighted")

  -- Cut to the window as the entries are, its bracket in view.
  vim.o.columns = 60
  resized()
  wait_for("the cut line", function()
    return lines_of(buf)[1] ~= found
  end)
  eq(lines_of(buf)[1], "[reading the file found 2 problems: line 3: line is not va…]", "at 60 columns")
  eq(vim.fn.strdisplaywidth(lines_of(buf)[1]), 60, "the line fills the window")
  vim.o.columns = 200
  resized()

  -- A tree whose server died says that first.
  kill_server()
  wait_lines(buf, with_not_live(vim.list_extend({ found }, entries)), "not live, and what reading found")
  eq(problems_marks(buf), { "PiSessiondNotLive", "PiSessiondWarnings" }, "both lines highlighted")
  eq(api.nvim_win_get_cursor(win), { 4, 3 }, "the cursor still on s2")
  vim.cmd("normal R")
  wait_lines(buf, vim.list_extend({ found }, entries), "reopened: what the new server's reading found")
  eq(api.nvim_win_get_cursor(win), { 3, 3 }, "the cursor on s2 again")
  vim.cmd("bwipeout")
end)

test("a torn last line is reported until the writer finishes it, then not (asked again after that append only)", function()
  one_window_of(200)
  local path = linear_session("torn", 2)
  local line = s_entry(3)
  local f = assert(io.open(path, "a"))
  f:write(line:sub(1, 40))
  f:close()
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, vim.list_extend({
    "[reading the file found 1 problem: line 4: the last line is incomplete (no newline, not valid JSON): a write "
      .. "was cut short; it is kept, and the next append starts on a new line]",
  }, s_lines(2, 2)), "the torn line reported")
  local s = spy()
  append_line(path, line:sub(41))
  wait_lines(buf, s_lines(3, 3), "the line finished: nothing to report")
  append_line(path, s_entry(4))
  wait_lines(buf, s_lines(4, 4), "the next append")
  s.restore()
  eq(vim.tbl_map(function(r)
    return r.method
  end, requests_of(s, vim.b[buf].pi_sessiond_handle)), { "session/getWarnings" },
    "asked again after the append that finished the line, not after the next")
  vim.cmd("bwipeout")
end)

test("what reading found, if read before the append that finished a torn line, is asked again", function()
  local path = linear_session("torn-race", 2)
  local line = s_entry(3)
  local f = assert(io.open(path, "a"))
  f:write(line:sub(1, 40))
  f:close()
  -- The first answer is held back; the test gives it as the server would have read it before the append.
  local held, buf
  local s = spy(function(method, params, answer)
    if method == "session/getWarnings" and not held and params.handle == vim.b[buf].pi_sessiond_handle then
      held = answer
      return true
    end
  end)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path))
  buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(2, 2), "the tree, before what reading found")
  wait_for("the question", function()
    return held ~= nil
  end)
  append_line(path, line:sub(41))
  wait_lines(buf, s_lines(3, 3), "the line finished")
  held(nil, { { line = 4, kind = "torn_tail", message = "the last line is incomplete" } })
  wait_answers(s, "session/getWarnings", 2, vim.b[buf].pi_sessiond_handle)
  s.restore()
  eq(lines_of(buf), s_lines(3, 3), "the server's answer to the second question: nothing to report")
  vim.cmd("bwipeout")
end)

test("R after the server was killed opens the session again on a new server", function()
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(path_b))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, { "x1 user: Add a README", "x2 assistant: Done. ◀ leaf" }, "tree of B")
  local old = pi.client()
  local seen = capture_notify(function(seen)
    vim.loop.kill(old.pid, "sigkill")
    wait_for("the exit message", function()
      return #seen > 0
    end)
  end)
  eq(seen[1].level, vim.log.levels.ERROR, "error level")
  truthy(seen[1].msg:find("was killed by signal 9", 1, true), "exit message: " .. seen[1].msg)
  append_line(
    path_b,
    [[{"type":"message","id":"x3","parentId":"x2","timestamp":"2025-01-02T09:00:03.000Z","message":{"role":"user","content":"Thanks","timestamp":1735808403000}}]]
  )
  vim.cmd("normal R")
  wait_lines(buf, { "x1 user: Add a README", "x2 assistant: Done.", "x3 user: Thanks ◀ leaf" }, "after R")
  truthy(pi.client() ~= old, "a new server")
end)

test("a killed server: every open tree says it is not live, and R in one reopens them all on a new server, following again", function()
  vim.cmd("silent! only")
  local p1, p2 = linear_session("dead1", 2), linear_session("dead2", 2)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(p1))
  local b1, w1 = api.nvim_get_current_buf(), api.nvim_get_current_win()
  vim.cmd("split")
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(p2))
  local b2, w2 = api.nvim_get_current_buf(), api.nvim_get_current_win()
  wait_lines(b1, s_lines(2, 2), "first tree")
  wait_lines(b2, s_lines(2, 2), "second tree")

  local old = kill_server()
  wait_lines(b1, with_not_live(s_lines(2, 2)), "the first tree says it is not live")
  wait_lines(b2, with_not_live(s_lines(2, 2)), "so does the second")
  local ns = api.nvim_create_namespace("pi_sessiond")
  local marks = api.nvim_buf_get_extmarks(b2, ns, { 0, 0 }, { 0, -1 }, { details = true })
  eq(marks[1] and marks[1][4].hl_group, "PiSessiondNotLive", "the line is highlighted")
  append_line(p1, s_entry(3))
  append_line(p2, s_entry(3))
  vim.wait(200)
  eq(lines_of(b2), with_not_live(s_lines(2, 2)), "nothing follows the file while no server runs")

  -- <CR> says why it shows nothing, without the server's stderr again.
  api.nvim_set_current_win(w2)
  api.nvim_win_set_cursor(w2, { 2, 0 })
  local seen = capture_notify(function()
    vim.cmd([[execute "normal \<CR>"]])
    vim.wait(100)
  end)
  eq(seen, { {
    msg = "pi-sessiond: this tree is not live (pi-sessiond was killed by signal 9); R reconnects it",
    level = vim.log.levels.WARN,
  } }, "<CR> in a tree that is not live")

  -- R in the other tree starts a server, and both trees move to it.
  api.nvim_set_current_win(w1)
  vim.cmd("normal R")
  wait_lines(b1, s_lines(3, 3), "the tree R was pressed in")
  wait_lines(b2, s_lines(3, 3), "the other tree, reopened too")
  truthy(pi.client() ~= old, "a new server")
  append_line(p2, s_entry(4))
  wait_lines(b2, s_lines(4, 4), "the other tree follows its file again")
  api.nvim_set_current_win(w2)
  api.nvim_win_set_cursor(w2, { 4, 0 })
  vim.cmd([[execute "normal \<CR>"]])
  wait_for("entry s4 from the new server", function()
    for _, w in ipairs(api.nvim_list_wins()) do
      local ok, id = pcall(api.nvim_buf_get_var, api.nvim_win_get_buf(w), "pi_sessiond_entry_id")
      if ok and id == "s4" then
        return true
      end
    end
    return false
  end)
  vim.cmd("silent! only")
  vim.cmd("silent bwipeout " .. b1 .. " " .. b2)
end)

-- A two-entry session's tree whose server was then killed (it says so); the session's path and the tree's buffer.
local function tree_of_a_killed_server(name)
  local p = linear_session(name, 2)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(p))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(2, 2), "the tree")
  kill_server()
  wait_lines(buf, with_not_live(s_lines(2, 2)), "not live")
  return p, buf
end

test("a narrow tree whose server was killed says so in one line that fits, what to press kept in view", function()
  one_window_of(40)
  local p = linear_session("dead-narrow", 2)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(p))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(2, 2), "the tree")
  kill_server()
  wait_for("the not-live line", function()
    return lines_of(buf)[1]:find("not live", 1, true) ~= nil
  end)
  local first = lines_of(buf)[1]
  truthy(vim.fn.strdisplaywidth(first) <= 40, "fits 40 columns: " .. first)
  truthy(first:find("^%[not live: pi%-sessiond") ~= nil, "says what happened: " .. first)
  truthy(first:find("; R reconnects]$") ~= nil, "and what to press: " .. first)
  vim.cmd("bwipeout")
end)

test(":PiSessions after the server was killed reopens the trees on its new server, a hidden one too", function()
  local p, buf = tree_of_a_killed_server("dead3")
  vim.cmd("PiSessions") -- in the tree's window: the tree is hidden
  append_line(p, s_entry(3))
  wait_for("the list", function()
    return lines_of(0)[1]:find("msgs", 1, true) ~= nil
  end)
  vim.cmd("buffer " .. buf)
  wait_lines(buf, s_lines(3, 3), "reopened, with the append made while it was hidden")
  append_line(p, s_entry(4))
  wait_lines(buf, s_lines(4, 4), "following again")
  vim.cmd("bwipeout")
end)

test(":PiSessionTree FILE on a tree whose server was killed reconnects it", function()
  local p, buf = tree_of_a_killed_server("dead4")
  append_line(p, s_entry(3))
  vim.cmd("enew")
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(p))
  eq(api.nvim_get_current_buf(), buf, "the open tree buffer")
  wait_lines(buf, s_lines(3, 3), "reopened on a new server")
  append_line(p, s_entry(4))
  wait_lines(buf, s_lines(4, 4), "following again")
  vim.cmd("bwipeout")
end)

test(":PiSessionTree on a missing file says so", function()
  local seen = capture_notify(function(seen)
    vim.cmd("PiSessionTree " .. vim.fn.fnameescape(root .. "/nope.jsonl"))
    wait_for("an error", function()
      return #seen > 0
    end)
  end)
  eq(seen[1].level, vim.log.levels.ERROR, "error level")
  eq(seen[1].msg, "pi-sessiond: no such file: " .. root .. "/nope.jsonl", "message")
  eq(lines_of(0), { "Error: no such file: " .. root .. "/nope.jsonl" }, "buffer")
end)

test("a binary that cannot be found gives a clear error", function()
  pi.setup({ binary = root .. "/no/pi-sessiond" })
  local before = api.nvim_get_current_buf()
  local seen = capture_notify(function()
    vim.cmd("PiSessions")
  end)
  eq(#seen, 1, "one message")
  eq(seen[1].level, vim.log.levels.ERROR, "error level")
  truthy(
    seen[1].msg:find("cannot find the server binary '" .. root .. "/no/pi-sessiond' (from setup({ binary = … }))", 1, true),
    "message names the binary and where it came from: " .. seen[1].msg
  )
  eq(api.nvim_get_current_buf(), before, "no buffer opened")
end)

test("a server that dies fails the request with its exit status", function()
  pi.setup({ binary = "false" }) -- on PATH, exits 1 at once
  local seen = capture_notify(function(seen)
    vim.cmd("PiSessions")
    wait_for("an error about the list", function()
      for _, n in ipairs(seen) do
        if n.msg:find("cannot list sessions", 1, true) then
          return true
        end
      end
      return false
    end)
  end)
  local listed
  for _, n in ipairs(seen) do
    if n.msg:find("cannot list sessions", 1, true) then
      listed = n
    end
  end
  eq(listed.level, vim.log.levels.ERROR, "error level")
  truthy(listed.msg:find("exited with code 1", 1, true), "message gives the exit status: " .. listed.msg)
  eq(lines_of(0)[1]:sub(1, 7), "Error: ", "the list buffer shows the error")
  pi.setup({ binary = bin })
end)

test("a dying server's message quotes what it wrote to stderr just before, not older lines, and only once", function()
  local dying = script("dying.sh", table.concat({
    "echo '2025-01-01T09:58:00.000000Z  WARN pi_sessiond: an old warning about /elsewhere.jsonl' >&2",
    "sleep 0.6",
    "echo \"thread 'main' panicked at src/main.rs:1:1: boom\" >&2",
    "exit 101",
  }, "\n"))
  rpc.stderr_recent_ms = 300
  cleanups[#cleanups + 1] = function()
    rpc.stderr_recent_ms = 2000
    pi.setup({ binary = bin })
  end
  pi.setup({ binary = dying })
  local c
  local seen = capture_notify(function()
    c = pi.client()
    wait_for("the exit", function()
      return c.finished
    end)
  end)
  eq(seen, { {
    msg = "pi-sessiond: " .. dying .. " exited with code 101, after writing to stderr: thread 'main' panicked at src/main.rs:1:1: boom",
    level = vim.log.levels.ERROR,
  } }, "the exit message")
  local err
  c:request("sessions/list", { cwd = project }, function(e)
    err = e
  end)
  wait_for("the answer", function()
    return err ~= nil
  end)
  eq(err.message, "pi-sessiond (" .. dying .. ") is not running: it exited with code 101", "a later request's error")
end)

test("a server killed long after its last log line: the line is not quoted as the cause", function()
  local logging = script("logging.sh", table.concat({
    "echo '2025-01-01T09:58:00.000000Z  WARN pi_sessiond: an old warning about /elsewhere.jsonl' >&2",
    "exec " .. vim.fn.shellescape(bin) .. ' "$@"',
  }, "\n"))
  rpc.stderr_recent_ms = 200
  cleanups[#cleanups + 1] = function()
    rpc.stderr_recent_ms = 2000
    pi.setup({ binary = bin })
  end
  pi.setup({ binary = logging })
  local p = linear_session("killed-later", 2)
  vim.cmd("PiSessionTree " .. vim.fn.fnameescape(p))
  local buf = api.nvim_get_current_buf()
  wait_lines(buf, s_lines(2, 2), "the tree")
  vim.wait(400)
  local _, seen = kill_server()
  eq(seen, { { msg = "pi-sessiond: " .. logging .. " was killed by signal 9", level = vim.log.levels.ERROR } },
    "the exit message")
  vim.cmd("bwipeout " .. buf)
end)

-- The lines of the :checkhealth report for this plugin (its own buffer, closed again).
local function checkhealth_lines()
  vim.cmd("checkhealth pi_sessiond")
  local lines = lines_of(0)
  vim.cmd("bwipeout!")
  return lines
end

local function report_has(lines, pattern)
  for _, line in ipairs(lines) do
    if line:find(pattern) then
      return true
    end
  end
  return false
end

test(":checkhealth pi_sessiond reports the binary, its version and the agent directory as OK", function()
  pi.setup({ binary = bin })
  local lines = checkhealth_lines()
  local report = table.concat(lines, "\n")
  truthy(report_has(lines, "OK.*" .. vim.pesc(vim.fn.exepath(bin)) .. " %(from setup"), "the binary: " .. report)
  truthy(report_has(lines, "OK.*runs: pi%-sessiond %d+%.%d+%.%d+"), "its version: " .. report)
  truthy(report_has(lines, "OK.*" .. vim.pesc(agent_dir) .. " %(from %$PI_CODING_AGENT_DIR%), with a sessions/"), "the agent dir: " .. report)
  eq(report_has(lines, "ERROR") or report_has(lines, "WARNING"), false, "nothing wrong: " .. report)
end)

test(":checkhealth pi_sessiond says in one line how to install a binary it cannot find", function()
  pi.setup({ binary = root .. "/no/pi-sessiond" })
  local lines = checkhealth_lines()
  pi.setup({ binary = bin })
  local report = table.concat(lines, "\n")
  truthy(report_has(lines, "ERROR.*cannot find the server binary .*install it with `cargo install %-%-locked pi%-sessiond`"), report)
end)

test("the binary comes from setup, else $PI_SESSIOND_BIN, else the plugin's bin/ (before PATH)", function()
  local own = plugin_dir .. "/bin/pi-sessiond"
  local made_dir = vim.fn.isdirectory(plugin_dir .. "/bin") == 0
  local made_link = vim.fn.filereadable(own) == 0
  if made_link then
    vim.fn.mkdir(plugin_dir .. "/bin", "p")
    truthy(vim.loop.fs_symlink(bin, own), "a binary in the plugin's bin/")
  end
  table.insert(cleanups, function()
    if made_link then
      os.remove(own)
    end
    if made_dir then
      vim.fn.delete(plugin_dir .. "/bin", "d")
    end
    vim.env.PI_SESSIOND_BIN = bin
    pi.setup({ binary = bin })
  end)
  pi.setup({ binary = "" })
  eq({ pi.binary() }, { vim.fn.exepath(bin), "$PI_SESSIOND_BIN" }, "the environment first")
  vim.env.PI_SESSIOND_BIN = nil
  eq({ pi.binary() }, { own, "the plugin's bin/" }, "then the plugin's own")
  pi.setup({ binary = bin })
  eq({ pi.binary() }, { vim.fn.exepath(bin), "setup({ binary = … })" }, "setup before all")
end)

test(":help pi-sessiond opens the plugin's help page, and its tags lead to the commands", function()
  vim.cmd("helptags " .. vim.fn.fnameescape(plugin_dir .. "/doc"))
  vim.cmd("help pi-sessiond")
  eq(vim.fn.fnamemodify(api.nvim_buf_get_name(0), ":t"), "pi-sessiond.txt", "the help file")
  truthy(api.nvim_get_current_line():find("*pi-sessiond*", 1, true), "the cursor on the tag: " .. api.nvim_get_current_line())
  vim.cmd("help :PiSessionTree")
  truthy(api.nvim_get_current_line():find("*:PiSessionTree*", 1, true), "the command's tag")
  vim.cmd("helpclose")
end)

watchdog:stop()
say(string.format("\n%d passed, %d failed", results.passed, #results.failed))
if #results.failed > 0 then
  say("failed:\n  " .. table.concat(results.failed, "\n  "))
  vim.fn.delete(root, "rf")
  vim.cmd("cquit 1")
else
  vim.fn.delete(root, "rf")
  vim.cmd("qall!")
end
