//! `zot rpc`: the JSON-lines control interface (SPEC section 7).

use super::{CliError, HostOpts};

/// `zot rpc --help`.
pub const HELP: &str = "usage: zot rpc [-e PATH]... [--no-ext] [--cwd DIR]\n";

/// Runs the control interface until shutdown or EOF.
pub fn run(_opts: HostOpts) -> Result<i32, CliError> {
    Err(CliError::Failed("zot rpc: not implemented yet".into()))
}
