//! How the command line talks to a person: colour only on a terminal (and never under `NO_COLOR`), lines cut to
//! the terminal's width, long output through a pager — and none of that when the output goes to a pipe or a
//! file, where a script reads it. Also the one place that turns a failure into what the user sees: a line on
//! stderr, or `{"error": {"kind", "message"}}` on stdout with `--json`.

use std::io::{IsTerminal, Write};
use std::process::{Child, Command, Stdio};

use crate::session::json::{Json, Object};
use crate::session::ErrorKind;

/// Exit status: the command did what was asked.
pub const EXIT_OK: u8 = 0;
/// Exit status of `search` when nothing matched (as grep and ripgrep).
pub const EXIT_NO_MATCH: u8 = 1;
/// Exit status of every failure: bad arguments, a missing or unreadable session, a failed write.
pub const EXIT_ERROR: u8 = 2;

/// When to colour the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set or `TERM` is `dumb`.
    #[default]
    Auto,
    /// Always (e.g. into `less -R`).
    Always,
    /// Never.
    Never,
}

/// What the output looks like: decided once from the environment, then passed to every command.
#[derive(Clone, Debug)]
pub struct Style {
    /// stdout is a terminal.
    pub tty: bool,
    /// Use ANSI colours.
    pub color: bool,
    /// Cut lines to this many columns (None: never cut — the output goes to a pipe or a file).
    pub width: Option<usize>,
}

