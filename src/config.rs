//! How to start a host: state, extensions, deadlines, limits.

use std::path::PathBuf;
use std::time::Duration;

/// Every deadline the host enforces (docs/PROTOCOL.md#timeouts).
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
    /// From a crash to the first restart (500 ms; doubles per crash, docs/PROTOCOL.md#supervision).
    pub restart_backoff: Duration,
    /// After an extension closed its stdout before `hello`, how long it
    /// may take to exit (and be reported with its status) before it is
    /// failed for the EOF (100 ms).
    pub eof_before_hello: Duration,
    /// The same once it said `hello` (2 s): longer, so that one that
    /// closes stdout on its way out is not taken for one that runs on mute.
    pub eof_after_hello: Duration,
    /// After an exit that came before the end of its stdout, the silence
    /// on its stdout after which the exit is handled while something (a
    /// child) can still write there (250 ms).
    pub exit_silence: Duration,
    /// The most that wait lasts in all (2 s): a pipe drains well within
    /// it, a child that keeps writing does not.
    pub exit_drain: Duration,
    /// After a write to its stdin failed, how long what it owes may still
    /// be answered before it fails (2 s).
    pub stdin_closed: Duration,
    /// How long an MCP server's `server/discover` probe may go unanswered
    /// before the legacy `initialize` (3 s, docs/PROTOCOL.md#mcp-servers); after a refused
    /// `initialize`, how much longer the probe may still win.
    pub mcp_probe: Duration,
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
            eof_before_hello: Duration::from_millis(100),
            eof_after_hello: Duration::from_secs(2),
            exit_silence: Duration::from_millis(250),
            exit_drain: Duration::from_secs(2),
            stdin_closed: Duration::from_secs(2),
            mcp_probe: Duration::from_secs(3),
        }
    }
}

/// The default [`HostConfig::builtin_tools`] (docs/PROTOCOL.md#names-and-precedence).
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
    /// Start the project's own extensions (`<cwd>/.zot/extensions`) for
    /// this host's life without the user's recorded trust (docs/PROTOCOL.md#trust), as
    /// `--trust-project` does; nothing is recorded. Default `false`: only
    /// the extensions `zot ext trust` recorded, unchanged since, start;
    /// the others are listed with state `untrusted` and one line on
    /// stderr names them.
    pub trust_project: bool,
    /// `hello_ack.zot_version`.
    pub zot_version: String,
    /// `hello_ack.provider`.
    pub provider: String,
    /// `hello_ack.model`.
    pub model: String,
    /// `session_id` of every event (docs/PROTOCOL.md#events); empty: one is made at start.
    pub session_id: String,
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
    /// Start every extension confined by Landlock to what its manifest's
    /// `permissions` allow; one the kernel cannot confine fails to start.
    /// The ruleset is applied between fork and exec by a pre-exec hook,
    /// so confined extensions are forked, not posix_spawned. A build
    /// without the `confine` feature refuses to start a host with it.
    pub confine: bool,
    /// The embedder runs built-in tools for extensions' `call_tool`
    /// ([`crate::HostEvent::BuiltinCall`]); false: such calls get an
    /// error result at once (docs/PROTOCOL.md#calls-from-extensions). True.
    #[cfg(feature = "ext-calls")]
    pub runs_builtins: bool,
    /// The embedder shows panels, so interactive tools may wait for the
    /// user without a deadline; false: they are refused (docs/PROTOCOL.md#interactive-tools). True.
    /// Only with the `panels` feature: without it an interactive tool is an ordinary one.
    #[cfg(feature = "panels")]
    pub interactive_tools: bool,
    /// Makes the embedder's tool calls durable: each step is journaled
    /// here before it takes effect (docs/JOURNAL.md).
    #[cfg(feature = "journal")]
    pub journal: Option<PathBuf>,
    /// Who the embedder is, in the journal's `origin` of its calls
    /// (an extension's `call_tool` is `extension:NAME`). `"embedder"`.
    #[cfg(feature = "journal")]
    pub journal_origin: String,
    /// The journal, once the host opened it.
    #[cfg(feature = "journal")]
    #[doc(hidden)]
    pub(crate) opened_journal: Option<std::sync::Arc<crate::journal::Journal>>,
}

