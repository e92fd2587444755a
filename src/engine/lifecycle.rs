//! The moves between an extension's phases: start, hello, ready,
//! failure, exit and stop (docs/PROTOCOL.md#handshake, docs/PROTOCOL.md#readiness,
//! docs/PROTOCOL.md#exits, docs/PROTOCOL.md#shutdown).

use super::action::{Action, AfterSpawn, Attached, Batch, Discovered, Launch, Starting};
use super::chains::Then;
use super::exit::ExitWatch;
use super::ext::{End, Ext, Phase, Run, Stage};
use super::later::later;
use super::pending::Owed;
use super::state::{HostState, Startup};
use super::Engine;
use crate::ext::discovery::{Scope, Status};
use crate::ext::manifest::Protocol;
use crate::log::human;
use crate::process::{describe_status, Reading};
use crate::types::{ExtensionState, HostError, HostEvent, ReadyVia, ReloadReport, Reply, Request};
#[cfg(feature = "mcp")]
use crate::wire::mcp_client::{McpClient, McpOptions};
use crate::wire::protocol::HostFrame;
use std::process::ExitStatus;
use std::time::Instant;

impl Phase {
    pub(super) fn gone(end: End) -> Phase {
        Phase::Gone {
            end,
            restart_at: None,
        }
    }
}

impl Engine {
    /// Starts every extension: the first startup, or the restart of a
    /// `reload` (with how many it stopped); `held` requests wait for the
    /// startup's end. The driver is asked to find them first
    /// ([`Engine::discovered`]).
    pub(super) fn start_all(
        &mut self,
        reload: Option<(Reply<ReloadReport>, usize)>,
        held: Vec<Request>,
        now: Instant,
    ) {
        self.state = HostState::Starting(Startup {
            deadline: later(now, self.cfg.timeouts.startup),
            reload,
            discovering: true,
            loaded: 0,
            held,
        });
        self.actions.push(Action::Discover);
    }

    /// The driver found `found` (in discovery order, logs opened): each
    /// is started unless it cannot be (untrusted, a bundle, invalid).
    pub(super) fn discovered(&mut self, found: Vec<Discovered>, now: Instant) {
        if let HostState::Starting(st) = &mut self.state {
            st.discovering = false;
        }
        // In discovery order: started below all at once, then settled in
        // this order, so nothing depends on which process starts first.
        let mut found_here = Vec::new();
        for Discovered { name, found, log } in found {
            #[cfg(feature = "bundles")]
            let bundle = found.manifest.as_ref().is_some_and(|m| m.is_bundle());
            let idx = self.exts.len();
            let ext = Ext::new(name, found.scope, found.dir, log, found.manifest);
            self.exts.push(ext);
            match found.status {
                Status::Untrusted(why) => {
                    let name = &self.exts[idx].name;
                    let hint = format!("{why}; review it, then run 'zot ext trust {name}'");
                    self.exts[idx].phase = Phase::gone(End::Untrusted(hint));
                }
                Status::Invalid(e) => {
                    found_here.push((idx, Some(format!("invalid manifest: {e}"))))
                }
                #[cfg(feature = "bundles")]
                Status::Start if bundle => self.exts[idx].phase = Phase::gone(End::Bundle),
                Status::Start => {
                    found_here.push((idx, None));
                }
                Status::Disabled | Status::Shadowed { .. } => {}
            }
        }
        // Started all at once by the driver; settled in `spawned`.
        let mut spawns = Vec::new();
        let mut order = Vec::new();
        for (idx, invalid) in found_here {
            let job = match invalid {
                Some(error) => Err(error),
                None => self.spawn_job(idx),
            };
            order.push((
                idx,
                job.map(|(spawn, starting)| {
                    self.exts[idx].phase = Phase::Spawning;
                    spawns.push((idx, spawn));
                    starting
                }),
            ));
        }
        self.launch(spawns, AfterSpawn::Startup(order), now);
    }

    /// Asks the driver to start `spawns`; with none, settles at once.
    pub(super) fn launch(&mut self, spawns: Vec<(usize, Launch)>, then: AfterSpawn, now: Instant) {
        if spawns.is_empty() {
            return self.spawned(then, Vec::new(), now);
        }
        self.actions.push(Action::Spawn(Batch { spawns, then }));
    }

