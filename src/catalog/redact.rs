//! Secrets replaced before session text leaves the machine: `push` (on by default) and `export --html` put
//! `[redacted: RULE]` where a rule finds a secret, so a team database or a shared page never holds a key that a
//! tool's output or a pasted `.env` put into a session. Local session files are never changed.
//!
//! Rules come in gitleaks' TOML format (a subset: `id`, `regex`, `secretGroup`, `keywords`, `entropy`): a
//! built-in set (`redact-rules.toml` beside this file) plus a team's own file. A JSON line is redacted inside its
//! decoded strings and written again, so it stays valid JSON whatever a secret's escapes were (a private key's
//! `\n`s) and team reads and opens still work; a line that is not JSON is redacted as text. Lines none of whose
//! rules' keywords appear are passed through untouched, so most of a session costs one keyword scan.
//!
//! Hand-written over a crate: the one crate found that embeds gitleaks' own rules needs a newer Rust than this
//! project builds with, and the others are scanners of files and repositories, not of strings inside JSON.

use std::borrow::Cow;

use aho_corasick::AhoCorasick;
use regex::Regex;
use serde::Deserialize;

use crate::session::json::{JsString, Json};

/// The built-in rules.
const BUILTIN_RULES: &str = include_str!("redact-rules.toml");

/// The marker that replaces a secret found by the rule `id`.
pub fn marker(id: &str) -> String {
    format!("[redacted: {id}]")
}

/// A rules file that cannot be used: which rule (or line) and why.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {why}")]
pub struct RulesError {
    origin: String,
    why: String,
}

#[derive(Deserialize)]
struct RulesFile {
    #[serde(default)]
    rules: Vec<RuleSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleSpec {
    id: String,
    /// gitleaks rules that only match paths have no regex: they say nothing about text and are skipped.
    regex: Option<String>,
    #[serde(default)]
    secret_group: usize,
    #[serde(default)]
    keywords: Vec<String>,
    entropy: Option<f64>,
}

#[derive(Debug)]
struct Rule {
    id: String,
    marker: String,
    regex: Regex,
    secret_group: usize,
    /// Lowercase; empty: the rule runs on every text.
    keywords: Vec<String>,
    entropy: Option<f64>,
}

/// A set of rules, compiled once, that replaces the secrets they find.
#[derive(Debug)]
pub struct Redactor {
    rules: Vec<Rule>,
    /// Every rule's keywords, ASCII case-insensitive: a text with none of them is not looked at further.
    prefilter: AhoCorasick,
    /// Some rule has no keywords, so no text can be passed over.
    unfiltered: bool,
}

impl Redactor {
    /// The built-in rules.
    pub fn builtin() -> Redactor {
        Redactor::new(&[(BUILTIN_RULES, "built-in rules")]).expect("the built-in rules compile")
    }

    /// The built-in rules, then those of a team's rules file (`text`, read from `origin`).
    pub fn with_team_rules(text: &str, origin: &str) -> Result<Redactor, RulesError> {
        Redactor::new(&[(BUILTIN_RULES, "built-in rules"), (text, origin)])
    }

    fn new(sources: &[(&str, &str)]) -> Result<Redactor, RulesError> {
        let mut rules = Vec::new();
        for (text, origin) in sources {
            let err = |why: String| RulesError { origin: (*origin).to_owned(), why };
            let file: RulesFile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
            for spec in file.rules {
                let Some(pattern) = spec.regex else { continue };
                let regex = Regex::new(&pattern).map_err(|e| err(format!("rule {}: {e}", spec.id)))?;
                if spec.secret_group >= regex.captures_len() {
                    return Err(err(format!(
                        "rule {}: secretGroup {} is not a group of its regex",
                        spec.id, spec.secret_group
                    )));
                }
                rules.push(Rule {
                    marker: marker(&spec.id),
                    id: spec.id,
                    regex,
                    secret_group: spec.secret_group,
                    keywords: spec.keywords.iter().map(|k| k.to_lowercase()).filter(|k| !k.is_empty()).collect(),
                    entropy: spec.entropy,
                });
            }
        }
        let unfiltered = rules.iter().any(|r| r.keywords.is_empty());
        let prefilter = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(rules.iter().flat_map(|r| r.keywords.iter()))
            .map_err(|e| RulesError { origin: "keywords".to_owned(), why: e.to_string() })?;
        Ok(Redactor { rules, prefilter, unfiltered })
    }

