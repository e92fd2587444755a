//! The host loop: one thread that owns every extension, pending request
//! and deadline, and `select!`s over the extensions' frames and the
//! embedder's requests (SPEC 3). The other files add one concern each.

mod embedder;
mod exposure;
mod frames;
mod jobs;
mod lifecycle;
mod oversize;
mod pending;
mod requests;
mod supervise;
mod time;

use crate::config::HostConfig;
use crate::discovery::Scope;
use crate::intercept::Chain;
use crate::log::ExtLog;
use crate::manifest::Manifest;
use crate::process::{ExtProcess, InboundMsg};
use crate::registry::Registry;
use crate::types::{
    CommandInfo, ExtensionInfo, HostEvent, InFlight, NameConflict, ReadyLatch, ReloadReport, Reply,
    Request, Snapshot, ToolInfo,
};
use crossbeam_channel::{select, Receiver, Sender};
use embedder::EventQueue;
use pending::Pending;
use requests::Then;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use supervise::Supervision;

/// How often the loop checks that extensions live, while requests wait
/// and while idle: a grandchild holding stdout open hides an exit.
const LIVENESS_EVERY: Duration = Duration::from_millis(100);
const LIVENESS_IDLE: Duration = Duration::from_secs(1);

/// After an EOF before `hello`, how long the process may take to exit
/// (and be reported with its status) before it is failed for the EOF.
const EOF_GRACE: Duration = Duration::from_millis(100);

/// The same once it said `hello`: longer, so that an extension that
/// closes stdout on its way out is not taken for one that runs on mute.
const EOF_RUNNING_GRACE: Duration = Duration::from_secs(2);

/// After an exit found by polling, how long the loop waits for the
/// next frame still in its pipe (the EOF comes after the last) before
/// it handles the exit: a grandchild may hold stdout open.
const EXIT_GRACE: Duration = Duration::from_millis(250);

/// The most an exit found by polling waits for frames in all: a pipe
/// drains well within it, a grandchild that keeps writing does not.
const EXIT_DRAIN_MAX: Duration = Duration::from_secs(2);

/// Parsed frames that may wait between the reader threads and the loop.
/// Beyond it a reader blocks, its extension's stdout pipe fills and the
/// extension blocks in its write: backpressure, not memory.
const INBOUND_FRAMES: usize = 256;

/// The caps on what one extension registers, shared with
/// `zot ext check`.
pub(crate) use crate::registry::{MAX_NAMES, MAX_NAME_BYTES};

/// Where an extension is in its life (SPEC 3.5, 3.13-3.15, 12). Each
/// phase owns its deadline; only a running one has a process.
enum Phase {
    Running(Run),
    /// No process: how it ended, and when it restarts after a crash.
    Gone {
        end: End,
        restart_at: Option<Instant>,
    },
}

struct Run {
    proc: ExtProcess,
    /// When to look again at its exit, and why.
    exit_check: Option<(Instant, ExitCheck)>,
    /// Its stdout closed: failed then unless it has exited (it can
    /// never answer again).
    eof_at: Option<Instant>,
    /// A write to its stdin failed: what it owes fails then, unless it
    /// has exited (then its exit decides, once its pipe is read).
    deaf_at: Option<Instant>,
    stage: Stage,
}

enum ExitCheck {
    /// It should exit soon: poll whether it did, the step doubling.
    Poll(Duration),
    /// Polling found it exited, at this time: its last frames are awaited.
    Drain(Instant),
}

