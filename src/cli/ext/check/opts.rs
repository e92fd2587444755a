//! What `zot ext check` was asked: the extension, the host's config as
//! `zot` would run it, the output form and the extra requests.

use serde_json::Value;
use std::path::PathBuf;

/// An extra request from the command line.
pub(crate) enum Probe {
    Call { tool: String, args: Value },
    Command { name: String, args: String },
}

pub(crate) struct Opts {
    pub(crate) path: PathBuf,
    pub(crate) cwd: PathBuf,
    /// The host's config, limits included, as `zot` would run it here.
    pub(crate) config: zot_host::HostConfig,
    pub(crate) json: bool,
    pub(crate) strict: bool,
    pub(crate) probes: Vec<Probe>,
}
