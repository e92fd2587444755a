//! The embedder's view. [`Host::start`] builds the engine's driver on the
//! caller's thread and every call runs the loop itself until its reply
//! comes (inline); [`Host::start_threaded`] runs the same loop on a thread
//! of its own and calls only wait (threaded). [`HostHandle`] makes the same
//! calls from any thread.
//!
//! Inline, the driver sits in one slot shared by the host and its handles:
//! a caller takes it, runs turns until its reply came, and puts it back;
//! a caller that finds it taken waits until its reply comes or the driver
//! is back (the driver wakes waiters after each turn that answered,
//! sent an event or released `wait_ready`, and when it is put back), so
//! one thread drives at a time and a request never waits for a thread
//! that does not drive. No wait here naps: each is a condition variable
//! or a channel, with the caller's deadline at most. Nothing runs
//! between calls: timers, restarts, extensions' notes and submitted
//! requests (`emit_nowait`) advance only in a call, [`Host::poll`] or
//! [`Host::next_event`], so a burst of submits is written in batches.
//!
//! An owned host ([`Host::start_owned`], the CLI surfaces') is inline
//! with one driver: only the thread that started it takes the slot;
//! other threads' calls wait as with the threaded layer. That thread
//! runs the loop in [`Host::poll_with`], which also returns for a
//! message on the caller's own channel: the loop selects on it with
//! everything else (`Driver::turn_with`).
//!
//! Without the watchdog, `PR_SET_PDEATHSIG` kills an extension when the
//! *thread* that spawned it ends (engine docs, "The host's death"); the
//! host's own spawning threads start every extension (`src/process/spawner.rs`),
//! so an embedder's thread that drives the loop and then ends takes no
//! extension with it.

use crate::config::HostConfig;
use crate::engine::driver::{self, Channels, Driver};
use crate::intercept::InterceptOutcome;
use crate::types::{
    CommandOutcome, HostError, HostEvent, InterceptRequest, ReadyLatch, ReloadReport, Reply,
    Request, Snapshot, Ticket, ToolOutcome, ToolRequest,
};
use crate::wire::protocol::EventPayload;
use crossbeam_channel::{Receiver, RecvError, Sender};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

// The panel calls (the `panels` feature).
#[cfg(feature = "panels")]
mod panels;

/// Where the inline driver is.
enum Slot {
    /// No thread runs it: the next caller takes it.
    Idle(Box<Driver>),
    /// A thread runs it (always, with the threaded layer).
    Driven,
    /// The host is done; the driver is dropped with its request channel,
    /// so later requests fail at once.
    Done,
}

/// The driver's slot, shared by the host and its handles.
struct Loop {
    slot: Mutex<Slot>,
    /// Signalled when the driver is put back, and after a turn that
    /// answered a request, sent an event or released `wait_ready`.
    turned: Condvar,
    /// Callers waiting on `turned`, changed under `slot`'s lock: only
    /// they need the signal (each one costs a futex syscall, twice per
    /// call otherwise).
    waiting: AtomicUsize,
    /// The loop runs on a thread of its own: callers only wait.
    threaded: bool,
    /// Inline, the one thread that drives ([`Host::start_owned`]); the
    /// others' calls only wait for it. `None`: any caller drives.
    owner: Option<ThreadId>,
    /// The host is being dropped: whichever thread drops it drives the
    /// shutdown, owner or not.
    released: AtomicBool,
}

impl Loop {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this thread may run the loop; a thread that may not
    /// waits for the one that does, as with the threaded layer.
    fn drives_here(&self) -> bool {
        !self.threaded
            && (self.owner.is_none_or(|o| o == std::thread::current().id())
                || self.released.load(Ordering::Relaxed))
    }

    /// Wakes the callers waiting for the driver (after a reply, an event).
    fn wake(&self) {
        let _slot = self.lock();
        self.notify();
    }

