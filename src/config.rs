//! How to start a host: state, extensions, deadlines, limits.

use std::path::PathBuf;
use std::time::Duration;

/// Every deadline the host enforces (SPEC 3.8).
#[derive(Debug, Clone)]
pub struct Timeouts {
    /// From spawn to `hello` (10 s).
    pub hello: Duration,
    /// Silence after which an extension that sent no `ready` is ready (250 ms).
    pub ready_idle: Duration,
    /// How long startup waits for every extension to be ready (3 s).
    pub startup: Duration,
    /// `command_invoked` to `command_response` (30 s).
    pub command: Duration,
    /// `tool_call` to `tool_result` (60 s).
    pub tool: Duration,
    /// One round of `event_intercept` answers (5 s; timeout = allow).
    pub intercept: Duration,
    /// From `shutdown` to SIGTERM (2 s).
    pub shutdown_grace: Duration,
    /// From SIGTERM to SIGKILL (1 s).
    pub term_grace: Duration,
    /// From a crash to the first restart (500 ms; doubles per crash, SPEC 12).
    pub restart_backoff: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            hello: Duration::from_secs(10),
            ready_idle: Duration::from_millis(250),
            startup: Duration::from_secs(3),
            command: Duration::from_secs(30),
            tool: Duration::from_secs(60),
            intercept: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(2),
            term_grace: Duration::from_secs(1),
            restart_backoff: Duration::from_millis(500),
        }
    }
}

/// The default [`HostConfig::builtin_tools`] (SPEC 3.7).
pub const BUILTIN_TOOLS: [&str; 5] = ["read", "write", "edit", "bash", "skill"];

/// How to start a [`Host`](crate::Host).
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// State directory: global extensions and logs live here.
    pub zot_home: PathBuf,
    /// The user's project directory: `.zot/extensions` and `hello_ack.cwd`.
    pub cwd: PathBuf,
    /// Extensions given explicitly (`-e`), highest precedence first.
    pub ext_paths: Vec<PathBuf>,
    /// Also discover project and global extensions.
    pub discover: bool,
    /// `hello_ack.zot_version`.
    pub zot_version: String,
    /// `hello_ack.provider`.
    pub provider: String,
    /// `hello_ack.model`.
    pub model: String,
    /// Deadlines.
    pub timeouts: Timeouts,
    /// Tool names the embedder implements itself; they always win.
    pub builtin_tools: Vec<String>,
    /// Command names the embedder implements itself; they always win.
    pub builtin_commands: Vec<String>,
    /// Bytes waiting for one extension's stdin beyond which events to it are dropped.
    pub event_queue_limit: usize,
    /// Size at which an extension's log is rotated to `.log.1`.
    pub log_rotate_bytes: u64,
    /// Bytes of notes and panel updates that may wait in `Host::events`.
    pub event_budget: usize,
    /// How long the loop and blocked callers poll before they sleep: waking
    /// costs tens of µs. `Duration::ZERO` never spins (battery). 50 µs.
    pub spin_before_sleep: Duration,
}

impl HostConfig {
    /// Defaults: discovery on, SPEC timeouts, [`BUILTIN_TOOLS`].
    pub fn new(zot_home: PathBuf, cwd: PathBuf) -> HostConfig {
        HostConfig {
            zot_home,
            cwd,
            ext_paths: Vec::new(),
            discover: true,
            zot_version: env!("CARGO_PKG_VERSION").to_string(),
            provider: String::new(),
            model: String::new(),
            timeouts: Timeouts::default(),
            builtin_tools: BUILTIN_TOOLS.map(String::from).to_vec(),
            builtin_commands: Vec::new(),
            event_queue_limit: 16 * 1024 * 1024,
            log_rotate_bytes: 8 * 1024 * 1024,
            event_budget: 8 * 1024 * 1024,
            spin_before_sleep: Duration::from_micros(50),
        }
    }
}