impl Style {
    /// The style for this process's stdout.
    pub fn detect(choice: ColorChoice) -> Style {
        let tty = std::io::stdout().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => tty && !no_color && !dumb,
        };
        let width = tty.then(terminal_width);
        Style { tty, color, width }
    }

    /// Plain text, no colour, no width: what scripts and tests of content get.
    pub fn plain() -> Style {
        Style { tty: false, color: false, width: None }
    }

    /// `text` wrapped in the SGR sequence `sgr` (e.g. `"1"` bold, `"2"` dim, `"32"` green) when colouring.
    pub fn paint(&self, sgr: &str, text: &str) -> String {
        if self.color && !text.is_empty() {
            format!("\x1b[{sgr}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// `line` cut to the width (in terminal columns, escape sequences not counted), with `…` where it was cut.
    pub fn fit(&self, line: &str) -> String {
        match self.width {
            Some(w) => cut_to_width(line, w),
            None => line.to_owned(),
        }
    }
}

/// The terminal's width: `COLUMNS` when set (as shells export it), else what the terminal says, else 80.
fn terminal_width() -> usize {
    if let Some(c) = std::env::var("COLUMNS").ok().and_then(|c| c.parse::<usize>().ok()).filter(|&c| c > 0) {
        return c;
    }
    rustix::termios::tcgetwinsize(std::io::stdout()).ok().map(|w| w.ws_col as usize).filter(|&c| c > 0).unwrap_or(80)
}

/// The terminal columns one character takes (East Asian wide characters and most emoji two, combining marks
/// none), by Unicode's tables (`unicode-width`) rather than a count of characters.
pub fn char_width(c: char) -> usize {
    unicode_width::UnicodeWidthChar::width(c).unwrap_or(0)
}

/// Cuts `line` to `width` terminal columns; escape sequences (colours) are kept and a cut line is reset.
pub fn cut_to_width(line: &str, width: usize) -> String {
    if visible_len(line) <= width {
        return line.to_owned();
    }
    let mut out = String::with_capacity(width * 4);
    let mut visible = 0;
    let mut in_escape = false;
    for c in line.chars() {
        if in_escape || c == '\x1b' {
            in_escape = if c == '\x1b' { true } else { !c.is_ascii_alphabetic() };
            out.push(c);
            continue;
        }
        // The `…` takes the last column.
        if visible + char_width(c) + 1 > width {
            break;
        }
        out.push(c);
        visible += char_width(c);
    }
    out.push('…');
    if line.contains('\x1b') {
        out.push_str("\x1b[0m");
    }
    out
}

/// `text` (no escape sequences) cut to its last `width` columns, with `…` first where it was cut: the end of a
/// path says more than its start.
pub fn cut_start_to_width(text: &str, width: usize) -> String {
    if visible_len(text) <= width {
        return text.to_owned();
    }
    let mut kept = 0;
    let start = text
        .char_indices()
        .rev()
        .find(|&(_, c)| {
            kept += char_width(c);
            kept + 1 > width
        })
        .map_or(0, |(i, c)| i + c.len_utf8());
    format!("…{}", &text[start..])
}

/// The terminal columns `line` takes, escape sequences not counted.
pub fn visible_len(line: &str) -> usize {
    let mut n = 0;
    let mut in_escape = false;
    for c in line.chars() {
        if in_escape {
            in_escape = !c.is_ascii_alphabetic();
        } else if c == '\x1b' {
            in_escape = true;
        } else {
            n += char_width(c);
        }
    }
    n
}

/// Where a command's output goes: stdout, or a pager reading it when stdout is a terminal (as git does: the
/// pager is `$PAGER`, default `less` with `LESS=FRX`, which quits at once when everything fits on one screen).
pub struct Screen {
    pager: Option<Child>,
    stdout: std::io::Stdout,
}

impl Screen {
    /// Stdout, through a pager if `paging` and stdout is a terminal and a pager can be started.
    pub fn open(style: &Style, paging: bool) -> Screen {
        let pager = (paging && style.tty).then(start_pager).flatten();
        Screen { pager, stdout: std::io::stdout() }
    }

    /// The writer to print to.
    pub fn writer(&mut self) -> Box<dyn Write + '_> {
        match self.pager.as_mut().and_then(|p| p.stdin.as_mut()) {
            Some(stdin) => Box::new(stdin),
            None => Box::new(self.stdout.lock()),
        }
    }

    /// Flushes, and waits for the pager (the person reads until they quit it). Fails when the pager could not
    /// be run at all (the shell's 127 or 126: not found, not executable), since the output went nowhere.
    pub fn finish(mut self) -> Result<(), Failure> {
        let Some(mut child) = self.pager.take() else {
            let _ = self.stdout.flush();
            return Ok(());
        };
        drop(child.stdin.take());
        match child.wait().map(|status| status.code()) {
            Ok(Some(code @ (126 | 127))) => Err(Failure::io(format!(
                "the pager `{}` could not be run (status {code}), so nothing was shown: set PAGER (or \
                 PI_SESSIOND_PAGER) to one that runs, or use --no-pager",
                pager_command()
            ))),
            _ => Ok(()),
        }
    }
}

/// The pager's command line: `PI_SESSIOND_PAGER`, else `PAGER`, else `less`.
fn pager_command() -> String {
    let pager =
        std::env::var("PI_SESSIOND_PAGER").or_else(|_| std::env::var("PAGER")).unwrap_or_else(|_| "less".into());
    pager.trim().to_owned()
}

fn start_pager() -> Option<Child> {
    let pager = pager_command();
    let pager = pager.as_str();
    if pager.is_empty() || pager == "cat" {
        return None;
    }
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(pager).stdin(Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        cmd.env("LESS", "FRX");
    }
    // Commands that read create no file: less would write its history file (~/.lesshst) even for a page that
    // fits the screen. A user's own choice of history file stands.
    if std::env::var_os("LESSHISTFILE").is_none() {
        cmd.env("LESSHISTFILE", "-");
    }
    cmd.spawn().ok()
}

/// What kind of failure it is. The engine's kinds come from its one table ([`ErrorKind`], which the RPC layer sends
/// as `data.kind` too); the command line adds only what naming things by prefix can cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// One of the engine's kinds.
    Session(ErrorKind),
    /// An id prefix that more than one session's id starts with.
    AmbiguousSession,
    /// An id prefix that more than one entry's id starts with.
    AmbiguousEntry,
    /// The web view's sidecar does not know the handle (it was closed).
    HandleNotFound,
    /// The team catalog (`--catalog`, `push --postgres`) failed or cannot be reached (the sidecar's kind of the
    /// same name).
    CatalogUnavailable,
    /// Something that should not happen (a sidecar answer of an unexpected shape).
    Internal,
}

impl FailureKind {
    /// The snake_case name printed as `error.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Session(kind) => kind.as_str(),
            FailureKind::AmbiguousSession => "ambiguous_session",
            FailureKind::AmbiguousEntry => "ambiguous_entry",
            FailureKind::HandleNotFound => "handle_not_found",
            FailureKind::CatalogUnavailable => "catalog_unavailable",
            FailureKind::Internal => "internal_error",
        }
    }

    /// The kind a sidecar's `data.kind` names (a name from outside both tables is an internal error).
    pub fn from_name(name: &str) -> FailureKind {
        let ours = [
            FailureKind::AmbiguousSession,
            FailureKind::AmbiguousEntry,
            FailureKind::HandleNotFound,
            FailureKind::CatalogUnavailable,
        ];
        ErrorKind::ALL
            .into_iter()
            .map(FailureKind::Session)
            .chain(ours)
            .find(|k| k.as_str() == name)
            .unwrap_or(FailureKind::Internal)
    }
}

