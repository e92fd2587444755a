//! The engine's side of the journal (`crate::journal`): each step of an
//! embedder's tool call is journaled before it takes effect. A step that
//! cannot be journaled ends the call with [`HostError::Journal`], which
//! names the file. Reconcile calls perform nothing and are not journaled;
//! nor are extensions' `call_tool`s, which a crash takes down with their
//! caller. Without the `journal` feature every step is a no-op.

use super::jobs::Job;
#[cfg(feature = "journal")]
use super::jobs::{At, Origin};
use super::Engine;
use crate::intercept::Answer;
use crate::types::{HostError, ToolOutcome};
use serde_json::Value;

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
        if j.reconcile || !matches!(j.origin, Origin::Embedder(_)) {
            return Ok(());
        }
        let claim = self.tools.owner(&j.name);
        let call = crate::journal::InterruptedCall {
            call: (j.operation_key.clone()).unwrap_or_else(|| journal.new_key()),
            tool: j.name.clone(),
            extension: claim.map_or_else(|| "built-in".into(), |c| self.exts[c.rank].name.clone()),
            args: j.args.clone(),
            replay: claim.map(|c| c.info.replay).unwrap_or_default(),
            accepted_at: crate::journal::now_ms(),
            dispatched: false,
        };
        journal
            .accepted(&call, "embedder")
            .map_err(HostError::Journal)?;
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

    /// Journals that `job` is handed to its extension.
    pub(super) fn journal_dispatched(&self, job: u64) -> Result<(), HostError> {
        match (self.journal(), self.journaled_key(job)) {
            (Some(journal), Some(key)) => journal.dispatched(&key).map_err(HostError::Journal),
            _ => Ok(()),
        }
    }

    /// Journals how `j` ended, before its caller hears of it.
    pub(super) fn journal_finished(
        &self,
        j: &Job,
        status: &str,
        result: &Result<ToolOutcome, HostError>,
    ) -> Result<(), HostError> {
        let (Some(journal), true, Some(key)) = (self.journal(), j.journaled, &j.operation_key)
        else {
            return Ok(());
        };
        let text = match result {
            Ok(outcome) => serde_json::to_string(outcome).ok(),
            Err(e) => serde_json::to_string(&e.to_string()).ok(),
        };
        (journal.finished(key, status, text.as_deref())).map_err(HostError::Journal)
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

    pub(super) fn journal_dispatched(&self, _: u64) -> Result<(), HostError> {
        Ok(())
    }

    pub(super) fn journal_guard(&self, _: u64, _: &str, _: &Answer) -> Result<(), HostError> {
        Ok(())
    }

    pub(super) fn journal_finished(
        &self,
        _: &Job,
        _: &str,
        _: &Result<ToolOutcome, HostError>,
    ) -> Result<(), HostError> {
        Ok(())
    }
}