    /// Waits (the lock released meanwhile) until [`Loop::wake`] or
    /// [`Loop::notify`], or `deadline`; may return early.
    fn wait<'a>(
        &'a self,
        slot: MutexGuard<'a, Slot>,
        deadline: Option<Instant>,
    ) -> MutexGuard<'a, Slot> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let slot = match deadline {
            None => self.turned.wait(slot).unwrap_or_else(|p| p.into_inner()),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                (self.turned.wait_timeout(slot, left))
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        slot
    }

    /// Signals `turned` if anybody waits on it; call it with the lock held.
    fn notify(&self) {
        if self.waiting.load(Ordering::Relaxed) > 0 {
            self.turned.notify_all();
        }
    }

    /// Runs turns on this thread until `until()` holds, `deadline` passes
    /// or the host is done; while another thread drives, waits for it.
    fn drive_until(&self, mut until: impl FnMut() -> bool, deadline: Option<Instant>) {
        let mut slot = self.lock();
        loop {
            if until() || deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            match &*slot {
                Slot::Idle(_) if self.drives_here() => {
                    slot = self.drive(slot, |driver| {
                        driver.run_until(&mut until, deadline);
                    })
                }
                Slot::Done => return,
                Slot::Idle(_) | Slot::Driven => slot = self.wait(slot, deadline),
            }
        }
    }

    /// Runs one turn now if no thread drives: what was just queued is
    /// handed to the engine and its frames are written.
    fn turn_now(&self) {
        let slot = self.lock();
        if matches!(*slot, Slot::Idle(_)) && self.drives_here() {
            drop(self.drive(slot, |driver| {
                driver.turn(Some(Instant::now()));
            }));
        }
    }

    /// Takes the idle driver, runs `f` with it (the slot unlocked), and
    /// puts it back, or marks the host done.
    fn drive<'a>(
        &'a self,
        mut slot: MutexGuard<'a, Slot>,
        f: impl FnOnce(&mut Driver),
    ) -> MutexGuard<'a, Slot> {
        if !matches!(*slot, Slot::Idle(_)) {
            return slot;
        }
        let Slot::Idle(driver) = std::mem::replace(&mut *slot, Slot::Driven) else {
            return slot;
        };
        drop(slot);
        let mut driving = Driving(self, Some(driver));
        f(driving.driver());
        // A done driver is dropped here, unlocked: its request channel
        // closes, so later requests fail at once.
        let driver = driving.1.take().filter(|d| !d.is_done());
        let mut slot = self.lock();
        *slot = driver.map_or(Slot::Done, Slot::Idle);
        self.notify();
        slot
    }
}

/// The driver while a thread runs it. Should a turn panic (in an
/// embedder's reply callback), the host is done rather than left taken.
struct Driving<'a>(&'a Loop, Option<Box<Driver>>);

impl Driving<'_> {
    fn driver(&mut self) -> &mut Driver {
        self.1
            .as_mut()
            .expect("the driver is held until the turn ends")
    }
}

impl Drop for Driving<'_> {
    fn drop(&mut self) {
        if self.1.take().is_some() {
            let mut slot = self.0.lock();
            *slot = Slot::Done;
            self.0.notify();
        }
    }
}

/// A cheap, cloneable way to make the host's calls from any thread. Every
/// blocking call blocks its caller only; inline, it runs the loop while no
/// other thread does.
#[derive(Clone)]
pub struct HostHandle {
    tx: Sender<Request>,
    shared: Arc<Loop>,
    ready: Arc<ReadyLatch>,
    events_sent: Arc<AtomicU64>,
    tickets: Arc<AtomicU64>,
    /// The journal the host opened, for recovery.
    #[cfg(feature = "journal")]
    pub(crate) journal: Option<Arc<crate::journal::Journal>>,
}

impl HostHandle {
    /// Events put into [`Host::events`] so far. Read inside a reply callback,
    /// it says how many events to take before acting on the reply (docs/PROTOCOL.md#ordering;
    /// [`crate::order`] does the rest).
    pub fn events_sent(&self) -> u64 {
        self.events_sent.load(Ordering::SeqCst)
    }

