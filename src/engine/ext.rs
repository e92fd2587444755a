//! One extension as the engine sees it: an [`Ext`] with its [`Phase`]
//! (starting, running in a [`Stage`], or gone with how it [`End`]ed),
//! what it subscribed to and claimed, and the frames queued for it this
//! turn. The questions asked of one extension alone are answered here:
//! its state as listed, whether it may get requests, whether it answers
//! an interception now (docs/PROTOCOL.md#supervision).

use super::action::Backlog;
use super::crashes::Supervision;
use super::exit::ExitWatch;
use crate::ext::discovery::Scope;
use crate::ext::manifest::{GuardFailure, Manifest};
use crate::intercept::{Answer, InterceptEvent};
use crate::log::ExtLog;
use crate::types::{ExtensionInfo, ExtensionState, NameConflict, NameKind, ReadyVia};
#[cfg(feature = "mcp")]
use crate::wire::mcp_client::McpClient;
use crate::wire::protocol::HostFrame;
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

/// Where an extension is in its life (docs/PROTOCOL.md#handshake, docs/PROTOCOL.md#exits,
/// docs/PROTOCOL.md#supervision). Each
/// phase owns its deadline; only a running one has a process.
pub(super) enum Phase {
    /// The driver is starting its process (within the turn that asked),
    /// or found it cannot (its `exec` or confinement).
    Spawning,
    Running(Run),
    /// No process: how it ended, and when it restarts after a crash.
    Gone {
        end: End,
        restart_at: Option<Instant>,
    },
}

/// A running extension as the engine sees it: its process is the
/// driver's (`action.rs`), at the same index.
pub(super) struct Run {
    pub(super) pid: u32,
    /// Its stdin takes lines: not closed, no write to it failed.
    pub(super) stdin_open: bool,
    /// Bytes its writer thread has not written yet.
    pub(super) backlog: Backlog,
    /// For an MCP server (docs/PROTOCOL.md#mcp-servers): its client, which every frame to it
    /// and every line from it goes through.
    #[cfg(feature = "mcp")]
    pub(super) mcp: Option<Box<McpClient>>,
    /// The deadlines that find its exit.
    pub(super) exit: ExitWatch,
    /// Confined, its data directory (else `data_dir` is its directory).
    pub(super) data_dir: Option<PathBuf>,
    pub(super) stage: Stage,
}

pub(super) enum Stage {
    /// Failed at `deadline` without `hello` (or when its stdout closed).
    AwaitingHello {
        deadline: Instant,
    },
    /// Said hello: ready at `ready_at` (silence) unless `ready` comes first.
    Registering {
        ready_at: Instant,
    },
    Ready,
    /// Failed (its handshake) and killed: its exit is awaited.
    Killed(String),
    /// Sent `shutdown`; `signal` goes to its group at the time given
    /// (SIGTERM, then SIGKILL). `hello`: its frames still count.
    Stopping {
        hello: bool,
        signal: Option<(Instant, libc::c_int)>,
    },
}

pub(super) enum End {
    Disabled,
    /// Skills and a theme only (docs/PROTOCOL.md#bundles): nothing to start.
    #[cfg(feature = "bundles")]
    Bundle,
    /// A project extension not trusted (docs/PROTOCOL.md#trust): why, and how to trust it.
    Untrusted(String),
    Failed(String),
    Exited(String),
}

impl End {
    /// Why it failed, how it exited, or why it is not trusted.
    pub(super) fn detail(&self) -> Option<&String> {
        match self {
            End::Untrusted(why) | End::Failed(why) | End::Exited(why) => Some(why),
            End::Disabled => None,
            #[cfg(feature = "bundles")]
            End::Bundle => None,
        }
    }
}

