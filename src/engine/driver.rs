//! The driver: the one wait of the loop and the engine's only way to the
//! world. The wait is a crossbeam [`Select`] over the embedder's
//! requests, the built-in tools' results, the driving thread's own
//! channel and each extension's channel (its reader's frames, its
//! writer's failure, its waiter's word that it exited: `process/mod.rs`),
//! with the engine's next deadline as its timeout; the ready watchdog,
//! the intercept and tool deadlines and every other timeout are such
//! deadlines, and no exit is polled for. A [`Driver`] holds the
//! engine, the channels it waits on and the extensions' processes (in a
//! table indexed like the engine's extensions, with the spawner that
//! starts them); [`Driver::turn`] waits once, hands the engine what came
//! (a few messages from each source in turn, so that one extension's
//! flood cannot starve the others or the requests) and carries out the
//! [`Action`]s it queued, so whichever thread waits for an answer can run
//! the loop (one at a time: it takes `&mut self`), and [`run`] is the
//! host thread doing that until the host is done. The file system is
//! read here too: discovery (with the trust store), the extensions' log
//! files opened, `exec` resolved on `$PATH` and the confinement's paths.

use super::action::{Action, Attached, Backlog, Confined, Discovered, Launch, Probe, Probes};
use super::Engine;
use crate::config::HostConfig;
use crate::ext::discovery::{self, Scope, Status};
use crate::ext::trust;
use crate::log::{inert, ExtLog};
#[cfg(feature = "confine")]
use crate::process::confine::{Confiner, Places};
use crate::process::spawner::Spawner;
use crate::process::{ExtProcess, Inbound, InboundMsg, Spawn};
use crate::types::{HostEvent, ReadyLatch, Request};
use crossbeam_channel::{Receiver, RecvError, Select, Sender, TryRecvError};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Most messages handled per turn before frames are written.
pub(crate) const BATCH: usize = 256;

/// Called after a turn that answered a request, sent a host event or
/// released `wait_ready`: it wakes the threads that wait for another
/// thread's turns (`host.rs`).
pub(crate) type Progress = Arc<dyn Fn() + Send + Sync>;

/// What the loop is fed from and reports to, made by `host.rs`.
pub(crate) struct Channels {
    pub(crate) requests: Receiver<Request>,
    pub(crate) events: Sender<HostEvent>,
    /// How many events were sent so far ([`crate::HostHandle::events_sent`]).
    pub(crate) events_sent: Arc<AtomicU64>,
    pub(crate) latch: Arc<ReadyLatch>,
    pub(crate) progress: Progress,
}

/// The engine with the channels it is fed from and the processes its
/// actions act on.
pub(crate) struct Driver {
    engine: Engine,
    requests: Receiver<Request>,
    /// The embedder's answers to [`crate::HostEvent::BuiltinCall`].
    #[cfg(feature = "ext-calls")]
    builtin_results: Receiver<Request>,
    /// Releases `Host::wait_ready` callers however the driver ends.
    release: ReleaseLatch,
    /// Where host events go, and how many were sent so far, for
    /// [`crate::HostHandle::events_sent`]: read in a reply callback it
    /// counts exactly the events sent before that reply.
    events: Sender<HostEvent>,
    events_sent: Arc<AtomicU64>,
    progress: Progress,
    /// Extension `i`'s process, while it runs.
    procs: Vec<Option<ExtProcess>>,
    /// The extension whose channel a turn looks at first: the next one
    /// each turn.
    first: usize,
    /// The engine's action queue between turns (its capacity is kept).
    spare: Vec<Action>,
    /// The stderr lines last printed about untrusted project extensions
    /// and `-e` directories not started.
    notices: Vec<String>,
    /// Each confined extension's permissions, resolved at its first start.
    #[cfg(feature = "confine")]
    confiner: Confiner,
    /// Starts extension processes. Last, so it is dropped after every
    /// process it started (its threads' end would kill them, docs/PROTOCOL.md#shutdown).
    spawner: Spawner,
}

