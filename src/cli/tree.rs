//! `pi-sessiond tree SESSION`: a session drawn for a person, as pi's `/tree` shows it — one line per entry,
//! a single line of conversation straight down, branches indented, the leaf, labels and the active path (pi's
//! bullet) marked, entries off the active branch dimmed — with pi's filters (`--filter no-tools|user-only|labeled-only|all`) and a folding depth.
//! Hidden entries are transparent: their children hang from the nearest shown ancestor.

use std::collections::HashSet;
use std::io::Write;

use crate::session::context::Bodies;
use crate::session::describe::{one_line, Description, Scanned};
use crate::session::entry::{EntryType, Role};
use crate::session::js::to_js_string;
use crate::session::json::Json;
use crate::session::tree::Tree;
use crate::session::{Env, SessionManager};

use clap::ValueEnum;

use super::output::{char_width, count, emit, terminal_safe, terminal_safe_output, Failure, Style};

/// pi's `/tree` filter modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Filter {
    /// pi's default view: conversation and summaries; settings and bookkeeping entries hidden.
    #[default]
    Default,
    /// The default view without tool results.
    NoTools,
    /// User messages only.
    UserOnly,
    /// Labelled entries only.
    LabeledOnly,
    /// Every entry, bookkeeping included.
    All,
}

/// How to draw.
#[derive(Clone, Debug, Default)]
pub struct TreeOptions {
    /// Which entries to show.
    pub filter: Filter,
    /// Fold branches nested deeper than this many levels (None: show everything).
    pub depth: Option<usize>,
}

/// Opens `path` and draws its tree into `out`.
pub fn tree(path: &str, options: &TreeOptions, style: &Style, out: &mut dyn Write) -> Result<u8, Failure> {
    let m = SessionManager::open(path, None, None, Env::system())?;
    let (text, shown) = draw(&m, options, style)?;
    let entries = m.records().iter().filter(|r| !r.is_header()).count();
    // A filter that leaves nothing would otherwise print nothing at all (the session's name at most).
    if entries > 0 && shown == 0 {
        let filter = options.filter.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default();
        eprintln!(
            "nothing to show: none of the session's {} passes --filter {filter}",
            count(entries, "entry", "entries")
        );
    }
    emit(out, &terminal_safe_output(&text))
}

/// Whether the filter shows record `i` (pi's `applyFilter`, without its search box), described as `entry`.
fn shown(m: &SessionManager, i: usize, entry: &Description<'_>, filter: Filter) -> bool {
    let r = &m.records()[i];
    if filter == Filter::All {
        return true;
    }
    if r.kind == EntryType::Usage {
        return false;
    }
    let is_leaf = m.leaf_entry() == Some(i);
    if r.kind == EntryType::Message && r.role == Role::Assistant && !is_leaf {
        let stop = entry.stop_reason();
        let error_or_aborted = stop.is_some_and(|s| !s.is_empty() && s != "stop" && s != "toolUse");
        if !entry.has_text() && !error_or_aborted {
            return false;
        }
    }
    let settings = matches!(
        r.kind,
        EntryType::Label
            | EntryType::ContextEdit
            | EntryType::Custom
            | EntryType::ModelChange
            | EntryType::ThinkingLevelChange
            | EntryType::SessionInfo
    );
    match filter {
        Filter::UserOnly => r.kind == EntryType::Message && r.role == Role::User,
        Filter::NoTools => !(settings || (r.kind == EntryType::Message && r.role == Role::ToolResult)),
        Filter::LabeledOnly => m.label(&r.id).is_some(),
        Filter::Default | Filter::All => !settings,
    }
}

/// The colour of an entry's kind.
fn kind_color(what: &str) -> &'static str {
    match what {
        "user" => "32",
        "assistant" => "34",
        "toolResult" | "bashExecution" => "90",
        "compaction" | "branch_summary" => "33",
        _ => "36",
    }
}

