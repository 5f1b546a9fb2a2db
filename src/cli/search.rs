//! `pi-sessiond search QUERY`: pi's `/resume` query language over every session (or one project's), down to
//! the entry, printed grouped by session with the matches highlighted and a count — or, with `--json`, the hits
//! as `sessions/search` returns them. The exit status says whether anything matched, as grep's does: 0 found,
//! 1 nothing, 2 an error.

use std::io::Write;

use crate::catalog::cancel::Cancel;
use crate::catalog::index::CatalogIndex;
use crate::catalog::listing::Catalog;
use crate::catalog::search::{parse_query, search_hit_json, search_page, Hit, Query, Scope, Searched, Token};
use crate::session::js::date::to_iso_string;
use crate::session::json::Json;
use crate::session::paths;

use super::ls::tilde;
use super::output::{
    count, cut_start_to_width, emit, terminal_safe, terminal_safe_output, visible_len, Failure, Style, EXIT_NO_MATCH,
    EXIT_OK,
};

/// The roles `--role` accepts (what `sessions/search` reports).
pub const ROLES: [&str; 9] =
    ["user", "assistant", "toolResult", "custom", "bashExecution", "name", "label", "summary", "session"];

/// What `pi-sessiond search` was asked.
#[derive(Debug)]
pub struct SearchRequest<'a> {
    /// The query (pi's `/resume` language).
    pub query: &'a str,
    /// Search this project's sessions only.
    pub cwd: Option<&'a str>,
    /// The session directory.
    pub dir: Option<&'a str>,
    /// At most this many results (at least 1).
    pub limit: usize,
    /// Skip this many of the best results first.
    pub offset: usize,
    /// Only these roles.
    pub roles: Option<Vec<String>>,
}

/// Runs the search and prints it; the status is [`EXIT_NO_MATCH`] when nothing matched.
pub fn search(
    request: &SearchRequest<'_>,
    agent_dir: &str,
    mut index: Option<&mut CatalogIndex>,
    json: bool,
    style: &Style,
    out: &mut dyn Write,
) -> Result<u8, Failure> {
    if request.query.trim().is_empty() {
        return Err(Failure::invalid("the query is empty: give words, \"a phrase\" or re:PATTERN"));
    }
    let query = parse_query(request.query).map_err(|m| Failure::invalid(format!("invalid search query: {m}")))?;
    // A project's directory that does not exist has nothing to search, and is not created.
    let project_dir = request.cwd.map(|cwd| match request.dir {
        Some(d) => d.to_owned(),
        None => paths::default_session_dir_path(cwd, agent_dir),
    });
    let searched = match &project_dir {
        Some(dir) if !paths::as_path(dir).exists() => {
            Searched { hits: Vec::new(), total: 0, sessions: 0, unindexed: Vec::new() }
        }
        _ => {
            let scope = Scope { cwd: request.cwd, session_dir: project_dir.as_deref().or(request.dir) };
            search_page(
                request.query,
                scope,
                request.roles.as_deref(),
                request.offset,
                request.limit,
                Catalog::new(agent_dir, index.as_deref_mut()),
                &mut |_, _, _| {},
            )?
        }
    };
    let Searched { hits, total, sessions, unindexed } = searched;
    let status = if hits.is_empty() { EXIT_NO_MATCH } else { EXIT_OK };
    let printed = if json {
        if hits.is_empty() && total == 0 {
            super::output::warn_if_missing_agent_dir(agent_dir);
        }
        let mut bytes = Vec::new();
        Json::Array(hits.iter().map(search_hit_json).collect()).write_preserving(&mut bytes);
        bytes.push(b'\n');
        emit(out, &String::from_utf8_lossy(&bytes)).map(|s| s.max(status))
    } else if hits.is_empty() && total > 0 {
        eprintln!("{}; none from --offset {}", count(total, "match", "matches"), request.offset);
        Ok(status)
    } else if hits.is_empty() {
        match super::output::missing_agent_dir(agent_dir) {
            Some(missing) => eprintln!("no matches: {missing}"),
            None => eprintln!("no matches"),
        }
        Ok(status)
    } else {
        let counted = Counted { total, sessions, offset: request.offset, limit: request.limit };
        emit(out, &terminal_safe_output(&grouped(&hits, &query, style, &counted))).map(|s| s.max(status))
    };
    // The answer is out; the text the search read goes into the index for the next search.
    if let (Some(ix), false) = (index, unindexed.is_empty()) {
        let _ = out.flush();
        if let Err(e) = ix.catch_up_docs(&unindexed, &Cancel::new(), &mut |_, _| {}) {
            tracing::warn!("catalog index: the searchable text was not stored ({e})");
        }
    }
    printed
}