#[cfg_attr(not(test), allow(dead_code))] // For a caller driving the loop itself.
impl Driver {
    /// Builds the engine and starts every extension (on the spawner's
    /// threads: see `process/mod.rs` on `PR_SET_PDEATHSIG`).
    pub(crate) fn start(cfg: HostConfig, channels: Channels) -> Driver {
        let Channels {
            requests,
            events,
            events_sent,
            latch,
            progress,
        } = channels;
        let release = ReleaseLatch(latch);
        // The engine holds its sender: it never disconnects.
        #[cfg(feature = "ext-calls")]
        let (builtin_tx, builtin_results) = crossbeam_channel::unbounded();
        let mut driver = Driver {
            engine: Engine::new(
                cfg,
                events.clone(),
                #[cfg(feature = "ext-calls")]
                builtin_tx,
            ),
            requests,
            #[cfg(feature = "ext-calls")]
            builtin_results,
            release,
            events,
            events_sent,
            progress,
            procs: Vec::new(),
            first: 0,
            spare: Vec::new(),
            notices: Vec::new(),
            #[cfg(feature = "confine")]
            confiner: Confiner::default(),
            spawner: Spawner::new(),
        };
        let now = Instant::now();
        driver.engine.start_all(None, Vec::new(), now);
        driver.act(now);
        driver
    }

    /// How a [`crate::BuiltinReply`] the engine hands out runs the loop
    /// while it waits for its answer: a caller that drives the loop itself
    /// may be the only thread that could.
    #[cfg(feature = "ext-calls")]
    pub(crate) fn drive_builtin_replies(mut self, drive: crate::types::Drive) -> Driver {
        self.engine.builtin_drive = Some(drive);
        self
    }

    /// Whether the host is done: shut down, every extension reaped.
    pub(crate) fn is_done(&self) -> bool {
        self.engine.is_done()
    }

    /// Hands a request to the engine directly (the caller drives the
    /// loop itself), in order with what it already took; what it queues
    /// for extensions is written at once.
    pub(crate) fn request(&mut self, req: Request) {
        let now = Instant::now();
        self.engine.request(req, now);
        self.settle(now);
    }

    /// Waits once, until a frame or request comes, the engine's next
    /// deadline, or `deadline`, whichever is first; handles what came and
    /// whatever else is already waiting; then hands the frames queued to
    /// the writers. False once the host is done.
    pub(crate) fn turn(&mut self, deadline: Option<Instant>) -> bool {
        self.turn_with(deadline, &crossbeam_channel::never::<()>())
            .0
    }

    /// When the wait of a turn ends at the latest: the engine's next
    /// deadline or `deadline`, whichever is first.
    fn wake_at(&self, deadline: Option<Instant>) -> Option<Instant> {
        [self.engine.next_deadline(), deadline]
            .into_iter()
            .flatten()
            .min()
    }

    /// [`Driver::turn`] that also ends for a message on `extra`, the
    /// driving thread's own channel (a CLI surface's stdin lines, signals,
    /// replies): the message, or its error once `extra` is disconnected,
    /// comes back with whether the host is still running. The one wait
    /// of the loop: [`Driver::turn`] is this with a channel that never
    /// has anything.
    pub(crate) fn turn_with<T>(
        &mut self,
        deadline: Option<Instant>,
        extra: &Receiver<T>,
    ) -> (bool, Option<Result<T, RecvError>>) {
        if self.engine.is_done() {
            return (false, None);
        }
        let mut own = take_own(extra);
        if own.is_none() {
            self.wait(deadline, extra);
            own = take_own(extra);
        }
        // One clock read for all that came in this wake-up.
        let now = Instant::now();
        self.take_waiting(now);
        (!self.engine.is_done(), own)
    }