/// The session as text: its name (when it has one), then one line per shown entry; and how many entries the
/// filter shows.
pub fn draw(m: &SessionManager, options: &TreeOptions, style: &Style) -> Result<(String, usize), Failure> {
    let tree = m.tree();
    let bodies = m.bodies();
    let n = tree.nodes.len();
    let mut lines_of: Vec<Option<String>> = vec![None; n];
    // Previews: as long as the terminal allows (lines are cut to it), else 72 characters, as the Python client's
    // format_tree draws them.
    let preview_chars = style.width.map_or(72, |w| w.max(20));
    for (k, node) in tree.nodes.iter().enumerate() {
        // Described from its line as stored; one that can no longer be read as JSON (the file changed under
        // us) is described as `null` is: as nothing.
        let scanned = bodies.bytes(node.record).ok().and_then(Scanned::of_bytes);
        let scanned = scanned.unwrap_or_else(|| Scanned::of_value(&Json::Null));
        let entry = scanned.describe();
        if shown(m, node.record, &entry, options.filter) {
            lines_of[k] = Some(entry_line(m, node.record, &entry, preview_chars, style));
        }
    }
    let branch = m.branch_path(None);
    let active: HashSet<usize> = branch.iter().copied().collect();
    // The leaf is marked where it is drawn: on itself, or, when the filter hides it (pi appends a label, name or
    // thinking-level change whenever it resumes), on its nearest shown ancestor, as pi's /tree selects it.
    let drawn: std::collections::HashMap<usize, usize> =
        tree.nodes.iter().enumerate().filter(|(k, _)| lines_of[*k].is_some()).map(|(k, n)| (n.record, k)).collect();
    let leaf_node = branch.iter().rev().find_map(|r| drawn.get(r).copied());
    let mut visible = VisibleTree::new(&tree, &|k| lines_of[k].is_some());
    // pi's /tree puts the branch holding the leaf first among its siblings (and among the roots). A node holds
    // the leaf exactly when it is on the leaf's path. A stable sort: the other branches keep getTree's order.
    let on_path = |k: &usize| active.contains(&tree.nodes[*k].record);
    visible.roots.sort_by_key(|k| !on_path(k));
    for siblings in &mut visible.children {
        siblings.sort_by_key(|k| !on_path(k));
    }
    // Where the leaf is hidden by the filter, the mark on its nearest shown ancestor says so and what it is.
    let leaf_mark = match m.leaf_entry() {
        Some(leaf) if leaf_node.is_some_and(|k| tree.nodes[k].record != leaf) => {
            let scanned = bodies.bytes(leaf).ok().and_then(Scanned::of_bytes);
            let what = scanned.map_or_else(|| "entry".to_owned(), |s| s.describe().what());
            format!("◀ leaf below (hidden {})", terminal_safe(&what))
        }
        _ => "◀ leaf".to_owned(),
    };
    let mut text = String::new();
    if let Ok(Some(name)) = m.session_name() {
        text.push_str(&style.fit(&style.paint("1", &name.to_string_lossy())));
        text.push('\n');
    }
    // (visible node, prefix of its line, prefix of its children, is last sibling, is on the main line, level)
    let mut stack: Vec<(usize, String, bool, bool, usize)> =
        visible.roots.iter().rev().map(|&k| (k, String::new(), true, true, 0)).collect();
    while let Some((k, prefix, last, straight, level)) = stack.pop() {
        let connector = if straight {
            ""
        } else if last {
            "└─ "
        } else {
            "├─ "
        };
        let child_prefix =
            if straight { prefix.clone() } else { format!("{prefix}{}", if last { "   " } else { "│  " }) };
        if options.depth.is_some_and(|d| level > d) {
            let folded = visible.count_from(k);
            let note = format!("… {} folded", super::output::count(folded, "entry", "entries"));
            text.push_str(&style.fit(&format!("{prefix}{connector}{}", style.paint("2", &note))));
            text.push('\n');
            continue;
        }
        let line = lines_of[k].as_ref().expect("visible nodes have lines");
        let record = tree.nodes[k].record;
        // pi's /tree marks the active path with a bullet; in colour the rest is dimmed too.
        let mut line = if active.contains(&record) { format!("• {line}") } else { line.clone() };
        if leaf_node == Some(k) {
            line.push(' ');
            line.push_str(&style.paint("1;32", &leaf_mark));
        }
        let line = if style.color && !active.contains(&record) {
            format!("\x1b[2m{}\x1b[0m", line.replace("\x1b[0m", "\x1b[0m\x1b[2m"))
        } else {
            line
        };
        text.push_str(&style.fit(&format!("{}{connector}{line}", style.paint("90", &prefix))));
        text.push('\n');
        let children = &visible.children[k];
        let single = children.len() == 1;
        for (i, &c) in children.iter().enumerate().rev() {
            if single {
                stack.push((c, child_prefix.clone(), true, true, level));
            } else {
                stack.push((c, child_prefix.clone(), i == children.len() - 1, false, level + 1));
            }
        }
    }
    let shown = lines_of.iter().filter(|l| l.is_some()).count();
    Ok((text, shown))
}

