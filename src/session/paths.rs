//! Paths as pi computes them: Node's POSIX `path.resolve`/`join`/`normalize`, pi's `~` and `file://` handling,
//! and the default session directory for a working directory.
//!
//! Session paths are part of what pi reports (`SessionInfo.path`, `parentSession`, the default directory name),
//! so they must be the same strings, not merely the same files. Node's path functions are purely lexical (they
//! never follow symlinks), and so are these.

use std::path::Path;

/// The directory pi keeps its state in: `$PI_CODING_AGENT_DIR` (with `~` and `file://` expanded, not resolved)
/// or `~/.pi/agent`.
pub fn agent_dir() -> String {
    match std::env::var("PI_CODING_AGENT_DIR") {
        Ok(dir) if !dir.is_empty() => normalize_path(&dir),
        _ => join(&[&home_dir(), ".pi", "agent"]),
    }
}

/// The session directory pi uses for `cwd`: `<agentDir>/sessions/--<encoded cwd>--`. Pure: creates nothing
/// (pi's exported `getDefaultSessionDir` also creates it; see `catalog::default_session_dir`).
pub fn default_session_dir_path(cwd: &str, agent_dir: &str) -> String {
    let resolved_cwd = resolve_path(cwd);
    join(&[&resolve_path(agent_dir), "sessions", &encode_cwd(&resolved_cwd)])
}

/// pi's directory-name encoding of an absolute cwd: drop one leading separator, turn `/`, `\` and `:` into `-`,
/// wrap in `--`. Not injective: `/a-b` and `/a/b` share `--a-b--`.
pub fn encode_cwd(resolved_cwd: &str) -> String {
    let trimmed = resolved_cwd.strip_prefix(['/', '\\']).unwrap_or(resolved_cwd);
    let body: String = trimmed.chars().map(|c| if matches!(c, '/' | '\\' | ':') { '-' } else { c }).collect();
    format!("--{body}--")
}

/// `os.homedir()`: `$HOME`, else the password database's entry (here: `/`).
pub fn home_dir() -> String {
    match std::env::var("HOME") {
        Ok(h) if !h.is_empty() => h,
        _ => "/".to_owned(),
    }
}

/// `process.cwd()`.
pub fn process_cwd() -> String {
    std::env::current_dir().map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|_| "/".to_owned())
}

/// pi's `normalizePath`: `~` and `~/…` expand to the home directory, `file://` URLs become paths; nothing else
/// changes (no resolving).
pub fn normalize_path(input: &str) -> String {
    let home = home_dir();
    if input == "~" {
        return home;
    }
    if let Some(rest) = input.strip_prefix("~/") {
        return join(&[&home, rest]);
    }
    if input.starts_with("file://") {
        return file_url_to_path(input);
    }
    input.to_owned()
}

/// pi's `resolvePath`: [`normalize_path`], then Node's `path.resolve` against the process's cwd.
pub fn resolve_path(input: &str) -> String {
    let normalized = normalize_path(input);
    if normalized.starts_with('/') {
        resolve(&[&normalized])
    } else {
        resolve(&[&normalize_path(&process_cwd()), &normalized])
    }
}

/// Node's `path.posix.resolve(...segments)`.
pub fn resolve(segments: &[&str]) -> String {
    let mut resolved = String::new();
    let mut absolute = false;
    let cwd;
    let mut all: Vec<&str> = segments.to_vec();
    if !segments.iter().any(|s| s.starts_with('/')) {
        cwd = process_cwd();
        all.insert(0, &cwd);
    }
    for seg in all.iter().rev() {
        if seg.is_empty() {
            continue;
        }
        resolved = format!("{seg}/{resolved}");
        if seg.starts_with('/') {
            absolute = true;
            break;
        }
    }
    let normalized = normalize_string(&resolved, !absolute);
    if absolute {
        format!("/{normalized}")
    } else if normalized.is_empty() {
        ".".to_owned()
    } else {
        normalized
    }
}

/// Node's `path.posix.join(...segments)`.
pub fn join(segments: &[&str]) -> String {
    let joined: Vec<&str> = segments.iter().copied().filter(|s| !s.is_empty()).collect();
    if joined.is_empty() {
        return ".".to_owned();
    }
    let path = joined.join("/");
    // Joining a directory and a file name (thousands per listing) is usually already normal.
    if is_normal(&path) {
        path
    } else {
        normalize(&path)
    }
}

/// True when `normalize(p)` would return `p` unchanged: no empty, `.` or `..` segment, no trailing slash.
fn is_normal(p: &str) -> bool {
    if p.is_empty() || p == "/" {
        return !p.is_empty();
    }
    let body = p.strip_prefix('/').unwrap_or(p);
    !body.ends_with('/') && body.split('/').all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// Node's `path.posix.normalize(path)`.
pub fn normalize(path: &str) -> String {
    if path.is_empty() {
        return ".".to_owned();
    }
    let absolute = path.starts_with('/');
    let trailing = path.ends_with('/');
    let mut p = normalize_string(path, !absolute);
    if p.is_empty() {
        if absolute {
            return "/".to_owned();
        }
        return if trailing { "./".to_owned() } else { ".".to_owned() };
    }
    if trailing {
        p.push('/');
    }
    if absolute {
        format!("/{p}")
    } else {
        p
    }
}

/// Node's `path.posix.dirname`-free parent: `path.resolve(p, "..")`.
pub fn parent_dir(p: &str) -> String {
    resolve(&[p, ".."])
}

/// Node's `path.basename(p)` (no extension argument).
pub fn basename(p: &str) -> &str {
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        return "";
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed)
}