    /// Waits until a message waits on a channel or `extra`, or the
    /// engine's next deadline or `deadline` passes. It may return early
    /// (crossbeam says a select may): the turn then finds nothing.
    fn wait<T>(&mut self, deadline: Option<Instant>, extra: &Receiver<T>) {
        let wake = self.wake_at(deadline);
        let mut select = Select::new();
        select.recv(&self.requests);
        #[cfg(feature = "ext-calls")]
        select.recv(&self.builtin_results);
        select.recv(extra);
        for inbound in self.procs.iter().flatten().filter_map(ExtProcess::inbound) {
            select.recv(inbound);
        }
        match wake {
            Some(at) => drop(select.ready_deadline(at)),
            None => drop(select.ready()),
        }
    }

    /// Hands the engine what is waiting, up to [`BATCH`] messages, before
    /// handing frames to the writer threads, so a burst costs one write
    /// per extension; then settles. Each pass takes one message from each
    /// source (the requests, the built-in results, each extension, the
    /// first of them a different one each turn): a flood from one source
    /// waits its turn behind the others.
    fn take_waiting(&mut self, now: Instant) {
        let mut taken = 0;
        let n = self.procs.len();
        self.first = if n == 0 { 0 } else { (self.first + 1) % n };
        while taken < BATCH {
            let before = taken;
            match self.requests.try_recv() {
                Ok(req) => {
                    self.engine.request(req, now);
                    taken += 1;
                }
                Err(TryRecvError::Disconnected) => self.all_handles_gone(now),
                Err(TryRecvError::Empty) => {}
            }
            #[cfg(feature = "ext-calls")]
            if let Ok(req) = self.builtin_results.try_recv() {
                self.engine.request(req, now);
                taken += 1;
            }
            for i in 0..n {
                let idx = (self.first + i) % n;
                let msg = self.procs.get_mut(idx).and_then(Option::as_mut);
                if let Some(msg) = msg.and_then(ExtProcess::take_inbound) {
                    self.inbound(msg, now);
                    taken += 1;
                }
            }
            if taken == before {
                break;
            }
        }
        self.settle(now);
    }

    /// Every handle is gone: nobody can ask for anything again.
    fn all_handles_gone(&mut self, now: Instant) {
        self.requests = crossbeam_channel::never();
        let reply = Box::new(|_| {});
        self.engine.request(Request::Shutdown { reply }, now);
    }

    /// Hands the engine what an extension's threads sent; the end of its
    /// stdout and its exit with what its process then looks like (reaped
    /// when it has exited: after [`Inbound::Exited`] that does not wait).
    fn inbound(&mut self, msg: InboundMsg, now: Instant) {
        let probe = matches!(msg.msg, Inbound::Eof | Inbound::Exited)
            .then(|| self.engine.ext_of(msg.key).map(|idx| self.probe(idx)))
            .flatten();
        self.engine.inbound(msg, probe, now);
    }

    /// The pass after a turn's inputs, then its actions.
    fn settle(&mut self, now: Instant) {
        self.settle_engine(now);
        self.act(now);
    }

    /// [`Engine::settle`], with the processes it asked about looked at
    /// first; then the journal records of the turn go to disk with one
    /// sync, before any of the turn's effects (its frames are queued for
    /// the writers only after it, and the calls' replies wait for it).
    fn settle_engine(&mut self, now: Instant) {
        let probes = self.probes(now);
        self.engine.settle(now, &probes);
        self.sync_journal(now);
        self.engine.queue_writes();
    }

    /// Syncs the records the engine buffered and hands it the outcome,
    /// until none are left (a failed sync fails calls, which journals
    /// their end in turn).
    #[cfg(feature = "journal")]
    fn sync_journal(&mut self, now: Instant) {
        let Some(journal) = self.engine.cfg.opened_journal.clone() else {
            return;
        };
        while journal.has_pending() {
            let synced = journal.sync();
            self.engine.journal_synced(synced, now);
        }
    }

    #[cfg(not(feature = "journal"))]
    fn sync_journal(&mut self, _: Instant) {}

    /// The processes the engine's tick at `now` asks about.
    fn probes(&mut self, now: Instant) -> Probes {
        let due: Vec<usize> = self.engine.probes_due(now).collect();
        due.into_iter().map(|i| (i, self.probe(i))).collect()
    }