impl From<ErrorKind> for FailureKind {
    fn from(kind: ErrorKind) -> FailureKind {
        FailureKind::Session(kind)
    }
}

/// A failure as the user sees it: a kind for machines, a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What kind of failure it is.
    pub kind: FailureKind,
    /// One line naming what failed and why.
    pub message: String,
}

impl Failure {
    /// A failure of this kind.
    pub fn new(kind: impl Into<FailureKind>, message: impl Into<String>) -> Failure {
        Failure { kind: kind.into(), message: message.into() }
    }

    /// A bad argument.
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(ErrorKind::InvalidParams, message)
    }

    /// A file system failure.
    pub fn io(message: impl Into<String>) -> Failure {
        Failure::new(ErrorKind::IoError, message)
    }

    /// Writing the output failed (a closed pipe is not a failure: see [`write_failed`]).
    pub fn output(e: &std::io::Error) -> Failure {
        Failure::io(format!("cannot write the output: {e}"))
    }

    /// The JSON form: `{"error": {"kind", "message"}}`.
    pub fn to_json(&self) -> String {
        let mut inner = Object::new();
        inner.insert("kind", Json::str(self.kind.as_str()));
        inner.insert("message", Json::str(&self.message));
        let mut o = Object::new();
        o.insert("error", Json::Object(inner));
        Json::Object(o).to_canonical_string()
    }

    /// Reports the failure (stdout as JSON with `json`, else one line on stderr) and returns [`EXIT_ERROR`].
    pub fn report(&self, json: bool) -> u8 {
        if json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", self.to_json());
            let _ = out.flush();
        } else {
            eprintln!("pi-sessiond: {}", self.message);
        }
        EXIT_ERROR
    }
}

impl Failure {
    /// The failure an engine error means to the user.
    pub fn from_session_ref(e: &crate::session::Error) -> Failure {
        use crate::session::Error as E;
        let message = match e {
            E::Io { path, source, .. } => format!("{path}: {}", describe_io(source)),
            E::InvalidSessionFile { path } => format!("{e} ({})", why_not_a_session(path)),
            _ => e.to_string(),
        };
        Failure::new(e.kind(), message)
    }
}

/// Why pi does not take the file at `path` for a session, from its first line: what a person fixing it needs
/// (the engine's error is pi's, which names the file only).
fn why_not_a_session(path: &str) -> String {
    use std::io::Read;
    let mut head = Vec::new();
    // Opened as the engine opens a session (a named pipe swapped in meanwhile must not block the message).
    let file = match crate::session::store::open_regular(path) {
        Ok(file) => file,
        Err(e) => return e.to_string(),
    };
    if let Err(e) = file.take(64 << 10).read_to_end(&mut head) {
        return describe_io(&e);
    }
    let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
    if head.is_empty() {
        return "it is empty".into();
    }
    // (A first line longer than what was read may end inside a character: that alone is not binary.)
    let cut = first.len() == head.len() && head.len() == 64 << 10;
    if first.contains(&0) || (std::str::from_utf8(first).is_err() && !cut) {
        return "it is not text".into();
    }
    match serde_json::from_slice::<serde_json::Value>(first) {
        Err(_) if first.iter().all(u8::is_ascii_whitespace) => "its first line is empty, not a session header".into(),
        Err(_) => "its first line is not JSON".into(),
        Ok(serde_json::Value::Object(o)) => match (o.get("type").and_then(|t| t.as_str()), o.get("id")) {
            (Some("session"), Some(serde_json::Value::String(_))) => "its session header is not one pi reads".into(),
            (Some("session"), _) => "its session header has no string id".into(),
            (Some(kind), _) => format!("its first line is a {kind:?} entry, not a session header"),
            (None, _) => "its first line is an object without a type, not a session header".into(),
        },
        Ok(_) => "its first line is JSON but not an object, not a session header".into(),
    }
}

impl From<crate::session::Error> for Failure {
    fn from(e: crate::session::Error) -> Failure {
        Failure::from_session_ref(&e)
    }
}

/// An I/O error as a person reads it: "no such file or directory", not "No such file or directory (os error 2)".
pub fn describe_io(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text.to_owned(),
    }
}

/// Maps an output error: a reader that went away (`| head`) ends the command normally; anything else fails.
pub fn write_failed(e: std::io::Error) -> Result<u8, Failure> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(EXIT_OK)
    } else {
        Err(Failure::output(&e))
    }
}

