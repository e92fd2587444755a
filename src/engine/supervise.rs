//! Supervision (SPEC 12): crashed extensions are started again after a
//! backoff, up to a limit; a guard that cannot answer blocks when its
//! manifest says `"guard_failure": "block"`.
//!
//! Restarts are deadlines of the host loop like any other (no thread
//! sleeps on them), and shutdown or reload cancels them at once.

use super::{later, Engine, Ext, State};
use crate::intercept::Answer;
use crate::manifest::{GuardFailure, Restart};
use crate::process::ExtProcess;
use crate::types::{human, HostEvent};
use std::time::{Duration, Instant};

/// Crashes older than this no longer count towards giving up.
const CRASH_WINDOW: Duration = Duration::from_secs(180);
/// The crash within [`CRASH_WINDOW`] after which the host gives up.
const MAX_CRASHES: usize = 5;
/// The backoff doubles per crash, up to this many times its base.
const MAX_BACKOFF_FACTOR: u32 = 16;

/// One extension's crash history and pending restart.
#[derive(Debug, Default)]
pub(super) struct Supervision {
    /// When it crashed, within [`CRASH_WINDOW`].
    crashes: Vec<Instant>,
    /// Crashes since it last ran for [`CRASH_WINDOW`] without one: the
    /// backoff grows with it, so a slow crash loop also backs off to 8 s.
    streak: u32,
    /// When it is started again, while a restart is pending.
    pub(super) restart_at: Option<Instant>,
    /// How the crash that the pending restart follows ended it.
    last_status: String,
    /// Restarts since it was (re)loaded.
    pub(super) restarts: u32,
    /// Its `intercept` list is from its previous run: it has not
    /// subscribed again yet, so it cannot answer but still counts.
    pub(super) remembered: bool,
}

/// What a crash leads to.
#[derive(Debug, PartialEq)]
enum AfterCrash {
    RestartIn(Duration),
    GiveUp,
}

impl Supervision {
    /// Records a crash at `now`: a restart after a backoff that doubles
    /// per crash in a row (capped), or giving up at the 5th crash
    /// within the window.
    fn crashed(&mut self, now: Instant, base: Duration) -> AfterCrash {
        let recent = |t: &Instant| now.saturating_duration_since(*t) < CRASH_WINDOW;
        if !self.crashes.last().is_some_and(recent) {
            self.streak = 0;
        }
        self.crashes.retain(recent);
        self.crashes.push(now);
        self.streak = self.streak.saturating_add(1);
        if self.crashes.len() >= MAX_CRASHES {
            return AfterCrash::GiveUp;
        }
        let factor = 1u32
            .checked_shl(self.streak - 1)
            .map_or(MAX_BACKOFF_FACTOR, |f| f.min(MAX_BACKOFF_FACTOR));
        AfterCrash::RestartIn(base.saturating_mul(factor))
    }
}

impl Ext {
    /// Whether it can answer an interception now.
    pub(super) fn answers_guard(&self) -> bool {
        self.serving() && !self.supervision.remembered
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
        self.intercept.iter().any(|e| e == event)
            && (self.answers_guard() || (self.fails_closed() && self.state != State::Disabled))
    }

    /// Why it cannot answer an interception now.
    pub(super) fn why_unavailable(&self) -> String {
        if self.stop.is_some() {
            return "stopping".into();
        }
        if self.supervision.restart_at.is_some() {
            return format!("restarting after {}", self.supervision.last_status);
        }
        if self.live() && !self.proc.as_ref().is_some_and(ExtProcess::writable) {
            return "stdin closed".into();
        }
        if self.live() {
            // A new run that has not subscribed to interception again yet.
            return "restarting".into();
        }
        match &self.state {
            State::Failed(why) => format!("failed: {why}"),
            State::Exited(how) => format!("exited: {how}"),
            _ => "not running".into(),
        }
    }