    /// What extension `idx`'s process looks like now (reaping it if it
    /// exited).
    fn probe(&mut self, idx: usize) -> Probe {
        match self.procs.get_mut(idx).and_then(Option::as_mut) {
            Some(proc) => Probe {
                exited: proc.try_wait(),
                stdout_held: proc.stdout_held(),
            },
            None => Probe::UNSEEN,
        }
    }

    /// Carries out what the engine queued, in order. What a discovery
    /// found and the results of a batch of starts go back to the engine,
    /// which settles again (it may queue more: the starts of what was
    /// found, the first lines to an MCP server).
    fn act(&mut self, now: Instant) {
        loop {
            let spare = std::mem::take(&mut self.spare);
            let mut actions = self.engine.take_actions(spare);
            if actions.is_empty() {
                self.spare = actions;
                return;
            }
            let mut answered = false;
            let mut told = false;
            for action in actions.drain(..) {
                told |= matches!(
                    action,
                    Action::Reply(_) | Action::Event(_) | Action::Ready(_)
                );
                answered |= self.carry_out(action, now);
            }
            self.spare = actions;
            if told {
                (self.progress)();
            }
            if answered {
                self.settle_engine(now);
            }
        }
    }

    /// One action; true when it handed the engine an answer (what was
    /// discovered or started).
    fn carry_out(&mut self, action: Action, now: Instant) -> bool {
        fn proc(procs: &mut [Option<ExtProcess>], idx: usize) -> Option<&mut ExtProcess> {
            procs.get_mut(idx).and_then(Option::as_mut)
        }
        match action {
            Action::Write { ext, bytes } => {
                if let Some(p) = proc(&mut self.procs, ext) {
                    p.send(bytes);
                }
            }
            Action::CloseStdin(ext) => {
                if let Some(p) = proc(&mut self.procs, ext) {
                    p.close_stdin();
                }
            }
            Action::Signal { ext, signal } => {
                if let Some(p) = proc(&mut self.procs, ext) {
                    p.signal_group(signal);
                }
            }
            Action::Reap(ext) => {
                if let Some(p) = self.procs.get_mut(ext).and_then(Option::take) {
                    p.finish();
                }
            }
            Action::Reply(reply) => reply(),
            Action::Event(event) => {
                if self.events.send(event).is_ok() {
                    self.events_sent.fetch_add(1, Ordering::SeqCst);
                }
            }
            Action::Ready(ready) => self.release.0.set(ready),
            Action::Discover => {
                let found = self.discover();
                self.engine.discovered(found, now);
                return true;
            }
            Action::Spawn(batch) => {
                let (exts, launches): (Vec<usize>, Vec<_>) = batch.spawns.into_iter().unzip();
                // What cannot be prepared fails in its place; the rest
                // starts all at once.
                let mut spawns = Vec::new();
                let prepared: Vec<_> = (launches.into_iter())
                    .map(|launch| {
                        let (spawn, shown) = self.prepare(launch)?;
                        spawns.push(spawn);
                        Ok::<_, String>(shown)
                    })
                    .collect();
                let mut results = self.spawner.spawn_all(spawns).into_iter();
                let started = exts.into_iter().zip(prepared).map(|(idx, prepared)| {
                    let (exe, confined) = prepared?;
                    let result = results
                        .next()
                        .unwrap_or_else(|| Err(io::ErrorKind::Other.into()));
                    let proc = result.map_err(|e| format!("cannot start {exe}: {e}"))?;
                    let attached = Attached {
                        pid: proc.pid,
                        confined,
                        backlog: Backlog(proc.backlog()),
                    };
                    if self.procs.len() <= idx {
                        self.procs.resize_with(idx + 1, || None);
                    }
                    // A process left there was reaped: dropping it ends its group.
                    self.procs[idx] = Some(proc);
                    Ok(attached)
                });
                let started = started.collect();
                self.engine.spawned(batch.then, started, now);
                return true;
            }
        }
        false
    }

