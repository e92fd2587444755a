//! Deadlines: the next wake-up, each phase's deadline and the shutdown
//! ladder. An exit is not among them: it comes as a message
//! (`exit.rs`).

use super::action::{Action, Probe, Probes};
use super::exit::Due;
use super::ext::{Ext, Phase, Stage};
use super::later::later;
use super::Engine;
use crate::log::human;
use crate::types::{HostError, ReadyVia};
use std::time::Instant;

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
        #[cfg(feature = "mcp")]
        let mcp = run.mcp.as_ref().and_then(|c| c.next_deadline());
        #[cfg(not(feature = "mcp"))]
        let mcp = None;
        [stage, run.exit.deadline(), mcp]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Engine {
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let startup = self.state.deadline();
        #[cfg(feature = "ext-calls")]
        let calls = self.jobs.next_deadline();
        #[cfg(not(feature = "ext-calls"))]
        let calls = None;
        let engine = [self.pending.next_deadline(), calls, startup];
        let exts = self.exts.iter().map(Ext::deadline);
        exts.chain(engine).flatten().min()
    }

    /// The running extensions whose process the driver is to look at
    /// before the tick at `now` (`action.rs`): those whose exit watch
    /// is due.
    pub(super) fn probes_due(&self, now: Instant) -> impl Iterator<Item = usize> + '_ {
        let exts = self.exts.iter().enumerate();
        exts.filter(move |(_, e)| {
            e.run()
                .is_some_and(|r| r.exit.deadline().is_some_and(|at| at <= now))
        })
        .map(|(idx, _)| idx)
    }

    pub(super) fn tick(&mut self, now: Instant, probes: &Probes) {
        for idx in 0..self.exts.len() {
            #[cfg(feature = "mcp")]
            self.tick_mcp(idx, now);
            let probe = probes.get(&idx).copied().unwrap_or(Probe::UNSEEN);
            self.tick_ext(idx, probe, now);
        }
        self.expire(now);
        #[cfg(feature = "ext-calls")]
        self.expire_jobs(now);
        self.check_startup(now);
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
                Some(Due::Exit(status)) => return self.exited(idx, status, now),
                Some(Due::Deaf) => {
                    let Some(status) = probe.exited.or(run.exit.exit_status()) else {
                        ext.log.line("its stdin is closed: what it owes fails");
                        let error = HostError::NotServing(ext.name.clone());
                        return self.release(idx, Some(&error), "stdin closed", now);
                    };
                    // It exited: the frames still in its pipe come first.
                    return self.exit_found(idx, status, now);
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
        // Its exit comes as a message once the signal ends it.
        self.actions.push(Action::Signal {
            ext: idx,
            signal: sig,
        });
    }
}