    /// The driver started a batch: `started` holds one result per
    /// process of the batch, in its order. A startup settles every
    /// extension it found in discovery order, so nothing depends on
    /// which process started first; a restart goes on (`supervise.rs`).
    pub(super) fn spawned(
        &mut self,
        then: AfterSpawn,
        started: Vec<Result<Attached, String>>,
        now: Instant,
    ) {
        let mut started = started.into_iter();
        let mut next = || started.next().unwrap_or_else(|| Err("not started".into()));
        let order = match then {
            AfterSpawn::Restart {
                ext,
                starting,
                status,
                attempt,
            } => {
                let outcome = self.attach(ext, next(), starting, now);
                return self.restarted(ext, outcome, status, attempt, now);
            }
            AfterSpawn::Startup(order) => order,
        };
        let mut loaded = 0;
        for (idx, job) in order {
            match job.and_then(|starting| self.attach(idx, next(), starting, now)) {
                Ok(()) => loaded += 1,
                Err(error) => {
                    self.exts[idx].log.line(&error);
                    self.fail(idx, error, now);
                }
            }
        }
        if let HostState::Starting(st) = &mut self.state {
            st.loaded = loaded;
        }
        self.check_startup(now);
    }

    /// What starting extension `idx` takes, under a new key (so that
    /// nothing a previous run still had in flight is taken for the new
    /// run's), and what its run needs besides its process.
    pub(super) fn spawn_job(&mut self, idx: usize) -> Result<(Launch, Starting), String> {
        let key = self.keys.fresh();
        let ext = &self.exts[idx];
        let Some(m) = &ext.manifest else {
            return Err("no valid manifest".into());
        };
        #[cfg(not(feature = "mcp"))]
        let reading = match m.protocol {
            Protocol::Zot => Reading::Frames,
            Protocol::Mcp => return Err(crate::ext::manifest::no_mcp()),
        };
        #[cfg(feature = "mcp")]
        let (reading, mcp) = match m.protocol {
            Protocol::Zot => (Reading::Frames, None),
            Protocol::Mcp => {
                let opts = McpOptions {
                    name: m.name.clone(),
                    prefix: m.prefix.clone().unwrap_or_default(),
                    client_version: self.cfg.zot_version.clone(),
                    tool_timeout: self.cfg.timeouts.tool,
                    command_timeout: self.cfg.timeouts.command,
                    probe_timeout: self.cfg.timeouts.mcp_probe,
                };
                // The answers to its requests wait within the same bound as
                // events to a zot extension.
                let pause_over = self.cfg.event_queue_limit;
                (Reading::Lines { pause_over }, Some(opts))
            }
        };
        let job = Launch {
            key,
            manifest: m.clone(),
            dir: ext.dir.clone(),
            log: ext.log.clone(),
            reading,
            #[cfg(feature = "confine")]
            confine_in: self.cfg.confine.then(|| self.cfg.cwd.clone()),
            trust_in: (ext.scope == Scope::Project && !self.cfg.trust_project)
                .then(|| self.cfg.cwd.clone()),
        };
        let starting = Starting {
            key,
            #[cfg(feature = "mcp")]
            mcp,
        };
        Ok((job, starting))
    }

    /// Extension `idx` runs as `proc` (or could not start: why): it has
    /// its hello limit.
    pub(super) fn attach(
        &mut self,
        idx: usize,
        proc: Result<Attached, String>,
        started: Starting,
        now: Instant,
    ) -> Result<(), String> {
        let proc = proc?;
        let ext = &mut self.exts[idx];
        let exec = ext.manifest.as_ref().and_then(|m| m.exec.as_deref());
        let pid = proc.pid;
        ext.log
            .line(&format!("started {} (pid {pid})", exec.unwrap_or_default()));
        let data_dir = proc.confined.map(|c| {
            ext.log.line(&format!("confined: {}", c.summary));
            c.data_dir
        });
        let deadline = later(now, self.cfg.timeouts.hello);
        ext.ready_via = None;
        ext.lost_to_builtin.clear();
        ext.phase = Phase::Running(Run {
            pid,
            stdin_open: true,
            backlog: proc.backlog,
            // Its first line, the probe, is written with this iteration's frames.
            #[cfg(feature = "mcp")]
            mcp: (started.mcp).map(|opts| Box::new(McpClient::new(opts, ext.log.clone(), now))),
            exit: ExitWatch::default(),
            data_dir,
            stage: Stage::AwaitingHello { deadline },
        });
        self.keys.attach(started.key, idx);
        Ok(())
    }

