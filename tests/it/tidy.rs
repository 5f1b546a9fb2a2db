//! The house rules of ARCHITECTURE.md, checked on the source itself (as rust-analyzer's `tidy` does): every file
//! says what it is, the engine knows nothing of the sidecar or the catalog, only the named rooms touch the file
//! system or the standard streams, modules import each other without cycles, no test is switched off, and
//! jsonrpsee brings in only its `types` (the envelopes), not a server or macros nothing here uses.
//!
//! The source is read with comments and string literals blanked out, so a doc comment naming `crate::rpc` or a
//! message mentioning `std::fs` is not an import. Each rule's checker is also run on a small made-up source that
//! breaks it, so a checker that can no longer see anything fails here too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where each kind of input and output may happen, and why there.
const IO_ROOMS: &[(&str, &str)] = &[
    ("session/store", "session files: open, read, append, rewrite, fsync"),
    ("session/identity.rs", "a file's stamp and known bytes: same, grew or rewritten (engine, catalog, push)"),
    ("session/dirscan.rs", "session directories: default directory, scans, findMostRecentSession"),
    ("session/kept.rs", "kept skeletons: what an open read, in pi-sessiond's own files beside the index"),
    ("catalog/listing.rs", "walking the agent directory for listAll"),
    ("catalog/index", "the catalog index database and the files it reads from where it stopped"),
    ("catalog/quiet.rs", "whether listed directories changed: their notifications, and the kinds of their names"),
    ("rpc/transport.rs", "stdin and stdout of the sidecar"),
    ("rpc/log.rs", "the sidecar's stderr"),
    ("watch.rs", "file-system notifications"),
    ("cli", "the command-line tools: their output, and files they are asked to write"),
    ("web", "the web view's server and the files it exports"),
    ("team", "pushing session files to the team catalog"),
    ("main.rs", "the process: arguments, exit status"),
];

/// What counts as touching the file system or the standard streams.
const IO_PATTERNS: &[&str] = &[
    r"\bstd::fs\b",
    r"(^|[^\w:])fs::",
    r"\bFile::",
    r"\bOpenOptions\b",
    r"\brustix::fs\b",
    r"\bread_dir\b",
    r"\.exists\(\)",
    r"\bcreate_dir",
    r"\b(stdin|stdout|stderr)\(\)",
    r"\be?print(ln)?!",
    r"\bnotify::",
];

/// What the engine (`src/session`) must not import, and what the catalog (`src/catalog`) must not.
const ENGINE_MUST_NOT_IMPORT: &[&str] =
    &["crate::rpc", "crate::catalog", "crate::cli", "tokio", "jsonrpsee", "rusqlite", "notify"];
const CATALOG_MUST_NOT_IMPORT: &[&str] = &["crate::rpc", "crate::cli", "tokio", "jsonrpsee"];

struct SourceFile {
    /// Path below `src/`, with `/`.
    rel: String,
    text: String,
    /// `text` with comments and string literals blanked (same length, newlines kept).
    code: String,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources(dir: &str) -> Vec<SourceFile> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let rel = p.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            SourceFile { code: blank_comments_and_strings(&text), rel, text }
        })
        .collect()
}

/// Blanks comments and string literals (raw strings too) with spaces, keeping newlines and byte positions.
fn blank_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let end = find(&b[i + 2..], b"*/").map_or(b.len(), |n| i + 2 + n + 2);
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'r' && (i == 0 || !is_ident(b[i - 1])) && matches!(b.get(i + 1), Some(b'"' | b'#')) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let start = i + 2 + hashes;
            let end = find(&b[start..], &close).map_or(b.len(), |n| start + n + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') && b[i + 1] == b'"' {
            // The character literal '"' would otherwise open a string.
            i += 3;
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8: only ASCII is written over whole characters")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn memchr(c: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&x| x == c)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The code before the file's unit-test module (a test module may import what the module itself must not).
fn non_test_code(code: &str) -> &str {
    match code.find("#[cfg(test)]\nmod tests") {
        Some(i) => &code[..i],
        None => code,
    }
}

/// The module path of a file below `src/` (`session/manager/write.rs` → `session::manager::write`).
fn module_of(rel: &str) -> String {
    let rel = rel.trim_end_matches(".rs");
    let mut parts: Vec<&str> = rel.split('/').collect();
    if matches!(parts.last(), Some(&"mod") | Some(&"lib")) {
        parts.pop();
    }
    parts.join("::")
}

/// Every path starting `crate::`, `super::` or `self::` in `code`, use-trees expanded
/// (`crate::a::{b, c::d}` gives `crate::a::b` and `crate::a::c::d`).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let tokens = tokenize(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts = matches!(tokens[i].as_str(), "crate" | "super" | "self")
            && (i == 0 || tokens[i - 1] != "::")
            && tokens.get(i + 1).is_some_and(|t| t == "::");
        if starts {
            i = use_tree(&tokens, i, Vec::new(), &mut out);
        } else {
            i += 1;
        }
    }
    out
}

