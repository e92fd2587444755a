//! `zot`: the interactive line-based session (SPEC section 6).

use super::{CliError, HostOpts};

/// Runs the session until `/quit` or EOF.
pub fn run(_opts: HostOpts) -> Result<i32, CliError> {
    Err(CliError::Failed("session: not implemented yet".into()))
}
