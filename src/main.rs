//! The `pi-sessiond` binary: the JSON-RPC sidecar (the default), and command-line tools over the engine.
//!
//! stdout belongs to the protocol (or to a tool's output); logs and diagnostics go to stderr only.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pi_sessiond::catalog::index::{default_index_path, SharedIndex};
use pi_sessiond::cli;
use pi_sessiond::rpc::framing::Framing;
use pi_sessiond::rpc::Config;
use pi_sessiond::session::context::ContextOptions;
use pi_sessiond::session::paths;
use pi_sessiond::session::store::Durability;

#[derive(Parser)]
#[command(name = "pi-sessiond", version, about = "Owns pi's session files: JSON-RPC sidecar and command-line tools")]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(clap::Args, Clone)]
struct ServeArgs {
    /// Message framing on stdin/stdout: auto (detected from the first byte), jsonl, or lsp.
    #[arg(long, default_value = "auto", value_parser = ["auto", "jsonl", "lsp"])]
    framing: String,
    /// Log level for stderr (overridden by RUST_LOG): error, warn, info, debug, trace.
    #[arg(long, default_value = "warn")]
    log_level: String,
    /// pi's agent directory (default: $PI_CODING_AGENT_DIR or ~/.pi/agent).
    #[arg(long, global = true)]
    agent_dir: Option<String>,
    /// The catalog index (default: <agentDir>/pi-sessiond/index.sqlite). Rebuildable at any time; the session
    /// files stay the source of truth.
    #[arg(long, global = true)]
    index: Option<String>,
    /// Use no catalog index: listings and searches read every file.
    #[arg(long, global = true, conflicts_with = "index")]
    no_index: bool,
    /// The largest frame accepted from the host, in bytes.
    #[arg(long, default_value_t = 1 << 30)]
    max_frame_bytes: usize,
    /// fsync policy for appends: none (like pi), entry (every entry before its response), batch (group commit).
    #[arg(long, default_value = "entry", value_parser = ["none", "entry", "batch"])]
    durability: String,
    /// How often watched files are checked even without a file-system notification, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    poll_ms: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Serve JSON-RPC on stdin/stdout (the default when no command is given).
    Serve,
    /// Print the protocol description (protocol/methods.json and protocol/schema.json), or write it to a directory.
    Protocol {
        /// Write methods.json and schema.json into this directory instead of printing.
        #[arg(long)]
        write: Option<String>,
    },
    /// Print pi's reads of a session file as one JSON object (the file is not modified).
    Inspect {
        /// The session file.
        file: String,
        /// Use a compaction's `retainedTail` as the post-compaction context (the seed's checkpoint) instead of
        /// pi 1.6.0's own context, which ignores the field.
        #[arg(long)]
        retained_tail: bool,
    },
    /// List sessions as pi's `list(cwd, dir)` (or `listAll(dir)` with --all) returns them, as JSON.
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
    /// Search sessions with pi's /resume query language (words, "exact phrases", re:regex), down to the entry.
    Search {
        /// The query.
        query: String,
        /// Search this project's sessions only (default: every session).
        #[arg(long)]
        cwd: Option<String>,
        /// The session directory (with --cwd: instead of pi's directory for it; without: search only this one).
        #[arg(long)]
        dir: Option<String>,
        /// At most this many results.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Only these roles (user, assistant, toolResult, custom, bashExecution, name, label, summary, session).
        #[arg(long = "role")]
        roles: Vec<String>,
        /// Print the results as a JSON array (the shape of sessions/search).
        #[arg(long)]
        json: bool,
    },
    /// Open a session and report its size, entry count, open time and peak memory (for benchmarks).
    Stats {
        /// The session file.
        file: String,
        /// Also time buildSessionContext and getTree, rendered to JSON in memory as the sidecar sends them.
        #[arg(long)]
        reads: bool,
    },
    /// Draw a session's tree: one line per entry, branches indented, labels and the active leaf marked.
    Tree {
        /// The session file.
        file: String,
    },
}

fn serve(args: ServeArgs) -> i32 {
    let framing = match args.framing.as_str() {
        "jsonl" => Some(Framing::Jsonl),
        "lsp" => Some(Framing::Lsp),
        _ => None,
    };
    let agent_dir = agent_dir_of(&args);
    let index_path = index_path_of(&args, &agent_dir);
    let durability = match args.durability.as_str() {
        "none" => Durability::None,
        "batch" => Durability::Batch,
        _ => Durability::Entry,
    };
    let config = Config {
        framing,
        agent_dir,
        max_frame: args.max_frame_bytes,
        durability,
        index_path,
        poll_interval: std::time::Duration::from_millis(args.poll_ms.max(1)),
    };
    pi_sessiond::rpc::serve_connection(config, pi_sessiond::rpc::Connection::stdio())
}

fn agent_dir_of(args: &ServeArgs) -> String {
    args.agent_dir.as_deref().map(paths::normalize_path).unwrap_or_else(paths::agent_dir)
}

fn index_path_of(args: &ServeArgs, agent_dir: &str) -> Option<String> {
    if args.no_index {
        return None;
    }
    Some(args.index.clone().unwrap_or_else(|| default_index_path(agent_dir)))
}

fn main() -> ExitCode {
    let args = Args::parse();
    // stdout carries the protocol (or a tool's output); logs go to stderr only, and never block or fail a request.
    let log = pi_sessiond::rpc::log::init(&args.serve.log_level);
    if matches!(args.command, None | Some(Command::Serve)) {
        let code = serve(args.serve);
        log.flush(std::time::Duration::from_millis(200));
        // The reader thread may still be blocked on stdin; everything is flushed, so leave now.
        std::process::exit(code);
    }
    let agent_dir = agent_dir_of(&args.serve);
    let index = SharedIndex::new(index_path_of(&args.serve, &agent_dir));
    let mut stdout = std::io::stdout().lock();
    let status = match args.command {
        Some(Command::Inspect { file, retained_tail }) => {
            cli::inspect(&file, ContextOptions { honour_retained_tail: retained_tail }, &mut stdout)
        }
        Some(Command::Ls { cwd, dir, all }) => {
            index.with(|ix| cli::ls(cwd.as_deref(), dir.as_deref(), all, &agent_dir, ix, &mut stdout))
        }
        Some(Command::Search { query, cwd, dir, limit, roles, json }) => {
            let roles = (!roles.is_empty()).then_some(roles);
            let request = cli::SearchRequest { query: &query, cwd: cwd.as_deref(), dir: dir.as_deref(), limit, roles };
            index.with(|ix| cli::search(&request, &agent_dir, ix, json, &mut stdout))
        }
        Some(Command::Tree { file }) => cli::tree(&file, &mut stdout),
        Some(Command::Stats { file, reads }) => cli::stats(&file, reads, &mut stdout),
        Some(Command::Protocol { write }) => {
            let (methods, schema) = pi_sessiond::rpc::protocol::generate();
            match write {
                Some(dir) => {
                    let ok = std::fs::create_dir_all(&dir).is_ok()
                        && std::fs::write(format!("{dir}/methods.json"), methods).is_ok()
                        && std::fs::write(format!("{dir}/schema.json"), schema).is_ok();
                    if ok {
                        0
                    } else {
                        1
                    }
                }
                None => {
                    use std::io::Write;
                    let _ = write!(stdout, "{methods}");
                    0
                }
            }
        }
        None | Some(Command::Serve) => unreachable!("handled above"),
    };
    log.flush(std::time::Duration::from_millis(200));
    ExitCode::from(status as u8)
}
