//! The `pi-sessiond` binary: command-line tools over the session engine.
//!
//! stdout belongs to the tool's output (and, for the server, to the protocol); diagnostics go to stderr.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pi_sessiond::cli;
use pi_sessiond::session::context::ContextOptions;

#[derive(Parser)]
#[command(name = "pi-sessiond", version, about = "Owns pi's session files: JSON-RPC sidecar and command-line tools")]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print pi's reads of a session file as one JSON object (the file is not modified).
    Inspect {
        /// The session file.
        file: String,
        /// Ignore compactions' `retainedTail` (pi 1.6.0's own context), instead of using it as the checkpoint.
        #[arg(long)]
        ignore_retained_tail: bool,
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
    /// Open a session and report its size, entry count, open time and peak memory (for benchmarks).
    Stats {
        /// The session file.
        file: String,
    },
    /// Draw a session's tree: one line per entry, branches indented, labels and the active leaf marked.
    Tree {
        /// The session file.
        file: String,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut stdout = std::io::stdout().lock();
    let status = match args.command {
        Some(Command::Inspect { file, ignore_retained_tail }) => {
            cli::inspect(&file, ContextOptions { honour_retained_tail: !ignore_retained_tail }, &mut stdout)
        }
        Some(Command::Ls { cwd, dir, all }) => cli::ls(cwd.as_deref(), dir.as_deref(), all, &mut stdout),
        Some(Command::Tree { file }) => cli::tree(&file, &mut stdout),
        Some(Command::Stats { file }) => cli::stats(&file, &mut stdout),
        None => {
            eprintln!("pi-sessiond: the JSON-RPC server is not built yet; use a subcommand (see --help)");
            2
        }
    };
    ExitCode::from(status as u8)
}
