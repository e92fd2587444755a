//! The host's own state (SPEC 3.6, 3.14, 3.15): one enum, each state
//! holding exactly its data. The questions the rest of the engine asks
//! of it (may a request run now? is a stop asked?) are answered here.

use crate::types::{ReloadReport, Reply, Request};
use std::time::Instant;

/// A command or tool whose name was unknown while an extension was still
/// starting: looked up again once none is, or at its deadline (SPEC 3.6).
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
    /// startup: a crash now is not restarted (SPEC 12).
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
