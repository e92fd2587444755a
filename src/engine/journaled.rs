//! The engine's side of the journal (`crate::journal`): each step of an
//! embedder's tool call is journaled before it takes effect. The engine
//! only buffers the records; the driver syncs the records of a turn at
//! once, after the engine settled and before the turn's frames are
//! written ([`Engine::journal_synced`]). Until then a call's `tool_call`
//! frame and its answer are parked here, so 64 calls in flight share a
//! sync instead of paying one each. A step that cannot be journaled ends
//! the call with [`HostError::Journal`], which names the file. Reconcile
//! calls perform nothing and are not journaled; their answer's state is
//! read here ([`Engine::reconciled`]). Every call is journaled
//! with its origin: the embedder's surface, or the extension whose
//! `call_tool` made it. Only in the `journal` feature's build.

use super::jobs::{status, At, Job, Origin, Wait};
use super::Engine;
use crate::intercept::{Answer, InterceptOutcome};
use crate::types::{HostError, ReconcileState, ToolOutcome};
use crate::wire::toolresult::{text_block, Content, NO_CONTENT};
use serde_json::Value;
use std::time::Instant;

/// The result of ending a job: the job and what it ended with; `None`
/// when it waits for the turn's sync.
type Ending = Option<(Job, Result<ToolOutcome, HostError>)>;

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
            #[cfg(feature = "ext-calls")]
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

    /// A reconcile call's state, read from its answer's
    /// `structured_content` (docs/PROTOCOL.md#replay-and-reconcile), and
    /// its content: on `completed` only the text blocks, the recovered
    /// result rather than the reconcile's report. `None` for other calls.
    pub(super) fn reconciled(
        &self,
        job: u64,
        mut content: Vec<Content>,
        structured: Option<&Value>,
    ) -> (Vec<Content>, Option<ReconcileState>) {
        if !self.jobs.get(job).is_some_and(|j| j.reconcile) {
            return (content, None);
        }
        let state = ReconcileState::of(structured);
        if state == ReconcileState::Completed {
            content.retain(|b| b.text().is_some());
            if content.is_empty() {
                content.push(text_block(NO_CONTENT));
            }
        }
        (content, Some(state))
    }

    /// Journals the guards' verdict on `job`.
    pub(super) fn journal_verdict(
        &self,
        job: u64,
        outcome: &InterceptOutcome,
        args: &Value,
    ) -> Result<(), HostError> {
        let block = (outcome.block).then(|| outcome.reason.as_deref().unwrap_or(""));
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
        self.parked.push(Wait::Dispatch(job));
        Ok(true)
    }

    /// Buffers how `j` ended: its answer waits for the turn's sync (the
    /// caller hears of no result the journal does not hold).
    pub(super) fn journal_finished(
        &mut self,
        j: Job,
        result: Result<ToolOutcome, HostError>,
    ) -> Ending {
        let (Some(journal), true, Some(key)) = (self.journal(), j.journaled, &j.operation_key)
        else {
            return Some((j, result));
        };
        let text = match &result {
            Ok(outcome) => serde_json::to_string(outcome).ok(),
            Err(e) => serde_json::to_string(&e.to_string()).ok(),
        };
        let status = status(&result);
        if let Err(e) = journal.finished(key, status, text.as_deref()) {
            return Some((j, Err(HostError::Journal(e))));
        }
        self.parked.push(Wait::Finish(Box::new(j), result));
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
        let parked = std::mem::take(&mut self.parked);
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
                (Wait::Finish(j, result), None) => self.ended(*j, result, now),
                (Wait::Finish(j, _), Some(e)) => self.ended(*j, Err(e.clone()), now),
            }
        }
        if let (Some(failed), Some(e)) = (failed, error) {
            let lost = |j: &Job| {
                j.journaled && (j.operation_key.as_ref()).is_some_and(|k| failed.keys.contains(k))
            };
            for job in self.jobs.all(lost) {
                self.abort_job(job, e.clone(), now);
            }
        }
        while self.advance(now) {}
    }

    fn journaled_key(&self, job: u64) -> Option<String> {
        let j = self.jobs.get(job)?;
        j.journaled.then(|| j.operation_key.clone()).flatten()
    }
}