impl HostConfig {
    /// Opens and locks [`HostConfig::journal`], once when the host
    /// starts; fails naming the file.
    #[cfg(feature = "journal")]
    pub(crate) fn open_journal(&mut self) -> std::io::Result<()> {
        if let Some(path) = &self.journal {
            let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            let journal = crate::journal::Journal::open(&path).map_err(std::io::Error::other)?;
            self.opened_journal = Some(std::sync::Arc::new(journal));
        }
        Ok(())
    }

    /// Makes the paths absolute, against the embedder's working directory,
    /// once when the host starts: an extension runs in its own directory,
    /// where a relative path would name something else.
    pub(crate) fn make_paths_absolute(&mut self) {
        let absolute = |p: &mut PathBuf| {
            if let Ok(abs) = std::path::absolute(&*p) {
                *p = abs;
            }
        };
        absolute(&mut self.zot_home);
        absolute(&mut self.cwd);
        self.ext_paths.iter_mut().for_each(absolute);
    }

    /// What this build cannot do of what the config asks: confinement
    /// without the `confine` feature (never an unconfined run instead).
    pub(crate) fn check_build(&self) -> std::io::Result<()> {
        #[cfg(not(feature = "confine"))]
        if self.confine {
            let no = std::io::ErrorKind::Unsupported;
            let why = crate::build::needs_feature("confinement", "confine");
            return Err(std::io::Error::new(no, why));
        }
        Ok(())
    }

    /// Defaults: discovery on, [`Timeouts::default`], [`BUILTIN_TOOLS`].
    pub fn new(zot_home: PathBuf, cwd: PathBuf) -> HostConfig {
        HostConfig {
            zot_home,
            cwd,
            ext_paths: Vec::new(),
            discover: true,
            trust_project: false,
            zot_version: env!("CARGO_PKG_VERSION").to_string(),
            provider: String::new(),
            model: String::new(),
            session_id: String::new(),
            timeouts: Timeouts::default(),
            builtin_tools: BUILTIN_TOOLS.map(String::from).to_vec(),
            builtin_commands: Vec::new(),
            event_queue_limit: 16 * 1024 * 1024,
            log_rotate_bytes: 8 * 1024 * 1024,
            event_budget: 8 * 1024 * 1024,
            confine: false,
            #[cfg(feature = "ext-calls")]
            runs_builtins: true,
            #[cfg(feature = "panels")]
            interactive_tools: true,
            #[cfg(feature = "journal")]
            journal: None,
            #[cfg(feature = "journal")]
            journal_origin: "embedder".into(),
            #[cfg(feature = "journal")]
            opened_journal: None,
        }
    }
}

/// A fresh session id: 128 random bits from the kernel, as a UUID (v4),
/// so two hosts started in the same instant never share one. Without
/// `/dev/urandom`: the pid, the time and a process-wide counter.
pub fn new_session_id() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if random.is_err() {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        b[..8].copy_from_slice(&nanos.to_be_bytes());
        b[8..12].copy_from_slice(&std::process::id().to_be_bytes());
        b[12..].copy_from_slice(&(n as u32).to_be_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// The defaults are those of docs/PROTOCOL.md#timeouts: tests that set
    /// shorter ones through the knobs rely on this.
    #[test]
    fn the_default_timeouts_are_the_documented_ones() {
        let t = super::Timeouts::default();
        let (ms, s) = (Duration::from_millis, Duration::from_secs);
        assert_eq!(
            [t.command, t.tool, t.intercept, t.hello, t.startup],
            [s(30), s(60), s(5), s(10), s(3)]
        );
        assert_eq!([t.shutdown_grace, t.term_grace], [s(2), s(1)]);
        assert_eq!([t.mcp_probe, t.restart_backoff], [s(3), ms(500)]);
    }

    #[test]
    fn session_ids_are_uuids_and_differ() {
        let (a, b) = (super::new_session_id(), super::new_session_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36, "{a}");
        assert_eq!(a.as_bytes()[14], b'4', "{a}");
    }
}
