//! The engine: the host's whole state, and every decision about it.
//!
//! State in, actions out. The engine does no I/O and reads no clock:
//! each input comes with the time (`now`), and each decision is queued
//! as an [`Action`] (`action.rs`) for the driver to carry out, in the
//! order decided: write these lines to an extension, start this batch,
//! close a stdin, signal a group, reap, call a reply, send a host event.
//! So the rules are tested with made-up times, manifests found in memory
//! and no processes (`rules.rs`, and the tests in `state.rs`, `exit.rs`,
//! `supervise.rs`). Two things stay injected: each extension's log
//! ([`ExtLog`], which the engine writes its `[zot]` lines to) and the
//! bytes its writer has not written yet (`Backlog`, which bounds the
//! events queued to a subscriber that stops reading).
//!
//! ```text
//!  embedder / zot rpc / zot mcp / session
//!         │ Request (+ reply)                    HostEvent ▲
//!         ▼                                                │
//!   driver.rs: one crossbeam Select, timeout = the next deadline
//!         │ inputs (with the time)       actions (in order)│
//!         ▼                                                │
//!   Engine: registries · pending requests · chains · jobs ─┘
//!
//!   per extension (`src/process/mod.rs`): reader thread (stdout -> frames),
//!   writer thread (lines -> stdin), stderr thread (-> its log),
//!   waiter thread (its exit -> a message)
//! ```
//!
//! The inputs: a request (`Engine::request`), what an extension's
//! threads sent (`Engine::inbound`: a frame, the end of its stdout, a
//! failed write, its exit), the extensions a discovery found
//! (`Engine::discovered`), the results of a batch of starts
//! (`Engine::spawned`) and the pass after
//! each turn (`Engine::settle`). `driver.rs` owns the one wait and the
//! world: the processes (in a table indexed like the engine's
//! extensions), the channels, the file system (discovery, trust, logs,
//! `$PATH`, confinement). Whichever thread waits for an answer may run a
//! turn, so the loop needs no thread of its own.
//!
//! Where each concern lives:
//!
//! - `mod.rs`: the [`Engine`] and each extension's [`Phase`] (awaiting
//!   `hello`, registering, ready, killed, stopping; or gone), each phase
//!   holding its own deadline; `state.rs`: the host's own [`HostState`]
//!   (starting, running, reloading, draining, stopping, done), moved on
//!   by `Engine::advance`; `time.rs`: the next deadline.
//! - `lifecycle.rs`: starts, readiness, exits, stopping; `exit.rs`: how
//!   an exit is found and its last frames drained; `supervise.rs`:
//!   restarts after a crash.
//! - `frames.rs`: what extensions send; `requests.rs`: what the embedder
//!   asks, and the interception chain; `pending.rs`: every request sent
//!   to an extension and not answered yet, one table; `jobs.rs`: tool
//!   calls from their `tool_call` event to their result, cancellable;
//!   `exposure.rs`: deferred tools; `oversize.rs`: answers over the
//!   frame limit; `journaled.rs`: the journal's steps.
//! - `mcp.rs`: driving the client of each MCP server; `embedder.rs`: the
//!   bounded queue of events for the embedder.
//!
//! What the host does on the wire is in docs/PROTOCOL.md; how the code
//! around the engine fits together, and why, in docs/INTERNALS.md.

mod action;
mod driver;
mod embedder;
mod exit;
mod exposure;
mod frames;
mod jobs;
mod journaled;
mod lifecycle;
mod mcp;
mod oversize;
mod pending;
mod requests;
#[cfg(test)]
mod rules;
mod state;
mod supervise;
mod time;

use crate::config::HostConfig;
use crate::ext::discovery::Scope;
use crate::ext::manifest::Manifest;
use crate::intercept::{Chain, InterceptEvent, InterceptOutcome};
use crate::log::ExtLog;
use crate::types::{
    CommandInfo, ExtensionInfo, ExtensionState, HostError, HostEvent, InFlight, NameConflict,
    NameKind, ReadyVia, Reply, Request, Snapshot, ToolInfo,
};
use crate::wire::mcp_client::McpClient;
use crate::wire::protocol::HostFrame;
use crate::wire::registry::Registry;
use action::{Action, Probes};
use crossbeam_channel::Sender;
use embedder::EventQueue;
use exit::ExitWatch;
use pending::Pending;
use state::HostState;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use supervise::Supervision;

