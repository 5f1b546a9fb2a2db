-- A session's tree as the plugin draws it: one line per entry, branches indented, labels and the active leaf
-- marked; remembers which entry each line shows.
--
-- The model is a skeleton mirror of the session: the entries as `session/open {snapshot: "skeleton"}` sends them
-- (id, parentId, type, timestamp, label, name, a one-line preview; a few hundred bytes an entry however long the
-- message), then the skeletons each `session/changed` carries appended to them. The tree is pi's getTree computed
-- from them here (roots in file order, orphans and self-parented entries as roots, children by timestamp, labels
-- resolved in file order), walked without recursion, so a view follows the session with no read at all: an append
-- costs its notification. `<CR>` fetches an entry's body from the server when it is asked for.

local M = {}

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

--- Some text on one line (whitespace runs, newlines included, become one space), from its first
--- PREVIEW_SCAN_BYTES bytes: whole, for the caller to cut to its window with `M.fit`.
local function flatten(s)
  s = string.sub(s, 1, PREVIEW_SCAN_BYTES)
  return vim.trim((string.gsub(s, "%s+", " ")))
end
M.one_line = flatten

local strdisplaywidth, strcharpart, strchars = vim.fn.strdisplaywidth, vim.fn.strcharpart, vim.fn.strchars

--- The longest start of `text` that takes at most `room` screen cells (wide characters take two), with "…" when
--- cut.
function M.fit(text, room)
  if strdisplaywidth(text) <= room then
    return text
  end
  room = room - strdisplaywidth("…")
  local lo, hi = 0, strchars(text) - 1 -- characters known to fit, characters that might
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if strdisplaywidth(strcharpart(text, 0, mid)) <= room then
      lo = mid
    else
      hi = mid - 1
    end
  end
  return strcharpart(text, 0, lo) .. "…"
end

local function field(entry, name)
  local v = entry[name]
  if is_nil(v) then
    return ""
  end
  return js_string(v)
end

--- What one line says about an entry (after its id), from its skeleton: its role or type and the server's
--- one-line preview of its text (whole: Model:render cuts it to the window), in the words `pi-sessiond tree` puts
--- around it. The preview is the sidecar's one description of an entry (`src/session/describe.rs`: tool calls as
--- `→ name`, images as `[image]`, a bash execution as `$ command`, …); the plugin's entries are always skeletons
--- (it opens with `snapshot: "skeleton"` and its handle's notifications carry skeletons), so it reads no message
--- content itself.
--- @param entry table a skeleton entry
--- @return string
function M.describe(entry)
  local t = entry.type
  local preview = type(entry.preview) == "string" and entry.preview or ""
  if t == "message" then
    return (type(entry.role) == "string" and entry.role or "message") .. ": " .. flatten(preview)
  elseif t == "thinking_level_change" or t == "model_change" then
    return preview
  elseif t == "compaction" then
    return "compaction: " .. flatten(preview)
  elseif t == "branch_summary" then
    return "branch summary: " .. flatten(preview)
  elseif t == "custom_message" then
    return "custom message (" .. field(entry, "customType") .. "): " .. flatten(preview)
  elseif t == "custom" then
    return "custom (" .. preview .. ")"
  elseif t == "label" then
    -- Said from the label itself, not the preview: a cleared label reads "(cleared)" here, where the preview
    -- shows the falsy value that cleared it.
    return "label " .. field(entry, "targetId") .. " → " .. (truthy(entry.label) and js_string(entry.label) or "(cleared)")
  elseif t == "session_info" then
    return "name: " .. preview
  elseif t == "usage" then
    return "usage (" .. preview .. ")"
  elseif t == "context_edit" then
    return "context edit of " .. preview
  end
  return js_string(t)
end

-- Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's days_from_civil).
function M.days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

--- Milliseconds since the epoch of an ISO 8601 timestamp in the forms pi writes and JavaScript's Date reads (a
--- date alone, or a date and time with `Z`, an offset or no zone, all taken as UTC), or nil where `new Date()`
--- gives NaN.
function M.date_ms(ts)
  if type(ts) ~= "string" then
    return nil
  end
  local y, rest = string.match(ts, "^(%d%d%d%d)(.*)$")
  if not y then
    return nil
  end
  local mo, d = 1, 1
  local m1, r1 = string.match(rest, "^%-(%d%d)(.*)$")
  if m1 then
    mo, rest = tonumber(m1), r1
    local d1, r2 = string.match(rest, "^%-(%d%d)(.*)$")
    if d1 then
      d, rest = tonumber(d1), r2
    end
  end
  local h, mi, s, frac = 0, 0, 0, 0
  if rest ~= "" then
    local hh, mm, r3 = string.match(rest, "^T(%d%d):(%d%d)(.*)$")
    if not hh then
      return nil
    end
    h, mi, rest = tonumber(hh), tonumber(mm), r3
    local ss, r4 = string.match(rest, "^:(%d%d)(.*)$")
    if ss then
      s, rest = tonumber(ss), r4
      local f, r5 = string.match(rest, "^[.,](%d+)(.*)$")
      if f then
        frac, rest = tonumber((string.sub(f .. "00", 1, 3))), r5
      end
    end
    if rest == "Z" then
      rest = ""
    else
      local sign, oh, om = string.match(rest, "^([+-])(%d%d):?(%d%d)$")
      if sign then
        local offset = (tonumber(oh) * 60 + tonumber(om)) * (sign == "+" and 1 or -1)
        mi = mi - offset
        rest = ""
      end
    end
  end
  if rest ~= "" or mo < 1 or mo > 12 or d < 1 or d > 31 or h > 24 or s > 59 then
    return nil
  end
  return ((M.days_from_civil(tonumber(y), mo, d) * 24 + h) * 60 + mi) * 60000 + s * 1000 + frac
