//! The `pi-sessiond` binary: the JSON-RPC sidecar (the default), and command-line tools over the engine.
//!
//! stdout belongs to the protocol (or to a tool's output); logs and diagnostics go to stderr only. The flags
//! are defined here once, and the shell completions and the man page are generated from the same definitions.

use std::io::IsTerminal;
use std::process::ExitCode;

/// Big blocks in huge pages, small ones the system's (`memory.rs` says why).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: pi_sessiond::memory::HugeBlocks = pi_sessiond::memory::HugeBlocks;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use pi_sessiond::catalog::index::{default_index_path, SharedIndex};
use pi_sessiond::cli::output::{describe_io, ColorChoice, Failure, Screen, Style, EXIT_OK};
use pi_sessiond::cli::{self, resolve};
use pi_sessiond::rpc::framing::Framing;
use pi_sessiond::rpc::Config;
use pi_sessiond::session::context::ContextOptions;
use pi_sessiond::session::paths;
use pi_sessiond::session::store::Durability;

const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), ", following pi 1.6.0 (@earendil-works/pi-coding-agent)");

const EXIT_STATUS: &str = "Exit status: 0 done; 1 `search` found nothing; 2 an error (bad arguments, a missing, \
unreadable or non-session file, a failed write). With --json an error is {\"error\": {\"kind\", \"message\"}} on \
stdout, else one line on stderr.";