/// `text` from a session (a preview, a title, a body, a snippet) as it may be shown on a terminal: every control
/// character but a newline and a tab is replaced by its visible picture (`␛` for ESC, `␇` for BEL, `␡` for DEL,
/// `�` for a C1 control), so a tool's output cannot clear the screen, retitle the window, write the clipboard
/// (OSC 52) or move the cursor when `tree`, `show`, `ls` or `search` prints it. The bidirectional embeddings,
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069) are shown by code point (`<U+202E>`): one left open
/// reorders the rest of the line on a terminal that does bidi, so a name or a command would read as another
/// (Trojan Source, CVE-2021-42574); the marks (U+200E, U+200F, U+061C) reorder nothing and stay. A `\r` before a `\n` is dropped
/// (text from Windows tools). Written here rather than taken from a crate: the crates that strip ANSI sequences
/// drop what they recognise and pass what they do not, where this must show every byte and pass none.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    safe_for_terminal(text, false)
}

/// A whole human-readable output as [`terminal_safe`] makes session text, except for the colour sequences
/// (`ESC [ digits ; m`) [`Style::paint`] writes: the last guard, at the point of writing, for any session text a
/// command did not pass through [`terminal_safe`] (a colour is then all it can change).
pub fn terminal_safe_output(text: &str) -> std::borrow::Cow<'_, str> {
    safe_for_terminal(text, true)
}

fn safe_for_terminal(text: &str, keep_colours: bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| control_picture(c).is_some() || is_bidi_control(c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if keep_colours && c == '\x1b' {
            if let Some(len) = colour_sequence_len(rest) {
                out.push_str(&rest[..len]);
                rest = &rest[len..];
                continue;
            }
        }
        rest = &rest[c.len_utf8()..];
        match control_picture(c) {
            Some(_) if c == '\r' && rest.starts_with('\n') => {}
            Some(picture) => out.push(picture),
            None if is_bidi_control(c) => out.push_str(&format!("<U+{:04X}>", c as u32)),
            None => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// What a terminal is shown in place of `c` when `c` is a character it would act on: a C0 control's picture
/// (newline and tab excepted), `␡` for DEL, `�` for a C1 control; None for every other character.
pub fn control_picture(c: char) -> Option<char> {
    match c {
        '\n' | '\t' => None,
        c if c < ' ' => char::from_u32(0x2400 + c as u32),
        '\u{7f}' => Some('\u{2421}'),
        '\u{80}'..='\u{9f}' => Some('\u{fffd}'),
        _ => None,
    }
}

/// True for the characters that open or close a bidirectional embedding, override or isolate.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The length of the SGR sequence (`ESC [ [0-9;]* m`) `text` starts with, if it starts with one.
fn colour_sequence_len(text: &str) -> Option<usize> {
    let params = text.strip_prefix("\x1b[")?;
    let digits = params.bytes().take_while(|b| b.is_ascii_digit() || *b == b';').count();
    (params.as_bytes().get(digits) == Some(&b'm')).then_some(2 + digits + 1)
}

/// Writes all of `text` to `out`; a closed pipe is a normal end.
pub fn emit(out: &mut dyn Write, text: &str) -> Result<u8, Failure> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(EXIT_OK),
        Err(e) => write_failed(e),
    }
}

/// Why a command found nothing, when the agent directory it looked in is not there: a mistyped `--agent-dir` (or
/// `PI_CODING_AGENT_DIR`) otherwise reads as an empty one.
pub fn missing_agent_dir(agent_dir: &str) -> Option<String> {
    (!crate::session::paths::as_path(agent_dir).is_dir())
        .then(|| format!("{agent_dir} does not exist (pi's agent directory: --agent-dir or PI_CODING_AGENT_DIR)"))
}

/// For a `--json` answer that found nothing: says on stderr (stdout stays the JSON a script parses) that the agent
/// directory it looked in is not there.
pub fn warn_if_missing_agent_dir(agent_dir: &str) {
    if let Some(missing) = missing_agent_dir(agent_dir) {
        tracing::warn!("{missing}");
    }
}

/// `n` and the noun it counts, in the number that agrees with it: "1 match", "1,701 matches".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n as u64), if n == 1 { one } else { many })
}

