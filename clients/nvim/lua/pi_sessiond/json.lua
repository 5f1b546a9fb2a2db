-- JSON text utilities that work on the text itself, not on decoded values.
--
-- Entries are shown "exactly as stored": a decoded Lua table has lost the member order (and cannot tell `{}` from
-- `[]` once re-encoded), so the entry view re-indents the server's own text instead. The server writes compact
-- JSON (no insignificant whitespace), but the scanner below accepts any valid JSON text.

local M = {}

--- The JSON text with every lone UTF-16 surrogate escape (`\ud800` with no partner) written `\ufffd`, the
--- replacement character. pi's sessions are JavaScript strings and can hold them; the server keeps them as
--- escapes, but lua-cjson (behind vim.json) refuses the whole document for one of them, so a listing would show
--- nothing at all because of one message. Escaped backslashes (`\\ud800`, text) are left alone.
--- @param text string
--- @return string
function M.mend_lone_surrogates(text)
  local out, pos = {}, 1
  while true do
    local s, e, hex = string.find(text, "\\u([dD][89a-fA-F]%x%x)", pos)
    if not s then
      break
    end
    local backslashes, b = 0, s - 1
    while b >= 1 and string.byte(text, b) == 92 do
      backslashes, b = backslashes + 1, b - 1
    end
    local low = tonumber(hex, 16) < 0xDC00 and string.match(text, "^\\u[dD][c-fC-F]%x%x", e + 1)
    if backslashes % 2 == 1 then
      out[#out + 1] = string.sub(text, pos, e) -- the backslash is itself escaped: this is text
      pos = e + 1
    elseif low then
      out[#out + 1] = string.sub(text, pos, e + 6) -- a pair: one character
      pos = e + 7
    else
      out[#out + 1] = string.sub(text, pos, s - 1) .. "\\ufffd"
      pos = e + 1
    end
  end
  out[#out + 1] = string.sub(text, pos)
  return table.concat(out)
end

-- Finds the end of the string literal whose opening quote is at `i`; returns the index of the closing quote.
local function string_end(text, i)
  local pos = i + 1
  while true do
    local q = string.find(text, '["\\]', pos)
    if not q then
      error("unterminated JSON string at byte " .. i)
    end
    if string.byte(text, q) == 92 then -- backslash: the next byte is escaped, whatever it is
      pos = q + 2
    else
      return q
    end
  end
end

--- Re-indents a JSON text: one member or element per line, `indent` spaces per level, `{}`/`[]` kept on one
--- line. Strings and numbers are copied byte for byte.
--- @param text string
--- @param indent integer|nil default 2
--- @return string[] lines
function M.pretty(text, indent)
  local unit = string.rep(" ", indent or 2)
  local out = {}
  local depth = 0
  local pos = 1
  local len = #text
  local function newline()
    out[#out + 1] = "\n" .. string.rep(unit, depth)
  end
  while pos <= len do
    local s = string.find(text, '[{}%[%],:"]', pos)
    -- Literals (numbers, true, false, null) sit between structural characters; drop the whitespace around them.
    local literal = string.match(string.sub(text, pos, (s or len + 1) - 1), "^%s*(.-)%s*$")
    if literal ~= "" then
      out[#out + 1] = literal
    end
    if not s then
      break
    end
    local c = string.sub(text, s, s)
    if c == '"' then
      local e = string_end(text, s)
      out[#out + 1] = string.sub(text, s, e)
      pos = e + 1
    elseif c == "{" or c == "[" then
      local close = c == "{" and "}" or "]"
      local nxt = string.find(text, "%S", s + 1)
      if nxt and string.sub(text, nxt, nxt) == close then
        out[#out + 1] = c .. close
        pos = nxt + 1
      else
        out[#out + 1] = c
        depth = depth + 1
        newline()
        pos = s + 1
      end
    elseif c == "}" or c == "]" then
      depth = depth - 1
      newline()
      out[#out + 1] = c
      pos = s + 1
    elseif c == "," then
      out[#out + 1] = ","
      newline()
      pos = s + 1
    else -- ":"
      out[#out + 1] = ": "
      pos = s + 1
    end
  end
  return vim.split(table.concat(out), "\n", { plain = true })
end

--- The text of member `name` of the top-level object in `text` (e.g. "result" of a JSON-RPC response), or nil.
--- @param text string
--- @param name string the member name as it appears between the quotes
--- @return string|nil
function M.member(text, name)
  local depth = 0
  local pos = 1
  local want = '"' .. name .. '"'
  local value_start -- set while the wanted member's value is being skipped
  while true do
    local s = string.find(text, '[{}%[%],:"]', pos)
    if not s then
      return nil
    end
    local c = string.sub(text, s, s)
    if c == '"' then
      local e = string_end(text, s)
      -- A key at depth 1 is followed by ':'; a string value at depth 1 is followed by ',' or '}'.
      if depth == 1 and not value_start and string.sub(text, s, e) == want then
        local colon = string.find(text, "%S", e + 1)
        if colon and string.sub(text, colon, colon) == ":" then
          value_start = colon + 1
          pos = colon + 1
        else
          pos = e + 1
        end
      else
        pos = e + 1
      end
    elseif c == "{" or c == "[" then
      depth = depth + 1
      pos = s + 1
    elseif c == "}" or c == "]" then
      if depth == 1 and value_start then
        return vim.trim(string.sub(text, value_start, s - 1))
      end
      depth = depth - 1
      pos = s + 1
    elseif c == "," and depth == 1 and value_start then
      return vim.trim(string.sub(text, value_start, s - 1))
    else
      pos = s + 1
    end
  end
end

return M
