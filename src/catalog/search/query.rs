//! pi's `/resume` query language: words, "phrases" and `re:` patterns, parsed (bounded in size) into a [`Query`].

use super::*;

/// One query token.
#[derive(Clone, Debug, PartialEq)]
pub enum Token {
    /// A word: literal substring, or fuzzy on the session name and cwd.
    Fuzzy(String),
    /// `"an exact phrase"`, compared with white space normalised.
    Phrase(String),
}

/// A parsed query.
#[derive(Clone, Debug)]
pub enum Query {
    /// All tokens must match.
    Tokens(Vec<Token>),
    /// `re:<pattern>`.
    Regex(regex::Regex),
}

/// The longest query accepted, in bytes of UTF-8: far more than anyone types into pi's `/resume` box.
pub const MAX_QUERY_BYTES: usize = 4096;

/// The most words a query may have (each word of a quoted phrase counts).
pub const MAX_QUERY_WORDS: usize = 64;

/// A regex that does not compile, in one line: the regex crate draws the pattern with a caret under the fault
/// over four lines, which a command line's one-line errors (and a host's message box) cannot hold.
fn regex_error(pattern: &str, e: &regex::Error) -> String {
    let text = e.to_string();
    let why = text.lines().rev().find_map(|l| l.trim().strip_prefix("error: ")).unwrap_or_else(|| text.trim());
    format!("re:{pattern}: {}", why.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// pi's `parseSearchQuery`. An empty or invalid regex is an error, and so is a query over [`MAX_QUERY_BYTES`] or
/// [`MAX_QUERY_WORDS`].
pub fn parse_query(query: &str) -> Result<Query, String> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(format!("the query is {} bytes long; at most {MAX_QUERY_BYTES} are accepted", query.len()));
    }
    let trimmed = query.trim();
    if let Some(pattern) = trimmed.strip_prefix("re:") {
        let pattern = pattern.trim();
        if pattern.is_empty() {
            return Err("Empty regex".into());
        }
        return regex::RegexBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .map(Query::Regex)
            .map_err(|e| regex_error(pattern, &e));
    }
    let mut tokens = Vec::new();
    let mut buf = String::new();
    let mut in_quote = false;
    let flush = |buf: &mut String, tokens: &mut Vec<Token>, phrase: bool| {
        let v = buf.trim().to_owned();
        buf.clear();
        if !v.is_empty() {
            tokens.push(if phrase { Token::Phrase(v) } else { Token::Fuzzy(v) });
        }
    };
    for ch in trimmed.chars() {
        if ch == '"' {
            flush(&mut buf, &mut tokens, in_quote);
            in_quote = !in_quote;
            continue;
        }
        if !in_quote && ch.is_whitespace() {
            flush(&mut buf, &mut tokens, false);
            continue;
        }
        buf.push(ch);
    }
    if in_quote {
        // Unbalanced quotes: plain white-space tokens, as pi does.
        tokens = trimmed.split_whitespace().map(|t| Token::Fuzzy(t.to_owned())).collect();
    } else {
        flush(&mut buf, &mut tokens, false);
    }
    let words: usize = tokens
        .iter()
        .map(|t| match t {
            Token::Fuzzy(_) => 1,
            Token::Phrase(p) => p.split_whitespace().count(),
        })
        .sum();
    if words > MAX_QUERY_WORDS {
        return Err(format!("the query has {words} words; at most {MAX_QUERY_WORDS} are accepted"));
    }
    Ok(Query::Tokens(tokens))
}

impl Query {
    /// Literal strings one of which any matching entry text must contain (for the index's prefilter); empty when
    /// the query cannot be narrowed that way (a regex).
    pub fn needles(&self) -> Vec<String> {
        match self {
            Query::Regex(_) => Vec::new(),
            Query::Tokens(t) => t
                .iter()
                .map(|t| match t {
                    Token::Fuzzy(v) => v.to_lowercase(),
                    // White space in the text may differ from the phrase's; any one word narrows enough.
                    Token::Phrase(v) => {
                        v.split_whitespace().max_by_key(|w| w.chars().count()).unwrap_or_default().to_lowercase()
                    }
                })
                .collect(),
        }
    }
}
