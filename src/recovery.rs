//! Recovery after a crash, on [`crate::HostHandle`] and [`crate::Host`]:
//! the calls the journal holds as interrupted, and resuming or abandoning
//! each. The journal itself (`journal.rs`) sits below the host, which
//! opens and writes it; this sits above the host.

use crate::journal::{InterruptedCall, Journal};
use crate::types::{HostError, ReconcileState, Replay, ToolOutcome, ToolRequest};
use std::path::Path;

/// Recovery.
macro_rules! recovery_methods {
    () => {
        /// The calls of [`crate::HostConfig::journal`] a crash interrupted
        /// (accepted, never finished) and not resolved yet. The host runs
        /// none of them by itself: [`Self::resume`] or [`Self::abandon`] each.
        pub fn interrupted_calls(&self) -> Vec<InterruptedCall> {
            self.journal_ref()
                .map_or_else(Vec::new, |j| j.interrupted())
        }

        /// Notes about reading the journal at start (a torn last line).
        pub fn journal_notes(&self) -> Vec<String> {
            self.journal_ref().map_or_else(Vec::new, |j| j.notes())
        }

        /// How many journal records this host wrote and how many syncs
        /// it made (`None` without a journal): the records of one loop
        /// turn share a sync, so calls in flight together share them.
        pub fn journal_counts(&self) -> Option<(u64, u64)> {
            self.journal_ref().map(Journal::counts)
        }

        /// Resolves interrupted call `key` by its tool's replay policy:
        /// `never` is refused; `safe` goes through the guards again, then
        /// runs; `idempotent` runs with the same `operation_key`;
        /// `reconcile` asks the extension first: `completed` gives the
        /// recovered result (journaled), `not_started` runs it, `unknown`
        /// leaves it open. The result's `reconciled` says what was found.
        pub fn resume(&self, key: &str) -> Result<ToolOutcome, HostError> {
            let (journal, call) = self.interrupted(key)?;
            let request =
                ToolRequest::new(call.tool.clone(), call.args.clone()).with_operation_key(key);
            match call.replay {
                Replay::Never => Err(HostError::Journal(format!(
                    "call {key} (tool {}) was interrupted and its tool's replay policy is \
                     never: it is not run again; abandon it",
                    call.tool
                ))),
                Replay::Safe => self.call_tool(request),
                Replay::Idempotent => self.call_tool_direct(request),
                Replay::Reconcile => {
                    let probe = self.call_tool_direct(request.clone().reconciling())?;
                    let state = match &probe {
                        ToolOutcome::Ran(r) => r.reconciled,
                        ToolOutcome::Builtin(_) => None,
                    };
                    match state {
                        Some(ReconcileState::Completed) => {
                            let text = serde_json::to_string(&probe).ok();
                            (journal.finished_now(key, "completed", text.as_deref()))
                                .map_err(HostError::Journal)?;
                            Ok(probe)
                        }
                        Some(ReconcileState::NotStarted) => {
                            let mut outcome = self.call_tool_direct(request)?;
                            if let ToolOutcome::Ran(r) = &mut outcome {
                                r.reconciled = Some(ReconcileState::NotStarted);
                            }
                            Ok(outcome)
                        }
                        _ => Ok(probe),
                    }
                }
            }
        }

        /// Closes interrupted call `key` without running it (journaled).
        pub fn abandon(&self, key: &str) -> Result<(), HostError> {
            let (journal, _) = self.interrupted(key)?;
            journal
                .finished_now(key, "abandoned", None)
                .map_err(HostError::Journal)
        }

        fn interrupted(&self, key: &str) -> Result<(&Journal, InterruptedCall), HostError> {
            let journal = self.journal_ref().ok_or_else(|| {
                HostError::Journal("this host has no journal (HostConfig::journal)".into())
            })?;
            let call = journal.interrupted_call(key).ok_or_else(|| {
                HostError::Journal(format!(
                    "no interrupted call {key:?} in journal {}",
                    journal.path().display()
                ))
            })?;
            Ok((journal, call))
        }
    };
}

impl crate::HostHandle {
    fn journal_ref(&self) -> Option<&Journal> {
        self.journal.as_deref()
    }

    /// The journal's path, when the host has one.
    pub fn journal_path(&self) -> Option<&Path> {
        self.journal_ref().map(Journal::path)
    }

    recovery_methods!();
}

/// The same on [`crate::Host`], through its handle (one copy of the code).
impl crate::Host {
    /// [`crate::HostHandle::interrupted_calls`].
    pub fn interrupted_calls(&self) -> Vec<InterruptedCall> {
        self.handle_ref().interrupted_calls()
    }

    /// [`crate::HostHandle::journal_notes`].
    pub fn journal_notes(&self) -> Vec<String> {
        self.handle_ref().journal_notes()
    }

    /// [`crate::HostHandle::journal_counts`].
    pub fn journal_counts(&self) -> Option<(u64, u64)> {
        self.handle_ref().journal_counts()
    }

    /// [`crate::HostHandle::resume`].
    pub fn resume(&self, key: &str) -> Result<ToolOutcome, HostError> {
        self.handle_ref().resume(key)
    }

    /// [`crate::HostHandle::abandon`].
    pub fn abandon(&self, key: &str) -> Result<(), HostError> {
        self.handle_ref().abandon(key)
    }
}
