//! The engine: the host's whole state, and every decision about it.
//!
//! State in, actions out. The engine does no I/O and reads no clock:
//! each input comes with the time (`now`), and each decision is queued
//! as an [`Action`] (`action.rs`) for the driver to carry out, in the
//! order decided: write these lines to an extension, start this batch,
//! close a stdin, signal a group, reap, call a reply, send a host event.
//! So the rules are tested with made-up times, manifests found in memory
//! and no processes (`rules.rs`, and the tests in `state.rs`, `exit.rs`,
//! `crashes.rs`). Two things stay injected: each extension's log
//! ([`crate::log::ExtLog`], which the engine writes its `[zot]` lines
//! to) and the bytes its writer has not written yet (`Backlog`, which
//! bounds the events queued to a subscriber that stops reading).
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
//! Where each concern lives. The imports run one way: `mod.rs` holds
//! the [`Engine`] and imports the files that hold its parts, each part's
//! data with its own methods; none of these imports `mod.rs`. The files
//! that add the engine's methods for one concern (`impl Engine`) import
//! `mod.rs`, and `mod.rs` imports none of them.
//!
//! The parts (imported by `mod.rs`):
//!
//! - `ext.rs`: one extension, with its [`Phase`] (awaiting `hello`,
//!   registering, ready, killed, stopping; or gone), each phase holding
//!   its own deadline, and what is asked of it alone; `exit.rs`: how its
//!   exit is found and its last frames drained; `crashes.rs`: its crash
//!   history and backoff.
//! - `state.rs`: the host's own [`HostState`] (starting, running,
//!   reloading, draining, stopping, done), moved on by
//!   `Engine::advance`; `session.rs`: the session and directory events
//!   name, and the counters of events and agent runs.
//! - `pending.rs`: every request sent to an extension and not answered
//!   yet, one table; `jobs.rs`: the tool calls in flight, each a job from
//!   its `tool_call` event to its result; `chains.rs`: the interception
//!   chains in flight; `keys.rs`: the key of each start, and which
//!   extension's process it tags. Each table hands out its own numbers.
//! - `action.rs`: what the engine asks of the driver, and what the driver
//!   tells it back; `embedder.rs`: the bounded queue of events for the
//!   embedder; `idmap.rs` and `later.rs`: the engine's map and deadlines.
//!
//! The engine's methods, by concern (each imports `mod.rs`):
//!
//! - `lifecycle.rs`: starts, readiness, exits, stopping; `supervise.rs`:
//!   restarts after a crash; `time.rs`: the next deadline, and what is
//!   due at it.
//! - `frames.rs`: what extensions send; `requests.rs`: what the embedder
//!   asks, and the interception chains; `pipeline.rs`: the tool pipeline,
//!   cancellable; `extcalls.rs` (only with the `ext-calls` feature): the
//!   tool calls extensions make, and the built-ins run for them;
//!   `exposure.rs` (only with the `tool-extras` feature): deferred tools;
//!   `oversize.rs`: answers
//!   over the frame limit; `journaled.rs` (only with the `journal`
//!   feature): the journal's steps and reconcile answers.
//! - `mcp.rs`: driving the client of each MCP server.
//! - `driver.rs`: the loop around the engine; the crate reaches it as
//!   `engine::driver`.
//!
//! What the host does on the wire is in docs/PROTOCOL.md; how the code
//! around the engine fits together, and why, in docs/INTERNALS.md.

mod action;
mod chains;
mod crashes;
pub(crate) mod driver;
mod embedder;
mod exit;
#[cfg(feature = "tool-extras")]
mod exposure;
mod ext;
#[cfg(feature = "ext-calls")]
mod extcalls;
mod frames;
mod idmap;
mod jobs;
#[cfg(feature = "journal")]
mod journaled;
mod keys;
mod later;
mod lifecycle;
#[cfg(feature = "mcp")]
mod mcp;
mod oversize;
#[cfg(feature = "panels")]
mod panels;
mod pending;
mod pipeline;
mod requests;
#[cfg(test)]
mod rules;
mod session;
mod state;
mod supervise;
mod time;

use crate::config::HostConfig;
use crate::types::{
    CommandInfo, HostError, HostEvent, InFlight, NameConflict, NameKind, Reply, Request, Snapshot,
    ToolInfo,
};
use crate::wire::registry::Registry;
use action::{Action, Probes};
use chains::Chains;
use crossbeam_channel::Sender;
use embedder::EventQueue;
use ext::{Ext, Phase};
use keys::Keys;
use pending::Pending;
use session::Session;
use state::HostState;
use std::time::Instant;

/// The caps on what one extension registers, shared with
/// `zot ext check`.
pub(crate) use crate::wire::registry::{MAX_NAMES, MAX_NAME_BYTES};

struct Engine {
    cfg: HostConfig,
    session: Session,
    events: EventQueue,
    exts: Vec<Ext>,
    keys: Keys,
    pending: Pending,
    jobs: jobs::Jobs,
    /// Where [`crate::BuiltinReply`] sends the embedder's results.
    #[cfg(feature = "ext-calls")]
    builtin_tx: Sender<Request>,
    /// Inline, how a [`crate::BuiltinReply`] runs the loop for its answer.
    #[cfg(feature = "ext-calls")]
    builtin_drive: Option<crate::types::Drive>,
    chains: Chains,
    /// Commands' descriptions; tools as listed.
    commands: Registry<String>,
    tools: Registry<ToolInfo>,
    state: HostState,
    /// What the driver is to do, in the order decided (`action.rs`).
    actions: Vec<Action>,
    /// Steps of journaled calls waiting for the turn's sync, in the
    /// order decided (`journaled.rs`).
    #[cfg(feature = "journal")]
    parked: Vec<jobs::Wait>,
}

impl Engine {
    /// An engine whose events go to `events` (it only reads how many
    /// wait there: the driver sends them).
    /// Built-in tool replies go back through `builtin`.
    fn new(
        cfg: HostConfig,
        events: Sender<HostEvent>,
        #[cfg(feature = "ext-calls")] builtin: Sender<Request>,
    ) -> Engine {
        Engine {
            session: Session::new(&cfg),
            events: EventQueue::new(events, cfg.event_budget),
            cfg,
            exts: Vec::new(),
            keys: Keys::default(),
            pending: Pending::default(),
            jobs: jobs::Jobs::default(),
            #[cfg(feature = "ext-calls")]
            builtin_tx: builtin,
            #[cfg(feature = "ext-calls")]
            builtin_drive: None,
            chains: Chains::default(),
            commands: Registry::case_insensitive(),
            tools: Registry::default(),
            // Until start_all: nothing is held before it.
            state: HostState::Running {
                parked: Vec::new(),
                held: Vec::new(),
            },
            actions: Vec::new(),
            #[cfg(feature = "journal")]
            parked: Vec::new(),
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
        let busy = !self.pending.is_empty() || !self.chains.is_empty() || !self.jobs.is_empty();
        #[cfg(feature = "journal")]
        let busy = busy || !self.parked.is_empty();
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