    /// Ends the startup (or reload) once none is loading, or at its deadline.
    pub(super) fn check_startup(&mut self, now: Instant) {
        // Called on every loop pass (tick): no scan once started.
        let HostState::Starting(st) = &self.state else {
            return;
        };
        if st.discovering || (now < st.deadline && self.any_starting()) {
            return;
        }
        let first = self.state.first_startup();
        let HostState::Starting(st) = std::mem::replace(&mut self.state, HostState::Done) else {
            unreachable!("checked above");
        };
        let (mut ready, mut errors) = (Vec::new(), Vec::new());
        for e in &self.exts {
            // Nothing is stopping during a startup: "starting" is loading.
            match e.state() {
                ExtensionState::Ready => ready.push(e.name.clone()),
                ExtensionState::Failed { reason } => errors.push(format!("{}: {reason}", e.name)),
                ExtensionState::Starting => e.log.line(
                    "still loading after the startup grace; \
                     its registrations count when they arrive",
                ),
                _ => {}
            }
        }
        if first {
            self.event(HostEvent::Ready {
                extensions: ready.clone(),
            });
            self.actions.push(Action::Ready(ready.clone()));
        }
        self.state = HostState::Running {
            parked: Vec::new(),
            held: st.held,
        };
        if let Some((reply, stopped)) = st.reload {
            let report = ReloadReport {
                stopped,
                loaded: st.loaded,
                ready: ready.len(),
                errors,
            };
            self.answer(reply, Ok(report));
        }
    }

    /// A registering extension is ready: it said so, or it was silent
    /// long enough (the watchdog, logged).
    pub(super) fn mark_ready(&mut self, idx: usize, via: ReadyVia, now: Instant) {
        let ext = &mut self.exts[idx];
        let Phase::Running(run) = &mut ext.phase else {
            return;
        };
        if !matches!(run.stage, Stage::Registering { .. }) {
            return;
        }
        run.stage = Stage::Ready;
        ext.supervision.ready_once = true;
        ext.ready_via = Some(via);
        if ext.supervision.remembered {
            ext.log
                .line("ready without subscribing to interception again: no longer a guard");
            ext.forget_remembered_intercept();
        }
        if via == ReadyVia::Watchdog {
            let idle = human(self.cfg.timeouts.ready_idle);
            let why = format!("no ready frame: treated as ready after {idle} of silence");
            ext.log.line(&why);
        }
        // After the first startup, every extension that becomes ready
        // (late, or after a reload) is announced.
        if !self.state.first_startup() {
            let extension = ext.name.clone();
            self.event(HostEvent::Registered { extension });
        }
        self.check_startup(now);
    }

    /// Extension `idx` failed: without a process, until a reload; else its
    /// handshake failed: it is killed and its exit awaited. Either way it
    /// owns no names and is owed nothing.
    pub(super) fn fail(&mut self, idx: usize, reason: String, now: Instant) {
        let extension = self.exts[idx].name.clone();
        let error = reason.clone();
        self.event(HostEvent::ExtensionFailed { extension, error });
        let ext = &mut self.exts[idx];
        if let Phase::Running(run) = &mut ext.phase {
            ext.log.line(&format!("failed: {reason}"));
            let signal = libc::SIGKILL;
            self.actions.push(Action::Signal { ext: idx, signal });
            run.stage = Stage::Killed(reason);
        } else {
            ext.phase = Phase::gone(End::Failed(reason));
        }
        self.check_startup(now);
    }

    /// Its process exited with `status` (docs/PROTOCOL.md#exits): handled
    /// at once when its stdout has ended, else once the frames still in
    /// its pipe have come (`exit.rs`).
    pub(super) fn exit_found(&mut self, idx: usize, status: ExitStatus, now: Instant) {
        let Phase::Running(run) = &mut self.exts[idx].phase else {
            return;
        };
        if run.exit.stdout_ended() {
            return self.exited(idx, status, now);
        }
        if run.exit.exit_status().is_none() {
            run.exit.exited(now, status, &self.cfg.timeouts);
        }
    }

