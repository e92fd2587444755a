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
pub enum Answer {
    /// Let it through unchanged (also: timed out, exited, unwritable).
    Allow,
    /// Refuse, with the reason shown to the model or user.
    Block(String),
    /// `tool_call`: replace the args.
    ModifyArgs(Value),
    /// `assistant_message`: replace the text.
    ReplaceText(String),
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
pub enum Step {
    /// Wait for more answers (or the round deadline).
    Wait,
    /// Ask the guards at these positions (again) with [`Chain::payload`].
    Ask(std::ops::Range<usize>),
    /// The chain is decided.
    Done(InterceptOutcome),
}

/// A chain over `n` guards in precedence order.
#[derive(Debug)]
pub struct Chain {
    /// The event name.
    pub event: String,
    /// The value guards decide on, rewritten as the chain walks.
    pub payload: EventPayload,
    /// This round's answers (`None`: not yet); those before `next` are used.
    answers: Vec<Option<Answer>>,
    next: usize,
    outcome: InterceptOutcome,
}

impl Chain {
    /// A chain over `guards` guards; all of them are to be asked first.
    pub fn new(event: &str, payload: EventPayload, guards: usize) -> Chain {
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
    pub fn answer(&mut self, pos: usize, answer: Answer) {
        if let Some(slot @ None) = self.answers.get_mut(pos).filter(|_| pos >= self.next) {
            *slot = Some(answer);
        }
    }

    /// Walks the answers in precedence order as far as they go.
    pub fn advance(&mut self) -> Step {
        while let Some(slot) = self.answers.get_mut(self.next) {
            match slot.take() {
                None => return Step::Wait,
                Some(Answer::Allow) => {}
                Some(Answer::Block(reason)) => {
                    self.outcome.block = true;
                    self.outcome.reason = Some(reason);
                    break;
                }
                Some(Answer::ModifyArgs(args)) => {
                    self.payload.tool_args = Some(args.clone());
                    self.outcome.modified_args = Some(args);
                    return self.ask_after_rewrite();
                }
                Some(Answer::ReplaceText(text)) => {
                    self.payload.text = Some(text.clone());
                    self.outcome.replace_text = Some(text);
                    return self.ask_after_rewrite();
                }
            }
            self.next += 1;
        }
        Step::Done(std::mem::take(&mut self.outcome))
    }

    /// The guards after a rewriter decided on the old value: ask again.
    fn ask_after_rewrite(&mut self) -> Step {
        self.next += 1;
        if self.next == self.answers.len() {
            return self.advance();
        }
        self.answers[self.next..].fill(None);
        Step::Ask(self.next..self.answers.len())
    }
}

/// Turns a guard's response into an [`Answer`] for `event`. A rewrite
/// that does not fit the event counts as allow.
pub fn answer_from(
    event: &str,
    block: bool,
    reason: Option<String>,
    modified_args: Option<Value>,
    replace_text: Option<String>,
    guard: &str,
) -> Answer {
    if block {
        let reason = reason
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| format!("blocked by extension {guard}"));
        return Answer::Block(reason);
    }
    match (event, modified_args, replace_text) {
        ("tool_call", Some(args), _) => Answer::ModifyArgs(args),
        ("assistant_message", _, Some(text)) if !text.is_empty() => Answer::ReplaceText(text),
        _ => Answer::Allow,
    }
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
        let a = |event, args: Option<Value>, text: Option<&str>| {
            answer_from(event, false, None, args, text.map(String::from), "g")
        };
        assert_eq!(a("turn_start", Some(json!(1)), Some("t")), Answer::Allow);
        assert_eq!(a("assistant_message", None, Some("")), Answer::Allow);
        assert_eq!(
            answer_from("tool_call", true, Some(" ".into()), None, None, "g"),
            Answer::Block("blocked by extension g".into())
        );
    }
}