enum Stage {
    /// Failed at `deadline` without `hello` (or at `eof_at`).
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
    /// Skills and a theme only (SPEC 14.6): nothing to start.
    Bundle,
    /// A project extension not trusted (SPEC 15): why, and how to trust it.
    Untrusted(String),
    Failed(String),
    Exited(String),
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
    intercept: Vec<String>,
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
    /// How this run became ready: `ready` or `watchdog`.
    ready_via: Option<&'static str>,
    /// Names it registered that a built-in owns, each once: `(kind, name)`.
    lost_to_builtin: Vec<(&'static str, String)>,
    /// Its hello listed `tool_cancel` / `call_tool` (SPEC 13.1).
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
    fn run(&self) -> Option<&Run> {
        match &self.phase {
            Phase::Running(run) => Some(run),
            Phase::Gone { .. } => None,
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
        matches!(
            self.stage(),
            Some(Stage::AwaitingHello { .. } | Stage::Registering { .. })
        )
    }

    /// Its state as listed, with why it failed or how it exited.
    fn state(&self) -> (&'static str, Option<&String>) {
        match &self.phase {
            Phase::Running(r) => match &r.stage {
                Stage::Ready | Stage::Stopping { hello: true, .. } => ("ready", None),
                Stage::Killed(why) => ("failed", Some(why)),
                _ => ("starting", None),
            },
            Phase::Gone { end, .. } => match end {
                End::Disabled => ("disabled", None),
                End::Bundle => ("bundle", None),
                End::Untrusted(why) => ("untrusted", Some(why)),
                End::Failed(why) => ("failed", Some(why)),
                End::Exited(how) => ("exited", Some(how)),
            },
        }
    }

    /// Its entry in a [`Snapshot`], with the names it owns.
    fn info(
        &self,
        commands: Vec<String>,
        tools: Vec<String>,
        conflicts: Vec<NameConflict>,
    ) -> ExtensionInfo {
        let (state, error) = self.state();
        // An untrusted project's skill files are not the embedder's to load.
        let untrusted = state == "untrusted";
        let provides = self
            .manifest
            .as_ref()
            .map(|m| &m.provides)
            .filter(|_| !untrusted);
        ExtensionInfo {
            name: self.name.clone(),
            version: self.version.clone(),
            scope: self.scope.as_str(),
            dir: self.dir.clone(),
            state,
            error: error.cloned(),
            pid: self.run().map(|r| r.proc.pid),
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

    /// Queues a frame, written batched at the end of the loop iteration.
    /// False when stdin is closed.
    fn send(&mut self, line: &[u8]) -> bool {
        if !self.run().is_some_and(|r| r.proc.writable()) {
            return false;
        }
        self.out.extend_from_slice(line);
        true
    }

    /// Hands what was queued this iteration to the writer thread.
    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let chunk = std::mem::take(&mut self.out);
        if let Some(r) = self.run() {
            r.proc.send(chunk);
        }
    }

    /// Bytes waiting for this extension, queued or not yet handed over.
    fn backlog(&self) -> usize {
        self.out.len() + self.run().map_or(0, |r| r.proc.queued_bytes())
    }

    /// Closes stdin once everything queued so far is written.
    fn close_stdin(&mut self) {
        self.flush();
        if let Phase::Running(r) = &mut self.phase {
            r.proc.close_stdin();
        }
    }
}

struct ChainState {
    chain: Chain,
    guards: Vec<usize>,
    /// The request id each guard was last asked under.
    ids: Vec<Option<String>>,
    then: Then,
}

enum Goal {
    Shutdown(Vec<Reply<()>>),
    Reload(Reply<ReloadReport>, usize),
}

struct Startup {
    deadline: Instant,
    reload: Option<Reply<ReloadReport>>,
    stopped: usize,
    loaded: usize,
}

struct Engine {
    cfg: HostConfig,
    cwd: String,
    /// `session_id` of every event: the embedder's, else made at start.
    session_id: String,
    /// Events emitted so far, over the host's life (SPEC 14.4).
    sequence: u64,
    /// `before_agent_start` passes so far: each has its `agent_run_id`.
    agent_runs: u64,
    events: EventQueue,
    latch: Arc<ReadyLatch>,
    inbound_tx: Sender<InboundMsg>,
    /// MCP servers' frames (SPEC 11): unbounded, because their adapter
    /// also answers some host frames itself, on the loop thread, which
    /// must never block on a channel it drains.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    mcp_inbound_tx: Sender<InboundMsg>,
    exts: Vec<Ext>,
    by_key: HashMap<u64, usize>,
    next_key: u64,
    pending: Pending,
    jobs: jobs::Jobs,
    /// Where [`crate::BuiltinReply`] sends the embedder's results.
    builtin_tx: Sender<Request>,
    chains: HashMap<u64, ChainState>,
    next_chain: u64,
    /// Commands' descriptions; tools as listed.
    commands: Registry<String>,
    tools: Registry<ToolInfo>,
    startup: Option<Startup>,
    announced: bool,
    /// The stderr lines last printed about untrusted project extensions.
    trust_notices: Vec<String>,
    goal: Option<Goal>,
    liveness_at: Option<Instant>,
    /// Requests that arrived while extensions were (re)starting.
    deferred: Vec<Request>,
    /// Commands and tools whose name was unknown while an extension was
    /// still starting: looked up again once none is, or at the deadline.
    parked: Vec<(Instant, Request)>,
    /// A graceful shutdown waits for accepted requests to finish.
    closing: Option<Vec<Reply<()>>>,
    /// So does a reload (SPEC 3.15 stops as 3.14 does).
    reload_asked: Option<Reply<ReloadReport>>,
    done: bool,
}

/// Most messages handled per loop iteration before frames are written.
const BATCH: usize = 256;

/// Yields until `ready()` or `budget` passes; with a zero budget it
/// checks once and returns ([`HostConfig::spin_before_sleep`]).
pub(crate) fn poll_briefly(budget: Duration, mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + budget;
    while !ready() && Instant::now() < until {
        std::thread::yield_now();
    }
}

/// Releases `Host::wait_ready` callers however the loop ends, even by
/// a panic (setting a set latch is a no-op).
struct ReleaseLatch(Arc<ReadyLatch>);

impl Drop for ReleaseLatch {
    fn drop(&mut self) {
        self.0.set(Vec::new());
    }
}

/// Runs the loop until shutdown.
pub(crate) fn run(
    cfg: HostConfig,
    mut requests: Receiver<Request>,
    events: Sender<HostEvent>,
    events_sent: Arc<std::sync::atomic::AtomicU64>,
    latch: Arc<ReadyLatch>,
) {
    let _release = ReleaseLatch(latch.clone());
    // Bounded: the loop only receives from it, never sends.
    let (inbound_tx, inbound) = crossbeam_channel::bounded(INBOUND_FRAMES);
    let (mcp_inbound_tx, mcp_inbound) = crossbeam_channel::unbounded();
    let session_id = match cfg.session_id.as_str() {
        "" => crate::config::new_session_id(),
        given => given.to_string(),
    };
    // The engine holds its sender: it never disconnects.
    let (builtin_tx, builtin_results) = crossbeam_channel::unbounded();
    let mut engine = Engine {
        cwd: cfg.cwd.to_string_lossy().into_owned(),
        session_id,
        sequence: 0,
        agent_runs: 0,
        events: EventQueue::new(events, cfg.event_budget, events_sent),
        cfg,
        latch,
        inbound_tx,
        mcp_inbound_tx,
        exts: Vec::new(),
        by_key: HashMap::new(),
        next_key: 0,
        pending: Pending::default(),
        jobs: jobs::Jobs::default(),
        builtin_tx,
        chains: HashMap::new(),
        next_chain: 0,
        commands: Registry::case_insensitive(),
        tools: Registry::default(),
        startup: None,
        announced: false,
        trust_notices: Vec::new(),
        goal: None,
        liveness_at: None,
        deferred: Vec::new(),
        parked: Vec::new(),
        closing: None,
        reload_asked: None,
        done: false,
    };
    engine.start_all(None, 0);
    while !engine.done {
        // The next frame or request usually follows within microseconds,
        // and waking a sleeping loop costs more (tens of µs across CPUs).
        poll_briefly(engine.cfg.spin_before_sleep, || {
            !inbound.is_empty() || !mcp_inbound.is_empty() || !requests.is_empty()
        });
        // Not an `after()` channel: no allocation per wake-up.
        let timeout = engine.next_deadline().map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        // The engine holds the inbound senders: those never disconnect.
        let hung_up = select! {
            recv(inbound) -> msg => msg.map(|m| engine.inbound(m)).is_err(),
            recv(mcp_inbound) -> msg => msg.map(|m| engine.inbound(m)).is_err(),
            recv(requests) -> req => req.map(|r| engine.request(r)).is_err(),
            recv(builtin_results) -> req => req.map(|r| engine.request(r)).is_err(),
            default(timeout) => false,
        };
        if hung_up {
            // Every handle is gone: nobody can ask for anything again.
            requests = crossbeam_channel::never();
            let reply = Box::new(|_| {});
            engine.request(Request::Shutdown { reply });
        }
        // Take what else is already waiting before handing frames to the
        // writer threads, so a burst costs one wake-up per extension.
        for _ in 0..BATCH {
            if let Ok(msg) = inbound.try_recv().or_else(|_| mcp_inbound.try_recv()) {
                engine.inbound(msg);
            } else if let Ok(req) = requests.try_recv().or_else(|_| builtin_results.try_recv()) {
                engine.request(req);
            } else {
                break;
            }
        }
        engine.tick(Instant::now());
        engine.check_stopped();
        engine.run_deferred();
        engine.run_parked(Instant::now());
        engine.check_drained();
        for ext in &mut engine.exts {
            ext.flush();
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

impl Engine {
    /// The names extension `idx` registered and lost, to a built-in or to
    /// an extension of higher precedence.
    fn conflicts(&self, idx: usize) -> Vec<NameConflict> {
        let builtin = (self.exts[idx].lost_to_builtin.iter()).map(|(kind, name)| NameConflict {
            kind,
            name: name.clone(),
            winner: "built-in".into(),
        });
        // The registries hold different things: their losses are alike.
        let lost = |kind: &'static str, lost: Vec<(String, usize)>| {
            lost.into_iter().map(move |(name, rank)| NameConflict {
                kind,
                name,
                winner: self.exts[rank].name.clone(),
            })
        };
        let commands = lost("command", self.commands.lost_by(idx));
        builtin
            .chain(commands)
            .chain(lost("tool", self.tools.lost_by(idx)))
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
