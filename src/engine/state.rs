//! The host's own state (docs/PROTOCOL.md#readiness, docs/PROTOCOL.md#shutdown,
//! docs/PROTOCOL.md#reload): one enum, each state holding exactly its data. The
//! questions the rest of the engine asks of it (may a request run now? is a
//! stop asked?) are answered here.

use crate::types::{ReloadReport, Reply, Request};
use std::time::Instant;

/// A command or tool whose name was unknown while an extension was still
/// starting: looked up again once none is, or at its deadline (docs/PROTOCOL.md#readiness).
pub(super) type Parked = Vec<(Instant, Request)>;

pub(super) enum HostState {
    /// Extensions are starting, first or after a reload: requests wait.
    Starting(Startup),
    /// Serving requests. `held`: those that waited for the startup or
    /// reload that just ended, run next, in order, before any later one.
    Running { parked: Parked, held: Vec<Request> },
    /// A reload waits for the requests already accepted, then stops every
    /// extension (`stopped`: how many it sent `shutdown`), then starts
    /// them again. Requests asked meanwhile wait for after it, in order.
    Reloading {
        reply: Reply<ReloadReport>,
        stopped: Option<usize>,
        held: Vec<Request>,
    },
    /// A shutdown waits for the requests already accepted, parked ones
    /// included; later ones are refused, later shutdowns wait with it.
    Draining {
        replies: Vec<Reply<()>>,
        parked: Parked,
    },
    /// Every extension was sent `shutdown`: done once all are gone.
    Stopping { replies: Vec<Reply<()>> },
    /// Shut down: every request fails with [`crate::HostError::Stopped`].
    Done,
}

pub(super) struct Startup {
    /// When the startup ends, whoever is still loading.
    pub(super) deadline: Instant,
    /// The reload it finishes, with how many extensions that reload
    /// stopped; `None` for the host's first startup.
    pub(super) reload: Option<(Reply<ReloadReport>, usize)>,
    /// The driver is still finding the extensions: none can be waited
    /// for yet.
    pub(super) discovering: bool,
    /// Extensions started.
    pub(super) loaded: usize,
    /// Requests that arrived meanwhile, in order.
    pub(super) held: Vec<Request>,
}

impl HostState {
    /// Where a request that arrives now waits behind others, if it must:
    /// during a startup or reload, and while held ones still wait to run.
    pub(super) fn held_mut(&mut self) -> Option<&mut Vec<Request>> {
        match self {
            HostState::Starting(st) => Some(&mut st.held),
            HostState::Reloading { held, .. } => Some(held),
            HostState::Running { held, .. } if !held.is_empty() => Some(held),
            _ => None,
        }
    }

    /// The parked requests, in the states that keep them.
    pub(super) fn parked_mut(&mut self) -> Option<&mut Parked> {
        match self {
            HostState::Running { parked, .. } | HostState::Draining { parked, .. } => Some(parked),
            _ => None,
        }
    }

    /// The first startup has not ended yet.
    pub(super) fn first_startup(&self) -> bool {
        matches!(self, HostState::Starting(Startup { reload: None, .. }))
    }

    /// A reload waits, stops or restarts the extensions.
    pub(super) fn reloading(&self) -> bool {
        matches!(
            self,
            HostState::Reloading { .. }
                | HostState::Starting(Startup {
                    reload: Some(_),
                    ..
                })
        )
    }

    /// A shutdown was accepted: later requests are refused.
    pub(super) fn shutting_down(&self) -> bool {
        matches!(
            self,
            HostState::Draining { .. } | HostState::Stopping { .. }
        )
    }

    /// A shutdown or reload was asked for, also one still held behind a
    /// startup: a crash now is not restarted (docs/PROTOCOL.md#supervision).
    pub(super) fn stop_asked(&self) -> bool {
        let stop = |r: &Request| matches!(r, Request::Shutdown { .. } | Request::Reload { .. });
        match self {
            HostState::Starting(st) => st.held.iter().any(stop),
            HostState::Running { held, .. } => held.iter().any(stop),
            HostState::Reloading { .. } | HostState::Draining { .. } => true,
            HostState::Stopping { .. } | HostState::Done => true,
        }
    }

    /// When the state itself next needs the loop: a startup's end.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self {
            HostState::Starting(st) => Some(st.deadline),
            _ => None,
        }
    }
}

/// The host's rules with a made-up clock and no processes: an engine
/// whose one extension is gone (disabled), requests handed in at chosen
/// times, the passes after a turn run at chosen times.
#[cfg(test)]
mod tests {
    use super::super::action::Action;
    use super::super::ext::{End, Ext, Phase};
    use super::super::pending::Waiter;
    use super::super::Engine;
    use super::*;
    use crate::config::HostConfig;
    use crate::ext::discovery::Scope;
    use crate::log::ExtLog;
    use crate::types::{CommandOutcome, HostError, HostEvent};
    use crossbeam_channel::Receiver;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    const S: Duration = Duration::from_secs(1);

