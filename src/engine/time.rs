//! Deadlines: the next wake-up, each phase's deadline, the shutdown
//! ladder and the liveness check.

use super::action::{Action, Probe, Probes};
use super::exit::{Due, LIVENESS_EVERY, LIVENESS_IDLE};
use super::ext::{Ext, Phase, Stage};
use super::later::later;
use super::Engine;
use crate::log::human;
use crate::types::{HostError, ReadyVia};
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

impl Ext {
    /// When its phase next needs the loop.
    pub(super) fn deadline(&self) -> Option<Instant> {
        let run = match &self.phase {
            Phase::Gone { restart_at, .. } => return *restart_at,
            Phase::Spawning => return None,
            Phase::Running(run) => run,
        };
        let stage = match run.stage {
            Stage::AwaitingHello { deadline } => Some(deadline),
            Stage::Registering { ready_at } => Some(ready_at),
            Stage::Stopping { signal, .. } => signal.map(|(at, _)| at),
            Stage::Ready | Stage::Killed(_) => None,
        };
        let mcp = run.mcp.as_ref().and_then(|c| c.next_deadline());
        [stage, run.exit.deadline(), mcp]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Engine {
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let startup = self.state.deadline();
        let calls = self.jobs.next_deadline();
        let engine = [
            self.pending.next_deadline(),
            calls,
            startup,
            self.liveness_at,
        ];
        let exts = self.exts.iter().map(Ext::deadline);
        exts.chain(engine).flatten().min()
    }

    /// The running extensions whose process the driver is to look at
    /// before the tick at `now` (`action.rs`): those whose exit watch
    /// is due, or all at the liveness check.
    pub(super) fn probes_due(&self, now: Instant) -> impl Iterator<Item = usize> + '_ {
        let all = self.liveness_at.is_some_and(|at| at <= now);
        let exts = self.exts.iter().enumerate();
        exts.filter(move |(_, e)| {
            e.run()
                .is_some_and(|r| all || r.exit.deadline().is_some_and(|at| at <= now))
        })
        .map(|(idx, _)| idx)
    }

    pub(super) fn tick(&mut self, now: Instant, probes: &Probes) {
        for idx in 0..self.exts.len() {
            self.tick_mcp(idx, now);
            let probe = probes.get(&idx).copied().unwrap_or(Probe::UNSEEN);
            self.tick_ext(idx, probe, now);
        }
        self.expire(now);
        self.expire_jobs(now);
        self.check_startup(now);
        self.check_liveness(now, probes);
    }

    /// Acts on extension `idx`'s deadline when it is due; `probe` is
    /// what the driver saw of its process when its exit watch was due.
    fn tick_ext(&mut self, idx: usize, probe: Probe, now: Instant) {
        let ext = &mut self.exts[idx];
        let run = match &mut ext.phase {
            Phase::Gone {
                restart_at: Some(at),
                ..
            } if *at <= now => return self.restart(idx, now),
            Phase::Spawning | Phase::Gone { .. } => return,
            Phase::Running(run) => run,
        };
        let t = &self.cfg.timeouts;
        match run.stage {
            Stage::AwaitingHello { deadline, .. } if deadline <= now => {
                let why = format!("no hello within {}", human(t.hello));
                return self.fail(idx, why, now);
            }
            Stage::Registering { ready_at } if ready_at <= now => {
                return self.mark_ready(idx, ReadyVia::Watchdog, now);
            }
            _ => {}
        }
        loop {
            match run.exit.due(now, t, || probe.stdout_held) {
                None => break,
                Some(Due::DrainCheck) => {}
                Some(Due::Poll) => return self.poll_exit(idx, probe, now),
                Some(Due::Deaf) => {
                    if probe.exited.is_none() {
                        ext.log.line("its stdin is closed: what it owes fails");
                        let error = HostError::NotServing(ext.name.clone());
                        return self.release(idx, Some(&error), "stdin closed", now);
                    }
                    // It exited: the frames still in its pipe come first.
                    if run.exit.unchecked() {
                        run.exit.drain(now, t);
                    }
                }
                Some(Due::Mute) => {
                    let why = match run.stage {
                        Stage::AwaitingHello { .. } => "closed its stdout before hello",
                        Stage::Registering { .. } | Stage::Ready => {
                            "closed its stdout but did not exit"
                        }
                        Stage::Killed(_) | Stage::Stopping { .. } => return,
                    };
                    return self.fail(idx, why.into(), now);
                }
            }
        }
        let Stage::Stopping { signal, .. } = &mut run.stage else {
            return;
        };
        let Some((_, sig)) = signal.filter(|(at, _)| *at <= now) else {
            return;
        };
        if sig == libc::SIGTERM {
            ext.log
                .line("no exit within the shutdown grace: SIGTERM to its process group");
            *signal = Some((later(now, t.term_grace), libc::SIGKILL));
        } else {
            ext.log
                .line("still running after SIGTERM: SIGKILL to its process group");
            *signal = None;
        }
        self.actions.push(Action::Signal {
            ext: idx,
            signal: sig,
        });
        run.exit.poll_from(now + MS);
    }

    /// Reaps extensions that exited without EOF, every [`LIVENESS_EVERY`]
    /// while requests wait or an extension is stopping (a reload waits
    /// for its exit), else every [`LIVENESS_IDLE`].
    pub(super) fn check_liveness(&mut self, now: Instant, probes: &Probes) {
        if !self.exts.iter().any(|e| e.run().is_some()) {
            self.liveness_at = None;
            return;
        }
        let stopping = self.exts.iter().any(|e| {
            e.stage()
                .is_some_and(|s| matches!(s, Stage::Stopping { .. }))
        });
        let every = if self.pending.is_empty() && !stopping {
            LIVENESS_IDLE
        } else {
            LIVENESS_EVERY
        };
        if self.liveness_at.is_some_and(|at| at <= now) {
            let t = &self.cfg.timeouts;
            for (idx, ext) in self.exts.iter_mut().enumerate() {
                let exited = probes.get(&idx).is_some_and(|p| p.exited.is_some());
                // Frames it wrote before exiting may still be in the pipe:
                // the EOF behind them reaps it, or `exit_silence` of silence.
                if let Phase::Running(run) = &mut ext.phase {
                    if run.exit.unchecked() && exited {
                        run.exit.drain(now, t);
                    }
                }
            }
            self.liveness_at = None;
        }
        if self.liveness_at.is_none_or(|at| at > now + every) {
            self.liveness_at = Some(now + every);
        }
    }
}
