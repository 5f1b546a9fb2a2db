-- JSON-RPC 2.0 client for pi-sessiond: spawns the server and talks LF-delimited JSON over its stdin/stdout.
--
-- vim.loop (libuv) is used rather than jobstart because jobstart hands output over already split into lines, with
-- NUL bytes turned into "\n": we want the raw bytes and to decide ourselves where a frame ends (only at "\n", as
-- protocol/README.md requires). Everything that touches the editor runs through vim.schedule, because libuv
-- callbacks run in a "fast" context where most of the Neovim API is forbidden.

local uv = vim.loop

local M = {}

-- How much of the server's stderr is kept to explain an unexpected exit.
local STDERR_KEEP = 4096

--- Only stderr lines that came at most this long before the exit (or after it) are quoted as what the server said
--- when it died: a server killed by a signal writes nothing, and its last log line may be a warning about another
--- file from minutes before, which would read as the cause. A field so that tests can shorten it.
M.stderr_recent_ms = 2000

-- How long the end of stderr is waited for once the server has exited: a process it started may hold the pipe
-- open, and the exit must not wait for that one.
local STDERR_WAIT_MS = 500

local function now_ms()
  return uv.hrtime() / 1e6
end

--- A line splitter for LF-delimited frames. Chunks from a pipe end anywhere (in the middle of a frame, of a
--- UTF-8 sequence, of an escape): partial data is kept in a list and joined only once its "\n" arrives, so a
--- frame of N bytes costs O(N) however many chunks it came in (repeated `buf = buf .. chunk` would be O(N²) on
--- a 40 MB response).
--- @param on_line fun(line: string) called once per complete frame, without its terminator
--- @return fun(chunk: string)
function M.framer(on_line)
  local pending = {}
  return function(chunk)
    local start = 1
    while true do
      local nl = string.find(chunk, "\n", start, true)
      if not nl then
        if start <= #chunk then
          pending[#pending + 1] = string.sub(chunk, start)
        end
        return
      end
      pending[#pending + 1] = string.sub(chunk, start, nl - 1)
      local line = table.concat(pending)
      pending = {}
      -- The server writes bare "\n", but a "\r\n" peer is legal JSON-lines; the "\r" is not part of the JSON.
      if string.byte(line, -1) == 13 then
        line = string.sub(line, 1, -2)
      end
      if line ~= "" then
        on_line(line)
      end
      start = nl + 1
    end
  end
end

--- vim.json.encode turns an empty Lua table into `[]`, and pi-sessiond rejects positional (array) params with
--- -32602, so params always go out as an object.
local function as_object(params)
  if params == nil or (type(params) == "table" and next(params) == nil) then
    return vim.empty_dict()
  end
  return params
end

local Client = {}
Client.__index = Client

--- Starts the server.
--- @param opts table { cmd = {binary, args...}, on_exit = fun(client, code, signal)? } (on_exit runs before the
---   requests still out are failed; `client.exit_description` says how it ended, with what it wrote to stderr just
---   before)
--- @return table|nil client, string|nil error
function M.start(opts)
  local cmd = opts.cmd
  local stdin, stdout, stderr = uv.new_pipe(false), uv.new_pipe(false), uv.new_pipe(false)
  local self = setmetatable({
    cmd = cmd,
    next_id = 1,
    pending = {}, -- id → { cb, method, raw }
    handlers = {}, -- notification method → list of functions
    stdin = stdin,
    stderr_lines = {}, -- { text, at (ms, when it came) }, oldest first, at most STDERR_KEEP bytes
    stderr_bytes = 0,
    stderr_partial = nil, -- the start of a line whose "\n" has not come yet: { text, at }
    alive = true,
    stopping = false,
    on_exit = opts.on_exit,
  }, Client)

  local handle, pid_or_err = uv.spawn(cmd[1], {
    args = vim.list_slice(cmd, 2),
    stdio = { stdin, stdout, stderr },
  }, function(code, signal)
    self.process:close()
    local at = now_ms() -- the exit's own time, not when the main loop gets to it
    vim.schedule(function()
      self.alive = false
      self.exit_status = { code, signal }
      self.exit_at = at
      self:_maybe_finish()
    end)
  end)
  if not handle then
    stdin:close()
    stdout:close()
    stderr:close()
    return nil, tostring(pid_or_err)
  end
  self.process = handle
  self.pid = pid_or_err

  local feed = M.framer(function(line)
    -- Decoding and dispatch happen on the main loop: callbacks are free to use the whole API, and vim.schedule
    -- keeps them in arrival order.
    vim.schedule(function()
      self:_receive(line)
    end)
  end)
  stdout:read_start(function(err, chunk)
    if chunk then
      feed(chunk)
    else
      stdout:close()
      -- libuv may report the exit before the last output is read; requests are failed only once both the exit
      -- and the end of stdout are in, so an answer the server did write is never lost.
      vim.schedule(function()
        self.stdout_done = true
        self:_maybe_finish()
      end)
    end
  end)
  stderr:read_start(function(err, chunk)
    if chunk then
      self:_stderr_chunk(chunk, now_ms())
    else
      stderr:close()
      -- What the server wrote just before it died may be read after the exit: the exit is handled once it is in.
      vim.schedule(function()
        self.stderr_done = true
        self:_maybe_finish()
      end)
    end
  end)
  return self
end

-- Keeps the last lines of stderr with the time each came (a line's time is its last piece's).
function Client:_stderr_chunk(chunk, at)
  local start = 1
  while true do
    local nl = string.find(chunk, "\n", start, true)
    local piece = string.sub(chunk, start, nl and nl - 1 or -1)
    if self.stderr_partial then
      piece = self.stderr_partial.text .. piece
    end
    if not nl then
      self.stderr_partial = piece ~= "" and { text = string.sub(piece, -STDERR_KEEP), at = at } or nil
      return
    end
    self.stderr_partial = nil
    local lines = self.stderr_lines
    lines[#lines + 1] = { text = string.sub(piece, -STDERR_KEEP), at = at }
    self.stderr_bytes = self.stderr_bytes + #lines[#lines].text
    while self.stderr_bytes > STDERR_KEEP and #lines > 1 do
      self.stderr_bytes = self.stderr_bytes - #table.remove(lines, 1).text
    end
    start = nl + 1
  end
end

--- The lines the server wrote to stderr shortly before it exited (see M.stderr_recent_ms), joined; "" if none.
function Client:recent_stderr()
  local since = (self.exit_at or now_ms()) - M.stderr_recent_ms
  local out = {}
  local lines = vim.list_slice(self.stderr_lines)
  lines[#lines + 1] = self.stderr_partial
  for _, l in ipairs(lines) do
    if l.at >= since and vim.trim(l.text) ~= "" then
      out[#out + 1] = vim.trim(l.text)
    end
  end
  return table.concat(out, "\n")
end

function Client:_write(msg)
  self.stdin:write(vim.json.encode(msg) .. "\n")
end

--- Sends a request; `cb(err, result, raw_line)` runs on the main loop. `err` is the JSON-RPC error object
--- ({code, message, data}) or, when the server is gone, {message, data = {kind = "client_exited"}}.
--- With `opts.raw`, the callback also gets the response line exactly as received (to show JSON in the server's
--- member order, which a Lua table cannot keep).
--- @return integer|nil request id
function Client:request(method, params, cb, opts)
  if not self.alive or self.stopping then
    vim.schedule(function()
      cb(self:_gone_error(), nil)
    end)
    return nil
  end
  local id = self.next_id
  self.next_id = id + 1
  self.pending[id] = { cb = cb, method = method, raw = opts and opts.raw }
  self:_write({ jsonrpc = "2.0", id = id, method = method, params = as_object(params) })
  return id
end

--- Sends a notification (no answer).
function Client:notify(method, params)
  if self.alive and not self.stopping then
    self:_write({ jsonrpc = "2.0", method = method, params = as_object(params) })
  end
end

--- Subscribes to a server notification; returns a function that unsubscribes.
function Client:on(method, fn)
  local list = self.handlers[method] or {}
  self.handlers[method] = list
  list[#list + 1] = fn
  return function()
    for i, f in ipairs(list) do
      if f == fn then
        table.remove(list, i)
        return
      end
    end
  end
end

function Client:is_alive()
  return self.alive and not self.stopping
end

--- Ends the server the orderly way the protocol offers: closing its stdin. It answers what it already received,
--- closes every session and exits 0; pending callbacks are then failed by the exit handler.
function Client:stop()
  if self.alive and not self.stopping then
    self.stopping = true
    self.stdin:shutdown(function()
      self.stdin:close()
    end)
  end
end

-- The exit status only: what the server wrote before dying is said once, by the exit (on_exit), not again by
-- every request that fails because of it.
function Client:_gone_error()
  local msg = string.format("pi-sessiond (%s) is not running", self.cmd[1])
  if self.exit_how then
    msg = msg .. ": it " .. self.exit_how
  end
  return { message = msg, data = { kind = "client_exited" } }
end

function Client:_receive(line)
  local ok, msg = pcall(vim.json.decode, line)
  if not ok and string.find(line, "\\u[dD][89a-fA-F]") then
    ok, msg = pcall(vim.json.decode, require("pi_sessiond.json").mend_lone_surrogates(line))
  end
  if not ok or type(msg) ~= "table" then
    -- The frame is not decodable here (lua-cjson, behind vim.json, refuses documents nested deeper than 1000
    -- levels). The server always writes `{"jsonrpc":"2.0","id":N,...`, so the id can still be read and the
    -- request failed instead of waiting forever.
    local id = tonumber(string.match(line, '^{"jsonrpc":"2%.0","id":(%d+),'))
    local err = {
      message = "cannot decode the response: " .. tostring(msg),
      data = { kind = "decode_error", bytes = #line },
    }
    local p = id and self.pending[id]
    if p then
      self.pending[id] = nil
      p.cb(err, nil)
    else
      vim.notify("pi-sessiond: " .. err.message, vim.log.levels.ERROR)
    end
    return
  end
  if msg.method ~= nil then
    if msg.id ~= nil then
      -- The protocol has no server-to-client requests; answering keeps a future server from waiting on us.
      self:_write({
        jsonrpc = "2.0",
        id = msg.id,
        error = { code = -32601, message = "method not found: " .. tostring(msg.method) },
      })
      return
    end
    for _, fn in ipairs(vim.list_slice(self.handlers[msg.method] or {})) do
      local ok_h, err_h = pcall(fn, msg.params)
      if not ok_h then
        vim.notify("pi-sessiond: " .. msg.method .. " handler failed: " .. tostring(err_h), vim.log.levels.ERROR)
      end
    end
    return
  end
  local p = self.pending[msg.id]
  if not p then
    return -- an answer to a request nobody waits for (e.g. after $/cancelRequest)
  end
  self.pending[msg.id] = nil
  if msg.error ~= nil then
    p.cb(msg.error, nil, p.raw and line or nil)
  else
    p.cb(nil, msg.result, p.raw and line or nil)
  end
end

function Client:_maybe_finish()
  if not (self.exit_status and self.stdout_done) or self.finished then
    return
  end
  if not self.stderr_done then
    if not self.stderr_waiting then
      self.stderr_waiting = true
      vim.defer_fn(function()
        self.stderr_done = true
        self:_maybe_finish()
      end, STDERR_WAIT_MS)
    end
    return
  end
  self.finished = true
  if not self.stdin:is_closing() then
    self.stdin:close()
  end
  self:_exited(self.exit_status[1], self.exit_status[2])
end

function Client:_exited(code, signal)
  local stderr = self:recent_stderr()
  self.exit_how = signal ~= 0 and ("was killed by signal " .. signal) or ("exited with code " .. code)
  self.exit_description = self.exit_how .. (stderr ~= "" and (", after writing to stderr: " .. stderr) or "")
  -- The exit is told first: its cause comes before the errors of the requests it fails, and their owners know the
  -- server is gone when those come.
  if self.on_exit then
    self.on_exit(self, code, signal)
  end
  local pending = self.pending
  self.pending = {}
  local ids = vim.tbl_keys(pending)
  table.sort(ids)
  for _, id in ipairs(ids) do
    pending[id].cb(self:_gone_error(), nil)
  end
end

return M
