-- Commands and buffer handlers of pi-sessiond; the work is in lua/pi_sessiond (loaded on first use).

if vim.g.loaded_pi_sessiond then
  return
end
vim.g.loaded_pi_sessiond = true

if vim.fn.has("nvim-0.7") == 0 then
  vim.notify("pi-sessiond: this plugin needs Neovim 0.7 or newer", vim.log.levels.ERROR)
  return
end

vim.api.nvim_create_user_command("PiSessions", function(opts)
  require("pi_sessiond").sessions(opts.bang)
end, { bang = true, desc = "List the pi sessions of the current directory (! for every session)" })

vim.api.nvim_create_user_command("PiSessionTree", function(opts)
  require("pi_sessiond").tree(opts.args)
end, { nargs = "?", complete = "file", desc = "Show a pi session's tree (default: the newest of this directory)" })

local group = vim.api.nvim_create_augroup("pi_sessiond", { clear = true })

-- Tree buffers are named after the session file, so `:edit pi-session:///path/to/session.jsonl` works too, and a
-- buffer that was unloaded is filled again when it is edited.
vim.api.nvim_create_autocmd("BufReadCmd", {
  group = group,
  pattern = "pi-session://*",
  callback = function(args)
    require("pi_sessiond")._read_tree(args.buf)
  end,
})

vim.api.nvim_create_autocmd("ColorScheme", {
  group = group,
  callback = function()
    if package.loaded["pi_sessiond"] then
      require("pi_sessiond")._define_highlights()
    end
  end,
})

vim.api.nvim_create_autocmd("VimLeavePre", {
  group = group,
  callback = function()
    if package.loaded["pi_sessiond"] then
      require("pi_sessiond").stop()
    end
  end,
})