fn tokenize(code: &str) -> Vec<String> {
    let b = code.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if is_ident(b[i]) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            tokens.push(code[start..i].to_owned());
        } else if b[i..].starts_with(b"::") {
            tokens.push("::".to_owned());
            i += 2;
        } else if b[i].is_ascii_whitespace() {
            i += 1;
        } else {
            tokens.push((b[i] as char).to_string());
            i += 1;
        }
    }
    tokens
}

/// Reads one use-tree (or expression path) from `tokens[i]`, with `prefix` before it; returns where it ends.
fn use_tree(tokens: &[String], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => {
                i += 1;
                loop {
                    match tokens.get(i).map(String::as_str) {
                        Some("}") => return i + 1,
                        Some(",") => i += 1,
                        Some(_) => i = use_tree(tokens, i, prefix.clone(), out),
                        None => return i,
                    }
                }
            }
            Some(t) if t.bytes().all(is_ident) => {
                prefix.push(t.to_owned());
                i += 1;
                if tokens.get(i).is_some_and(|t| t == "::") {
                    i += 1;
                    continue;
                }
                out.push(prefix);
                return i;
            }
            _ => {
                out.push(prefix);
                return i;
            }
        }
    }
}

/// The module a path in `module` refers to: the longest module named by a prefix of it.
fn resolve(module: &str, path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let segments = from_root(module, path)?;
    (0..=segments.len()).map(|n| segments[..n].join("::")).rfind(|name| modules.contains(name))
}

/// `path` (starting `crate`, `super` or `self`, written in `module`) as segments from the crate root.
fn from_root(module: &str, path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> =
        if module.is_empty() { Vec::new() } else { module.split("::").map(str::to_owned).collect() };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module graph: which modules each module's (non-test) code refers to. A module referring to its own
/// ancestor or descendant is left out (children use their parent's items; a parent declares its children).
fn import_graph(files: &[SourceFile]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&f.rel)).collect();
    let related = |a: &str, b: &str| {
        a == b || a.is_empty() || b.is_empty() || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
    };
    let mut graph = BTreeMap::new();
    for f in files {
        let module = module_of(&f.rel);
        let targets: BTreeSet<String> = crate_paths(non_test_code(&f.code))
            .iter()
            .filter_map(|p| resolve(&module, p, &modules))
            .filter(|t| !related(&module, t))
            .collect();
        graph.insert(module, targets);
    }
    graph
}

/// The strongly connected components of more than one module (Tarjan), each sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.found
}

/// Lines of `code` matching any of `patterns`, as `file:line: text`.
fn matching_lines(file: &SourceFile, patterns: &[regex::Regex]) -> Vec<String> {
    let code = non_test_code(&file.code);
    code.lines()
        .zip(file.text.lines())
        .enumerate()
        .filter(|(_, (code, _))| patterns.iter().any(|p| p.is_match(code)))
        .map(|(n, (_, text))| format!("src/{}:{}: {}", file.rel, n + 1, text.trim()))
        .collect()
}

fn io_patterns() -> Vec<regex::Regex> {
    IO_PATTERNS.iter().map(|p| regex::Regex::new(p).unwrap()).collect()
}

fn in_io_room(rel: &str) -> bool {
    IO_ROOMS.iter().any(|(room, _)| rel == *room || rel.starts_with(&format!("{room}/")) || rel == format!("{room}.rs"))
}

fn made_up(rel: &str, text: &str) -> SourceFile {
    SourceFile { rel: rel.to_owned(), text: text.to_owned(), code: blank_comments_and_strings(text) }
}