    /// The answer standing in for this guard's when it cannot give one:
    /// allow, or a block when its manifest says it fails closed.
    pub(super) fn unavailable(&self, why: &str) -> Answer {
        if self.fails_closed() {
            self.log
                .line(&format!("cannot answer an interception ({why}): blocked"));
            Answer::Block(format!("guard {} unavailable ({why})", self.name))
        } else {
            self.log.line(&format!(
                "cannot answer an interception ({why}): counted as allow"
            ));
            Answer::Allow
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

impl Engine {
    /// After a crash (SPEC 12): schedules a restart, or gives up after
    /// the 5th crash within 3 minutes. `status` says how it ended.
    pub(super) fn crashed(&mut self, idx: usize, status: &str, now: Instant) {
        let base = self.cfg.timeouts.restart_backoff;
        let ext = &mut self.exts[idx];
        if ext
            .manifest
            .as_ref()
            .is_none_or(|m| m.restart == Restart::Never)
        {
            return ext.log.line(&format!(
                "crashed ({status}); not restarted: its manifest says \"restart\": \"never\""
            ));
        }
        if self.closing.is_some() {
            return ext.log.line(&format!(
                "crashed ({status}); not restarted: the host is shutting down"
            ));
        }
        match ext.supervision.crashed(now, base) {
            AfterCrash::RestartIn(delay) => {
                ext.log.line(&format!(
                    "crashed ({status}); restarting in {}",
                    human(delay)
                ));
                ext.supervision.restart_at = Some(later(now, delay));
                ext.supervision.last_status = status.to_string();
            }
            AfterCrash::GiveUp => {
                let reason = format!("crashed {MAX_CRASHES} times in 3 min (last: {status})");
                ext.log.line(&format!("not restarted again: {reason}"));
                ext.state = State::Failed(reason.clone());
                self.events.send(HostEvent::ExtensionFailed {
                    extension: ext.name.clone(),
                    error: reason,
                });
            }
        }
    }

    /// Starts a crashed extension again, its backoff over: it gets
    /// `hello_ack` and registers anew; its event subscriptions and queue
    /// start empty; its guard subscriptions count until it subscribes again.
    pub(super) fn restart(&mut self, idx: usize, now: Instant) {
        let ext = &mut self.exts[idx];
        ext.supervision.restart_at = None;
        ext.hello = false;
        ext.events.clear();
        ext.event_set.clear();
        ext.capped.clear();
        ext.out.clear();
        ext.dropped_events = 0;
        ext.dropping = false;
        ext.eof_before_hello = None;
        ext.supervision.remembered = !ext.intercept.is_empty();
        let status = ext.supervision.last_status.clone();
        let attempt = ext.supervision.streak;
        match self.spawn(idx, now) {
            Ok(()) => {
                let ext = &mut self.exts[idx];
                ext.supervision.restarts += 1;
                ext.log
                    .line(&format!("restarted (attempt {attempt}: {status})"));
                self.events.send(HostEvent::ExtensionRestarted {
                    extension: ext.name.clone(),
                    attempt,
                    status,
                });
            }
            Err(e) => {
                let ext = &mut self.exts[idx];
                ext.log.line(&format!("not restarted: {e}"));
                ext.state = State::Failed(e.clone());
                self.events.send(HostEvent::ExtensionFailed {
                    extension: ext.name.clone(),
                    error: e,
                });
            }
        }
    }

    /// Shutdown and reload cancel every pending restart at once.
    pub(super) fn cancel_restarts(&mut self) {
        for ext in &mut self.exts {
            if ext.supervision.restart_at.take().is_some() {
                ext.log
                    .line("pending restart cancelled: the host is stopping or reloading");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(500);

    fn ms(m: u64) -> AfterCrash {
        AfterCrash::RestartIn(Duration::from_millis(m))
    }

    #[test]
    fn backoff_doubles_then_gives_up_at_the_fifth_crash_in_the_window() {
        let mut s = Supervision::default();
        let t0 = Instant::now();
        let after: Vec<AfterCrash> = (0..5).map(|i| s.crashed(t0 + BASE * i, BASE)).collect();
        assert_eq!(
            after,
            [ms(500), ms(1000), ms(2000), ms(4000), AfterCrash::GiveUp]
        );
    }

    #[test]
    fn a_slow_crash_loop_backs_off_to_the_cap_and_never_gives_up() {
        let mut s = Supervision::default();
        let t0 = Instant::now();
        // One crash a minute: never 5 within 3 minutes.
        let after: Vec<AfterCrash> = (0..7)
            .map(|i| s.crashed(t0 + Duration::from_secs(60 * i), BASE))
            .collect();
        assert_eq!(
            after,
            [
                ms(500),
                ms(1000),
                ms(2000),
                ms(4000),
                ms(8000),
                ms(8000),
                ms(8000)
            ]
        );
        // After 3 quiet minutes the backoff starts over.
        let quiet = t0 + Duration::from_secs(60 * 6) + CRASH_WINDOW;
        assert_eq!(s.crashed(quiet, BASE), ms(500));
    }
}
