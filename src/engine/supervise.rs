//! Supervision (docs/PROTOCOL.md#supervision), the engine's side: a
//! crashed extension restarts after a backoff, up to a limit (its crash
//! history: `crashes.rs`), and a shutdown or reload cancels pending
//! restarts. A pending restart is a gone phase's deadline. Whether a
//! guard answers while it restarts, or blocks because its manifest says
//! `"guard_failure": "block"`, is asked of the extension (`ext.rs`).

use super::action::AfterSpawn;
use super::crashes::MAX_CRASHES;
use super::ext::{Drops, Phase};
use super::later::later;
use super::Engine;
use crate::ext::manifest::Restart;
use crate::log::human;
use crate::types::HostEvent;
use std::time::Instant;

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
        // Requests waiting for its names wait for its first restart too,
        // within its hello limit (docs/PROTOCOL.md#readiness).
        if self.exts[idx].before_first_restart() {
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
