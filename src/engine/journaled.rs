//! The engine's side of the journal (`crate::journal`): each step of an
//! embedder's tool call is journaled before it takes effect. The engine
//! only buffers the records; the driver syncs the records of a turn at
//! once, after the engine settled and before the turn's frames are
//! written ([`Engine::journal_synced`]). Until then a call's `tool_call`
//! frame and its answer are parked here, so 64 calls in flight share a
//! sync instead of paying one each. A step that cannot be journaled ends
//! the call with [`HostError::Journal`], which names the file. Reconcile
//! calls perform nothing and are not journaled. Every call is journaled
//! with its origin: the embedder's surface, or the extension whose
//! `call_tool` made it. Without the `journal` feature every step is a
//! no-op.

#[cfg(feature = "journal")]
use super::jobs::{At, Origin};
use super::jobs::{Caller, Job};
use super::Engine;
use crate::intercept::Answer;
use crate::types::{HostError, ToolOutcome};
use serde_json::Value;
#[cfg(feature = "journal")]
use std::time::Instant;

/// A call's step that waits for the turn's journal sync.
#[cfg_attr(not(feature = "journal"), allow(dead_code))]
enum Wait {
    /// Its `tool_call` frame (`dispatched` is buffered).
    Dispatch(u64),
    /// Its answer (`finished` is buffered).
    Finish(Box<Job>, Result<ToolOutcome, HostError>, Caller),
}

/// The steps parked until the turn's sync, in the order decided.
#[derive(Default)]
pub(super) struct Parked(Vec<Wait>);

impl Parked {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The result of ending a job: the job, what it ended with and whether
/// its caller listens; `None` when it waits for the turn's sync.
type Ending = Option<(Job, Result<ToolOutcome, HostError>, Caller)>;

#[cfg(feature = "journal")]
impl Engine {
    fn journal(&self) -> Option<std::sync::Arc<crate::journal::Journal>> {
        self.cfg.opened_journal.clone()
    }

    /// Journals `accepted` for `job`, giving it a key (its `operation_key`)
    /// when the embedder gave none.
    pub(super) fn journal_accepted(&mut self, job: u64) -> Result<(), HostError> {
        let Some(journal) = self.journal() else {
            return Ok(());
        };
        let Some(j) = self.jobs.get(job) else {
            return Ok(());
        };
        if j.reconcile {
            return Ok(());
        }
        let origin = match &j.origin {
            Origin::Embedder(_) => self.cfg.journal_origin.clone(),
            Origin::Ext { ext, .. } => format!("extension:{}", self.exts[*ext].name),
        };
        let claim = self.tools.owner(&j.name);
        let call = crate::journal::InterruptedCall {
            call: (j.operation_key.clone()).unwrap_or_else(|| journal.new_key()),
            tool: j.name.clone(),
            extension: claim.map_or_else(|| "built-in".into(), |c| self.exts[c.rank].name.clone()),
            args: j.args.clone(),
            replay: claim.map(|c| c.info.replay).unwrap_or_default(),
            accepted_at: crate::journal::now_ms(),
            origin,
            dispatched: false,
        };
        journal.accepted(&call).map_err(HostError::Journal)?;
        if let Some(j) = self.jobs.get_mut(job) {
            j.operation_key = Some(call.call);
            j.journaled = true;
        }
        Ok(())
    }

    /// Journals the guards' verdict on `job`.
    pub(super) fn journal_verdict(
        &self,
        job: u64,
        block: Option<&str>,
        args: &Value,
    ) -> Result<(), HostError> {
        // Without guards there is no verdict to record (one sync less).
        let guarded = (self.jobs.get(job)).is_some_and(|j| matches!(j.at, At::Guards(_)));
        match (self.journal(), self.journaled_key(job)) {
            (Some(journal), Some(key)) if guarded => {
                (journal.verdict(&key, block, args)).map_err(HostError::Journal)
            }
            _ => Ok(()),
        }
    }

    /// Journals guard `guard`'s answer on `job`.
    pub(super) fn journal_guard(
        &self,
        job: u64,
        guard: &str,
        answer: &Answer,
    ) -> Result<(), HostError> {
        let (Some(journal), Some(key)) = (self.journal(), self.journaled_key(job)) else {
            return Ok(());
        };
        let (decision, detail) = match answer {
            Answer::Block(reason) => ("block", Some(("reason", Value::from(reason.as_str())))),
            Answer::Rewrite {
                args: Some(args), ..
            } => ("rewrite", Some(("args", args.clone()))),
            Answer::Unusable(why) => ("unavailable", Some(("reason", Value::from(why.as_str())))),
            _ => ("allow", None),
        };
        (journal.guard(&key, guard, decision, detail)).map_err(HostError::Journal)
    }

