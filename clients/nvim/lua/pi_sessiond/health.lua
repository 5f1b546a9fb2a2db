-- `:checkhealth pi_sessiond`: what a first run needs, checked in the order a failure would show it: Neovim's
-- version, the server binary (found as the commands find it), that it runs and which version it is, and the pi
-- agent directory whose sessions the commands list.

local M = {}

-- Neovim 0.10 has vim.health.start/ok/…; 0.7 to 0.9 have the same under report_* in the `health` module.
local health = vim.health or require("health")
local start = health.start or health.report_start
local ok = health.ok or health.report_ok
local warn = health.warn or health.report_warn
local fail = health.error or health.report_error
local info = health.info or health.report_info

-- The agent directory the server will use: --agent-dir from setup({ args }), else $PI_CODING_AGENT_DIR, else
-- ~/.pi/agent (the server's own order).
local function agent_dir(args)
  for i, arg in ipairs(args) do
    if arg == "--agent-dir" and args[i + 1] then
      return args[i + 1], "setup({ args = { '--agent-dir', … } })"
    end
    local value = arg:match("^%-%-agent%-dir=(.+)$")
    if value then
      return value, "setup({ args })"
    end
  end
  if vim.env.PI_CODING_AGENT_DIR and vim.env.PI_CODING_AGENT_DIR ~= "" then
    return vim.env.PI_CODING_AGENT_DIR, "$PI_CODING_AGENT_DIR"
  end
  return (vim.env.HOME or "~") .. "/.pi/agent", "the default"
end

function M.check()
  local plugin = require("pi_sessiond")

  start("Neovim")
  if vim.fn.has("nvim-0.7") == 1 then
    local v = vim.version()
    ok(string.format("Neovim %d.%d.%d (0.7 or newer)", v.major, v.minor, v.patch))
  else
    fail("Neovim 0.7 or newer is needed")
  end

  start("pi-sessiond binary")
  local bin, source = plugin.binary()
  if not bin then
    fail(source)
  else
    ok(string.format("%s (from %s)", bin, source))
    local out = vim.fn.system({ bin, "--version" })
    if vim.v.shell_error == 0 then
      ok("runs: " .. vim.trim(out))
    else
      fail(string.format("%s --version failed (exit status %d): %s", bin, vim.v.shell_error, vim.trim(out)))
    end
  end

  start("pi agent directory")
  local dir, from = agent_dir(plugin.server_args())
  if vim.fn.isdirectory(dir .. "/sessions") == 1 then
    ok(string.format("%s (from %s), with a sessions/ folder", dir, from))
  elseif vim.fn.isdirectory(dir) == 1 then
    warn(string.format("%s (from %s) has no sessions/ yet: :PiSessions lists nothing until pi saves one", dir, from))
  else
    warn(string.format("%s (from %s) does not exist: run pi once, or point the plugin elsewhere", dir, from), {
      "require('pi_sessiond').setup({ args = { '--agent-dir', '/path/to/agent' } })",
    })
  end
  info("sessions are listed and opened by the server; none of these checks writes anything")
end

return M