/// One entry's line: id, what it is, a preview, its label.
fn entry_line(m: &SessionManager, i: usize, entry: &Description<'_>, preview_chars: usize, style: &Style) -> String {
    let r = &m.records()[i];
    let summary = entry.summary(preview_chars, char_width);
    // The kind (a message's role, or the whole phrase of other entries) in its colour, then the text.
    let head_len = if r.kind == EntryType::Message { summary.what.len() } else { summary.phrase.len() };
    let (head, rest) = summary.phrase.split_at(head_len.min(summary.phrase.len()));
    let id = style.paint("33", &r.id.display());
    let (head, rest) = (terminal_safe(head), terminal_safe(rest));
    let mut line = format!("{id} {}{rest}", style.paint(kind_color(&summary.what), &head));
    if let Some(label) = m.label(&r.id) {
        // On the entry's line, as the label entry's own phrase shows it: a newline in it must not break the tree.
        let label = terminal_safe(&one_line(&to_js_string(label).to_string(), preview_chars, char_width)).into_owned();
        line.push(' ');
        line.push_str(&style.paint("1;35", &format!("[{label}]")));
    }
    line
}

/// The tree with hidden nodes taken out: each shown node's children are its nearest shown descendants.
struct VisibleTree {
    roots: Vec<usize>,
    children: Vec<Vec<usize>>,
}

impl VisibleTree {
    fn new(tree: &Tree, shown: &dyn Fn(usize) -> bool) -> VisibleTree {
        let mut children = vec![Vec::new(); tree.nodes.len()];
        let mut roots = Vec::new();
        // (node, nearest shown ancestor); iterative, as sessions are thousands of entries deep.
        let mut stack: Vec<(usize, Option<usize>)> = tree.roots.iter().rev().map(|&r| (r, None)).collect();
        let mut seen = vec![false; tree.nodes.len()];
        while let Some((k, anchor)) = stack.pop() {
            if std::mem::replace(&mut seen[k], true) {
                continue;
            }
            let here = if shown(k) {
                match anchor {
                    Some(a) => children[a].push(k),
                    None => roots.push(k),
                }
                Some(k)
            } else {
                anchor
            };
            stack.extend(tree.nodes[k].children.iter().rev().map(|&c| (c, here)));
        }
        VisibleTree { roots, children }
    }

    /// How many shown nodes the subtree at `k` has, `k` included.
    fn count_from(&self, k: usize) -> usize {
        let mut stack = vec![k];
        let mut count = 0;
        while let Some(n) = stack.pop() {
            count += 1;
            stack.extend(&self.children[n]);
        }
        count
    }
}
