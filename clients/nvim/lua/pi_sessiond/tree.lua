-- A session's tree as the plugin draws it: one line per entry, branches indented, labels and the active leaf
-- marked; remembers which entry each line shows.
--
-- The tree itself comes from the server's `session/getTreeFlat`: pi's getTree (roots in file order, children by
-- timestamp, labels resolved) as a flat pre-order list `{entry, parentIndex, depth, label?}`. The nested
-- `session/getTree` cannot be used: a linear conversation of N entries is a JSON document about 2·N levels deep,
-- and vim.json (lua-cjson) refuses anything deeper than 1000 levels. Nothing here orders or links entries: the
-- drawing follows the list as given, so pi's rules live in one place, the server. Only the entries' previews are
-- kept, not their bodies; `<CR>` fetches the full entry from the server.

local M = {}

local PREVIEW_CHARS = 60
-- Whitespace is collapsed in at most this many bytes of a text: enough for a preview, and a 5 MB tool output
-- costs nothing.
local PREVIEW_SCAN_BYTES = 4096

local NIL = vim.NIL

local function is_nil(v)
  return v == nil or v == NIL
end

-- JavaScript truthiness of a decoded JSON value (pi resolves labels with `if (entry.label)`).
local function truthy(v)
  return not (is_nil(v) or v == false or v == "" or v == 0)
end

-- Like JavaScript's String(v) for what labels and names can be.
local function js_string(v)
  if is_nil(v) then
    return "null"
  elseif type(v) == "table" then
    return vim.json.encode(v)
  end
  return tostring(v)
end

--- At most `n` characters (not bytes) of a UTF-8 string, with "…" when cut.
local function truncate(s, n)
  local count, cut = 0, nil
  for pos in string.gmatch(s, "()[%z\1-\127\194-\244][\128-\191]*") do
    count = count + 1
    if count == n + 1 then
      cut = pos
      break
    end
  end
  if cut then
    return string.sub(s, 1, cut - 1) .. "…"
  end
  return s
end

--- A one-line preview of some text: whitespace runs (newlines included) become one space.
local function one_line(s)
  s = string.sub(s, 1, PREVIEW_SCAN_BYTES)
  s = string.gsub(s, "%s+", " ")
  return truncate(vim.trim(s), PREVIEW_CHARS)
end
M.one_line = one_line