    /// The rules' names, in the order they run.
    pub fn rule_ids(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.id.as_str())
    }

    /// Whether any rule could find something in `bytes`: some keyword is there (or a rule has none).
    fn may_match(&self, bytes: &[u8]) -> bool {
        self.unfiltered || self.prefilter.is_match(bytes)
    }

    /// `text` with every secret the rules find replaced by its rule's marker; borrowed when nothing was found.
    pub fn redact_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.may_match(text.as_bytes()) {
            return Cow::Borrowed(text);
        }
        let mut current = Cow::Borrowed(text);
        let mut lower: Option<String> = None;
        for rule in &self.rules {
            if !rule.keywords.is_empty() {
                let lower = lower.get_or_insert_with(|| current.to_lowercase());
                if !rule.keywords.iter().any(|k| lower.contains(k.as_str())) {
                    continue;
                }
            }
            if let Some(next) = rule.apply(&current) {
                current = Cow::Owned(next);
                lower = None;
            }
        }
        current
    }

    /// Redacts every string inside `value`, member names too (an agent's env maps and header dicts can have a
    /// secret as a key), but not the base64 `data` of an image block, which is no text; returns how many strings
    /// changed.
    pub fn redact_json(&self, value: &mut Json) -> usize {
        let mut changed = 0;
        // A heap stack: JSON nests to any depth (see `Json`).
        let mut stack: Vec<&mut Json> = vec![value];
        while let Some(v) = stack.pop() {
            match v {
                Json::String(s) => {
                    if let Some(new) = self.redact_js_string(s) {
                        *s = new;
                        changed += 1;
                    }
                }
                Json::Array(items) => stack.extend(items.iter_mut()),
                Json::Object(o) => {
                    changed += o.rename_keys(|k| self.redact_js_string(k));
                    let image = o.get("type").and_then(Json::as_js_str).is_some_and(|t| t.eq_str("image"));
                    stack.extend(o.iter_mut().filter(|(k, _)| !(image && k.eq_str("data"))).map(|(_, v)| v));
                }
                Json::Null | Json::Bool(_) | Json::Number(_) => {}
            }
        }
        changed
    }

    fn redact_js_string(&self, s: &JsString) -> Option<JsString> {
        if !self.may_match(s.as_bytes()) {
            return None;
        }
        // A string with a lone surrogate is looked at as its lossy text, and written so only if a secret was in it.
        let text = s.to_string_lossy();
        match self.redact_text(&text) {
            Cow::Owned(new) => Some(JsString::from(new)),
            Cow::Borrowed(_) => None,
        }
    }

    /// One stored line with its secrets replaced, or None when it has none (it is then kept byte for byte). A
    /// JSON line is redacted inside its strings and written again (keeping member order and number literals);
    /// anything else (a damaged line, half a line still being written) as text.
    pub fn redact_line(&self, line: &[u8]) -> Option<Vec<u8>> {
        // A `\u` escape could spell a keyword the raw bytes do not show: such lines are always decoded.
        if !self.may_match(line) && memchr::memmem::find(line, b"\\u").is_none() {
            return None;
        }
        match Json::parse(line) {
            Ok(mut value) => {
                if self.redact_json(&mut value) == 0 {
                    return None;
                }
                let mut out = Vec::with_capacity(line.len());
                value.write_preserving(&mut out);
                Some(out)
            }
            Err(_) => match self.redact_text(&String::from_utf8_lossy(line)) {
                Cow::Owned(new) => Some(new.into_bytes()),
                Cow::Borrowed(_) => None,
            },
        }
    }
}

/// A line as it may leave the machine: secrets redacted (with a `redactor`) and, unless `keep_images`, each
/// image's base64 data replaced by a placeholder ([`image_placeholders`]); None when it leaves as it is.
pub fn outgoing_line(line: &[u8], redactor: Option<&Redactor>, keep_images: bool) -> Option<Vec<u8>> {
    if keep_images || memchr::memmem::find(line, b"\"image\"").is_none() {
        return redactor.and_then(|r| r.redact_line(line));
    }
    let Ok(mut value) = Json::parse(line) else { return redactor.and_then(|r| r.redact_line(line)) };
    let changed = image_placeholders(&mut value) + redactor.map_or(0, |r| r.redact_json(&mut value));
    if changed == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(line.len().min(1 << 16));
    value.write_preserving(&mut out);
    Some(out)
}

