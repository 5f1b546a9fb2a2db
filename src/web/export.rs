//! `pi-sessiond export SESSION --html`.

use crate::cli::output::Failure;

/// Writes the HTML view of `path`.
pub fn export_html(_path: &str, _agent_dir: &str, _output: Option<&str>) -> Result<u8, Failure> {
    Err(Failure::invalid("not yet"))
}