#[derive(Parser)]
#[command(
    name = "pi-sessiond",
    version = VERSION,
    about = "Owns pi's session files: a JSON-RPC sidecar, command-line tools and a live web view",
    long_about = "Owns pi's session files: a JSON-RPC sidecar (the default; spawned by hosts, it reads requests on \
stdin and answers on stdout), command-line tools to list, search, draw and inspect sessions, and a live web view. \
Sessions are named by path, full id, unique id prefix, or `latest` (the newest session of the current directory).",
    after_long_help = EXIT_STATUS
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    global: GlobalArgs,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Flags every command takes.
#[derive(clap::Args, Clone)]
struct GlobalArgs {
    /// pi's agent directory (default: $PI_CODING_AGENT_DIR or ~/.pi/agent).
    #[arg(long, global = true, value_name = "DIR")]
    agent_dir: Option<String>,
    /// The catalog index (default: <agentDir>/pi-sessiond/index.sqlite; the command-line tools use it only if it
    /// exists). Rebuildable at any time; the session files stay the source of truth.
    #[arg(long, global = true, value_name = "PATH")]
    index: Option<String>,
    /// Use no catalog index: listings and searches read every file.
    #[arg(long, global = true, conflicts_with = "index")]
    no_index: bool,
    /// The team catalog (a PostgreSQL URL, e.g. postgres://user@host/db): `ls`, `search`, `usage`, `web` and the
    /// server then answer across every machine that pushed to it (`push`). Credentials may also come from PG*
    /// variables.
    #[arg(long, global = true, value_name = "URL")]
    catalog: Option<String>,
    /// Print JSON for scripts (errors too: {"error": {"kind", "message"}} on stdout).
    #[arg(long, global = true)]
    json: bool,
    /// Colour the output: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    /// Never start a pager (by default long output on a terminal goes through $PAGER, or `less -FRX`).
    #[arg(long, global = true)]
    no_pager: bool,
    /// Log level for stderr (overridden by RUST_LOG).
    #[arg(long, global = true, value_enum, default_value_t = LogLevel::Warn)]
    log_level: LogLevel,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// The server's flags, accepted before and after the word `serve`.
#[derive(clap::Args, Clone, Default)]
struct ServeArgs {
    /// Message framing on stdin/stdout [default: auto, detected from the first byte].
    #[arg(long, value_enum)]
    framing: Option<FramingArg>,
    /// The largest frame accepted from the host, in bytes [default: 1073741824].
    #[arg(long, value_name = "BYTES")]
    max_frame_bytes: Option<usize>,
    /// fsync policy for appends: none (like pi), entry (every entry before its response), batch (group commit),
    /// after (answered when written, fsynced right after) [default: entry].
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// How often watched files are checked even without a file-system notification, in milliseconds
    /// [default: 1000].
    #[arg(long, value_name = "MS")]
    poll_ms: Option<u64>,
}

impl ServeArgs {
    /// These flags, with the ones not given here taken from `outer` (the flags before `serve`).
    fn or(self, outer: ServeArgs) -> ServeArgs {
        ServeArgs {
            framing: self.framing.or(outer.framing),
            max_frame_bytes: self.max_frame_bytes.or(outer.max_frame_bytes),
            durability: self.durability.or(outer.durability),
            poll_ms: self.poll_ms.or(outer.poll_ms),
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum FramingArg {
    Auto,
    Jsonl,
    Lsp,
}

#[derive(Clone, Copy, ValueEnum)]
enum DurabilityArg {
    None,
    Entry,
    Batch,
    After,
}

/// `team` subcommands.
#[derive(Subcommand)]
enum TeamCommand {
    /// Delete every machine's sessions whose file last changed longer ago than --older-than, with their entries,
    /// in one transaction.
    Prune {
        /// The database, as for `push`.
        #[arg(long, value_name = "URL")]
        postgres: String,
        /// The age past which a session goes: 90d, 12h, 2w….
        #[arg(long, value_name = "DURATION")]
        older_than: String,
    },
    /// Let a PostgreSQL role read these machines' or projects' sessions (--push: push as these machines);
    /// PostgreSQL's row-level security enforces it. Run as the tables' owner.
    Grant(AccessArgs),
    /// Take back what `team grant` with the same arguments gave.
    Revoke(AccessArgs),
}

impl AccessArgs {
    /// `team grant` (`give`) or `team revoke`; the exit status.
    fn run(&self, give: bool, json: bool) -> u8 {
        let request = pi_sessiond::team::cli::AccessRequest {
            url: &self.postgres,
            role: &self.role,
            machines: &self.machine,
            projects: &self.project,
            push: self.push,
        };
        pi_sessiond::team::cli::access(&request, give, json, &mut std::io::stdout()) as u8
    }
}

/// The arguments of `team grant` and `team revoke`.
#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("scope").required(true).multiple(true).args(["machine", "project"]))]
struct AccessArgs {
    /// The database, as the tables' owner.
    #[arg(long, value_name = "URL")]
    postgres: String,
    /// The PostgreSQL login role (created beforehand with CREATE ROLE … LOGIN).
    #[arg(long)]
    role: String,
    /// A machine, by its name in the database (repeatable).
    #[arg(long, value_name = "NAME")]
    machine: Vec<String>,
    /// Projects whose cwd matches this glob (`*` and `?` within a directory, `**` across; repeatable).
    #[arg(long, value_name = "GLOB")]
    project: Vec<String>,
    /// The right to push as these machines (and nothing else), rather than to read.
    #[arg(long)]
    push: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Serve JSON-RPC on stdin/stdout (the default when no command is given).
    Serve(ServeArgs),
    /// List sessions: this project's (or every one with --all) as a table; --json: pi's list()/listAll().
    Ls {
        /// The working directory whose sessions to list (default: the current directory).
        #[arg(long)]
        cwd: Option<String>,
        /// The session directory (default: pi's directory for the cwd, or all project directories with --all).
        #[arg(long)]
        dir: Option<String>,
        /// List every session (pi's `listAll`).
        #[arg(long)]
        all: bool,
    },
    /// Copy this machine's sessions into a team PostgreSQL database (incremental; safe to kill and rerun).
    Push {
        /// The database, as a URL (postgres://user@host:port/db?sslmode=require) or libpq key=value string;
        /// what it leaves out comes from PGHOST, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE….
        #[arg(long, value_name = "URL")]
        postgres: String,
        /// This machine's name in the database (default: the host name).
        #[arg(long)]
        machine: Option<String>,
        /// Keep running and push every change as it happens.
        #[arg(long)]
        watch: bool,
        /// Push an agent directory that has no `sessions` directory as one without sessions (deleting what the
        /// database holds for this machine); without it such a directory is refused as a likely typo.
        #[arg(long)]
        allow_empty: bool,
        /// With --watch: how often session files are checked even without a file-system notification, in
        /// milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        poll_ms: u64,
        /// Send session text as it is: without this, secrets (keys, tokens, private keys, passwords in URLs,
        /// secret-named env lines) are replaced by `[redacted: RULE]` before they leave the machine.
        #[arg(long)]
        no_redact: bool,
        /// More secret patterns, in gitleaks' TOML rule format ([[rules]] id, regex, keywords, secretGroup,
        /// entropy), used after the built-in ones.
        #[arg(long, value_name = "FILE", conflicts_with = "no_redact")]
        redact_rules: Option<String>,
        /// Push only sessions whose cwd matches this glob (`*` within a directory, `**` across; repeatable).
        /// The database then holds exactly the chosen sessions: rows of others are deleted.
        #[arg(long, value_name = "GLOB")]
        include: Vec<String>,
        /// Do not push sessions whose cwd matches this glob (repeatable; wins over --include).
        #[arg(long, value_name = "GLOB")]
        exclude: Vec<String>,
        /// Push only sessions whose file changed on or after this date (2026-01-31, or an ISO time).
        #[arg(long, value_name = "DATE")]
        since: Option<String>,
        /// Push images as they are: without this each image's data is replaced by a placeholder that keeps its
        /// type, size and SHA-256.
        #[arg(long)]
        keep_images: bool,
        /// Retention: leave out sessions whose file last changed longer ago than --older-than (default 90d),
        /// deleting what the database holds of them, as `team prune` does for every machine.
        #[arg(long)]
        prune: bool,
        /// With --prune: the age past which a session goes (90d, 12h, 2w…).
        #[arg(long, value_name = "DURATION", requires = "prune")]
        older_than: Option<String>,
    },
    /// The team database itself (its rows of every machine).
    Team {
        #[command(subcommand)]
        command: TeamCommand,
    },
    /// Draw a session's tree: branches indented, the leaf and labels marked, entries off the active branch dimmed.
    Tree {
        /// The session: a path, an id, a unique id prefix, or `latest`.
        session: String,
        /// Which entries to show, as pi's /tree filters.
        #[arg(long, value_enum, default_value_t = cli::tree::Filter::Default)]
        filter: cli::tree::Filter,
        /// Fold branches nested deeper than this many levels.
        #[arg(long)]
        depth: Option<usize>,
    },
    /// Show one entry whole (--json: as stored).
    Show {
        /// The session: a path, an id, a unique id prefix, or `latest`.
        session: String,
        /// The entry: its id or a unique prefix of it.
        entry: String,
    },
    /// Search sessions with pi's /resume query language (words, "exact phrases", re:regex), down to the entry.
    Search {
        /// The query.
        #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
        query: String,
        /// Search this project's sessions only (default: every session).
        #[arg(long)]
        cwd: Option<String>,
        /// The session directory (with --cwd: instead of pi's directory for it; without: search only this one).
        #[arg(long)]
        dir: Option<String>,
        /// At most this many results.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
        /// Skip this many of the best results (the next page: --offset 20 after --limit 20).
        #[arg(long, default_value_t = 0)]
        offset: u32,
        /// Only these roles (repeat the flag for several).
        #[arg(long = "role", value_parser = clap::builder::PossibleValuesParser::new(cli::search::ROLES))]
        roles: Vec<String>,
    },
    /// What a session holds: entries by type and role, branches, labels, compactions, tokens and cost by model.
    Stats {
        /// The session: a path, an id, a unique id prefix, or `latest`.
        session: String,
        /// Also report the open time and peak memory (for benchmarks).
        #[arg(long)]
        timing: bool,
        /// Also time buildSessionContext and getTree, rendered to JSON as the sidecar sends them (implies --timing).
        #[arg(long)]
        reads: bool,
    },
    /// Tokens and cost across every session of the agent directory, by day, model or project (as pi sums them);
    /// with --catalog, across every machine's sessions in the team catalog (also by machine).
    Usage {
        /// Only entries dated at or after this (a date as JavaScript reads it: `2026-01-31` is midnight UTC).
        #[arg(long)]
        since: Option<String>,
        /// How to group the sums.
        #[arg(long, value_enum, default_value_t = cli::usage::GroupBy::Day)]
        by: cli::usage::GroupBy,
    },
    /// Print pi's reads of a session as one JSON object (the file is not modified).
    Inspect {
        /// The session: a path, an id, a unique id prefix, or `latest`.
        session: String,
        /// Use a compaction's `retainedTail` as the post-compaction context (the seed's checkpoint) instead of
        /// pi 1.6.0's own context, which ignores the field.
        #[arg(long)]
        retained_tail: bool,
        /// Print `tree` in pi's nested getTree shape (as deep as the longest branch) instead of the flat list.
        #[arg(long)]
        nested: bool,
        /// Print only this member.
        #[arg(long, value_name = "KEY", value_parser = clap::builder::PossibleValuesParser::new(cli::inspect::MEMBERS))]
        only: Option<String>,
    },
    /// Write a session as one self-contained HTML file: the web view, with no network references.
    Export {
        /// The session: a path, an id, a unique id prefix, or `latest`.
        session: String,
        /// HTML, the one format (the default; accepted so that scripts may name it).
        #[arg(long)]
        html: bool,
        /// The file to write (default, or `-`: stdout, which must not be a terminal unless named).
        #[arg(short, long, value_name = "FILE")]
        output: Option<String>,
        /// Export session text as it is: without this, secrets are replaced by `[redacted: RULE]`, as `push`
        /// does, since an exported page is made to be shared.
        #[arg(long)]
        no_redact: bool,
        /// More secret patterns, in gitleaks' TOML rule format, used after the built-in ones.
        #[arg(long, value_name = "FILE", conflicts_with = "no_redact")]
        redact_rules: Option<String>,
    },
    /// Serve a live web view of the sessions on 127.0.0.1; prints its URL (with its access token) first.
    Web {
        /// The port (default: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// Print the protocol description (protocol/methods.json and protocol/schema.json), or write it to a directory.
    Protocol {
        /// Write methods.json and schema.json into this directory instead of printing.
        #[arg(long, value_name = "DIR")]
        write: Option<String>,
    },
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// Installs logging: stdout carries the protocol (or a command's output); logs go to stderr only, and never block
/// or fail a request.
fn init_logging(level: LogLevel, lines: pi_sessiond::rpc::log::Lines) -> pi_sessiond::rpc::log::LogWriter {
    pi_sessiond::rpc::log::init_as(level.as_str(), lines)
}

fn serve(global: &GlobalArgs, args: ServeArgs) -> i32 {
    let framing = match args.framing {
        Some(FramingArg::Jsonl) => Some(Framing::Jsonl),
        Some(FramingArg::Lsp) => Some(Framing::Lsp),
        Some(FramingArg::Auto) | None => None,
    };
    let agent_dir = agent_dir_of(global);
    let index_path = if global.no_index {
        None
    } else {
        Some(global.index.clone().unwrap_or_else(|| default_index_path(&agent_dir)))
    };
    let durability = match args.durability {
        Some(DurabilityArg::None) => Durability::None,
        Some(DurabilityArg::Batch) => Durability::Batch,
        Some(DurabilityArg::After) => Durability::After,
        Some(DurabilityArg::Entry) | None => Durability::Entry,
    };
    // A host that dies while this process is stopped (SIGSTOP; the host's watchdog only notices while a call
    // waits) would leave it stopped for ever, holding its sessions' locks: the kernel continues it when the host
    // goes, so it reads the end of its input and shuts down in order. Harmless to a process that runs.
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::CONT)) {
        tracing::debug!("no parent-death signal ({e}): a stopped sidecar outlives a host that dies");
    }
    if std::io::stdin().is_terminal() {
        // A person started it by hand: say what it is instead of waiting in silence.
        eprintln!(
            "pi-sessiond {VERSION}: a JSON-RPC 2.0 server for pi's sessions, reading requests on stdin (one JSON \
             object per line) and answering on stdout; hosts spawn it (protocol/README.md). Try `pi-sessiond --help` \
             for the commands; Ctrl-D ends it."
        );
    }
    let config = Config {
        framing,
        agent_dir,
        max_frame: args.max_frame_bytes.unwrap_or(1 << 30),
        durability,
        index_path,
        poll_interval: std::time::Duration::from_millis(args.poll_ms.unwrap_or(1000).max(1)),
        catalog: global.catalog.clone(),
    };
    pi_sessiond::rpc::serve_connection(config, pi_sessiond::rpc::Connection::stdio())
}

fn agent_dir_of(global: &GlobalArgs) -> String {
    global.agent_dir.as_deref().map(paths::normalize_path).unwrap_or_else(paths::agent_dir)
}

/// The index a read-only command uses: the one named, else the default one only if it already exists (a
/// listing must not leave an index — or a directory for it — behind).
fn existing_index_of(global: &GlobalArgs, agent_dir: &str) -> Option<String> {
    if global.no_index {
        return None;
    }
    if let Some(ix) = &global.index {
        return Some(ix.clone());
    }
    let default = default_index_path(agent_dir);
    paths::as_path(&default).exists().then_some(default)
}

/// Parses the command line; a usage error is reported as JSON when `--json` was asked for.
fn parse_args() -> Result<Args, u8> {
    match Args::try_parse() {
        Ok(a) => Ok(a),
        Err(e) => {
            use clap::error::ErrorKind as K;
            let usage =
                !matches!(e.kind(), K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand);
            // `args_os`: an argument that is not UTF-8 (a file name's bytes) is what clap refused here, and
            // `args` would panic on it.
            if usage && std::env::args_os().any(|a| a == "--json") {
                // clap's message without its advice: the error and, for a bad value, the accepted ones.
                let text = e.render().to_string();
                let lines: Vec<&str> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with("tip:") && !l.starts_with("For more information"))
                    .collect();
                let message = lines.join(" ").trim_start_matches("error: ").to_owned();
                return Err(Failure::invalid(message).report(true));
            }
            e.exit()
        }
    }
}

/// glibc's malloc, told to hand memory back: under a long mixed load its defaults grew the sidecar's RSS without
/// bound while its heap stayed under 20 MB (heaptrack): a freed 4 MiB read buffer raises the mmap threshold to
/// 4 MiB, so later large buffers are carved from the arenas and fragment them, and every thread may get an arena
/// of its own. A fixed 256 KiB threshold (large buffers are mapped and unmapped) and 2 arenas kept a 90-second
/// soak at 48 MB where the defaults reached 160 MB and were still rising (docs/performance.md, "Bounded for
/// hours"). Called before any thread starts.
///
/// A worker thread's arena grows by what each allocation needs, a page and an `mprotect` at a time: opening a
/// 40 MB session from kept skeletons made 627 of them for its 9,000 records. A top pad of 4 MiB grows (and,
/// when trimming, keeps) an arena in steps of that size. Measured on that open: the second open in a process
/// took 7.4 ms with no pad, 5.2 with 4 MiB and 2.9 with 16 MiB, but 16 MiB raised the peak RSS of an open with
/// its context and tree from 29 to 34 MiB, where 4 MiB left it as it was.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_malloc() {
    // SAFETY: mallopt only sets allocator parameters; it is called once, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_TOP_PAD, 4 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() {}

fn main() -> ExitCode {
    tune_malloc();
    let args = match parse_args() {
        Ok(a) => a,
        Err(status) => return ExitCode::from(status),
    };
    let global = args.global.clone();
    let command = match args.command {
        None => Command::Serve(ServeArgs::default()),
        Some(c) => c,
    };
    // Servers (the sidecar, the web view) log with times, to be read later; a command says what it has to say to
    // the person who ran it.
    let lines = match &command {
        Command::Serve(_) | Command::Web { .. } | Command::Push { watch: true, .. } => {
            pi_sessiond::rpc::log::Lines::Timed
        }
        _ => pi_sessiond::rpc::log::Lines::Said,
    };
    let log = init_logging(global.log_level, lines);
    if let Command::Serve(inner) = command {
        let code = serve(&global, inner.or(args.serve));
        log.flush(std::time::Duration::from_millis(200));
        // The reader thread may still be blocked on stdin; everything is flushed, so leave now.
        std::process::exit(code);
    }
    let status = match run(command, &global) {
        Ok(status) => status,
        Err(failure) => failure.report(global.json),
    };
    log.flush(std::time::Duration::from_millis(200));
    ExitCode::from(status)
}

/// The name of a command that reads only this machine's session files, which `--catalog` would not change: it
/// is refused with the flag rather than answered from local files as if from the team's.
fn reads_local_files_only(command: &Command) -> Option<&'static str> {
    match command {
        Command::Tree { .. } => Some("tree"),
        Command::Show { .. } => Some("show"),
        Command::Stats { .. } => Some("stats"),
        Command::Inspect { .. } => Some("inspect"),
        Command::Export { .. } => Some("export"),
        _ => None,
    }
}

fn run(command: Command, global: &GlobalArgs) -> Result<u8, Failure> {
    let agent_dir = agent_dir_of(global);
    let index = SharedIndex::new(existing_index_of(global, &agent_dir));
    let places = resolve::Places { agent_dir: agent_dir.clone(), cwd: paths::process_cwd() };
    let style = Style::detect(global.color);
    let json = global.json;
    // Output for reading at leisure goes through the pager on a terminal.
    let paged = |style: &Style| Screen::open(style, !global.no_pager);
    if let Some(name) = global.catalog.as_ref().and_then(|_| reads_local_files_only(&command)) {
        return Err(Failure::invalid(format!(
            "--catalog: `{name}` reads this machine's session files, not the team catalog (another machine's \
             sessions are listed, searched and counted with `ls`, `search` and `usage --catalog`, and read in \
             `web --catalog`)"
        )));
    }
    match command {
        Command::Ls { cwd, dir, all } if global.catalog.is_some() => {
            let url = global.catalog.as_deref().unwrap_or_default();
            let request = cli::ls::LsRequest { cwd, dir, all };
            let mut screen = paged(&style);
            let status = pi_sessiond::team::cli::ls(url, &request, json, &style, &mut screen.writer());
            screen.finish()?;
            Ok(status as u8)
        }
        Command::Push {
            postgres,
            machine,
            watch,
            allow_empty,
            poll_ms,
            no_redact,
            redact_rules,
            include,
            exclude,
            since,
            keep_images,
            prune,
            older_than,
        } => {
            let request = pi_sessiond::team::cli::PushRequest {
                agent_dir: &agent_dir,
                url: &postgres,
                machine: machine.as_deref(),
                allow_empty,
                watch,
                poll: std::time::Duration::from_millis(poll_ms.max(1)),
                redact: !no_redact,
                redact_rules: redact_rules.as_deref(),
                include: &include,
                exclude: &exclude,
                since: since.as_deref(),
                keep_images,
                prune: prune
                    .then(|| older_than.unwrap_or_else(|| pi_sessiond::team::cli::DEFAULT_RETENTION.to_owned())),
            };
            Ok(pi_sessiond::team::cli::push(&request, json, &mut std::io::stdout()) as u8)
        }
        Command::Team { command: TeamCommand::Prune { postgres, older_than } } => {
            Ok(pi_sessiond::team::cli::prune(&postgres, &older_than, json, &mut std::io::stdout()) as u8)
        }
        Command::Team { command: TeamCommand::Grant(a) } => Ok(a.run(true, json)),
        Command::Team { command: TeamCommand::Revoke(a) } => Ok(a.run(false, json)),
        Command::Ls { cwd, dir, all } => {
            let request = cli::ls::LsRequest { cwd, dir, all };
            let listing = index.with(|ix| cli::ls::listing(&request, &agent_dir, ix))?;
            if listing.is_empty() && json {
                cli::output::warn_if_missing_agent_dir(&agent_dir);
            }
            if listing.is_empty() && !json {
                // A mistyped --agent-dir looks like an empty one unless it is named as missing.
                if let Some(missing) = cli::output::missing_agent_dir(&agent_dir) {
                    eprintln!("no sessions: {missing}");
                    return Ok(EXIT_OK);
                }
                let scope = if all { agent_dir.clone() } else { request.cwd.unwrap_or_else(paths::process_cwd) };
                eprintln!("no sessions for {scope}{}", if all { "" } else { " (--all lists every project's)" });
                return Ok(EXIT_OK);
            }
            let mut screen = paged(&style);
            // On a terminal ids may be shown as prefixes, which must name their sessions among every project's.
            let others = if style.width.is_some() { cli::ls::ids_in_file_names(&agent_dir) } else { Vec::new() };
            let status = cli::ls::print_among(&listing, &others, json, &style, &mut screen.writer());
            let shown = screen.finish();
            status.and_then(|status| shown.map(|()| status))
        }
        Command::Tree { session, filter, depth } => {
            let path = resolve::session_path(&session, &places)?;
            let options = cli::tree::TreeOptions { filter, depth };
            // getTree holds every entry: `--filter all` says as much, any other filter or a depth would be ignored.
            if json && (![cli::tree::Filter::Default, cli::tree::Filter::All].contains(&filter) || depth.is_some()) {
                return Err(Failure::invalid(
                    "tree --json is pi's whole getTree; --filter and --depth choose what the drawn tree shows (leave them out, \
                     or drop --json)",
                ));
            }
            if json {
                let inspect = cli::inspect::InspectOptions { only: Some("tree".into()), ..Default::default() };
                return cli::inspect::run(&path, &inspect, pi_sessiond::session::Env::system(), &mut std::io::stdout());
            }
            let mut screen = paged(&style);
            let status = cli::tree::tree(&path, &options, &style, &mut screen.writer());
            let shown = screen.finish();
            status.and_then(|status| shown.map(|()| status))
        }
        Command::Show { session, entry } => {
            let path = resolve::session_path(&session, &places)?;
            let mut screen = paged(&style);
            let status = cli::show::show(&path, &entry, json, &style, &mut screen.writer());
            let shown = screen.finish();
            status.and_then(|status| shown.map(|()| status))
        }
        Command::Search { query, cwd, dir, limit, offset, roles } => {
            let roles = (!roles.is_empty()).then_some(roles);
            let request = cli::search::SearchRequest {
                query: &query,
                cwd: cwd.as_deref(),
                dir: dir.as_deref(),
                limit: limit as usize,
                offset: offset as usize,
                roles,
            };
            if let Some(url) = &global.catalog {
                return Ok(pi_sessiond::team::cli::search(url, &request, json, &mut std::io::stdout()) as u8);
            }
            let mut screen = paged(&style);
            let status =
                index.with(|ix| cli::search::search(&request, &agent_dir, ix, json, &style, &mut screen.writer()));
            let shown = screen.finish();
            status.and_then(|status| shown.map(|()| status))
        }
        Command::Stats { session, timing, reads } => {
            let path = resolve::session_path(&session, &places)?;
            let options = cli::stats::StatsOptions { timing, reads };
            cli::stats::stats(&path, options, json, &style, &mut std::io::stdout().lock())
        }
        Command::Usage { since, by } => {
            let since_ms = since.as_deref().map(cli::usage::parse_since).transpose()?;
            if let Some(url) = &global.catalog {
                let mut out = std::io::stdout().lock();
                return Ok(pi_sessiond::team::cli::usage(url, since_ms, by, json, &style, &mut out) as u8);
            }
            if json {
                cli::output::warn_if_missing_agent_dir(&agent_dir);
            } else if let Some(missing) = cli::output::missing_agent_dir(&agent_dir) {
                eprintln!("no usage: {missing}");
                return Ok(EXIT_OK);
            }
            index
                .with(|ix| cli::usage::usage(&agent_dir, ix, since_ms, by, json, &style, &mut std::io::stdout().lock()))
        }
        Command::Inspect { session, retained_tail, nested, only } => {
            let path = resolve::session_path(&session, &places)?;
            let options = cli::inspect::InspectOptions {
                context: ContextOptions { honour_retained_tail: retained_tail },
                nested,
                only,
                pretty: style.tty,
            };
            let mut screen = paged(&style);
            let status = cli::inspect::run(&path, &options, pi_sessiond::session::Env::system(), &mut screen.writer());
            let shown = screen.finish();
            status.and_then(|status| shown.map(|()| status))
        }
        Command::Export { session, html: _, output, no_redact, redact_rules } => {
            let path = resolve::session_path(&session, &places)?;
            // `-o -` is stdout, as a terminal too: asked for by name.
            let named_stdout = output.as_deref() == Some("-");
            let output = output.filter(|o| o != "-");
            if output.is_none() && !named_stdout && style.tty {
                return Err(Failure::invalid("export writes HTML: give -o FILE (or redirect stdout)"));
            }
            let redactor = pi_sessiond::team::cli::redactor(!no_redact, redact_rules.as_deref())
                .map_err(|e| Failure::invalid(e.to_string()))?;
            pi_sessiond::web::export::export_html(&path, &agent_dir, output.as_deref(), redactor.as_ref())
        }
        Command::Web { port } => {
            let config = pi_sessiond::web::WebConfig {
                agent_dir,
                index_path: existing_index_of(global, &places.agent_dir),
                port,
                catalog: global.catalog.clone(),
            };
            pi_sessiond::web::serve(config)
        }
        Command::Protocol { write } => {
            let (methods, schema) = pi_sessiond::rpc::protocol::generate();
            match write {
                Some(dir) => {
                    let write = |name: &str, text: &str| {
                        let file = format!("{dir}/{name}");
                        std::fs::write(&file, text).map_err(|e| Failure::io(format!("{file}: {}", describe_io(&e))))
                    };
                    std::fs::create_dir_all(&dir).map_err(|e| Failure::io(format!("{dir}: {}", describe_io(&e))))?;
                    write("methods.json", &methods)?;
                    write("schema.json", &schema)?;
                    Ok(EXIT_OK)
                }
                None => cli::output::emit(&mut std::io::stdout(), &methods),
            }
        }
        Command::Completions { shell } => cli::output::emit(&mut std::io::stdout(), &completion_script(shell)),
        Command::Man => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Args::command())
                .render(&mut out)
                .map_err(|e| Failure::io(format!("cannot render the man page: {e}")))?;
            cli::output::emit(&mut std::io::stdout(), &String::from_utf8_lossy(&out))
        }
        Command::Serve(_) => {
            unreachable!("handled in main")
        }
    }
}

/// The completion script for `shell`, generated from the flags.
///
/// clap_complete's bash script names a subcommand's state `pi__sessiond__subcmd__tree` where it walks the words,
/// but `pi__subcmd__sessiond__subcmd__tree` in the arms that complete it (the hyphen of the binary's name is
/// escaped twice, clap-rs/clap#6421), so nothing after a subcommand completed. The arms are renamed to what the
/// walk produces; once clap_complete agrees with itself the replacement finds nothing to replace.
fn completion_script(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Args::command(), "pi-sessiond", &mut out);
    let script = String::from_utf8_lossy(&out).into_owned();
    match shell {
        clap_complete::Shell::Bash => script.replace("pi__subcmd__sessiond__", "pi__sessiond__"),
        _ => script,
    }
}