/// True when two resolved paths name the same location for pi (`pathsEqual` on POSIX: resolved strings equal).
pub fn paths_equal(a: &str, b: &str) -> bool {
    resolve(&[a]) == resolve(&[b])
}

/// A `Path` for a pi path string.
pub fn as_path(p: &str) -> &Path {
    Path::new(p)
}

/// Node's `normalizeString` with `/` as the only separator (a line-for-line port, since its handling of `..`
/// at the top of relative paths is what `resolve` and `normalize` return).
fn normalize_string(path: &str, allow_above_root: bool) -> String {
    let bytes = path.as_bytes();
    let mut res = String::new();
    let mut last_segment_length: usize = 0;
    let mut last_slash: isize = -1;
    let mut dots: i32 = 0;
    let mut code = 0u8;
    let mut i: isize = 0;
    while i <= bytes.len() as isize {
        if (i as usize) < bytes.len() {
            code = bytes[i as usize];
        } else if code == b'/' {
            break;
        } else {
            code = b'/';
        }
        if code == b'/' {
            if last_slash == i - 1 || dots == 1 {
                // Nothing: an empty segment or ".".
            } else if dots == 2 {
                if res.len() < 2 || last_segment_length != 2 || !res.ends_with("..") {
                    if res.len() > 2 {
                        match res.rfind('/') {
                            None => {
                                res.clear();
                                last_segment_length = 0;
                            }
                            Some(idx) => {
                                res.truncate(idx);
                                last_segment_length = match res.rfind('/') {
                                    Some(j) => res.len() - 1 - j,
                                    None => res.len(),
                                };
                            }
                        }
                        last_slash = i;
                        dots = 0;
                        i += 1;
                        continue;
                    } else if !res.is_empty() {
                        res.clear();
                        last_segment_length = 0;
                        last_slash = i;
                        dots = 0;
                        i += 1;
                        continue;
                    }
                }
                if allow_above_root {
                    res.push_str(if res.is_empty() { ".." } else { "/.." });
                    last_segment_length = 2;
                }
            } else {
                let segment = &path[(last_slash + 1) as usize..i as usize];
                if !res.is_empty() {
                    res.push('/');
                }
                res.push_str(segment);
                last_segment_length = (i - last_slash - 1) as usize;
            }
            last_slash = i;
            dots = 0;
        } else if code == b'.' && dots != -1 {
            dots += 1;
        } else {
            dots = -1;
        }
        i += 1;
    }
    res
}

/// Node's `fileURLToPath` for POSIX `file://` URLs: percent-decoded path; a host other than `localhost` is not a
/// local file (Node throws; we keep the URL's path part).
fn file_url_to_path(url: &str) -> String {
    let rest = &url["file://".len()..];
    let path = match rest.find('/') {
        Some(i) => &rest[i..],
        None => "/",
    };
    percent_decode(path.split(['?', '#']).next().unwrap_or(path))
}

/// `%XX` escapes decoded (invalid ones kept as they are; bytes that are not UTF-8 become U+FFFD).
pub fn percent_decode(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_cwd_matches_pi_examples() {
        assert_eq!(encode_cwd("/home/u/proj"), "--home-u-proj--");
        assert_eq!(encode_cwd("/"), "----");
        assert_eq!(encode_cwd("/tmp/a:b\\c"), "--tmp-a-b-c--");
    }

    #[test]
    fn resolve_collapses_dots_and_trailing_slashes() {
        assert_eq!(resolve(&["/a/b/../c"]), "/a/c");
        assert_eq!(resolve(&["/trailing/"]), "/trailing");
        assert_eq!(resolve(&["/a", "b", "..", "c/"]), "/a/c");
        assert_eq!(resolve(&["/a/b", "/x"]), "/x");
        assert_eq!(resolve(&["/.."]), "/");
    }

    #[test]
    fn the_join_fast_path_only_skips_paths_normalize_would_keep() {
        for p in [
            "/",
            "/a",
            "/a/b.jsonl",
            "a",
            "a/b",
            ".",
            "..",
            "/a/",
            "//a",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "a/.",
            "...",
            "/.a/b..",
        ] {
            if is_normal(p) {
                assert_eq!(normalize(p), p, "{p}");
            }
        }
        assert!(is_normal("/home/u/.pi/agent/sessions/--x--/2026_a.jsonl"));
        assert!(!is_normal("/a/../b"));
    }

    #[test]
    fn normalize_and_join_keep_nodes_edge_cases() {
        assert_eq!(normalize(""), ".");
        assert_eq!(normalize("a/"), "a/");
        assert_eq!(normalize("../../a"), "../../a");
        assert_eq!(normalize("a/../.."), "..");
        assert_eq!(normalize("//a//b/"), "/a/b/");
        assert_eq!(join(&["a", "", "b"]), "a/b");
        assert_eq!(join(&["", ""]), ".");
        assert_eq!(join(&["/x/", "../y"]), "/y");
        assert_eq!(normalize("/aa/bb/../cc"), "/aa/cc");
        assert_eq!(normalize("aa/bb/../../.."), "..");
    }

    #[test]
    fn file_urls_become_paths() {
        assert_eq!(normalize_path("file:///a/b%20c"), "/a/b c");
    }
}