/// The bytes after a file's last newline as they may leave the machine. pi reads such a rest only when it is a
/// whole JSON value (a file whose last line has no newline); anything else is a line still being written, which
/// pi skips, and which may stop inside a secret that no rule can recognise yet (a URL's password before its
/// `@`, half a token): it never leaves, whatever the rules. A whole value goes as a line does ([`outgoing_line`]).
pub fn outgoing_unterminated(rest: Vec<u8>, redactor: Option<&Redactor>, keep_images: bool) -> Vec<u8> {
    if Json::parse(&rest).is_err() {
        return Vec::new();
    }
    outgoing_line(&rest, redactor, keep_images).unwrap_or(rest)
}

/// Replaces the base64 `data` of every image block (`{"type":"image","data","mimeType"}`) by `""` and adds
/// `omitted: {bytes, sha256}` (the image's size and the SHA-256 of its base64 text), keeping its `mimeType`: a
/// team sees that an image was there, of what type and size, and can tell two apart, without megabytes of
/// pixels per screenshot. Returns how many were replaced.
pub fn image_placeholders(value: &mut Json) -> usize {
    use sha2::{Digest, Sha256};
    let mut replaced = 0;
    let mut stack: Vec<&mut Json> = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Json::Array(items) => stack.extend(items.iter_mut()),
            Json::Object(o) => {
                let image = o.get("type").and_then(Json::as_js_str).is_some_and(|t| t.eq_str("image"));
                let data = o.get("data").and_then(Json::as_js_str).filter(|d| image && !d.is_empty());
                if let Some(data) = data {
                    let b64 = data.as_bytes();
                    let padding = b64.iter().rev().take_while(|&&b| b == b'=').count();
                    let bytes = (b64.len() / 4 * 3).saturating_sub(padding.min(2));
                    let hash: String = Sha256::digest(b64).iter().map(|b| format!("{b:02x}")).collect();
                    let mut omitted = crate::session::json::Object::new();
                    omitted.insert("bytes", Json::number(bytes as f64));
                    omitted.insert("sha256", Json::str(&hash));
                    o.insert("data", Json::str(""));
                    o.insert("omitted", Json::Object(omitted));
                    replaced += 1;
                    continue;
                }
                stack.extend(o.iter_mut().map(|(_, v)| v));
            }
            Json::Null | Json::Bool(_) | Json::Number(_) | Json::String(_) => {}
        }
    }
    replaced
}

impl Rule {
    /// `text` with this rule's secrets replaced, or None when it found none.
    fn apply(&self, text: &str) -> Option<String> {
        let mut out = String::new();
        let mut last = 0;
        let mut replaced = false;
        for caps in self.regex.captures_iter(text) {
            let secret = if self.secret_group > 0 {
                caps.get(self.secret_group)
            } else {
                // gitleaks' rule: the first group that took part, else the whole match.
                caps.iter().skip(1).flatten().next().or_else(|| caps.get(0))
            };
            let Some(secret) = secret.filter(|m| !m.is_empty()) else { continue };
            if self.entropy.is_some_and(|min| shannon_entropy(secret.as_str()) < min) {
                continue;
            }
            out.push_str(&text[last..secret.start()]);
            out.push_str(&self.marker);
            last = secret.end();
            replaced = true;
        }
        if !replaced {
            return None;
        }
        out.push_str(&text[last..]);
        Some(out)
    }
}