    /// Blocks until every extension is ready or failed, or the startup
    /// grace ran out; returns the names of the ready ones.
    pub fn wait_ready(&self) -> Vec<String> {
        if self.shared.drives_here() {
            self.shared.drive_until(|| self.ready.is_set(), None);
        }
        self.ready.wait()
    }

    /// Queues a request; after the host stopped it fails at once. Inline,
    /// it waits for the next call, [`Host::poll`] or [`Host::next_event`]
    /// to run the loop, so a burst of them is handed to the engine and
    /// written to each extension in batches, not a write per request;
    /// the submit that makes 256 wait runs the loop itself.
    pub fn submit(&self, request: Request) {
        if let Err(e) = self.tx.send(request) {
            e.into_inner().fail(HostError::Stopped);
            return;
        }
        if self.shared.drives_here() && self.tx.len() >= driver::BATCH {
            self.shared.turn_now();
        }
    }

    /// A fresh ticket: submit a tool call under it
    /// ([`HostHandle::call_tool_as`], [`Request::Cancellable`]) to be
    /// able to [`cancel`](HostHandle::cancel) it from another thread.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.tickets.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a request and blocks for its reply; inline, running the loop.
    pub fn call<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, HostError> {
        let slot = Arc::new(Mutex::new(None));
        let answer = slot.clone();
        if !self.shared.drives_here() {
            // The reply goes into `slot` and a `()` says it is there (or,
            // its sender dropped, that none will come): one channel type
            // for every `T`, where a channel of each reply type compiled
            // crossbeam's channel code again, each time, in the static
            // binary.
            let (tx, rx) = crossbeam_channel::bounded(1);
            self.submit(make(Box::new(move |r| {
                *lock_slot(&answer) = Some(r);
                let _ = tx.send(());
            })));
            let _ = rx.recv();
        } else {
            // This thread looks at `slot` between turns and never blocks
            // on it: no channel, which cost two allocations per call (one
            // cache-aligned) and its own bookkeeping. The callback may run
            // on another caller's turn: it wakes this one.
            let waiter: Weak<Loop> = Arc::downgrade(&self.shared);
            let request = make(Box::new(move |r| {
                *lock_slot(&answer) = Some(r);
                if let Some(shared) = waiter.upgrade() {
                    shared.wake();
                }
            }));
            if let Err(e) = self.tx.send(request) {
                e.into_inner().fail(HostError::Stopped);
            }
            self.shared.drive_until(|| lock_slot(&slot).is_some(), None);
        }
        let taken = lock_slot(&slot).take();
        taken.unwrap_or(Err(HostError::Stopped))
    }
}

/// A call's reply slot, locked (a panicked reply callback left it as it
/// was).
fn lock_slot<T>(slot: &Mutex<Option<T>>) -> MutexGuard<'_, Option<T>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// The requests: each builds a [`Request`] and hands it to `call` or
/// `submit`. A [`Host`] has them too, through `Deref`.
impl HostHandle {
    /// Runs a slash command (name without `/`).
    pub fn command(&self, name: &str, args: &str) -> Result<CommandOutcome, HostError> {
        let (name, args) = (name.into(), args.into());
        self.call(|reply| Request::Command { name, args, reply })
    }

    /// Runs a tool after its `tool_call` event and interception chain;
    /// a built-in one only gets the verdict and final `args` (docs/PROTOCOL.md#tool-pipeline).
    pub fn call_tool(&self, call: ToolRequest) -> Result<ToolOutcome, HostError> {
        self.tool(call, true)
    }

    /// Runs a tool directly, without event or interception.
    pub fn call_tool_direct(&self, call: ToolRequest) -> Result<ToolOutcome, HostError> {
        self.tool(call, false)
    }

    /// [`HostHandle::call_tool`], cancellable under `ticket`.
    pub fn call_tool_as(
        &self,
        ticket: Ticket,
        call: ToolRequest,
    ) -> Result<ToolOutcome, HostError> {
        self.call(|reply| Request::Cancellable {
            ticket,
            request: Box::new(Request::Tool {
                call,
                pipeline: true,
                reply,
            }),
        })
    }