pub(super) struct Ext {
    pub(super) name: String,
    pub(super) version: Option<String>,
    pub(super) scope: Scope,
    pub(super) dir: PathBuf,
    pub(super) phase: Phase,
    pub(super) log: ExtLog,
    /// Observed events in subscription order, and as a set for lookups.
    pub(super) events: Vec<String>,
    pub(super) event_set: HashSet<String>,
    /// Bytes of those names, against [`super::MAX_NAME_BYTES`].
    pub(super) event_bytes: usize,
    pub(super) intercept: Vec<InterceptEvent>,
    pub(super) commands_claimed: Claims,
    pub(super) tools_claimed: Claims,
    /// Events its full stdin queue did not take.
    pub(super) dropped_events: Drops,
    /// Notes and panel updates the embedder did not take in time.
    pub(super) dropped_notes: Drops,
    /// Frames queued during this loop iteration.
    pub(super) out: Vec<u8>,
    /// What it was started from (`None` when invalid): restarts reuse it.
    pub(super) manifest: Option<Manifest>,
    /// Crashes and remembered guard subscriptions.
    pub(super) supervision: Supervision,
    /// How this run became ready.
    pub(super) ready_via: Option<ReadyVia>,
    /// Names it registered that a built-in owns, each once: `(kind, name)`.
    pub(super) lost_to_builtin: Vec<(NameKind, String)>,
    /// Its hello listed `tool_cancel` (docs/PROTOCOL.md#capabilities).
    pub(super) tool_cancel: bool,
    /// Its hello listed `call_tool`.
    #[cfg(feature = "ext-calls")]
    pub(super) call_tool: bool,
}

/// Names one extension claimed in a registry, against
/// [`super::MAX_NAMES`] and [`super::MAX_NAME_BYTES`].
#[derive(Default)]
pub(super) struct Claims {
    pub(super) count: usize,
    pub(super) bytes: usize,
    /// The cap was hit (logged once).
    pub(super) capped: bool,
}

/// Messages dropped for one extension, logged when a streak of drops
/// begins and ends, and in total at its exit.
#[derive(Default)]
pub(super) struct Drops {
    pub(super) total: u64,
    streak: bool,
}

impl Drops {
    /// Counts a drop: true when it begins a streak.
    pub(super) fn count(&mut self) -> bool {
        self.total += 1;
        !std::mem::replace(&mut self.streak, true)
    }

    /// Ends a streak: the total so far, when one was running.
    pub(super) fn end(&mut self) -> Option<u64> {
        std::mem::take(&mut self.streak).then_some(self.total)
    }
}

impl Ext {
    /// An extension as discovered, before anything ran: disabled until
    /// the startup says otherwise.
    pub(super) fn new(
        name: String,
        scope: Scope,
        dir: PathBuf,
        log: ExtLog,
        manifest: Option<Manifest>,
    ) -> Ext {
        Ext {
            name,
            version: manifest.as_ref().and_then(|m| m.version.clone()),
            scope,
            dir,
            phase: Phase::Gone {
                end: End::Disabled,
                restart_at: None,
            },
            log,
            events: Vec::new(),
            event_set: HashSet::new(),
            event_bytes: 0,
            intercept: Vec::new(),
            commands_claimed: Claims::default(),
            tools_claimed: Claims::default(),
            dropped_events: Drops::default(),
            dropped_notes: Drops::default(),
            out: Vec::new(),
            manifest,
            supervision: Supervision::default(),
            ready_via: None,
            lost_to_builtin: Vec::new(),
            tool_cancel: false,
            #[cfg(feature = "ext-calls")]
            call_tool: false,
        }
    }

    pub(super) fn run(&self) -> Option<&Run> {
        match &self.phase {
            Phase::Running(run) => Some(run),
            Phase::Spawning | Phase::Gone { .. } => None,
        }
    }

    pub(super) fn stage(&self) -> Option<&Stage> {
        self.run().map(|r| &r.stage)
    }

    /// Handshaken and not being stopped: may get requests.
    pub(super) fn serving(&self) -> bool {
        matches!(self.stage(), Some(Stage::Registering { .. } | Stage::Ready))
    }