/// The caps on what one extension registers, shared with
/// `zot ext check`.
pub(crate) use crate::wire::registry::{MAX_NAMES, MAX_NAME_BYTES};

/// Where an extension is in its life (docs/PROTOCOL.md#handshake, docs/PROTOCOL.md#exits,
/// docs/PROTOCOL.md#supervision). Each
/// phase owns its deadline; only a running one has a process.
enum Phase {
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
struct Run {
    pid: u32,
    /// Its stdin takes lines: not closed, no write to it failed.
    stdin_open: bool,
    /// Bytes its writer thread has not written yet.
    backlog: action::Backlog,
    /// For an MCP server (docs/PROTOCOL.md#mcp-servers): its client, which every frame to it
    /// and every line from it goes through.
    mcp: Option<Box<McpClient>>,
    /// The deadlines that find its exit.
    exit: ExitWatch,
    /// Confined, its data directory (else `data_dir` is its directory).
    data_dir: Option<PathBuf>,
    stage: Stage,
}

enum Stage {
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

enum End {
    Disabled,
    /// Skills and a theme only (docs/PROTOCOL.md#bundles): nothing to start.
    Bundle,
    /// A project extension not trusted (docs/PROTOCOL.md#trust): why, and how to trust it.
    Untrusted(String),
    Failed(String),
    Exited(String),
}

impl End {
    /// Why it failed, how it exited, or why it is not trusted.
    fn detail(&self) -> Option<&String> {
        match self {
            End::Untrusted(why) | End::Failed(why) | End::Exited(why) => Some(why),
            End::Disabled | End::Bundle => None,
        }
    }
}

struct Ext {
    name: String,
    version: Option<String>,
    scope: Scope,
    dir: PathBuf,
    phase: Phase,
    log: ExtLog,
    /// Observed events in subscription order, and as a set for lookups.
    events: Vec<String>,
    event_set: HashSet<String>,
    /// Bytes of those names, against [`MAX_NAME_BYTES`].
    event_bytes: usize,
    intercept: Vec<InterceptEvent>,
    commands_claimed: Claims,
    tools_claimed: Claims,
    /// Events its full stdin queue did not take.
    dropped_events: Drops,
    /// Notes and panel updates the embedder did not take in time.
    dropped_notes: Drops,
    /// Frames queued during this loop iteration.
    out: Vec<u8>,
    /// What it was started from (`None` when invalid): restarts reuse it.
    manifest: Option<Manifest>,
    /// Crashes and remembered guard subscriptions.
    supervision: Supervision,
    /// How this run became ready.
    ready_via: Option<ReadyVia>,
    /// Names it registered that a built-in owns, each once: `(kind, name)`.
    lost_to_builtin: Vec<(NameKind, String)>,
    /// Its hello listed `tool_cancel` / `call_tool` (docs/PROTOCOL.md#capabilities).
    tool_cancel: bool,
    call_tool: bool,
}

/// Names one extension claimed in a registry, against [`MAX_NAMES`] and
/// [`MAX_NAME_BYTES`].
#[derive(Default)]
struct Claims {
    count: usize,
    bytes: usize,
    /// The cap was hit (logged once).
    capped: bool,
}

/// Messages dropped for one extension, logged when a streak of drops
/// begins and ends, and in total at its exit.
#[derive(Default)]
struct Drops {
    total: u64,
    streak: bool,
}

impl Drops {
    /// Counts a drop: true when it begins a streak.
    fn count(&mut self) -> bool {
        self.total += 1;
        !std::mem::replace(&mut self.streak, true)
    }

    /// Ends a streak: the total so far, when one was running.
    fn end(&mut self) -> Option<u64> {
        std::mem::take(&mut self.streak).then_some(self.total)
    }
}

impl Ext {
    /// An extension as discovered, before anything ran: disabled until
    /// the startup says otherwise.
    fn new(
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
            call_tool: false,
        }
    }

    fn run(&self) -> Option<&Run> {
        match &self.phase {
            Phase::Running(run) => Some(run),
            Phase::Spawning | Phase::Gone { .. } => None,
        }
    }

    fn stage(&self) -> Option<&Stage> {
        self.run().map(|r| &r.stage)
    }