/// Shannon entropy of `s` in bits per character: random keys score high (base64 about 6, hex about 4), words low.
fn shannon_entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        n += 1;
    }
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_replaced_by_a_marker_naming_its_rule_and_the_text_around_it_is_kept() {
        let r = Redactor::builtin();
        let out = r.redact_text("the key is AKIAZ7QWERTYUIOPASDF, keep it safe");
        assert_eq!(out, "the key is [redacted: aws-access-key], keep it safe");
    }

    #[test]
    fn an_env_line_keeps_its_name_and_loses_its_value() {
        let r = Redactor::builtin();
        let out = r.redact_text("HOME=/root\nDATABASE_PASSWORD=correct-horse-battery\nDEBUG=1\n");
        assert_eq!(out, "HOME=/root\nDATABASE_PASSWORD=[redacted: env-secret]\nDEBUG=1\n");
    }

    #[test]
    fn ordinary_prose_about_keys_and_tokens_is_left_alone() {
        let r = Redactor::builtin();
        let text = "The token: counting tokens is how the password field and api_key = settings work.";
        assert!(matches!(r.redact_text(text), Cow::Borrowed(_)), "{}", r.redact_text(text));
    }

    #[test]
    fn a_private_key_escaped_in_a_json_line_is_redacted_and_the_line_stays_json() {
        let r = Redactor::builtin();
        let line = br#"{"type":"message","n":1.50,"text":"key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----\nbye"}"#;
        let out = r.redact_line(line).expect("redacted");
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, r#"{"type":"message","n":1.50,"text":"key:\n[redacted: private-key]\nbye"}"#);
    }

    #[test]
    fn an_image_s_data_is_not_text_and_is_kept() {
        let r = Redactor::builtin();
        let line = br#"{"type":"image","data":"password=aGVsbG8gd29ybGQgaGVsbG8","mimeType":"image/png"}"#;
        assert_eq!(r.redact_line(line), None);
    }

    #[test]
    fn a_secret_used_as_a_member_name_is_redacted_and_two_such_members_stay_two() {
        let r = Redactor::builtin();
        let (a, b) = ("ghp_J50nK3yT0k3nAaBbCcDdEeFfGgHhIiJjKk4444", "ghp_Q9wErTyUiOpAsDfGhJkLzXcVbNmQwErTyUi777");
        let line = format!(r#"{{"env":{{"{a}":"one","{b}":"two","PATH":"/bin"}}}}"#);
        let out = String::from_utf8(r.redact_line(line.as_bytes()).expect("redacted")).unwrap();
        assert_eq!(
            out,
            r#"{"env":{"[redacted: github-token]":"one","[redacted: github-token] #2":"two","PATH":"/bin"}}"#
        );
    }

    #[test]
    fn a_url_password_with_an_empty_user_is_redacted_as_redis_writes_it() {
        let r = Redactor::builtin();
        let out = r.redact_text("REDIS_URL=redis://:r3d1sP4ssNoUser99@cache:6379/0");
        assert_eq!(out, "REDIS_URL=redis://:[redacted: password-in-url]@cache:6379/0");
    }

    #[test]
    fn a_rest_still_being_written_never_leaves_and_a_whole_one_leaves_redacted() {
        let r = Redactor::builtin();
        // Cut before the `@` that makes it a URL's password: no rule can see the secret yet.
        let half = br#"{"type":"message","message":{"content":"connecting to postgres://admin:W4tchH4lfP4ss"#;
        assert!(r.redact_line(half).is_none(), "no rule sees it: the case this guards");
        assert_eq!(outgoing_unterminated(half.to_vec(), Some(&r), true), b"");
        assert_eq!(outgoing_unterminated(half.to_vec(), None, true), b"");
        let whole = br#"{"type":"message","text":"postgres://admin:W4tchH4lfP4ss@db/app"}"#;
        assert_eq!(
            String::from_utf8(outgoing_unterminated(whole.to_vec(), Some(&r), true)).unwrap(),
            r#"{"type":"message","text":"postgres://admin:[redacted: password-in-url]@db/app"}"#
        );
        let plain = br#"{"type":"message","text":"nothing secret"}"#.to_vec();
        assert_eq!(outgoing_unterminated(plain.clone(), Some(&r), true), plain);
    }

    #[test]
    fn a_team_rule_file_adds_rules_and_a_broken_one_is_refused_with_the_rule_named() {
        let r = Redactor::with_team_rules(
            "[[rules]]\nid = \"acme-ticket\"\nregex = '''ACME-[0-9]{6}'''\nkeywords = [\"acme-\"]\n",
            "team.toml",
        )
        .unwrap();
        assert_eq!(r.redact_text("see ACME-123456 now"), "see [redacted: acme-ticket] now");
        let err = Redactor::with_team_rules("[[rules]]\nid = \"bad\"\nregex = '''(unclosed'''\n", "team.toml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("team.toml: rule bad:"), "{err}");
    }
}
