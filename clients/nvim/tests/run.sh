#!/bin/sh
# Runs the Neovim plugin's tests headless against a built server:
#   PI_SESSIOND_BIN=/path/to/pi-sessiond clients/nvim/tests/run.sh
# Exits non-zero, after naming the failed tests, if any fails.
set -eu

plugin_dir=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${PI_SESSIOND_BIN:-}" ]; then
  PI_SESSIOND_BIN=$(command -v pi-sessiond || true)
fi
if [ -z "$PI_SESSIOND_BIN" ] || [ ! -x "$PI_SESSIOND_BIN" ]; then
  echo "run.sh: set PI_SESSIOND_BIN to a built pi-sessiond (e.g. target/debug/pi-sessiond)" >&2
  exit 2
fi
export PI_SESSIOND_BIN

# -u NONE: no user configuration; -i NONE: no shada file. The paths go through the environment so that spaces in
# them need no quoting on the Vim command line.
export PI_SESSIOND_NVIM_DIR="$plugin_dir"
exec nvim --headless -u NONE -i NONE \
  -c 'lua vim.opt.runtimepath:append(vim.env.PI_SESSIOND_NVIM_DIR)' \
  -c 'lua dofile(vim.env.PI_SESSIOND_NVIM_DIR .. "/tests/test_tree.lua")'