    /// Handshaken and not being stopped: may get requests.
    fn serving(&self) -> bool {
        matches!(self.stage(), Some(Stage::Registering { .. } | Stage::Ready))
    }

    /// Not yet ready and not being stopped.
    fn loading(&self) -> bool {
        matches!(self.phase, Phase::Spawning)
            || matches!(
                self.stage(),
                Some(Stage::AwaitingHello { .. } | Stage::Registering { .. })
            )
    }

    /// Its state as listed, with why it failed or how it exited.
    fn state(&self) -> ExtensionState {
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
                End::Bundle => ExtensionState::Bundle,
                End::Untrusted(why) => ExtensionState::Untrusted { reason: text(why) },
                End::Failed(why) => ExtensionState::Failed { reason: text(why) },
                End::Exited(how) => ExtensionState::Exited { status: text(how) },
            },
        }
    }

    /// How it ended, when it is gone and that has a text.
    fn end_detail(&self) -> Option<&String> {
        match &self.phase {
            Phase::Gone { end, .. } => end.detail(),
            Phase::Spawning | Phase::Running(_) => None,
        }
    }

    /// Its entry in a [`Snapshot`], with the names it owns.
    fn info(
        &self,
        commands: Vec<String>,
        tools: Vec<String>,
        conflicts: Vec<NameConflict>,
    ) -> ExtensionInfo {
        let state = self.state();
        // An untrusted project's skill files are not the embedder's to load.
        let untrusted = matches!(state, ExtensionState::Untrusted { .. });
        let provides = self
            .manifest
            .as_ref()
            .map(|m| &m.provides)
            .filter(|_| !untrusted);
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
            skills: provides.map(|p| p.skills.clone()).unwrap_or_default(),
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
    fn send(&mut self, frame: &HostFrame, now: Instant) -> bool {
        let Phase::Running(run) = &mut self.phase else {
            return false;
        };
        if !run.stdin_open {
            return false;
        }
        let Some(client) = &mut run.mcp else {
            frame.write_line(&mut self.out);
            return true;
        };
        client.on_host_frame(frame, now);
        self.out.append(&mut client.take_lines());
        true
    }

    /// Queues a frame already serialized, or lines of an MCP server's
    /// client. False when stdin is closed.
    fn send_line(&mut self, line: &[u8]) -> bool {
        if !self.writable() {
            return false;
        }
        self.out.extend_from_slice(line);
        true
    }

    /// Bytes waiting for this extension, queued or not yet handed over.
    fn backlog(&self) -> usize {
        self.out.len() + self.run().map_or(0, |r| r.backlog.bytes())
    }
}

/// Who gets the outcome of an interception chain.
enum Then {
    /// The embedder, who asked for the chain alone.
    Reply(Reply<InterceptOutcome>),
    /// The tool pipeline run (`super::jobs`) the chain guards.
    RunTool { job: u64 },
}

struct ChainState {
    chain: Chain,
    guards: Vec<usize>,
    /// The request id each guard was last asked under.
    ids: Vec<Option<String>>,
    then: Then,
}

struct Engine {
    cfg: HostConfig,
    cwd: String,
    /// `session_id` of every event: the embedder's, else made at start.
    session_id: String,
    /// Events emitted so far, over the host's life (docs/PROTOCOL.md#events).
    sequence: u64,
    /// `before_agent_start` passes so far: each has its `agent_run_id`.
    agent_runs: u64,
    events: EventQueue,
    exts: Vec<Ext>,
    by_key: IdMap<u64, usize>,
    next_key: u64,
    pending: Pending,
    jobs: jobs::Jobs,
    /// Where [`crate::BuiltinReply`] sends the embedder's results.
    builtin_tx: Sender<Request>,
    /// Inline, how a [`crate::BuiltinReply`] runs the loop for its answer.
    builtin_drive: Option<crate::types::Drive>,
    chains: IdMap<u64, ChainState>,
    next_chain: u64,
    /// Commands' descriptions; tools as listed.
    commands: Registry<String>,
    tools: Registry<ToolInfo>,
    state: HostState,
    /// What the driver is to do, in the order decided (`action.rs`).
    actions: Vec<Action>,
    /// Steps of journaled calls waiting for the turn's sync (`journaled.rs`).
    parked: journaled::Parked,
}