end

-- A stable merge sort by `before(a, b)` (true: a goes first); equal elements keep their order, as in V8's sort.
local function stable_sort(list, before)
  local n = #list
  if n < 2 then
    return list
  end
  local src, dst = list, {}
  local width = 1
  while width < n do
    local i = 1
    while i <= n do
      local mid, hi = math.min(i + width, n + 1), math.min(i + 2 * width, n + 1)
      local a, b, k = i, mid, i
      while a < mid and b < hi do
        if before(src[b], src[a]) then
          dst[k], b = src[b], b + 1
        else
          dst[k], a = src[a], a + 1
        end
        k = k + 1
      end
      while a < mid do
        dst[k], a, k = src[a], a + 1, k + 1
      end
      while b < hi do
        dst[k], b, k = src[b], b + 1, k + 1
      end
      i = i + 2 * width
    end
    src, dst = dst, src
    width = width * 2
  end
  for i = 1, n do
    list[i] = src[i]
  end
  return list
end

-- A table key for an id as JavaScript's Map compares it (ids are strings in every file pi writes).
local function key(v)
  if is_nil(v) then
    return NIL
  end
  return v
end

local Model = {}
Model.__index = Model

--- A skeleton mirror of a session's tree: empty until `set_entries`.
function M.new_model()
  return setmetatable({ entries = {}, leaf = nil, nodes = {}, built = true, cut = {}, cut_count = 0 }, Model)
end

