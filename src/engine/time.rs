//! Deadlines: the next wake-up, timeouts, the shutdown ladder and the
//! liveness check.

use super::{later, min_deadline, Engine, Ext, PendingKind, LIVENESS_EVERY, LIVENESS_IDLE};
use crate::process::ExtProcess;
use crate::types::{human, HostError};
use std::time::{Duration, Instant};

impl Engine {
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let mut next = self.startup.as_ref().map(|s| s.deadline);
        for e in &self.exts {
            next = min_deadline(next, e.hello_deadline);
            next = min_deadline(next, e.idle_ready_at);
            next = min_deadline(next, e.exit_poll.map(|(at, _)| at));
            next = min_deadline(next, e.eof_before_hello);
            next = min_deadline(next, e.supervision.restart_at);
            if let Some(stop) = &e.stop {
                next = min_deadline(next, stop.term_at);
                next = min_deadline(next, stop.kill_at);
            }
        }
        for p in self.pending.values() {
            next = min_deadline(next, Some(p.deadline));
        }
        min_deadline(next, self.liveness_at)
    }

    pub(super) fn tick(&mut self, now: Instant) {
        for idx in 0..self.exts.len() {
            self.tick_ext(idx, now);
        }
        let expired: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.expire(&id, now);
        }
        if self.startup.as_ref().is_some_and(|s| s.deadline <= now) {
            self.check_startup(now);
        }
        self.check_liveness(now);
    }

    pub(super) fn tick_ext(&mut self, idx: usize, now: Instant) {
        let ext = &mut self.exts[idx];
        let due = |at: Option<Instant>| at.is_some_and(|t| t <= now);
        if due(ext.supervision.restart_at) {
            return self.restart(idx, now);
        }
        if due(ext.hello_deadline) {
            let limit = human(self.cfg.timeouts.hello);
            return self.fail(idx, format!("no hello within {limit}"), now);
        }
        if due(ext.idle_ready_at) {
            let idle = human(self.cfg.timeouts.ready_idle);
            return self.mark_ready(
                idx,
                &format!("no ready frame: treated as ready after {idle} of silence"),
                now,
            );
        }
        if due(ext.eof_before_hello) {
            ext.eof_before_hello = None;
            if !ext.hello && ext.live() {
                return self.fail(idx, "closed its stdout before hello".into(), now);
            }
        }
        if due(ext.exit_poll.map(|(at, _)| at)) {
            return self.poll_exit(idx, now);
        }
        let Some(p) = &ext.proc else { return };
        let Some(stop) = &mut ext.stop else { return };
        if due(stop.term_at) {
            ext.log
                .line("no exit within the shutdown grace: SIGTERM to its process group");
            p.signal_group(libc::SIGTERM);
            stop.term_at = None;
            stop.kill_at = Some(later(now, self.cfg.timeouts.term_grace));
            ext.exit_poll = Some((now + Duration::from_millis(1), Duration::from_millis(1)));
        } else if due(stop.kill_at) {
            ext.log
                .line("still running after SIGTERM: SIGKILL to its process group");
            p.signal_group(libc::SIGKILL);
            stop.kill_at = None;
            ext.exit_poll = Some((now + Duration::from_millis(1), Duration::from_millis(1)));
        }
    }

    pub(super) fn expire(&mut self, id: &str, now: Instant) {
        let Some(p) = self.pending.remove(id) else {
            return;
        };
        let ext = &self.exts[p.ext];
        match p.kind {
            PendingKind::Command { name, reply } => {
                let limit = self.cfg.timeouts.command;
                ext.log.line(&format!(
                    "no command_response for /{name} within {}",
                    human(limit)
                ));
                reply(Err(HostError::TimedOut {
                    extension: ext.name.clone(),
                    request: format!("/{name}"),
                    limit,
                }));
            }
            PendingKind::Tool { name, reply } => {
                let limit = self.cfg.timeouts.tool;
                ext.log.line(&format!(
                    "no tool_result for {name} within {}",
                    human(limit)
                ));
                reply(Err(HostError::TimedOut {
                    extension: ext.name.clone(),
                    request: format!("tool {name}"),
                    limit,
                }));
            }
            PendingKind::Guard { chain, pos } => {
                let limit = human(self.cfg.timeouts.intercept);
                let answer = ext.unavailable(&format!("no answer within {limit}"));
                self.answer_guard(chain, pos, answer, now);
            }
        }
    }

    /// While requests wait, check now and then that their extensions
    /// still run: a grandchild holding stdout open hides the exit.
    pub(super) fn check_liveness(&mut self, now: Instant) {
        if !self.exts.iter().any(Ext::live) {
            self.liveness_at = None;
            return;
        }
        // Often while answers are awaited, seldom while idle.
        let every = if self.pending.is_empty() {
            LIVENESS_IDLE
        } else {
            LIVENESS_EVERY
        };
        match self.liveness_at {
            Some(at) if at > now && at <= now + every => {}
            Some(at) if at > now => self.liveness_at = Some(now + every),
            Some(_) => {
                for idx in 0..self.exts.len() {
                    if let Some(status) =
                        self.exts[idx].proc.as_mut().and_then(ExtProcess::try_wait)
                    {
                        self.exited(idx, status, now);
                    }
                }
                self.liveness_at = Some(now + every);
            }
            None => self.liveness_at = Some(now + every),
        }
    }
}