pub(crate) use driver::{run, Channels, BATCH};
#[allow(unused_imports)] // The inline host drives the loop through it.
pub(crate) use driver::{Driver, Until};

impl Engine {
    /// An engine whose events go to `events` (it only reads how many
    /// wait there: the driver sends them).
    /// Built-in tool replies go back through `builtin`.
    fn new(cfg: HostConfig, events: Sender<HostEvent>, builtin: Sender<Request>) -> Engine {
        let session_id = match cfg.session_id.as_str() {
            "" => crate::config::new_session_id(),
            given => given.to_string(),
        };
        Engine {
            cwd: cfg.cwd.to_string_lossy().into_owned(),
            session_id,
            sequence: 0,
            agent_runs: 0,
            events: EventQueue::new(events, cfg.event_budget),
            cfg,
            exts: Vec::new(),
            by_key: IdMap::default(),
            next_key: 0,
            pending: Pending::default(),
            jobs: jobs::Jobs::default(),
            builtin_tx: builtin,
            builtin_drive: None,
            chains: IdMap::default(),
            next_chain: 0,
            commands: Registry::case_insensitive(),
            tools: Registry::default(),
            // Until start_all: nothing is held before it.
            state: HostState::Running {
                parked: Vec::new(),
                held: Vec::new(),
            },
            actions: Vec::new(),
            parked: journaled::Parked::default(),
        }
    }

    fn is_done(&self) -> bool {
        matches!(self.state, HostState::Done)
    }

    /// After the inputs of one turn: the deadlines that came due (with
    /// what the driver saw of the processes [`Engine::probes_due`]
    /// named), then the host's state moves on as far as it can. The
    /// driver then syncs the turn's journal records and has the frames
    /// of the turn queued for the writers ([`Engine::queue_writes`]).
    fn settle(&mut self, now: Instant, probes: &Probes) {
        self.tick(now, probes);
        while self.advance(now) {}
    }

    /// Queues the frames of the turn for the writers, one write each.
    fn queue_writes(&mut self) {
        for idx in 0..self.exts.len() {
            self.flush(idx);
        }
    }

    /// [`Engine::settle`] with no process looked at: nothing exited.
    #[cfg(test)]
    fn settle_at(&mut self, now: Instant) {
        self.settle(now, &Probes::default());
        self.queue_writes();
    }

    /// For tests without a driver: carries out the replies and events
    /// queued (the events to the engine's channel); returns the rest.
    #[cfg(test)]
    fn answer_inline(&mut self) -> Vec<Action> {
        let mut rest = Vec::new();
        for action in self.take_actions(Vec::new()) {
            match action {
                Action::Reply(reply) => reply(),
                Action::Event(event) => self.events.deliver(event),
                Action::Ready(_) => {}
                other => rest.push(other),
            }
        }
        rest
    }

    /// Queues what was sent to extension `idx` this turn as one write.
    fn flush(&mut self, idx: usize) {
        let ext = &mut self.exts[idx];
        if !ext.out.is_empty() && ext.run().is_some() {
            let bytes = std::mem::take(&mut ext.out);
            self.actions.push(Action::Write { ext: idx, bytes });
        }
    }

    /// Closes extension `idx`'s stdin once everything queued so far is
    /// written.
    fn close_stdin(&mut self, idx: usize) {
        self.flush(idx);
        if let Phase::Running(run) = &mut self.exts[idx].phase {
            if std::mem::replace(&mut run.stdin_open, false) {
                self.actions.push(Action::CloseStdin(idx));
            }
        }
    }

    /// What the driver is to do, in order; the engine's queue is left
    /// empty with its capacity (`spare`'s, cleared).
    fn take_actions(&mut self, spare: Vec<Action>) -> Vec<Action> {
        debug_assert!(spare.is_empty());
        self.events.handed_over();
        std::mem::replace(&mut self.actions, spare)
    }