--- Replaces every entry (a snapshot's `entries`, skeletons in file order).
function Model:set_entries(entries)
  self.entries = {}
  self:add_entries(entries)
end

--- Appends entries (an `append` change's skeletons) at the end; the tree is laid out again when next drawn.
function Model:add_entries(entries)
  for _, e in ipairs(entries) do
    if type(e) == "table" and e.type ~= "session" then
      self.entries[#self.entries + 1] = e
    end
  end
  self.built = false
end

--- pi's getTree over the entries, flat in pre-order: `self.nodes[i] = {id, parent (index), text, label}`.
function Model:build()
  if self.built then
    return
  end
  self.built = true
  local entries = self.entries
  local labels = {}
  for _, e in ipairs(entries) do
    if e.type == "label" and not is_nil(e.targetId) then
      labels[key(e.targetId)] = truthy(e.label) and e.label or nil
    end
  end
  local tnodes, by_id, roots = {}, {}, {}
  for i, e in ipairs(entries) do
    local node = { entry = e, children = {}, index = i, ms = M.date_ms(e.timestamp) }
    tnodes[i] = node
    if not is_nil(e.id) then
      by_id[key(e.id)] = node
    end
  end
  for i, e in ipairs(entries) do
    local node = tnodes[i]
    local parent = (not is_nil(e.parentId) and e.parentId ~= e.id) and by_id[key(e.parentId)] or nil
    if parent then
      parent.children[#parent.children + 1] = node
    else
      roots[#roots + 1] = node
    end
  end
  -- The nodes on the leaf's path: pi's /tree puts the branch holding the leaf first among its siblings (and
  -- among the roots), and a node holds it exactly when it is on that path.
  local on_path = {}
  local at = self.leaf ~= nil and by_id[key(self.leaf)] or nil
  while at and not on_path[at] do
    on_path[at] = true
    local e = at.entry
    at = (not is_nil(e.parentId) and e.parentId ~= e.id) and by_id[key(e.parentId)] or nil
  end
  local function leaf_first(list)
    local first, rest = {}, {}
    for _, node in ipairs(list) do
      local into = on_path[node] and first or rest
      into[#into + 1] = node
    end
    for _, node in ipairs(rest) do
      first[#first + 1] = node
    end
    return first
  end
  roots = leaf_first(roots)
  -- `new Date(a) - new Date(b)`: NaN for an unreadable timestamp, which sorts as equal.
  local function before(a, b)
    return a.ms ~= nil and b.ms ~= nil and a.ms < b.ms
  end
  local nodes = {}
  local stack = {}
  for i = #roots, 1, -1 do
    stack[#stack + 1] = { node = roots[i], parent = nil }
  end
  while #stack > 0 do
    local top = table.remove(stack)
    local e = top.node.entry
    local label = not is_nil(e.id) and labels[key(e.id)] or nil
    nodes[#nodes + 1] = { id = e.id, parent = top.parent, text = M.describe(e), label = label }
    local here = #nodes
    local children = leaf_first(stable_sort(top.node.children, before))
    for i = #children, 1, -1 do
      stack[#stack + 1] = { node = children[i], parent = here }
    end
  end
  self.nodes = nodes
end

--- Sets the active leaf (an entry id, or nil/vim.NIL for none).
function Model:set_leaf(id)
  local leaf = not is_nil(id) and id or nil
  -- The branch holding the leaf is drawn first among its siblings: a new leaf may change the order.
  if leaf ~= self.leaf then
    self.built = false
  end
  self.leaf = leaf
end

--- The line (1-based) that shows the active leaf, or nil when the tree does not hold it.
function Model:leaf_index()
  self:build()
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
--- siblings are branches, drawn with `├─`/`└─`, the one holding the leaf first (as pi's /tree draws them). With `width`, each line's
--- description is cut so that the line takes at most `width` screen cells with its label and leaf marker, which
--- would otherwise be the part out of sight.
--- @param width integer|nil
--- @return table { lines = string[], ids = table (line → entry id), leaf_line = integer|nil,
---   off_path = integer[] (lines not on the path from the root to the leaf), labels = { {line, col_start, col_end} } }
function Model:render(width)
  self:build()
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

  -- Measuring a line takes calls into Vim (tens of microseconds for a cut one): what each line was cut to is kept
  -- for the width, so a redraw after an append measures the lines that changed, not the whole session again.
  if width ~= self.cut_width or self.cut_count > 2 * #nodes + 1000 then
    self.cut_width, self.cut, self.cut_count = width, {}, 0
  end
  local cut = self.cut

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
    local head = prefix .. connector .. js_string(n.id) .. " "
    local label = n.label ~= nil and (" [" .. js_string(n.label) .. "]") or ""
    local tail = label .. (k == leaf_line and " ◀ leaf" or "")
    local text = n.text
    if width then
      local whole = head .. text .. tail
      local fitted = cut[whole]
      if not fitted then
        fitted = text
        if strdisplaywidth(whole) > width then
          fitted = M.fit(text, math.max(width - strdisplaywidth(head) - strdisplaywidth(tail), 1))
        end
        cut[whole] = fitted
        self.cut_count = self.cut_count + 1
      end
      text = fitted
    end
    local line = head .. text
    if label ~= "" then
      out.labels[#out.labels + 1] = { k, #line + 1, #line + #label }
    end
    out.lines[k] = line .. tail
    out.ids[k] = n.id
    if not on_path[k] then
      out.off_path[#out.off_path + 1] = k
    end
  end
  return out
end

return M