/// Imports of `forbidden` roots in the non-test code of the files under `dir/`.
fn forbidden_imports(files: &[SourceFile], dir: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for f in files.iter().filter(|f| f.rel.starts_with(&format!("{dir}/"))) {
        let module = module_of(&f.rel);
        for path in crate_paths(non_test_code(&f.code)) {
            let Some(segments) = from_root(&module, &path) else { continue };
            let absolute = format!("crate::{}", segments.join("::"));
            if let Some(root) =
                forbidden.iter().find(|root| absolute == **root || absolute.starts_with(&format!("{root}::")))
            {
                found.push(format!("src/{}: {} ({root})", f.rel, path.join("::")));
            }
        }
        for line in non_test_code(&f.code).lines() {
            let line = line.trim_start();
            let external = line.strip_prefix("use ").or_else(|| line.strip_prefix("pub use "));
            if let Some(used) = external {
                if let Some(root) =
                    forbidden.iter().find(|root| !root.contains("::") && used.starts_with(&format!("{root}::")))
                {
                    found.push(format!("src/{}: use {} ({root})", f.rel, used.trim_end_matches(';')));
                }
            }
        }
        for root in forbidden.iter().filter(|r| !r.contains("::")) {
            let qualified = regex::Regex::new(&format!(r"(^|[^\w:]){root}::")).unwrap();
            for (n, line) in non_test_code(&f.code).lines().enumerate() {
                if qualified.is_match(line) && !line.trim_start().starts_with("use ") {
                    found.push(format!("src/{}:{}: {root}::…", f.rel, n + 1));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_source_file_starts_with_a_module_doc_saying_what_it_is() {
    let missing: Vec<String> = sources("src")
        .iter()
        .filter(|f| !f.text.trim_start().starts_with("//!"))
        .map(|f| format!("src/{}", f.rel))
        .collect();
    assert!(missing.is_empty(), "files without a `//!` module doc: {missing:#?}");
}

#[test]
fn the_engine_imports_nothing_of_the_sidecar_the_catalog_or_async_and_database_crates() {
    let found = forbidden_imports(&sources("src"), "session", ENGINE_MUST_NOT_IMPORT);
    assert!(found.is_empty(), "src/session must stay the engine: {found:#?}");
}

#[test]
fn the_catalog_imports_nothing_of_the_sidecar_or_async_crates() {
    let found = forbidden_imports(&sources("src"), "catalog", CATALOG_MUST_NOT_IMPORT);
    assert!(found.is_empty(), "src/catalog must not know the sidecar: {found:#?}");
}

#[test]
fn the_import_checks_see_an_engine_file_importing_the_sidecar_and_tokio() {
    let files = [
        made_up("session/leak.rs", "//! x\nuse crate::rpc::proto::State;\nfn f() { tokio::spawn(async {}); }\n"),
        made_up("session/grouped.rs", "//! x\nuse super::super::{catalog::Cancel, session::json};\n"),
        made_up("session/quiet.rs", "//! Mentions crate::rpc in a doc.\nconst S: &str = \"tokio::spawn\";\n"),
    ];
    let found = forbidden_imports(&files, "session", ENGINE_MUST_NOT_IMPORT);
    let files_found: BTreeSet<&str> = found.iter().map(|f| f.split(':').next().unwrap()).collect();
    assert_eq!(
        files_found,
        BTreeSet::from(["src/session/grouped.rs", "src/session/leak.rs"]),
        "the checker must catch both real imports and nothing in comments or strings: {found:#?}"
    );
}

#[test]
fn only_the_named_rooms_touch_the_file_system_or_the_standard_streams() {
    let patterns = io_patterns();
    let found: Vec<String> =
        sources("src").iter().filter(|f| !in_io_room(&f.rel)).flat_map(|f| matching_lines(f, &patterns)).collect();
    assert!(
        found.is_empty(),
        "input or output outside the rooms ARCHITECTURE.md names (move it there, or name the room): {found:#?}"
    );
}

#[test]
fn the_io_check_sees_file_system_calls_but_not_names_that_merely_contain_them() {
    let patterns = io_patterns();
    let leaky = made_up("session/tree.rs", "//! x\nfn f() { let _ = std::fs::read(\"a\"); println!(\"b\"); }\n");
    let clean = made_up(
        "session/context.rs",
        "//! Not std::fs.\nfn f(s: SessionFile) { SessionFile::open(\"std::fs\"); let fs_like = 1; }\n",
    );
    assert_eq!(matching_lines(&leaky, &patterns).len(), 1, "one line, two calls");
    assert_eq!(matching_lines(&clean, &patterns), Vec::<String>::new());
    assert!(!in_io_room("session/tree.rs") && in_io_room("session/store.rs") && in_io_room("cli/tree.rs"));
}

#[test]
fn no_modules_import_each_other_in_a_cycle() {
    let graph = import_graph(&sources("src"));
    let found = cycles(&graph);
    assert!(found.is_empty(), "import cycles (each line one strongly connected set of modules): {found:#?}");
    assert!(
        graph.get("session::manager").is_some_and(|t| t.contains("session::store")),
        "the graph must see the engine's own imports, or the cycle check sees nothing: {graph:#?}"
    );
}

/// The import graph between rooms (the top-level modules: `session`, `catalog`, `rpc`, `team`, `watch`, …): a
/// file in one room importing another room is an edge between the rooms.
fn room_graph(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let room = |m: &str| m.split("::").next().unwrap_or_default().to_owned();
    let mut rooms: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in graph {
        let from = room(from);
        let edges = rooms.entry(from.clone()).or_default();
        edges.extend(targets.iter().map(|t| room(t)).filter(|t| *t != from && !t.is_empty()));
    }
    rooms.remove("");
    rooms
}

#[test]
fn no_rooms_import_each_other_even_through_files_that_do_not_cycle() {
    let found = cycles(&room_graph(&import_graph(&sources("src"))));
    assert!(found.is_empty(), "rooms that import each other (each line one strongly connected set): {found:#?}");
}

#[test]
fn the_room_check_sees_two_rooms_leaning_on_each_other_through_different_files() {
    let files = vec![
        made_up("rpc/server.rs", "//! s\nuse crate::watch::FsWatcher;\n"),
        made_up("rpc/team.rs", "//! t\nuse crate::team::TeamCatalog;\n"),
        made_up("team/push.rs", "//! p\nfn f() { crate::rpc::server::run(); }\n"),
        made_up("team/mod.rs", "//! m\npub struct TeamCatalog;\n"),
        made_up("watch.rs", "//! w\npub struct FsWatcher;\n"),
    ];
    let graph = import_graph(&files);
    assert!(cycles(&graph).is_empty(), "no file-level cycle here: {graph:#?}");
    assert_eq!(cycles(&room_graph(&graph)), vec![vec!["rpc".to_owned(), "team".to_owned()]]);
}

#[test]
fn the_cycle_check_finds_a_cycle_through_use_trees_and_expression_paths() {
    let files = [
        made_up("a/mod.rs", "//! a\npub mod one;\npub mod two;\n"),
        made_up("a/one.rs", "//! one\nuse super::{two::Thing, three};\n"),
        made_up("a/two.rs", "//! two\npub fn f() { crate::a::three::g(); }\n"),
        made_up("a/three.rs", "//! three\npub fn g() { super::one::h(); }\n"),
        made_up("b.rs", "//! b, imported by nobody\nuse crate::a::one;\n"),
    ];
    let found = cycles(&import_graph(&files));
    assert_eq!(found, vec![vec!["a::one".to_owned(), "a::three".to_owned(), "a::two".to_owned()]]);
}

/// The only reasons a test may be ignored: it needs a service that `tests/run-all` provides and runs them with
/// (`cargo test --test it -- --ignored`), so `cargo test` elsewhere lists them as ignored instead of passing them.
const IGNORED_BECAUSE: &[&str] = &["#[ignore = \"needs PostgreSQL\"]", "#[ignore = \"needs PostgreSQL and root\"]"];

#[test]
fn no_test_is_switched_off_or_passes_by_panicking() {
    let mut found = Vec::new();
    for dir in ["src", "tests"] {
        for f in sources(dir) {
            for (n, (line, text)) in f.code.lines().zip(f.text.lines()).enumerate() {
                let allowed = IGNORED_BECAUSE.contains(&text.trim());
                if (line.contains("#[ignore") && !allowed) || line.contains("#[should_panic") {
                    found.push(format!("{dir}/{}:{}", f.rel, n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "tests must run and fail by their assertions: {found:#?}");
}

#[test]
fn a_test_needing_postgresql_says_so_and_only_such_a_test_is_ignored() {
    let mut wrong = Vec::new();
    for f in sources("tests") {
        // Where the code (comments and strings blanked, every byte in its place) has a test, the text says why
        // it is ignored, if it is.
        for (at, _) in f.code.match_indices("#[test]\n") {
            let from = at + "#[test]\n".len();
            let ignored = IGNORED_BECAUSE.iter().any(|a| f.text[from..].starts_with(a));
            let body = f.code[from..].split("\n}\n").next().unwrap_or_default();
            let needs = body.contains("pg_server::");
            if ignored != needs {
                let name = body.lines().find(|l| l.starts_with("fn ")).unwrap_or_default();
                wrong.push(format!("tests/{}: {name} (uses PostgreSQL: {needs}, ignored: {ignored})", f.rel));
            }
        }
    }
    assert!(wrong.is_empty(), "a PostgreSQL test is ignored with its reason, and nothing else is: {wrong:#?}");
}

/// What jsonrpsee may bring in: its types (request, response, notification, error object, id), which the
/// envelopes use. Its server core, proc macros and their own dependencies (tower, tokio, rand, tracing…) are
/// features nothing here uses.
const JSONRPSEE_MAY_PULL: &[&str] = &["jsonrpsee-types"];

/// The dependencies `Cargo.lock` records for the `jsonrpsee` package (cargo writes only those its enabled
/// features need), or None when the lock has no such package.
fn jsonrpsee_dependencies(lock: &str) -> Option<Vec<String>> {
    let package = lock.split("[[package]]").find(|p| p.lines().any(|l| l.trim() == "name = \"jsonrpsee\""))?;
    let Some(list) = package.split("dependencies = [").nth(1) else { return Some(Vec::new()) };
    let list = list.split(']').next().unwrap_or_default();
    // Each entry is `"name"` or, when two versions are locked, `"name version"`.
    Some(
        list.split(',')
            .filter_map(|e| e.trim().trim_matches('"').split(' ').next())
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect(),
    )
}

/// What jsonrpsee pulls in beyond [`JSONRPSEE_MAY_PULL`].
fn jsonrpsee_pulls_unused(lock: &str) -> Vec<String> {
    let deps = jsonrpsee_dependencies(lock).expect("jsonrpsee is in the lock");
    deps.into_iter().filter(|d| !JSONRPSEE_MAY_PULL.contains(&d.as_str())).collect()
}

#[test]
fn jsonrpsee_brings_in_only_the_types_the_envelopes_use() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).expect("Cargo.lock");
    let unused = jsonrpsee_pulls_unused(&lock);
    assert!(
        unused.is_empty(),
        "jsonrpsee features nothing uses pull in {unused:?}: keep features = [\"jsonrpsee-types\"]"
    );
    let users: Vec<String> =
        sources("src").into_iter().filter(|f| f.code.contains("jsonrpsee::types")).map(|f| f.rel).collect();
    assert!(!users.is_empty(), "nothing uses jsonrpsee's types any more: drop the dependency");
}

#[test]
fn the_jsonrpsee_check_sees_a_server_core_and_macros_pulled_in() {
    // The lock as `features = ["server-core", "macros"]` wrote it for jsonrpsee 0.26.
    let lock = "[[package]]\nname = \"jsonrpsee\"\nversion = \"0.26.1\"\ndependencies = [\n \"jsonrpsee-core\",\n \
                \"jsonrpsee-proc-macros\",\n \"jsonrpsee-types\",\n \"tracing 0.1.41\",\n]\n\n[[package]]\n\
                name = \"jsonrpsee-core\"\nversion = \"0.26.1\"\ndependencies = [\n \"jsonrpsee-types\",\n]\n";
    assert_eq!(jsonrpsee_pulls_unused(lock), ["jsonrpsee-core", "jsonrpsee-proc-macros", "tracing"]);
    let trimmed =
        "[[package]]\nname = \"jsonrpsee\"\nversion = \"0.26.1\"\ndependencies = [\n \"jsonrpsee-types\",\n]\n";
    assert!(jsonrpsee_pulls_unused(trimmed).is_empty());
}