/// `n` with thousands separators (`12,345`).
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A byte count for people (`12.3 MB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A table for a terminal: a bold header, the first column left-aligned, the others right-aligned (numbers).
pub fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]], style: &Style) -> String {
    let mut widths = header.map(str::len);
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(visible_len(c));
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (k, (c, w)) in cells.iter().zip(widths).enumerate() {
            let pad = " ".repeat(w.saturating_sub(visible_len(c)));
            if k == 0 {
                l.push_str(&format!("{c}{pad}"));
            } else {
                l.push_str(&format!("  {pad}{c}"));
            }
        }
        l
    };
    let mut t = style.paint("1", &line(header.to_vec()));
    t.push('\n');
    for r in rows {
        t.push_str(&line(r.iter().map(String::as_str).collect()));
        t.push('\n');
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_but_newline_and_tab_is_shown_as_its_picture() {
        assert_eq!(terminal_safe("plain text, unchanged"), std::borrow::Cow::Borrowed("plain text, unchanged"));
        assert_eq!(terminal_safe("a\tb\nc"), "a\tb\nc");
        assert_eq!(terminal_safe("\x00\x07\x08\x1b[2J\x7f"), "␀␇␈␛[2J␡");
        assert_eq!(terminal_safe("csi \u{9b}2J, nel \u{85}"), "csi �2J, nel �");
        assert_eq!(terminal_safe("dos\r\nline\rback"), "dos\nline␍back");
        assert_eq!(terminal_safe("é 日本 \u{a0}"), "é 日本 \u{a0}", "text beyond C1 is left alone");
    }

    #[test]
    fn bidirectional_overrides_and_isolates_are_shown_by_code_point_and_marks_are_left_alone() {
        assert_eq!(terminal_safe("rm -rf \u{202e}txt.exe"), "rm -rf <U+202E>txt.exe");
        assert_eq!(terminal_safe("\u{202a}\u{202c}\u{2066}\u{2069}"), "<U+202A><U+202C><U+2066><U+2069>");
        assert_eq!(terminal_safe("שלום\u{200f} ok\u{200e}"), "שלום\u{200f} ok\u{200e}");
        assert_eq!(terminal_safe_output("\x1b[1mx\x1b[0m \u{2067}y"), "\x1b[1mx\x1b[0m <U+2067>y");
    }

    #[test]
    fn a_whole_output_keeps_its_colours_and_nothing_else_that_a_terminal_acts_on() {
        assert_eq!(terminal_safe_output("\x1b[1;32mleaf\x1b[0m"), "\x1b[1;32mleaf\x1b[0m");
        assert_eq!(terminal_safe_output("\x1b]0;title\x07 \x1b[2J \x1b[m"), "␛]0;title␇ ␛[2J \x1b[m");
        assert_eq!(terminal_safe_output("cut \x1b["), "cut ␛[");
        assert_eq!(terminal_safe("\x1b[1;32mleaf"), "␛[1;32mleaf", "session text keeps no colour of its own");
    }

    #[test]
    fn a_line_longer_than_the_width_is_cut_with_an_ellipsis() {
        assert_eq!(cut_to_width("abcdefgh", 5), "abcd…");
        assert_eq!(cut_to_width("abcde", 5), "abcde");
        assert_eq!(cut_to_width("ab", 5), "ab");
    }

    #[test]
    fn wide_characters_count_as_the_two_columns_a_terminal_gives_them() {
        assert_eq!(visible_len("日本語 ok 🎉"), 12);
        assert_eq!(cut_to_width("日本語のテキスト", 7), "日本語…");
        assert_eq!(visible_len(&cut_to_width("日本語のテキスト", 8)), 7, "a wide character never straddles the edge");
        assert_eq!(cut_start_to_width("/work/日本/app", 7), "…本/app");
        assert_eq!(cut_start_to_width("/work/日本/app", 6), "…/app", "a wide character never straddles the edge");
        assert_eq!(cut_start_to_width("/work/app", 9), "/work/app");
    }

    #[test]
    fn colour_sequences_do_not_count_towards_the_width_and_a_cut_line_is_reset() {
        let line = "\x1b[32mabcdefgh\x1b[0m";
        assert_eq!(cut_to_width(line, 5), "\x1b[32mabcd…\x1b[0m");
        assert_eq!(cut_to_width("\x1b[32mabc\x1b[0m", 5), "\x1b[32mabc\x1b[0m");
    }

    #[test]
    fn counts_are_written_with_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(12_345_678), "12.3 MB");
    }

    #[test]
    fn an_io_error_reads_as_a_sentence_without_the_os_code() {
        let e = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(describe_io(&std::io::Error::from_raw_os_error(2)), "no such file or directory");
        assert!(!describe_io(&e).is_empty());
    }
}