    /// Its process exited: reaped with its group; its requests fail at
    /// once, the interceptions it owes are settled as unavailable, its
    /// names leave the registries (docs/PROTOCOL.md#exits); a crash is supervised.
    pub(super) fn exited(&mut self, idx: usize, status: ExitStatus, now: Instant) {
        let mut desc = describe_status(status);
        // Frames its reader still has queued are dropped from now on: a
        // dead extension must not claim names.
        self.keys.detach(idx);
        let ext = &mut self.exts[idx];
        let gone = Phase::gone(End::Exited(desc.clone()));
        let Phase::Running(Run { stage, .. }) = std::mem::replace(&mut ext.phase, gone) else {
            unreachable!("only a running extension exits");
        };
        ext.out.clear();
        // Whatever the extension left in its group goes with it.
        self.actions.push(Action::Reap(idx));
        ext.log.line(&format!("exited ({desc})"));
        let (notes, events) = (ext.dropped_notes.total, ext.dropped_events.total);
        if notes > 0 {
            ext.log.line(&format!(
                "{notes} notes and panel updates dropped in total: the embedder did not take them"
            ));
        }
        if events > 0 {
            ext.log.line(&format!(
                "dropped {events} events in total: its queue was full"
            ));
        }
        // How this run ended, when that was a crash (docs/PROTOCOL.md#supervision): a failed
        // start, a non-zero status or a signal the host did not send.
        let failed = !status.success();
        let crash = match stage {
            Stage::Stopping { .. } => None,
            Stage::AwaitingHello { .. } => {
                let error = format!("exited before hello ({desc})");
                self.fail(idx, error.clone(), now);
                failed.then_some(error)
            }
            Stage::Killed(why) => {
                ext.phase = Phase::gone(End::Failed(why.clone()));
                // What its requests fail with: why we killed it.
                desc = format!("killed: {why}");
                Some(why)
            }
            Stage::Registering { .. } | Stage::Ready => {
                let extension = ext.name.clone();
                let status = desc.clone();
                self.event(HostEvent::ExtensionExited { extension, status });
                failed.then(|| desc.clone())
            }
        };
        let guard_why = match crash {
            Some(how) => {
                self.crashed(idx, &how, now);
                format!("crashed: {how}")
            }
            None => format!("exited: {desc}"),
        };
        // Names first: a chain finished below may dispatch a tool, and it
        // must go to the next registrant, not to this extension.
        self.commands.remove_rank(idx);
        self.tools.remove_rank(idx);
        let ext = &mut self.exts[idx];
        (ext.commands_claimed, ext.tools_claimed) = Default::default();
        let why = HostError::Exited {
            extension: ext.name.clone(),
            status: desc,
        };
        self.release(idx, Some(&why), &guard_why, now);
        self.check_startup(now);
    }

    /// Settles the interceptions extension `idx` owes as unavailable
    /// (`why`); with an `error`, fails its commands and tool calls too.
    pub(super) fn release(
        &mut self,
        idx: usize,
        error: Option<&HostError>,
        why: &str,
        now: Instant,
    ) {
        for owed in self.pending.fail_ext(idx, error, &mut self.actions) {
            match owed {
                Owed::Guard(chain, pos) => {
                    let answer = self.exts[idx].unavailable(why);
                    self.answer_guard(chain, pos, answer, now);
                }
                Owed::Tool(job, error) => self.finish_job(job, Err(error), now),
            }
        }
        // It can take no answers: the tool calls it made are abandoned.
        #[cfg(feature = "ext-calls")]
        if error.is_some() {
            self.drop_calls_of(idx, now);
        }
    }

    /// Sends `shutdown` to every running extension and starts its
    /// signal ladder: a draining shutdown becomes `Stopping`, a reload
    /// that waited for its requests counts the extensions it stopped.
    /// `advance` finishes once all are gone.
    pub(super) fn begin_stop(&mut self, now: Instant) {
        let stopped = self.stop_all(now);
        let state = std::mem::replace(&mut self.state, HostState::Done);
        self.state = match state {
            HostState::Draining { replies, .. } => HostState::Stopping { replies },
            HostState::Reloading { reply, held, .. } => HostState::Reloading {
                reply,
                stopped: Some(stopped),
                held,
            },
            other => other,
        };
    }