    /// Cancels the tool call submitted under `ticket`: it answers
    /// [`HostError::CallCancelled`], and its extension gets `tool_cancel`
    /// when it asked for that (docs/PROTOCOL.md#cancellation). False when nothing under that
    /// ticket runs (finished already, or never submitted).
    pub fn cancel(&self, ticket: Ticket) -> Result<bool, HostError> {
        self.call(|reply| Request::Cancel { ticket, reply })
    }

    fn tool(&self, call: ToolRequest, pipeline: bool) -> Result<ToolOutcome, HostError> {
        self.call(|reply| Request::Tool {
            call,
            pipeline,
            reply,
        })
    }

    /// Asks the guards about an event the embedder is about to act on.
    pub fn intercept(&self, request: InterceptRequest) -> Result<InterceptOutcome, HostError> {
        self.call(|reply| Request::Intercept { request, reply })
    }

    /// Runs `before_agent_start` (docs/PROTOCOL.md#system-prompt) on `system_prompt`: every
    /// guard in turn may replace it; returns the prompt after the last.
    /// Answers that cannot be used keep the prompt and come as
    /// [`HostEvent::HostNote`]s before the reply.
    pub fn before_agent_start(&self, system_prompt: &str) -> Result<String, HostError> {
        let payload = EventPayload {
            system_prompt: Some(system_prompt.to_string()),
            ..Default::default()
        };
        let request = InterceptRequest {
            event: crate::intercept::InterceptEvent::BeforeAgentStart,
            payload,
        };
        let outcome = self.intercept(request)?;
        Ok(outcome.system_prompt.unwrap_or_default())
    }

    /// Emits a lifecycle event; returns the subscribers it was queued to.
    pub fn emit(&self, event: &str, payload: EventPayload) -> Result<Vec<String>, HostError> {
        let event = event.into();
        self.call(|reply| Request::Emit {
            event,
            payload,
            reply,
        })
    }

    /// Queues a lifecycle event without waiting, in order with other
    /// requests; inline, it is written at the next call ([`HostHandle::submit`]).
    pub fn emit_nowait(&self, event: &str, payload: EventPayload) {
        let (event, reply) = (event.into(), Box::new(|_| {}));
        self.submit(Request::Emit {
            event,
            payload,
            reply,
        });
    }

    /// Extensions and registries as they are now.
    pub fn list(&self) -> Result<Snapshot, HostError> {
        self.call(|reply| Request::List { reply })
    }

    /// Stops every extension, rediscovers and starts them again.
    pub fn reload(&self) -> Result<ReloadReport, HostError> {
        self.call(|reply| Request::Reload { reply })
    }
}

/// A running extension host. Its calls block the calling thread only;
/// [`Host::handle`] gives other threads the same calls. Dropping it shuts
/// it down gracefully.
///
/// Started with [`Host::start`] it is driven inline: each call runs the
/// host loop on the caller's thread until its reply comes, so nothing
/// happens between calls. An embedder that stops calling for a while
/// and still wants extensions' notes, restarts and timeouts to advance
/// calls [`Host::poll`] (or [`Host::next_event`]) at least every second,
/// or starts the host with [`Host::start_threaded`].
pub struct Host {
    handle: HostHandle,
    events: Receiver<HostEvent>,
    /// The threaded layer's loop thread.
    thread: Option<JoinHandle<()>>,
}

impl Host {
    /// Starts the extensions; the loop runs in this thread's calls (and
    /// in other threads' calls through a [`HostHandle`], one at a time).
    /// Any thread may drive it: extensions are spawned by the host's own
    /// threads, which outlive them.
    pub fn start(config: HostConfig) -> io::Result<Host> {
        Host::start_inline(config, None)
    }

