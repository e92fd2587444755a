//! `zot ext`: manage installed extensions (SPEC section 5).

use super::CliError;
use std::ffi::OsString;

/// Runs `zot ext <args>`.
pub fn run(_args: Vec<OsString>) -> Result<i32, CliError> {
    Err(CliError::Failed("zot ext: not implemented yet".into()))
}