--- The text of message content: a string, or blocks of which text shows as itself, a tool call as `→ name`,
--- an image as `[image]` (thinking and unknown blocks are left out, as in `pi-sessiond tree`).
local function content_text(content)
  if type(content) == "string" then
    return content
  end
  if type(content) ~= "table" then
    return ""
  end
  local parts = {}
  local size = 0
  for _, block in ipairs(content) do
    if type(block) == "table" then
      local piece
      if block.type == "text" and type(block.text) == "string" then
        piece = block.text
      elseif block.type == "toolCall" then
        piece = "→ " .. (type(block.name) == "string" and block.name or "")
      elseif block.type == "image" then
        piece = "[image]"
      end
      if piece then
        parts[#parts + 1] = piece
        size = size + #piece
        if size > PREVIEW_SCAN_BYTES then
          break
        end
      end
    end
  end
  return table.concat(parts, " ")
end

local function field(entry, name)
  local v = entry[name]
  if is_nil(v) then
    return ""
  end
  return js_string(v)
end

--- What one line says about an entry (after its id): type or role and a preview.
--- @param entry table a decoded session entry
--- @return string
function M.describe(entry)
  local t = entry.type
  if t == "message" then
    local msg = type(entry.message) == "table" and entry.message or {}
    local role = type(msg.role) == "string" and msg.role or "message"
    local text
    if role == "bashExecution" then
      text = "$ " .. (type(msg.command) == "string" and msg.command or "")
    elseif not is_nil(msg.content) then
      text = content_text(msg.content)
    else
      -- branchSummary and compactionSummary messages carry a summary instead of content
      text = type(msg.summary) == "string" and msg.summary or ""
    end
    return role .. ": " .. one_line(text)
  elseif t == "thinking_level_change" then
    return "thinking level → " .. field(entry, "thinkingLevel")
  elseif t == "model_change" then
    return "model → " .. field(entry, "provider") .. "/" .. field(entry, "modelId")
  elseif t == "compaction" then
    return "compaction: " .. one_line(content_text(entry.summary))
  elseif t == "branch_summary" then
    return "branch summary: " .. one_line(content_text(entry.summary))
  elseif t == "custom_message" then
    return "custom message (" .. field(entry, "customType") .. "): " .. one_line(content_text(entry.content))
  elseif t == "custom" then
    return "custom (" .. field(entry, "customType") .. ")"
  elseif t == "label" then
    return "label " .. field(entry, "targetId") .. " → " .. (truthy(entry.label) and js_string(entry.label) or "(cleared)")
  elseif t == "session_info" then
    return "name: " .. field(entry, "name")
  elseif t == "usage" then
    return "usage (" .. field(entry, "kind") .. ")"
  elseif t == "context_edit" then
    return "context edit of " .. field(entry, "targetId")
  end
  return js_string(t)
end

local Model = {}
Model.__index = Model

--- A mirror of a session's tree: empty until `set_tree`.
function M.new_model()
  return setmetatable({ nodes = {}, leaf = nil }, Model)
end

--- Takes a `session/getTreeFlat` result: nodes in pre-order, `parentIndex` the 0-based position of the parent.
--- @param flat table[] decoded getTreeFlat nodes
function Model:set_tree(flat)
  local nodes = {}
  for i, n in ipairs(flat) do
    local entry = type(n.entry) == "table" and n.entry or {}
    local p = n.parentIndex
    -- Pre-order puts a parent before its children; anything else (never sent) is drawn as a root.
    p = (type(p) == "number" and p >= 0 and p < i - 1) and p + 1 or nil
    nodes[i] = {
      id = entry.id,
      parent = p,
      text = M.describe(entry),
      label = not is_nil(n.label) and n.label or nil,
    }
  end
  self.nodes = nodes
end

--- Sets the active leaf (an entry id, or nil/vim.NIL for none).
function Model:set_leaf(id)
  self.leaf = not is_nil(id) and id or nil
end

--- The line (1-based) that shows the active leaf, or nil when the tree does not hold it.
function Model:leaf_index()
  if self.leaf == nil then
    return nil
  end
  for i, n in ipairs(self.nodes) do
    if n.id == self.leaf then
      return i
    end
  end
  return nil
end

--- Draws the tree: a root or a single child continues at its parent's indentation (a line of conversation);
--- siblings are branches, drawn with `├─`/`└─` in the order the server gave.
--- @return table { lines = string[], ids = table (line → entry id), leaf_line = integer|nil,
---   off_path = integer[] (lines not on the path from the root to the leaf), labels = { {line, col_start, col_end} } }
function Model:render()
  local nodes = self.nodes
  local leaf_line = self:leaf_index()
  local on_path = {}
  local i = leaf_line
  while i and not on_path[i] do
    on_path[i] = true
    i = nodes[i].parent
  end

  local child_count = {}
  for _, n in ipairs(nodes) do
    if n.parent then
      child_count[n.parent] = (child_count[n.parent] or 0) + 1
    end
  end
  local drawn_children = {}
  local child_prefix = {} -- node → what its children's lines start with

  local out = { lines = {}, ids = {}, off_path = {}, labels = {}, leaf_line = leaf_line }
  for k, n in ipairs(nodes) do
    local prefix, connector, continuation = "", "", ""
    if n.parent then
      prefix = child_prefix[n.parent]
      local count = child_count[n.parent]
      if count > 1 then
        local nth = (drawn_children[n.parent] or 0) + 1
        drawn_children[n.parent] = nth
        local last = nth == count
        connector = last and "└─ " or "├─ "
        continuation = last and "   " or "│  "
      end
    end
    child_prefix[k] = prefix .. continuation
    local line = prefix .. connector .. js_string(n.id) .. " " .. n.text
    if n.label ~= nil then
      local text = "[" .. js_string(n.label) .. "]"
      out.labels[#out.labels + 1] = { k, #line + 1, #line + 1 + #text }
      line = line .. " " .. text
    end
    if k == leaf_line then
      line = line .. " ◀ leaf"
    end
    out.lines[k] = line
    out.ids[k] = n.id
    if not on_path[k] then
      out.off_path[#out.off_path + 1] = k
    end
  end
  return out
end

return M