    /// Buffers that `job` is handed to its extension; true when its
    /// frame now waits for the turn's sync.
    pub(super) fn journal_dispatched(&mut self, job: u64) -> Result<bool, HostError> {
        let (Some(journal), Some(key)) = (self.journal(), self.journaled_key(job)) else {
            return Ok(false);
        };
        journal.dispatched(&key).map_err(HostError::Journal)?;
        self.parked.0.push(Wait::Dispatch(job));
        Ok(true)
    }

    /// Buffers how `j` ended: its answer waits for the turn's sync (the
    /// caller hears of no result the journal does not hold).
    pub(super) fn journal_finished(
        &mut self,
        j: Job,
        result: Result<ToolOutcome, HostError>,
        caller: Caller,
    ) -> Ending {
        let (Some(journal), true, Some(key)) = (self.journal(), j.journaled, &j.operation_key)
        else {
            return Some((j, result, caller));
        };
        let text = match &result {
            Ok(outcome) => serde_json::to_string(outcome).ok(),
            Err(e) => serde_json::to_string(&e.to_string()).ok(),
        };
        let status = super::jobs::status(&result);
        if let Err(e) = journal.finished(key, status, text.as_deref()) {
            return Some((j, Err(HostError::Journal(e)), caller));
        }
        self.parked
            .0
            .push(Wait::Finish(Box::new(j), result, caller));
        None
    }

    /// The driver synced the turn's records (or could not): the parked
    /// frames are sent and answers given, or, when the sync failed, those
    /// calls fail with its error, as do the calls whose earlier records
    /// were lost with it (their ends are journaled in turn).
    pub(super) fn journal_synced(
        &mut self,
        synced: Result<(), crate::journal::SyncFailed>,
        now: Instant,
    ) {
        let parked = std::mem::take(&mut self.parked.0);
        let failed = synced.err();
        let error = (failed.as_ref()).map(|f| HostError::Journal(f.error.clone()));
        for wait in parked {
            match (wait, &error) {
                (Wait::Dispatch(job), None) => {
                    if self.jobs.get(job).is_some_and(|j| j.at == At::Starting) {
                        self.send_tool(job, now);
                    }
                }
                (Wait::Dispatch(job), Some(e)) => self.finish_job(job, Err(e.clone()), now),
                (Wait::Finish(j, result, caller), None) => self.ended(*j, result, caller, now),
                (Wait::Finish(j, _, caller), Some(e)) => {
                    self.ended(*j, Err(e.clone()), caller, now)
                }
            }
        }
        if let (Some(failed), Some(e)) = (failed, error) {
            let lost = |j: &Job| {
                j.journaled && (j.operation_key.as_ref()).is_some_and(|k| failed.keys.contains(k))
            };
            for job in self.jobs.all(lost) {
                self.abort_job(job, e.clone(), Caller::Listening, now);
            }
        }
        while self.advance(now) {}
    }

    fn journaled_key(&self, job: u64) -> Option<String> {
        let j = self.jobs.get(job)?;
        j.journaled.then(|| j.operation_key.clone()).flatten()
    }
}

#[cfg(not(feature = "journal"))]
impl Engine {
    pub(super) fn journal_accepted(&mut self, _: u64) -> Result<(), HostError> {
        Ok(())
    }

    pub(super) fn journal_verdict(
        &self,
        _: u64,
        _: Option<&str>,
        _: &Value,
    ) -> Result<(), HostError> {
        Ok(())
    }

    pub(super) fn journal_dispatched(&mut self, _: u64) -> Result<bool, HostError> {
        Ok(false)
    }

    pub(super) fn journal_guard(&self, _: u64, _: &str, _: &Answer) -> Result<(), HostError> {
        Ok(())
    }

    pub(super) fn journal_finished(
        &mut self,
        j: Job,
        result: Result<ToolOutcome, HostError>,
        caller: Caller,
    ) -> Ending {
        Some((j, result, caller))
    }
}