/// How many hits a search found in all, and which page of them is shown.
struct Counted {
    total: usize,
    sessions: usize,
    offset: usize,
    limit: usize,
}

/// The hits, grouped by session in rank order of each session's best hit, then the true count of the search's
/// hits and sessions, and which of them these are when they are not all.
fn grouped(hits: &[Hit], query: &Query, style: &Style, counted: &Counted) -> String {
    let mut order: Vec<&str> = Vec::new();
    for h in hits {
        if !order.contains(&h.path.as_str()) {
            order.push(&h.path);
        }
    }
    let mut text = String::new();
    for path in &order {
        let in_session: Vec<&Hit> = hits.iter().filter(|h| h.path == *path).collect();
        let id = crate::session::js::to_js_string(&in_session[0].session_id).to_string_lossy();
        // Of this page only when the search has more than it shows: a session's whole count is not known then.
        let count = match hits.len() < counted.total {
            true => format!("{} on this page", count(in_session.len(), "match", "matches")),
            false => count(in_session.len(), "match", "matches"),
        };
        // On a terminal the path gives way, from its start, so that the id (what names the session) stays whole.
        let mut shown = tilde(path);
        if let Some(width) = style.width {
            let room = width.saturating_sub(visible_len(&id) + visible_len(&count) + 4).max(12);
            shown = cut_start_to_width(&shown, room);
        }
        text.push_str(&style.fit(&format!(
            "{}  {}  {}",
            style.paint("1;35", &shown),
            style.paint("33", &id),
            style.paint("2", &count)
        )));
        text.push('\n');
        for h in in_session {
            let when = to_iso_string(h.timestamp).map(|t| t[..16].replace('T', " ")).unwrap_or_else(|| "-".into());
            let entry = h.entry_id.as_deref().map(|e| format!("#{}", e.trim_matches('"'))).unwrap_or_default();
            let head = format!("  {}  {:<13} {}", style.paint("2", &when), h.role, style.paint("33", &entry));
            text.push_str(&style.fit(head.trim_end()));
            text.push('\n');
            let snippet = highlight(&terminal_safe(&h.snippet), query, style);
            text.push_str(&style.fit(&format!("      {snippet}")));
            text.push('\n');
        }
        text.push('\n');
    }
    let Counted { total, sessions, offset, limit } = *counted;
    text.push_str(&format!("{} in {}", count(total, "match", "matches"), count(sessions, "session", "sessions")));
    if offset > 0 || hits.len() < total {
        let last = offset + hits.len();
        text.push_str(&format!("; these are {}–{last}", offset + 1));
        if last < total {
            text.push_str(&format!(" (--offset {last} shows the next {})", limit.min(total - last)));
        }
    }
    text.push('\n');
    text
}

/// `snippet` with every place the query matches painted (bold red on a colour terminal; unchanged otherwise).
pub fn highlight(snippet: &str, query: &Query, style: &Style) -> String {
    if !style.color {
        return snippet.to_owned();
    }
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    match query {
        Query::Regex(re) => ranges.extend(re.find_iter(snippet).map(|m| (m.start(), m.end()))),
        Query::Tokens(tokens) => {
            let lower = snippet.to_lowercase();
            // Lower-casing can change byte lengths outside ASCII; only highlight when positions still line up.
            if lower.len() == snippet.len() {
                for t in tokens {
                    let needle = match t {
                        Token::Fuzzy(w) => w.to_lowercase(),
                        Token::Phrase(p) => p.to_lowercase().split_whitespace().collect::<Vec<_>>().join(" "),
                    };
                    if needle.is_empty() {
                        continue;
                    }
                    ranges.extend(lower.match_indices(&needle).map(|(i, m)| (i, i + m.len())));
                }
            }
        }
    }
    ranges.retain(|&(a, b)| a < b && snippet.is_char_boundary(a) && snippet.is_char_boundary(b));
    ranges.sort();
    let mut out = String::new();
    let mut at = 0;
    for (a, b) in ranges {
        if a < at {
            continue;
        }
        out.push_str(&snippet[at..a]);
        out.push_str(&style.paint("1;31", &snippet[a..b]));
        at = b;
    }
    out.push_str(&snippet[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_of_a_word_is_highlighted_whatever_its_case() {
        let style = Style { tty: true, color: true, width: None };
        let q = parse_query("foo").unwrap();
        assert_eq!(highlight("a Foo and foo", &q, &style), "a \x1b[1;31mFoo\x1b[0m and \x1b[1;31mfoo\x1b[0m");
        assert_eq!(highlight("a Foo", &q, &Style::plain()), "a Foo");
    }
}