    fn engine() -> (Engine, Receiver<HostEvent>) {
        let dir = std::env::temp_dir().join("zot-state-test");
        let mut cfg = HostConfig::new(dir.clone(), dir);
        cfg.discover = false;
        let (events_tx, events) = crossbeam_channel::unbounded();
        let mut e = Engine::new(
            cfg,
            events_tx,
            #[cfg(feature = "ext-calls")]
            crossbeam_channel::unbounded().0,
        );
        let (dir, log) = (std::env::temp_dir(), ExtLog::stderr("x"));
        e.exts
            .push(Ext::new("x".into(), Scope::Explicit, dir, log, None));
        (e, events)
    }

    /// The pass after a turn at `at`, with the driver's part in it
    /// played: the replies and events queued are carried out, and a
    /// startup's discovery finds nothing (then the engine settles again,
    /// as after a driver's answer).
    fn settle(e: &mut Engine, at: Instant) {
        e.settle_at(at);
        while (e.answer_inline().iter()).any(|a| matches!(a, Action::Discover)) {
            e.discovered(Vec::new(), at);
            e.settle_at(at);
        }
    }

    /// The first startup at `t0`: it finds nothing more.
    fn started(e: &mut Engine, t0: Instant) {
        e.start_all(None, Vec::new(), t0);
        settle(e, t0);
    }

    /// Where a reply lands.
    type Slot<T> = Arc<Mutex<Option<Result<T, HostError>>>>;