    /// Sends `shutdown` to every extension not stopping yet; returns how many.
    fn stop_all(&mut self, now: Instant) -> usize {
        self.cancel_restarts();
        let mut stopped = 0;
        for ext in &mut self.exts {
            if matches!(ext.stage(), None | Some(Stage::Stopping { .. })) {
                continue;
            }
            stopped += 1;
            // Queued after every event already emitted to it.
            ext.send(&HostFrame::Shutdown, now);
            let Phase::Running(run) = &mut ext.phase else {
                continue;
            };
            let term_at = match run.stage {
                // Without hello it has nothing to finish, and its hello
                // deadline may be far: stopped at once (docs/PROTOCOL.md#shutdown).
                Stage::AwaitingHello { .. } => now,
                _ => later(now, self.cfg.timeouts.shutdown_grace),
            };
            let hello = !matches!(run.stage, Stage::AwaitingHello { .. } | Stage::Killed(_));
            run.stage = Stage::Stopping {
                hello,
                signal: Some((term_at, libc::SIGTERM)),
            };
        }
        stopped
    }

    /// Every extension is gone: a shutdown is done, a reload starts them
    /// again.
    pub(super) fn stopped(&mut self, now: Instant) {
        match std::mem::replace(&mut self.state, HostState::Done) {
            HostState::Stopping { replies } => {
                // Before the replies: an embedder's last line (rpc's
                // `shutdown` response) comes after every event.
                self.events.report_drops(&mut self.actions);
                for reply in replies {
                    self.answer(reply, Ok(()));
                }
            }
            HostState::Reloading {
                reply,
                stopped,
                held,
            } => {
                self.fail_all(HostError::Reloaded, now);
                self.commands.clear();
                self.tools.clear();
                self.exts.clear();
                self.keys.clear();
                self.start_all(Some((reply, stopped.unwrap_or(0))), held, now);
            }
            other => self.state = other,
        }
    }

    /// Fails every request sent to extensions and every chain.
    fn fail_all(&mut self, error: HostError, now: Instant) {
        let owed: Vec<_> = self.pending.drain().collect();
        for waiter in owed {
            waiter.fail(error.clone(), &mut self.actions);
        }
        for chain in self.chains.take_all() {
            if let Then::Reply(reply) = chain.then {
                self.answer(reply, Err(error.clone()));
            }
        }
        // Tool calls in any state, their chains' included.
        self.fail_jobs(&error, now);
    }

    /// Stops at once: whatever is accepted fails now (a second Ctrl-C).
    pub(super) fn shutdown_now(&mut self, reply: Reply<()>, now: Instant) {
        let mut replies = vec![reply];
        let (mut held, mut parked, mut reload) = (Vec::new(), Vec::new(), None);
        // A startup still running (first or after a reload) ends with the
        // stop, and so does a reload still waiting for its requests.
        match std::mem::replace(&mut self.state, HostState::Done) {
            HostState::Starting(st) => (held, reload) = (st.held, st.reload.map(|r| r.0)),
            HostState::Running { parked: p, held: h } => (held, parked) = (h, p),
            HostState::Reloading { reply, held: h, .. } => (held, reload) = (h, Some(reply)),
            HostState::Draining {
                replies: r,
                parked: p,
            } => {
                replies.extend(r);
                parked = p;
            }
            // Already stopping: only the replies are added, after the earlier.
            HostState::Stopping { replies: earlier } => {
                replies = earlier.into_iter().chain(replies).collect();
            }
            HostState::Done => {}
        }
        let held = held.into_iter().chain(parked.into_iter().map(|(_, r)| r));
        for req in held {
            match req {
                Request::Shutdown { reply } | Request::ShutdownNow { reply } => replies.push(reply),
                other => self.refuse(other, HostError::Cancelled),
            }
        }
        self.fail_all(HostError::Cancelled, now);
        if let Some(reload) = reload {
            self.answer(reload, Err(HostError::Cancelled));
        }
        self.stop_all(now);
        self.state = HostState::Stopping { replies };
    }
}
