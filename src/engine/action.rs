//! The boundary between the engine and the world: what the engine asks
//! the driver to do ([`Action`]: a discovery, a write, a start, a signal,
//! a reply, an event) and what the driver tells it back: the extensions
//! it found ([`Discovered`]), a process it started ([`Attached`]) or
//! looked at ([`Probe`]). The engine refers to an extension by its
//! index; the driver keeps the processes in a table indexed the same
//! way, so no file, file descriptor, signal, spawn, reply callback or
//! channel send is the engine's. The driver carries the actions out in the order
//! they were decided: a reply comes after the events decided before it
//! (docs/PROTOCOL.md#ordering), and an exit's process is reaped before its requests fail.

use crate::ext::discovery::Found;
use crate::ext::manifest::Manifest;
use crate::log::ExtLog;
use crate::process::Reading;
use crate::types::HostEvent;
#[cfg(feature = "mcp")]
use crate::wire::mcp_client::McpOptions;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What the engine decided that touches a process, in the order decided.
pub(super) enum Action {
    /// Find the extensions (docs/PROTOCOL.md#discovery), open their logs and say the
    /// trust notices; the list goes back to
    /// [`super::Engine::discovered`].
    Discover,
    /// Start these processes, all at once (`process/spawner.rs`); their results
    /// go back to [`super::Engine::spawned`] in this order.
    Spawn(Batch),
    /// Whole lines for extension `ext`'s stdin, in order (one write per
    /// extension and turn: the frames of a turn are batched).
    Write { ext: usize, bytes: Vec<u8> },
    /// Close its stdin, once everything written before is.
    CloseStdin(usize),
    /// Send `signal` to its process group.
    Signal { ext: usize, signal: libc::c_int },
    /// It exited and was reaped: kill what is left of its group, let go
    /// of its process and wait (bounded) for the last of its stderr.
    Reap(usize),
    /// Call a reply callback with its result (bound in the closure).
    Reply(Box<dyn FnOnce() + Send>),
    /// Send an event to the embedder ([`crate::Host::events`]).
    Event(HostEvent),
    /// The first startup ended with these extensions ready: release
    /// `Host::wait_ready`.
    Ready(Vec<String>),
}

/// An extension directory found for a startup, with its log opened
/// (shadowed copies are not handed over: the driver logged them).
pub(super) struct Discovered {
    /// Its manifest's name, else its directory's.
    pub(super) name: String,
    pub(super) found: Found,
    pub(super) log: ExtLog,
}

/// A batch of starts, and what the engine does once they ran.
pub(super) struct Batch {
    pub(super) spawns: Vec<(usize, Launch)>,
    pub(super) then: AfterSpawn,
}

/// What to start for one extension. The driver resolves `exec` (on
/// `$PATH`) and builds the confinement: when either fails, that error is
/// the start's result, as is `cannot start <exe>: why` when the process
/// does not start.
pub(super) struct Launch {
    /// Unique across reloads: tags its frames, names its `TMPDIR`.
    pub(super) key: u64,
    pub(super) manifest: Manifest,
    /// Its directory: where `exec` is resolved and the child runs.
    pub(super) dir: PathBuf,
    pub(super) log: ExtLog,
    /// How its stdout is handed over.
    pub(super) reading: Reading,
    /// Confined (docs/PROTOCOL.md#confinement), `$CWD` being this directory.
    #[cfg(feature = "confine")]
    pub(super) confine_in: Option<PathBuf>,
    /// A project extension of this project directory: trust is checked
    /// before it starts (`trust::check_start`).
    pub(super) trust_in: Option<PathBuf>,
}

/// What a start needs besides its process, kept while it is spawned.
pub(super) struct Starting {
    pub(super) key: u64,
    /// For an MCP server: its client's options (docs/PROTOCOL.md#mcp-servers).
    #[cfg(feature = "mcp")]
    pub(super) mcp: Option<McpOptions>,
}

/// What a batch of starts was for.
pub(super) enum AfterSpawn {
    /// A startup (first or after a reload): every extension found, in
    /// discovery order, with why it cannot start or what its run needs.
    Startup(Vec<(usize, Result<Starting, String>)>),
    /// The restart of a crashed extension, with how its last run ended
    /// and the attempt it is.
    Restart {
        ext: usize,
        starting: Starting,
        status: String,
        attempt: u32,
    },
}

/// A process the driver started for the engine.
pub(super) struct Attached {
    pub(super) pid: u32,
    /// Confined: what that allows, for its log, and its data directory.
    pub(super) confined: Option<Confined>,
    /// Bytes handed to its writer thread and not written yet.
    pub(super) backlog: Backlog,
}

/// What a confined start was given.
pub(super) struct Confined {
    /// What it may do, in one line.
    pub(super) summary: String,
    /// Its data directory (its `hello_ack`'s `data_dir`).
    pub(super) data_dir: PathBuf,
}

/// Bytes waiting in a process's writer queue: the one thing the engine
/// reads that the process layer updates (its writer thread, as the pipe
/// takes them); it bounds the events queued to a slow reader (docs/PROTOCOL.md#ordering).
#[derive(Clone, Default)]
pub(crate) struct Backlog(pub(crate) Arc<AtomicUsize>);

impl Backlog {
    pub(super) fn bytes(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// What the driver saw of a process when one of its exit deadlines is
/// due at a tick ([`super::Engine::probes_due`]), at the end of its
/// stdout, and when its waiter said it exited.
#[derive(Clone, Copy, Debug)]
pub(super) struct Probe {
    /// Its status, when it has exited (reaped).
    pub(super) exited: Option<ExitStatus>,
    /// Something (a child) may still write to its stdout.
    pub(super) stdout_held: bool,
}

impl Probe {
    /// What is assumed of a process nobody looked at: running, its
    /// stdout perhaps held (so a drain of its last frames does not wait
    /// for an end of file that may never come).
    pub(super) const UNSEEN: Probe = Probe {
        exited: None,
        stdout_held: true,
    };
}

/// The probes of one tick, by extension index.
pub(super) type Probes = super::idmap::IdMap<usize, Probe>;