    /// A reply slot and the callback that fills it.
    fn slot<T: Send + 'static>() -> (Slot<T>, crate::types::Reply<T>) {
        let got: Slot<T> = Arc::default();
        let fill = got.clone();
        (got, Box::new(move |r| *fill.lock().unwrap() = Some(r)))
    }

    /// What a reply slot got, once the replies queued ran.
    fn taken<T>(e: &mut Engine, got: &Slot<T>) -> Option<Result<T, HostError>> {
        e.answer_inline();
        got.lock().unwrap().take()
    }

    /// The next event, once the events queued were sent.
    fn received(
        e: &mut Engine,
        events: &Receiver<HostEvent>,
    ) -> Result<HostEvent, crossbeam_channel::TryRecvError> {
        e.answer_inline();
        events.try_recv()
    }

    /// A command sent to extension 0 at `at` and not answered yet.
    fn command_in_flight(e: &mut Engine, at: Instant) -> Slot<CommandOutcome> {
        let (got, reply) = slot();
        let waiter = Waiter::Command {
            name: "slow".into(),
            reply,
        };
        let limit = e.cfg.timeouts.command;
        let id = e.pending.new_id();
        e.pending.register(id, 0, limit, waiter, at);
        got
    }

    #[test]
    fn a_shutdown_waits_for_an_accepted_request_until_its_timeout() {
        let t0 = Instant::now();
        let (mut e, _events) = engine();
        started(&mut e, t0);
        let answer = command_in_flight(&mut e, t0);
        let (stopped, reply) = slot();
        e.request(Request::Shutdown { reply }, t0);
        settle(&mut e, t0);
        assert!(matches!(e.state, HostState::Draining { .. }));
        // Later requests are refused meanwhile.
        let (listed, reply) = slot();
        e.request(Request::List { reply }, t0 + S);
        assert!(matches!(
            taken(&mut e, &listed),
            Some(Err(HostError::ShuttingDown))
        ));
        settle(&mut e, t0 + 29 * S);
        assert!(
            taken(&mut e, &stopped).is_none(),
            "stopped before the command's timeout"
        );
        assert_eq!(e.next_deadline(), Some(t0 + 30 * S));
        settle(&mut e, t0 + 30 * S);
        assert!(matches!(
            taken(&mut e, &answer),
            Some(Err(HostError::TimedOut { .. }))
        ));
        assert!(matches!(taken(&mut e, &stopped), Some(Ok(()))));
        assert!(e.is_done());
        let (late, reply) = slot();
        e.request(Request::List { reply }, t0 + 31 * S);
        assert!(matches!(
            taken(&mut e, &late),
            Some(Err(HostError::Stopped))
        ));
    }

    #[test]
    fn requests_during_a_startup_wait_in_order_and_a_stop_at_once_cancels_them() {
        let t0 = Instant::now();
        let (mut e, _events) = engine();
        let startup = Startup {
            deadline: t0 + 3 * S,
            reload: None,
            discovering: false,
            loaded: 0,
            held: Vec::new(),
        };
        e.state = HostState::Starting(startup);
        assert_eq!(e.next_deadline(), Some(t0 + 3 * S));
        let (listed, reply) = slot();
        e.request(Request::List { reply }, t0);
        let (reload, reply) = slot();
        e.request(Request::Reload { reply }, t0);
        assert!(
            taken(&mut e, &listed).is_none() && taken(&mut e, &reload).is_none(),
            "held"
        );
        let (now, reply) = slot();
        e.request(Request::ShutdownNow { reply }, t0 + S);
        assert!(matches!(
            taken(&mut e, &listed),
            Some(Err(HostError::Cancelled))
        ));
        assert!(matches!(
            taken(&mut e, &reload),
            Some(Err(HostError::Cancelled))
        ));
        settle(&mut e, t0 + S);
        assert!(matches!(taken(&mut e, &now), Some(Ok(()))));
        assert!(e.is_done());
    }

    #[test]
    fn held_requests_run_in_order_once_the_startup_ends_and_a_held_reload_holds_the_rest() {
        let t0 = Instant::now();
        let (mut e, events) = engine();
        e.state = HostState::Starting(Startup {
            deadline: t0 + 3 * S,
            reload: None,
            discovering: false,
            loaded: 0,
            held: Vec::new(),
        });
        let (first, reply) = slot();
        e.request(Request::List { reply }, t0);
        let (reload, reply) = slot();
        e.request(Request::Reload { reply }, t0);
        let (second, reply) = slot();
        e.request(Request::List { reply }, t0);
        // Nothing is loading: the startup ends at the first check, is
        // announced, and what was held runs: the list, then the reload,
        // which holds the second list until it is done too.
        e.check_startup(t0);
        assert!(matches!(
            received(&mut e, &events),
            Ok(HostEvent::Ready { .. })
        ));
        assert!(
            taken(&mut e, &first).is_none(),
            "runs after the pass, not inside it"
        );
        settle(&mut e, t0);
        assert!(matches!(taken(&mut e, &first), Some(Ok(_))));
        let report = taken(&mut e, &reload)
            .expect("the reload is done")
            .expect("ok");
        assert_eq!((report.stopped, report.loaded), (0, 0));
        assert!(
            matches!(taken(&mut e, &second), Some(Ok(_))),
            "held past the reload, then run"
        );
        // A reload's startup is not announced again.
        assert!(received(&mut e, &events).is_err());
    }

    #[test]
    fn a_second_reload_while_one_waits_is_refused() {
        let t0 = Instant::now();
        let (mut e, _events) = engine();
        started(&mut e, t0);
        let answer = command_in_flight(&mut e, t0);
        let (first, reply) = slot();
        e.request(Request::Reload { reply }, t0);
        settle(&mut e, t0);
        let (second, reply) = slot();
        e.request(Request::Reload { reply }, t0);
        assert!(matches!(
            taken(&mut e, &second),
            Some(Err(HostError::ReloadRunning))
        ));
        assert!(
            taken(&mut e, &first).is_none(),
            "waits for the accepted command"
        );
        settle(&mut e, t0 + 30 * S);
        assert!(matches!(
            taken(&mut e, &answer),
            Some(Err(HostError::TimedOut { .. }))
        ));
        assert!(matches!(taken(&mut e, &first), Some(Ok(_))));
        assert!(matches!(e.state, HostState::Running { .. }));
    }

    #[test]
    fn a_crash_schedules_its_restart_after_the_backoff_and_a_held_shutdown_cancels_it() {
        let t0 = Instant::now();
        let (mut e, _events) = engine();
        let manifest = br#"{"name": "x", "exec": "./x"}"#;
        e.exts[0].manifest =
            Some(crate::ext::manifest::Manifest::parse(manifest).expect("manifest"));
        e.exts[0].phase = Phase::gone(End::Exited("exit code 1".into()));
        started(&mut e, t0);
        e.crashed(0, "exit code 1", t0);
        // The loop sleeps until the restart, 500 ms away (docs/PROTOCOL.md#supervision).
        assert_eq!(e.next_deadline(), Some(t0 + S / 2));
        e.state = HostState::Starting(Startup {
            deadline: t0 + 3 * S,
            reload: None,
            discovering: false,
            loaded: 0,
            held: Vec::new(),
        });
        let (_stopped, reply) = slot();
        e.request(Request::Shutdown { reply }, t0 + S / 4);
        assert!(e.state.stop_asked(), "a held shutdown counts as asked");
        assert_eq!(
            e.next_deadline(),
            Some(t0 + 3 * S),
            "the restart is cancelled"
        );
    }
}
