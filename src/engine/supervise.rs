//! Supervision (docs/PROTOCOL.md#supervision): crashed extensions restart after a backoff, up
//! to a limit (each one's crash history and backoff: `crashes.rs`); a
//! guard that cannot answer blocks when its manifest says
//! `"guard_failure": "block"`. A pending restart is a gone phase's deadline.

use super::action::AfterSpawn;
use super::crashes::MAX_CRASHES;
use super::{later, Drops, End, Engine, Ext, Phase, Stage};
use crate::ext::manifest::{GuardFailure, Restart};
use crate::intercept::Answer;
use crate::log::human;
use crate::types::HostEvent;
use std::time::Instant;

impl Ext {
    /// Whether it can answer an interception now.
    pub(super) fn answers_guard(&self) -> bool {
        self.serving() && !self.supervision.remembered
    }

    /// Never ready yet, and a restart may follow: it is being killed
    /// (its exit decides), or its restart is pending. Requests for names
    /// it may register wait for it (docs/PROTOCOL.md#readiness).
    pub(super) fn restarting_before_ready(&self) -> bool {
        !self.supervision.ready_once
            && match &self.phase {
                Phase::Running(run) => matches!(run.stage, Stage::Killed(_)),
                Phase::Gone { restart_at, .. } => restart_at.is_some(),
                Phase::Spawning => true,
            }
    }

    /// Why it failed for good once started, without ever becoming ready
    /// (an invalid manifest never started: it could register nothing).
    pub(super) fn failed_before_ready(&self) -> Option<&String> {
        if self.supervision.ready_once || self.manifest.is_none() {
            return None;
        }
        match &self.phase {
            Phase::Running(run) => match &run.stage {
                Stage::Killed(why) => Some(why),
                _ => None,
            },
            Phase::Gone {
                end: End::Failed(why),
                ..
            } => Some(why),
            Phase::Spawning | Phase::Gone { .. } => None,
        }
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
        let disabled = matches!(
            self.phase,
            Phase::Gone {
                end: End::Disabled,
                ..
            }
        );
        let closed = self.fails_closed() && !disabled;
        self.intercept.iter().any(|e| e.as_str() == event) && (self.answers_guard() || closed)
    }

    /// Why it cannot answer an interception now.
    pub(super) fn why_unavailable(&self) -> String {
        match (self.run(), self.end_detail()) {
            (Some(run), _) => match run.stage {
                Stage::Stopping { .. } => "stopping".into(),
                _ if !run.stdin_open => "stdin closed".into(),
                // A new run that has not subscribed to interception again yet.
                _ => "restarting".into(),
            },
            // Gone: its deadline is its restart.
            (None, Some(how)) if self.deadline().is_some() => format!("restarting after {how}"),
            (None, Some(how)) => format!("{}: {how}", self.state().as_str()),
            (None, None) => "not running".into(),
        }
    }

    /// Its answer when it cannot give one: allow, or block if it fails closed.
    pub(super) fn unavailable(&self, why: &str) -> Answer {
        if self.fails_closed() {
            self.log
                .line(&format!("cannot answer an interception ({why}): blocked"));
            Answer::Block(format!("guard {} unavailable ({why})", self.name))
        } else {
            self.log.line(&format!(
                "cannot answer an interception ({why}): counted as allow"
            ));
            let what = "before_agent_start: extension";
            Answer::Unusable(format!(
                "{what} {} could not answer ({why}): the system prompt is kept",
                self.name
            ))
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
    /// After a crash (docs/PROTOCOL.md#supervision) that ended with `status`:
    /// schedules a restart, or gives up.
    pub(super) fn crashed(&mut self, idx: usize, status: &str, now: Instant) {
        let base = self.cfg.timeouts.restart_backoff;
        let stopping = self.state.stop_asked();
        let ext = &mut self.exts[idx];
        let never = ext
            .manifest
            .as_ref()
            .is_none_or(|m| m.restart == Restart::Never);
        let why = match (never, stopping) {
            (true, _) => r#"its manifest says "restart": "never""#,
            (_, true) => "the host is stopping or reloading",
            _ => "",
        };
        if !why.is_empty() {
            return ext
                .log
                .line(&format!("crashed ({status}); not restarted: {why}"));
        }
        match ext.supervision.crashed(now, base) {
            Some(delay) => {
                let line = format!("crashed ({status}); restarting in {}", human(delay));
                ext.log.line(&line);
                if let Phase::Gone { restart_at, .. } = &mut ext.phase {
                    *restart_at = Some(later(now, delay));
                }
            }
            None => {
                let reason = format!("crashed {MAX_CRASHES} times in 3 min (last: {status})");
                ext.log.line(&format!("not restarted again: {reason}"));
                self.fail(idx, reason, now);
            }
        }
    }

    /// Starts a crashed extension again, its backoff over: it registers
    /// anew with empty subscriptions and queue; its guard subscriptions
    /// count until it subscribes again.
    pub(super) fn restart(&mut self, idx: usize, now: Instant) {
        let ext = &mut self.exts[idx];
        let Some(status) = ext.end_detail().cloned() else {
            return;
        };
        ext.events.clear();
        ext.event_set.clear();
        ext.event_bytes = 0;
        ext.out.clear();
        ext.dropped_events = Drops::default();
        ext.supervision.remembered = !ext.intercept.is_empty();
        let attempt = ext.supervision.streak;
        match self.spawn_job(idx) {
            Ok((spawn, starting)) => {
                self.exts[idx].phase = Phase::Spawning;
                let then = AfterSpawn::Restart {
                    ext: idx,
                    starting,
                    status,
                    attempt,
                };
                self.launch(vec![(idx, spawn)], then, now);
            }
            Err(e) => self.restarted(idx, Err(e), status, attempt, now),
        }
    }

    /// The restart of extension `idx` ran (`outcome`): announced, or
    /// failed for good.
    pub(super) fn restarted(
        &mut self,
        idx: usize,
        outcome: Result<(), String>,
        status: String,
        attempt: u32,
        now: Instant,
    ) {
        if let Err(e) = outcome {
            self.exts[idx].log.line(&format!("not restarted: {e}"));
            return self.fail(idx, e, now);
        }
        // Requests waiting for its names wait for this start too, within
        // its hello limit (docs/PROTOCOL.md#readiness).
        if !self.exts[idx].supervision.ready_once {
            let until = later(now, self.cfg.timeouts.hello);
            for (deadline, _) in self.state.parked_mut().into_iter().flatten() {
                *deadline = (*deadline).max(until);
            }
        }
        let ext = &mut self.exts[idx];
        ext.supervision.restarts += 1;
        ext.log
            .line(&format!("restarted (attempt {attempt}: {status})"));
        let extension = ext.name.clone();
        self.event(HostEvent::ExtensionRestarted {
            extension,
            attempt,
            status,
        });
    }

    /// Shutdown and reload cancel every pending restart at once.
    pub(super) fn cancel_restarts(&mut self) {
        for ext in &mut self.exts {
            if let Phase::Gone { restart_at, .. } = &mut ext.phase {
                if restart_at.take().is_some() {
                    ext.log
                        .line("pending restart cancelled: the host is stopping or reloading");
                }
            }
        }
    }
}
