//! The interception chain (SPEC 3.10) as a pure state machine: every
//! guard is asked at once, the answers are walked in precedence order,
//! and a rewrite sends the value again to the guards after the rewriter.
//! The host loop owns the I/O and the deadlines; this module decides.

use crate::protocol::EventPayload;
use serde::Serialize;
use serde_json::Value;

/// Events a guard may intercept.
pub const INTERCEPTABLE: [&str; 3] = ["tool_call", "turn_start", "assistant_message"];

/// One guard's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// Let it through unchanged (also: timed out, exited, unwritable).
    Allow,
    /// Refuse, with the reason shown to the model or user.
    Block(String),
    /// Replace the args (`tool_call`) or the text (`assistant_message`);
    /// a rewrite that does not fit the event allows.
    Rewrite {
        args: Option<Value>,
        text: Option<String>,
    },
}

/// Result of a chain.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InterceptOutcome {
    /// Whether a guard refused.
    pub block: bool,
    /// The refusing guard's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Rewritten tool args, when a guard rewrote them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_args: Option<Value>,
    /// Rewritten assistant text, when a guard rewrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace_text: Option<String>,
}

/// What the host loop must do next.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// Wait for more answers (or the round deadline).
    Wait,
    /// Ask the guards at these positions (again) with [`Chain::payload`].
    Ask(std::ops::Range<usize>),
    /// The chain is decided.
    Done(InterceptOutcome),
}

/// A chain over `n` guards in precedence order.
#[derive(Debug)]
pub(crate) struct Chain {
    pub(crate) event: String,
    /// The value guards decide on, rewritten as the chain walks.
    pub(crate) payload: EventPayload,
    /// This round's answers (`None`: not yet); those before `next` are used.
    answers: Vec<Option<Answer>>,
    next: usize,
    outcome: InterceptOutcome,
}

impl Chain {
    /// A chain over `guards` guards; all of them are to be asked first.
    pub(crate) fn new(event: &str, payload: EventPayload, guards: usize) -> Chain {
        Chain {
            event: event.to_string(),
            payload,
            answers: vec![None; guards],
            next: 0,
            outcome: InterceptOutcome::default(),
        }
    }

    /// Records the answer of the guard at `pos` for the current round;
    /// an answer nobody waits for is ignored.
    pub(crate) fn answer(&mut self, pos: usize, answer: Answer) {
        if let Some(slot @ None) = self.answers.get_mut(pos).filter(|_| pos >= self.next) {
            *slot = Some(answer);
        }
    }

    /// Walks the answers in precedence order as far as they go.
    pub(crate) fn advance(&mut self) -> Step {
        while let Some(slot) = self.answers.get_mut(self.next) {
            let (args, text) = match slot.take() {
                None => return Step::Wait,
                Some(Answer::Allow) => (None, None),
                Some(Answer::Block(reason)) => {
                    self.outcome.block = true;
                    self.outcome.reason = Some(reason);
                    break;
                }
                Some(Answer::Rewrite { args, text }) => (args, text),
            };
            self.next += 1;
            match (self.event.as_str(), args, text) {
                ("tool_call", Some(args), _) => {
                    self.payload.tool_args = Some(args.clone());
                    self.outcome.modified_args = Some(args);
                }
                ("assistant_message", _, Some(text)) if !text.is_empty() => {
                    self.payload.text = Some(text.clone());
                    self.outcome.replace_text = Some(text);
                }
                _ => continue,
            }
            if self.next < self.answers.len() {
                // Later guards decided on the old value: ask again.
                self.answers[self.next..].fill(None);
                return Step::Ask(self.next..self.answers.len());
            }
        }
        Step::Done(std::mem::take(&mut self.outcome))
    }
}

/// Turns a guard's `event_intercept_response` into an [`Answer`].
pub(crate) fn answer_from(
    block: Option<bool>,
    reason: Option<String>,
    args: Option<Value>,
    text: Option<String>,
    guard: &str,
) -> Answer {
    if block != Some(true) {
        return Answer::Rewrite { args, text };
    }
    let reason = reason.filter(|r| !r.trim().is_empty());
    Answer::Block(reason.unwrap_or_else(|| format!("blocked by extension {guard}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn first_block_in_precedence_order_wins() {
        let mut c = Chain::new("tool_call", EventPayload::default(), 3);
        c.answer(2, Answer::Block("third".into()));
        assert_eq!(c.advance(), Step::Wait);
        c.answer(1, Answer::Block("second".into()));
        assert_eq!(c.advance(), Step::Wait);
        c.answer(0, Answer::Allow);
        let Step::Done(out) = c.advance() else {
            panic!()
        };
        assert_eq!((out.block, out.reason.as_deref()), (true, Some("second")));
    }

    #[test]
    fn rewrites_that_do_not_fit_the_event_allow() {
        let rewrite = |event, text: &str| {
            let mut c = Chain::new(event, EventPayload::default(), 1);
            let args = Some(json!(1));
            c.answer(0, answer_from(None, None, args, Some(text.into()), "g"));
            c.advance()
        };
        assert_eq!(rewrite("turn_start", "t"), Step::Done(Default::default()));
        assert_eq!(
            rewrite("assistant_message", ""),
            Step::Done(Default::default())
        );
        assert_eq!(
            answer_from(Some(true), Some(" ".into()), None, None, "g"),
            Answer::Block("blocked by extension g".into())
        );
    }
}
