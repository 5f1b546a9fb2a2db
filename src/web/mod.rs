//! The live web view (`pi-sessiond web`) and its offline twin (`pi-sessiond export --html`).

pub mod bridge;
pub mod export;
pub mod view;

use crate::cli::output::Failure;

/// What `pi-sessiond web` serves.
#[derive(Clone, Debug)]
pub struct WebConfig {
    /// pi's agent directory.
    pub agent_dir: String,
    /// The catalog index, if one is to be used.
    pub index_path: Option<String>,
    /// The port on 127.0.0.1 (0: any free one).
    pub port: u16,
}

/// Serves until killed.
pub fn serve(_config: WebConfig) -> Result<u8, Failure> {
    Err(Failure::invalid("not yet"))
}