    /// Finds the extensions to start (docs/PROTOCOL.md#discovery) and opens their logs.
    /// The trust notices and those of `-e` directories shadowed by another
    /// go to stderr once, and after a reload only those that are new;
    /// a shadowed copy is noted in the log of the extension that shadows
    /// it and not handed over.
    fn discover(&mut self) -> Vec<Discovered> {
        let cfg = &self.engine.cfg;
        let found = discovery::discover_with(
            &cfg.ext_paths,
            &cfg.cwd,
            &cfg.zot_home,
            cfg.discover,
            cfg.trust_project,
        );
        let mut notices = discovery::trust_notices(&found, &cfg.cwd);
        // Both directories were asked for by name: say which did not start.
        for f in found.iter().filter(|f| f.scope == Scope::Explicit) {
            if let Status::Shadowed { by } = &f.status {
                if f.dir.canonicalize().ok() == by.canonicalize().ok() {
                    continue; // one directory given twice
                }
                let (dir, by) = (f.dir.display(), by.display());
                let line = format!("zot: {dir} not started: {by} has its extension name");
                notices.push(inert(&line).into_owned());
            }
        }
        if notices != self.notices {
            for line in notices.iter().filter(|l| !self.notices.contains(l)) {
                eprintln!("{line}");
            }
            self.notices = notices;
        }
        let logs = discovery::logs_dir(&cfg.zot_home);
        let mut out = Vec::new();
        for found in found {
            let name = match &found.manifest {
                Some(m) => m.name.clone(),
                None => (found.dir.file_name())
                    .map_or_else(|| "unknown".into(), |n| n.to_string_lossy().into_owned()),
            };
            #[cfg(feature = "bundles")]
            let bundle = found.manifest.as_ref().is_some_and(|m| m.is_bundle());
            let log = match found.status {
                // A bundle runs nothing, so it has nothing to log; nothing
                // of an untrusted extension's is written to disk.
                Status::Invalid(_) | Status::Untrusted(_) => ExtLog::stderr(&name),
                #[cfg(feature = "bundles")]
                _ if bundle => ExtLog::stderr(&name),
                _ => ExtLog::open(&logs, &name, cfg.log_rotate_bytes),
            };
            if let Status::Shadowed { by } = &found.status {
                let (dir, by) = (found.dir.display(), by.display());
                log.line(&format!("not started: {dir} is shadowed by {by}"));
                continue;
            }
            out.push(Discovered { name, found, log });
        }
        out
    }

    /// What starts `launch`: its `exec` resolved and its confinement
    /// built, with the program as its start's error names it and what
    /// the confinement allows; else why it cannot start.
    fn prepare(&self, launch: Launch) -> Result<(Spawn, (String, Option<Confined>)), String> {
        let Launch {
            key,
            manifest: m,
            dir,
            log,
            reading,
            #[cfg(feature = "confine")]
            confine_in,
            trust_in,
        } = launch;
        // Every start of a project extension, restarts included, is
        // decided here: what runs is what was trusted.
        if let Some(project) = &trust_in {
            trust::check_start(&self.engine.cfg.zot_home, project, &dir, &m)?;
        }
        let exe = m.resolve_exec(&dir)?;
        #[cfg(feature = "confine")]
        let confine = match confine_in {
            Some(cwd) => {
                let places = Places::new(&dir, &cwd, &self.engine.cfg.zot_home);
                Some(self.confiner.confinement(&m, &exe, &places, key)?)
            }
            None => None,
        };
        #[cfg(feature = "confine")]
        let confined = (confine.as_ref()).map(|c| Confined {
            summary: c.summary.clone(),
            data_dir: c.data_dir.clone(),
        });
        #[cfg(not(feature = "confine"))]
        let confined = None;
        let shown = (exe.display().to_string(), confined);
        let spawn = Spawn {
            key,
            name: m.name,
            exe,
            args: m.args,
            dir,
            log,
            reading,
            #[cfg(feature = "confine")]
            confine,
        };
        Ok((spawn, shown))
    }