    /// Answers the embedder: the callback runs when the driver carries
    /// out the actions, after the events decided before it.
    fn answer<T: Send + 'static>(&mut self, reply: Reply<T>, result: Result<T, HostError>) {
        self.actions
            .push(Action::Reply(Box::new(move || reply(result))));
    }

    /// Fails a request the engine will not run, as [`Engine::answer`].
    fn refuse(&mut self, req: Request, error: HostError) {
        self.actions
            .push(Action::Reply(Box::new(move || req.fail(error))));
    }

    /// Sends a lifecycle event to the embedder (never dropped).
    fn event(&mut self, event: HostEvent) {
        self.events.send(event, &mut self.actions);
    }

    /// The one place where the host's state moves on by itself
    /// (docs/PROTOCOL.md#readiness, docs/PROTOCOL.md#shutdown,
    /// docs/PROTOCOL.md#reload), not at an input: held requests run once the
    /// startup ended, parked ones once their names may have come, a stop begins
    /// once nothing accepted is left, and ends once every extension is gone.
    /// Only from [`Engine::settle`]: a reload replaces `exts`, indexes and all.
    /// True when it moved (ask again).
    fn advance(&mut self, now: Instant) -> bool {
        let busy = !self.pending.is_empty()
            || !self.chains.is_empty()
            || !self.jobs.is_empty()
            || !self.parked.is_empty();
        let running = self.exts.iter().any(|e| e.run().is_some());
        match &mut self.state {
            // It ends at an input or in tick (check_startup).
            HostState::Starting(_) | HostState::Done => false,
            HostState::Running { held, .. } if !held.is_empty() => {
                for req in std::mem::take(held) {
                    self.request(req, now);
                }
                true
            }
            HostState::Running { .. } => {
                self.run_parked(now);
                false
            }
            HostState::Reloading { stopped: None, .. } if !busy => {
                self.begin_stop(now);
                true
            }
            HostState::Draining { parked, .. } if !busy && parked.is_empty() => {
                self.begin_stop(now);
                true
            }
            HostState::Draining { parked, .. } if !parked.is_empty() => {
                self.run_parked(now);
                // Once none is left, the stop may begin.
                self.state.parked_mut().is_some_and(|p| p.is_empty())
            }
            HostState::Reloading {
                stopped: Some(_), ..
            }
            | HostState::Stopping { .. }
                if !running =>
            {
                self.stopped(now);
                true
            }
            HostState::Draining { .. }
            | HostState::Reloading { .. }
            | HostState::Stopping { .. } => false,
        }
    }
}

/// `now + d`, or decades away when `d` is too large (`Duration::MAX`
/// says "no timeout").
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// A map keyed by the engine's own numbers (jobs, chains, process keys,
/// extension indexes, request ids): they come from counters, never from
/// outside (an answer's id is only looked up), so std's SipHash (built
/// against keys an attacker picks) buys nothing and costs about 100
/// instructions a lookup, several per call.
type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// The hash of [`IdMap`], FxHash's step: a rotate, an xor and a
/// multiplication per word.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

impl Engine {
    /// The names extension `idx` registered and lost, to a built-in or to
    /// an extension of higher precedence.
    fn conflicts(&self, idx: usize) -> Vec<NameConflict> {
        let builtin = (self.exts[idx].lost_to_builtin.iter()).map(|(kind, name)| NameConflict {
            kind: *kind,
            name: name.clone(),
            winner: "built-in".into(),
        });
        // The registries hold different things: their losses are alike.
        let lost = |kind: NameKind, lost: Vec<(String, usize)>| {
            lost.into_iter().map(move |(name, rank)| NameConflict {
                kind,
                name,
                winner: self.exts[rank].name.clone(),
            })
        };
        let commands = lost(NameKind::Command, self.commands.lost_by(idx));
        builtin
            .chain(commands)
            .chain(lost(NameKind::Tool, self.tools.lost_by(idx)))
            .collect()
    }

    fn snapshot(&self) -> Snapshot {
        let extensions = (self.exts.iter().enumerate())
            .map(|(i, e)| {
                e.info(
                    self.commands.owned_by(i),
                    self.tools.owned_by(i),
                    self.conflicts(i),
                )
            })
            .collect();
        let commands = self
            .commands
            .owners()
            .map(|(name, c)| CommandInfo {
                name: name.to_string(),
                description: c.info.clone(),
                extension: self.exts[c.rank].name.clone(),
            })
            .collect();
        let tools = self.tools.owners().map(|(_, c)| c.info.clone()).collect();
        Snapshot {
            extensions,
            commands,
            tools,
            in_flight: InFlight {
                requests: self.pending.len(),
                tool_calls: self.jobs.len(),
            },
        }
    }
}
