//! The driver: the one `select!` over the extensions' frames, the
//! embedder's requests and the engine's next deadline. A [`Driver`]
//! holds the engine and the channels it waits on; [`Driver::turn`] waits
//! once and handles what came, so whichever thread waits for an answer
//! can run the loop (one at a time: it takes `&mut self`), and [`run`] is
//! the host thread doing that until the host is done.

use super::Engine;
use crate::config::HostConfig;
use crate::process::InboundMsg;
use crate::types::{HostEvent, ReadyLatch, Request};
use crossbeam_channel::{select, Receiver, Sender};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Parsed frames that may wait between the reader threads and the loop.
/// Beyond it a reader blocks, its extension's stdout pipe fills and the
/// extension blocks in its write: backpressure, not memory.
const INBOUND_FRAMES: usize = 256;

/// Most messages handled per turn before frames are written.
pub(crate) const BATCH: usize = 256;

/// Why [`Driver::run_until`] returned.
#[cfg_attr(not(test), allow(dead_code))] // For a caller driving the loop itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// The condition holds.
    Met,
    /// The deadline passed first.
    Deadline,
    /// The host is done (shut down): nothing more will happen.
    Done,
}

/// The engine with the channels it is fed from.
pub(crate) struct Driver {
    engine: Engine,
    requests: Receiver<Request>,
    inbound: Receiver<InboundMsg>,
    builtin_results: Receiver<Request>,
    /// Releases `Host::wait_ready` callers however the driver ends.
    _release: ReleaseLatch,
}

#[cfg_attr(not(test), allow(dead_code))] // For a caller driving the loop itself.
impl Driver {
    /// Builds the engine and starts every extension (from this thread:
    /// see `process.rs` on `PR_SET_PDEATHSIG`).
    pub(crate) fn start(
        cfg: HostConfig,
        requests: Receiver<Request>,
        events: Sender<HostEvent>,
        events_sent: Arc<AtomicU64>,
        latch: Arc<ReadyLatch>,
    ) -> Driver {
        let release = ReleaseLatch(latch.clone());
        // Bounded: the loop only receives from it, never sends.
        let (inbound_tx, inbound) = crossbeam_channel::bounded(INBOUND_FRAMES);
        // The engine holds its sender: it never disconnects.
        let (builtin_tx, builtin_results) = crossbeam_channel::unbounded();
        let senders = super::Senders {
            inbound: inbound_tx,
            builtin: builtin_tx,
        };
        let mut engine = Engine::new(cfg, events, events_sent, latch, senders);
        engine.start_all(None, Vec::new(), Instant::now());
        Driver {
            engine,
            requests,
            inbound,
            builtin_results,
            _release: release,
        }
    }

    /// How a [`crate::BuiltinReply`] the engine hands out runs the loop
    /// while it waits for its answer: a caller that drives the loop itself
    /// may be the only thread that could.
    pub(crate) fn drive_builtin_replies(&mut self, drive: crate::types::Drive) {
        self.engine.builtin_drive = Some(drive);
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
        self.engine.settle(now);
    }

    /// Waits once, until a frame or request comes, the engine's next
    /// deadline, or `deadline`, whichever is first; handles what came and
    /// whatever else is already waiting; then hands the frames queued to
    /// the writers. False once the host is done.
    pub(crate) fn turn(&mut self, deadline: Option<Instant>) -> bool {
        if self.engine.is_done() {
            return false;
        }
        let engine = &mut self.engine;
        // The next frame or request usually follows within microseconds,
        // and waking a sleeping loop costs more (tens of µs across CPUs).
        let inbound = &self.inbound;
        let (requests, builtin_results) = (&self.requests, &self.builtin_results);
        poll_briefly(engine.cfg.spin_before_sleep, || {
            !inbound.is_empty() || !requests.is_empty()
        });
        let wake = [engine.next_deadline(), deadline]
            .into_iter()
            .flatten()
            .min();
        // Not an `after()` channel: no allocation per wake-up.
        let timeout = wake.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        // The engine holds the inbound senders: those never disconnect.
        let hung_up = select! {
            recv(inbound) -> msg => msg.map(|m| engine.inbound(m, Instant::now())).is_err(),
            recv(requests) -> req => req.map(|r| engine.request(r, Instant::now())).is_err(),
            recv(builtin_results) -> req => {
                req.map(|r| engine.request(r, Instant::now())).is_err()
            }
            default(timeout) => false,
        };
        if hung_up {
            // Every handle is gone: nobody can ask for anything again.
            self.requests = crossbeam_channel::never();
            let reply = Box::new(|_| {});
            self.engine
                .request(Request::Shutdown { reply }, Instant::now());
        }
        let engine = &mut self.engine;
        let inbound = &self.inbound;
        let (requests, builtin_results) = (&self.requests, &self.builtin_results);
        // Take what else is already waiting before handing frames to the
        // writer threads, so a burst costs one wake-up per extension.
        for _ in 0..BATCH {
            if let Ok(msg) = inbound.try_recv() {
                engine.inbound(msg, Instant::now());
            } else if let Ok(req) = requests.try_recv().or_else(|_| builtin_results.try_recv()) {
                engine.request(req, Instant::now());
            } else {
                break;
            }
        }
        engine.settle(Instant::now());
        !engine.is_done()
    }

    /// Turns until `until()` holds (checked before each turn), `deadline`
    /// passes or the host is done.
    pub(crate) fn run_until(
        &mut self,
        mut until: impl FnMut() -> bool,
        deadline: Option<Instant>,
    ) -> Until {
        loop {
            if until() {
                return Until::Met;
            }
            if self.engine.is_done() {
                return Until::Done;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Until::Deadline;
            }
            self.turn(deadline);
        }
    }
}

/// Yields until `ready()` or `budget` passes; with a zero budget it
/// checks once and returns ([`HostConfig::spin_before_sleep`]).
pub(crate) fn poll_briefly(budget: Duration, mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + budget;
    while !ready() && Instant::now() < until {
        std::thread::yield_now();
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
pub(crate) fn run(
    cfg: HostConfig,
    requests: Receiver<Request>,
    events: Sender<HostEvent>,
    events_sent: Arc<AtomicU64>,
    latch: Arc<ReadyLatch>,
) {
    let mut driver = Driver::start(cfg, requests, events, events_sent, latch);
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

    fn driver() -> (Driver, Sender<Request>, Receiver<HostEvent>) {
        let dir = std::env::temp_dir().join(format!("zot-driver-{}", std::process::id()));
        let mut cfg = HostConfig::new(dir.clone(), dir);
        cfg.discover = false;
        let (tx, rx) = crossbeam_channel::unbounded();
        let (event_tx, events) = crossbeam_channel::unbounded();
        let driver = Driver::start(cfg, rx, event_tx, Arc::default(), Arc::default());
        (driver, tx, events)
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
        assert_eq!(driver.run_until(came, Some(deadline)), Until::Met);
        assert!(matches!(events.try_recv(), Ok(HostEvent::Ready { .. })));
        // Nothing more comes: the deadline ends the wait.
        let soon = Some(Instant::now() + Duration::from_millis(5));
        assert_eq!(driver.run_until(|| false, soon), Until::Deadline);
    }

    #[test]
    fn a_shutdown_through_the_channel_ends_the_turns() {
        let (mut driver, tx, _events) = driver();
        tx.send(Request::Shutdown {
            reply: Box::new(|_| {}),
        })
        .unwrap();
        let deadline = Some(Instant::now() + Duration::from_secs(20));
        assert_eq!(driver.run_until(|| false, deadline), Until::Done);
        assert!(driver.is_done() && !driver.turn(None));
    }
}