    /// [`Host::start`], but only this thread runs the loop: other
    /// threads' calls queue their requests and wait for it, as with the
    /// threaded layer. For a CLI surface, whose main thread runs the loop
    /// in [`Host::poll_with`] while its stdin reader and signal handler
    /// only submit.
    pub(crate) fn start_owned(config: HostConfig) -> io::Result<Host> {
        Host::start_inline(config, Some(std::thread::current().id()))
    }

    fn start_inline(mut config: HostConfig, owner: Option<ThreadId>) -> io::Result<Host> {
        let (host, channels) = Host::new(&mut config, false, owner)?;
        let driver = Driver::start(config, channels);
        // Weak: the driver sits inside the loop it would otherwise keep.
        #[cfg(feature = "ext-calls")]
        let driver = {
            let shared = Arc::downgrade(&host.handle.shared);
            driver.drive_builtin_replies(Arc::new(move |until| {
                if let Some(shared) = shared.upgrade() {
                    shared.drive_until(until, None);
                }
            }))
        };
        *host.handle.shared.lock() = Slot::Idle(Box::new(driver));
        Ok(host)
    }

    /// Starts the extensions on a loop thread of the host's own; returns
    /// at once. Calls only wait, from any thread, and the loop runs
    /// whether or not anybody calls (notes, restarts, timeouts).
    pub fn start_threaded(mut config: HostConfig) -> io::Result<Host> {
        let (mut host, channels) = Host::new(&mut config, true, None)?;
        let shared = Arc::downgrade(&host.handle.shared);
        let thread = std::thread::Builder::new()
            .name("zot-host".into())
            .spawn(move || {
                driver::run(config, channels);
                // Callers waiting for an event learn that none will come.
                if let Some(shared) = shared.upgrade() {
                    *shared.lock() = Slot::Done;
                    shared.notify();
                }
            })?;
        host.thread = Some(thread);
        Ok(host)
    }

    /// A host without its loop yet, with the channels the loop takes,
    /// once `config` is checked against this build, its paths made
    /// absolute and its journal opened.
    fn new(
        config: &mut HostConfig,
        threaded: bool,
        owner: Option<ThreadId>,
    ) -> io::Result<(Host, Channels)> {
        config.check_build()?;
        config.make_paths_absolute();
        #[cfg(feature = "journal")]
        config.open_journal()?;
        let (tx, requests) = crossbeam_channel::unbounded();
        let (event_tx, events) = crossbeam_channel::unbounded();
        let shared = Arc::new(Loop {
            slot: Mutex::new(Slot::Driven),
            turned: Condvar::new(),
            waiting: AtomicUsize::new(0),
            threaded,
            owner,
            released: AtomicBool::new(false),
        });
        let waiters: Weak<Loop> = Arc::downgrade(&shared);
        let handle = HostHandle {
            tx,
            shared,
            ready: Arc::default(),
            events_sent: Arc::default(),
            tickets: Arc::default(),
            #[cfg(feature = "journal")]
            journal: config.opened_journal.clone(),
        };
        let channels = Channels {
            requests,
            events: event_tx,
            events_sent: handle.events_sent.clone(),
            latch: handle.ready.clone(),
            progress: Arc::new(move || {
                if let Some(shared) = waiters.upgrade() {
                    shared.wake();
                }
            }),
        };
        let host = Host {
            handle,
            events,
            thread: None,
        };
        Ok((host, channels))
    }

    /// Unasked events. Notes and panel updates beyond
    /// [`HostConfig::event_budget`] waiting bytes are dropped (counted).
    /// Inline, they arrive while the loop runs: in a call, [`Host::poll`]
    /// or [`Host::next_event`].
    pub fn events(&self) -> &Receiver<HostEvent> {
        &self.events
    }