    /// Not yet ready and not being stopped.
    pub(super) fn loading(&self) -> bool {
        matches!(self.phase, Phase::Spawning)
            || matches!(
                self.stage(),
                Some(Stage::AwaitingHello { .. } | Stage::Registering { .. })
            )
    }

    /// Its state as listed, with why it failed or how it exited.
    pub(super) fn state(&self) -> ExtensionState {
        let text = |s: &String| s.clone();
        match &self.phase {
            Phase::Spawning => ExtensionState::Starting,
            Phase::Running(r) => match &r.stage {
                Stage::Ready | Stage::Stopping { hello: true, .. } => ExtensionState::Ready,
                Stage::Killed(why) => ExtensionState::Failed { reason: text(why) },
                _ => ExtensionState::Starting,
            },
            Phase::Gone { end, .. } => match end {
                End::Disabled => ExtensionState::Disabled,
                #[cfg(feature = "bundles")]
                End::Bundle => ExtensionState::Bundle,
                End::Untrusted(why) => ExtensionState::Untrusted { reason: text(why) },
                End::Failed(why) => ExtensionState::Failed { reason: text(why) },
                End::Exited(how) => ExtensionState::Exited { status: text(how) },
            },
        }
    }

    /// How it ended, when it is gone and that has a text.
    pub(super) fn end_detail(&self) -> Option<&String> {
        match &self.phase {
            Phase::Gone { end, .. } => end.detail(),
            Phase::Spawning | Phase::Running(_) => None,
        }
    }

    /// Its entry in a [`crate::types::Snapshot`], with the names it owns.
    pub(super) fn info(
        &self,
        commands: Vec<String>,
        tools: Vec<String>,
        conflicts: Vec<NameConflict>,
    ) -> ExtensionInfo {
        let state = self.state();
        // An untrusted project's skill files are not the embedder's to load.
        #[cfg(feature = "bundles")]
        let provides = (self.manifest.as_ref())
            .map(|m| &m.provides)
            .filter(|_| !matches!(state, ExtensionState::Untrusted { .. }));
        ExtensionInfo {
            name: self.name.clone(),
            version: self.version.clone(),
            scope: self.scope,
            dir: self.dir.clone(),
            state,
            pid: self.run().map(|r| r.pid),
            commands,
            tools,
            events: self.events.clone(),
            intercept: self.intercept.clone(),
            restarts: self.supervision.restarts,
            #[cfg(feature = "bundles")]
            skills: provides.map(|p| p.skills.clone()).unwrap_or_default(),
            #[cfg(feature = "bundles")]
            theme: provides.and_then(|p| p.theme.clone()),
            ready_via: self.ready_via,
            conflicts,
        }
    }

    /// Whether its stdin takes lines.
    fn writable(&self) -> bool {
        self.run().is_some_and(|r| r.stdin_open)
    }

    /// Queues a frame, written batched at the end of the loop iteration;
    /// an MCP server's client is handed it to translate (its deadlines
    /// count from `now`). False when stdin is closed.
    // `now` is for an MCP server's client only.
    #[cfg_attr(not(feature = "mcp"), allow(unused_variables))]
    pub(super) fn send(&mut self, frame: &HostFrame, now: Instant) -> bool {
        let Phase::Running(run) = &mut self.phase else {
            return false;
        };
        if !run.stdin_open {
            return false;
        }
        #[cfg(feature = "mcp")]
        if let Some(client) = &mut run.mcp {
            client.on_host_frame(frame, now);
            self.out.append(&mut client.take_lines());
            return true;
        }
        frame.write_line(&mut self.out);
        true
    }

    /// Queues a frame already serialized, or lines of an MCP server's
    /// client. False when stdin is closed.
    pub(super) fn send_line(&mut self, line: &[u8]) -> bool {
        if !self.writable() {
            return false;
        }
        self.out.extend_from_slice(line);
        true
    }