    /// Turns until `until()` holds (checked before each turn), `deadline`
    /// passes or the host is done.
    pub(crate) fn run_until(&mut self, mut until: impl FnMut() -> bool, deadline: Option<Instant>) {
        while !until() && !self.engine.is_done() && deadline.is_none_or(|d| Instant::now() < d) {
            self.turn(deadline);
        }
    }
}

/// The driving thread's own message, if one waits, or the error of its
/// disconnected channel.
fn take_own<T>(extra: &Receiver<T>) -> Option<Result<T, RecvError>> {
    match extra.try_recv() {
        Ok(msg) => Some(Ok(msg)),
        Err(TryRecvError::Disconnected) => Some(Err(RecvError)),
        Err(TryRecvError::Empty) => None,
    }
}

/// Releases `Host::wait_ready` callers however the driver ends, even by
/// a panic (setting a set latch is a no-op).
struct ReleaseLatch(Arc<ReadyLatch>);

impl Drop for ReleaseLatch {
    fn drop(&mut self) {
        self.0.set(Vec::new());
    }
}

/// Runs the loop on this thread until shutdown.
pub(crate) fn run(cfg: HostConfig, channels: Channels) {
    let mut driver = Driver::start(cfg, channels);
    while driver.turn(None) {}
}

/// Whichever thread waits may drive the loop: the driver moves between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Driver>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Snapshot;
    use std::sync::Mutex;
    use std::time::Duration;

    fn driver() -> (Driver, Sender<Request>, Receiver<HostEvent>) {
        let dir = std::env::temp_dir().join(format!("zot-driver-{}", std::process::id()));
        let mut cfg = HostConfig::new(dir.clone(), dir);
        cfg.discover = false;
        let (tx, requests) = crossbeam_channel::unbounded();
        let (events_tx, events) = crossbeam_channel::unbounded();
        let channels = Channels {
            requests,
            events: events_tx,
            events_sent: Arc::default(),
            latch: Arc::default(),
            progress: Arc::new(|| {}),
        };
        (Driver::start(cfg, channels), tx, events)
    }

    #[test]
    fn the_calling_thread_turns_the_loop_until_its_reply_came() {
        let (mut driver, _tx, events) = driver();
        let got: Arc<Mutex<Option<Snapshot>>> = Arc::default();
        let slot = got.clone();
        driver.request(Request::List {
            reply: Box::new(move |r| *slot.lock().unwrap() = r.ok()),
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let came = || got.lock().unwrap().is_some();
        driver.run_until(came, Some(deadline));
        assert!(came(), "no reply before the deadline");
        assert!(matches!(events.try_recv(), Ok(HostEvent::Ready { .. })));
        // Nothing more comes: the deadline ends the wait.
        let soon = Some(Instant::now() + Duration::from_millis(5));
        driver.run_until(|| false, soon);
        assert!(!driver.is_done() && soon.is_some_and(|d| Instant::now() >= d));
    }

    #[test]
    fn a_message_on_the_callers_own_channel_ends_the_turn() {
        let (mut driver, _tx, _events) = driver();
        let (own_tx, own) = crossbeam_channel::unbounded();
        let from = std::thread::spawn(move || own_tx.send("line").unwrap());
        // No deadline: only the message can end the wait.
        let mut came = None;
        while came.is_none() {
            let (running, msg) = driver.turn_with(None, &own);
            assert!(running, "the host stopped before the message came");
            came = msg;
        }
        assert_eq!(came, Some(Ok("line")));
        from.join().unwrap();
        // Its sender is gone: the turn says so instead of waiting.
        assert_eq!(driver.turn_with(None, &own), (true, Some(Err(RecvError))));
    }

    #[test]
    fn a_shutdown_through_the_channel_ends_the_turns() {
        let (mut driver, tx, _events) = driver();
        tx.send(Request::Shutdown {
            reply: Box::new(|_| {}),
        })
        .unwrap();
        let deadline = Some(Instant::now() + Duration::from_secs(20));
        driver.run_until(|| false, deadline);
        assert!(driver.is_done() && !driver.turn(None));
    }
}