    /// Runs the host loop on this thread until a new event is put into
    /// [`Host::events`] or `timeout` passes (`Duration::ZERO`: one turn,
    /// for what is due or has come); true when one was. Threaded, the loop
    /// runs anyway: this only waits for a new event.
    pub fn poll(&self, timeout: Duration) -> bool {
        let before = self.events_sent();
        let new = || self.events_sent() > before;
        let deadline = Instant::now().checked_add(timeout);
        let shared = &self.handle.shared;
        if !shared.drives_here() {
            // The driving thread wakes this one after each turn that sent
            // an event, and once the host is done.
            let mut slot = shared.lock();
            while !new()
                && !matches!(*slot, Slot::Done)
                && deadline.is_none_or(|d| Instant::now() < d)
            {
                slot = shared.wait(slot, deadline);
            }
        } else {
            self.handle.shared.turn_now();
            self.handle.shared.drive_until(new, deadline);
        }
        new()
    }

    /// The next event: one already waiting, else the first new one while
    /// [`Host::poll`] runs the loop for at most `timeout`.
    pub fn next_event(&self, timeout: Duration) -> Option<HostEvent> {
        if self.events.is_empty() {
            self.poll(timeout);
        }
        self.events.try_recv().ok()
    }

    /// [`Host::poll`] that also returns for a message on `extra`, the
    /// caller's own channel (a surface's stdin lines, signals, replies),
    /// or its error once `extra` is disconnected: runs the loop on this
    /// thread until that message, a new event, `deadline` or the end of
    /// the host. Only the thread that started an owned host
    /// ([`Host::start_owned`]) drives it; should another thread be
    /// driving (dropping the host), `extra` is looked at each time that
    /// thread wakes this one.
    pub(crate) fn poll_with<T>(
        &self,
        extra: &Receiver<T>,
        deadline: Option<Instant>,
    ) -> Option<Result<T, RecvError>> {
        let before = self.events_sent();
        let new = || self.events_sent() > before;
        let shared = &self.handle.shared;
        let mut slot = shared.lock();
        loop {
            if new() || deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            match &*slot {
                Slot::Idle(_) if shared.drives_here() => {
                    let mut came = None;
                    slot = shared.drive(slot, |driver| {
                        while came.is_none() && !new() {
                            let (running, msg) = driver.turn_with(deadline, extra);
                            came = msg;
                            let late = deadline.is_some_and(|d| Instant::now() >= d);
                            if !running || late {
                                break;
                            }
                        }
                    });
                    if came.is_some() {
                        return came;
                    }
                }
                Slot::Done => return extra.try_recv().ok().map(Ok),
                Slot::Idle(_) | Slot::Driven => {
                    match extra.try_recv() {
                        Ok(msg) => return Some(Ok(msg)),
                        Err(crossbeam_channel::TryRecvError::Disconnected) => {
                            return Some(Err(RecvError))
                        }
                        Err(crossbeam_channel::TryRecvError::Empty) => {}
                    }
                    slot = shared.wait(slot, deadline);
                }
            }
        }
    }

    /// Its handle, borrowed.
    #[cfg(feature = "journal")]
    pub(crate) fn handle_ref(&self) -> &HostHandle {
        &self.handle
    }

    /// A handle for making calls from other threads.
    pub fn handle(&self) -> HostHandle {
        self.handle.clone()
    }

    /// Graceful shutdown (docs/PROTOCOL.md#shutdown); returns when every extension is gone.
    pub fn shutdown(self) {
        drop(self)
    }
}

/// The calls of [`HostHandle`] ([`HostHandle::command`], [`HostHandle::call_tool`],
/// [`HostHandle::submit`]...), made on the host itself.
impl std::ops::Deref for Host {
    type Target = HostHandle;

    fn deref(&self) -> &HostHandle {
        &self.handle
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Whichever thread drops an inline host drives its shutdown.
        (self.handle.shared.released).store(true, Ordering::Relaxed);
        let _ = self.call(|reply| Request::Shutdown { reply });
        match self.thread.take() {
            Some(thread) => {
                let _ = thread.join();
            }
            None => self.handle.shared.drive_until(|| false, None),
        }
        #[cfg(feature = "journal")]
        if let Some(journal) = &self.handle.journal {
            journal.close();
        }
    }
}