    /// Bytes waiting for this extension, queued or not yet handed over.
    pub(super) fn backlog(&self) -> usize {
        self.out.len() + self.run().map_or(0, |r| r.backlog.bytes())
    }
}

impl Ext {
    /// Whether it can answer an interception now.
    pub(super) fn answers_guard(&self) -> bool {
        self.serving() && !self.supervision.remembered
    }

    /// Never ready yet, and its first restart may follow: it is being
    /// killed (its exit decides), or that restart is pending. Requests for
    /// names it may register wait for that one restart, not for every
    /// later one (docs/PROTOCOL.md#readiness).
    pub(super) fn restarting_before_ready(&self) -> bool {
        self.before_first_restart()
            && match &self.phase {
                Phase::Running(run) => matches!(run.stage, Stage::Killed(_)),
                Phase::Gone { restart_at, .. } => restart_at.is_some(),
                Phase::Spawning => true,
            }
    }

    /// Never ready yet, and not restarted yet: requests for names it may
    /// register wait for its first restart (docs/PROTOCOL.md#readiness).
    pub(super) fn before_first_restart(&self) -> bool {
        !self.supervision.ready_once && self.supervision.restarts == 0
    }

    /// Why it failed for good once started, without ever becoming ready
    /// (an invalid manifest never started: it could register nothing).
    pub(super) fn failed_before_ready(&self) -> Option<&String> {
        if self.supervision.ready_once || self.manifest.is_none() {
            return None;
        }
        match &self.phase {
            Phase::Running(run) => match &run.stage {
                Stage::Killed(why) => Some(why),
                _ => None,
            },
            Phase::Gone {
                end: End::Failed(why),
                ..
            } => Some(why),
            Phase::Spawning | Phase::Gone { .. } => None,
        }
    }

    /// Whether its manifest says `"guard_failure": "block"`.
    fn fails_closed(&self) -> bool {
        self.manifest
            .as_ref()
            .is_some_and(|m| m.guard_failure == GuardFailure::Block)
    }

    /// Whether it is a guard for `event` now: it answers, or it fails
    /// closed while it cannot (a disabled extension is no guard at all).
    pub(super) fn guards(&self, event: &str) -> bool {
        let disabled = matches!(
            self.phase,
            Phase::Gone {
                end: End::Disabled,
                ..
            }
        );
        let closed = self.fails_closed() && !disabled;
        self.intercept.iter().any(|e| e.as_str() == event) && (self.answers_guard() || closed)
    }

    /// Why it cannot answer an interception now.
    pub(super) fn why_unavailable(&self) -> String {
        match (self.run(), self.end_detail()) {
            (Some(run), _) => match run.stage {
                Stage::Stopping { .. } => "stopping".into(),
                _ if !run.stdin_open => "stdin closed".into(),
                // A new run that has not subscribed to interception again yet.
                _ => "restarting".into(),
            },
            // Gone: its deadline is its restart.
            (None, Some(how)) if self.deadline().is_some() => format!("restarting after {how}"),
            (None, Some(how)) => format!("{}: {how}", self.state().as_str()),
            (None, None) => "not running".into(),
        }
    }

    /// Its answer when it cannot give one: allow, or block if it fails closed.
    pub(super) fn unavailable(&self, why: &str) -> Answer {
        if self.fails_closed() {
            self.log
                .line(&format!("cannot answer an interception ({why}): blocked"));
            Answer::Block(format!("guard {} unavailable ({why})", self.name))
        } else {
            self.log.line(&format!(
                "cannot answer an interception ({why}): counted as allow"
            ));
            let what = "before_agent_start: extension";
            Answer::Unusable(format!(
                "{what} {} could not answer ({why}): the system prompt is kept",
                self.name
            ))
        }
    }

    /// Its new run subscribed to interception again, or became ready
    /// without: the subscriptions of its previous run no longer count.
    pub(super) fn forget_remembered_intercept(&mut self) {
        if std::mem::take(&mut self.supervision.remembered) {
            self.intercept.clear();
        }
    }
}
