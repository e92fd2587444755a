//! The interception chain (docs/PROTOCOL.md#interception) as a pure state machine: every
//! guard is asked at once, the answers are walked in precedence order,
//! and a rewrite sends the value again to the guards after the rewriter.
//! The host loop owns the I/O and the deadlines; this module decides.

use crate::wire::protocol::EventPayload;
use crate::wire::tooldef::kind;
use serde::Serialize;
use serde_json::Value;

closed_set! {
    /// The events a guard may intercept (docs/PROTOCOL.md#interception).
    pub enum InterceptEvent {
        /// The model is about to call a tool: guards may block it or rewrite its args.
        ToolCall = "tool_call",
        /// A turn is about to start: guards may block it.
        TurnStart = "turn_start",
        /// The model's answer is about to be shown: guards may block or rewrite it.
        AssistantMessage = "assistant_message",
        /// A prompt is about to go to the model: guards are asked one after
        /// another, each with the previous one's system prompt (docs/PROTOCOL.md#system-prompt).
        BeforeAgentStart = "before_agent_start",
    }
}

/// Events a guard may intercept, by name.
pub(crate) const INTERCEPTABLE: &[&str] = InterceptEvent::NAMES;

/// The event whose guards are asked one after another (docs/PROTOCOL.md#system-prompt).
pub(crate) const BEFORE_AGENT_START: &str = "before_agent_start";

/// The longest `system_prompt` answer used, JSON-encoded (upstream's limit).
pub const MAX_SYSTEM_PROMPT: usize = 1 << 20;

/// One guard's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// Refuse, with the reason shown to the model or user.
    Block(String),
    /// Replace the args (`tool_call`) or the text (`assistant_message`);
    /// a rewrite that does not fit the event allows.
    Rewrite {
        args: Option<Value>,
        text: Option<String>,
    },
    /// `before_agent_start`: the replacement prompt, or `None` to keep it.
    Prompt(Option<String>),
    /// Cannot be used (timed out, exited, a `system_prompt` that is not
    /// a string...): allows, and for `before_agent_start` keeps the
    /// prompt and says why.
    Unusable(String),
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
    /// `before_agent_start`: the system prompt after every guard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// `before_agent_start`: why answers were not used (the prompt was kept).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
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
    /// The guards to ask first: all at once, or for `before_agent_start`
    /// the first alone (docs/PROTOCOL.md#system-prompt).
    pub(crate) fn first_round(&self) -> std::ops::Range<usize> {
        match self.event == BEFORE_AGENT_START {
            true => 0..self.answers.len().min(1),
            false => 0..self.answers.len(),
        }
    }

    /// A chain over `guards` guards.
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
        if self.event == BEFORE_AGENT_START {
            return self.advance_serial();
        }
        while let Some(slot) = self.answers.get_mut(self.next) {
            let (args, text) = match slot.take() {
                None => return Step::Wait,
                Some(Answer::Prompt(_) | Answer::Unusable(_)) => (None, None),
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

    /// `before_agent_start`: one guard at a time, each deciding on the
    /// prompt the one before left; `block` means nothing here.
    fn advance_serial(&mut self) -> Step {
        while let Some(slot) = self.answers.get_mut(self.next) {
            match slot.take() {
                None => return Step::Wait,
                Some(Answer::Prompt(Some(prompt))) => self.payload.system_prompt = Some(prompt),
                Some(Answer::Block(why) | Answer::Unusable(why)) => self.outcome.warnings.push(why),
                Some(_) => {}
            }
            self.next += 1;
            if self.next < self.answers.len() {
                return Step::Ask(self.next..self.next + 1);
            }
        }
        self.outcome.system_prompt = self.payload.system_prompt.clone();
        Step::Done(std::mem::take(&mut self.outcome))
    }
}

/// A guard's `event_intercept_response`, as it came.
#[derive(Debug, Default)]
pub(crate) struct GuardReply {
    pub block: Option<bool>,
    pub reason: Option<String>,
    pub modified_args: Option<Value>,
    pub replace_text: Option<String>,
    pub system_prompt: Option<Value>,
}

/// A `before_agent_start` answer: the prompt, or why it is not used.
fn prompt_answer(value: Option<Value>, guard: &str) -> Answer {
    let kept = "the system prompt is kept";
    match value {
        None => Answer::Prompt(None),
        Some(Value::String(s)) => {
            // Its encoded size, as upstream counts it (escapes included).
            let encoded = serde_json::to_string(&s).map_or(s.len(), |e| e.len());
            if encoded > MAX_SYSTEM_PROMPT {
                return Answer::Unusable(format!(
                    "before_agent_start: extension {guard} answered a system_prompt of \
                     {encoded} bytes, over the 1 MiB limit: {kept}"
                ));
            }
            Answer::Prompt(Some(s))
        }
        Some(other) => Answer::Unusable(format!(
            "before_agent_start: extension {guard} answered a system_prompt that is \
             {}, not a string: {kept}",
            kind(&other)
        )),
    }
}

/// Turns a guard's `event_intercept_response` to `event` into an [`Answer`].
pub(crate) fn answer_from(event: &str, reply: GuardReply, guard: &str) -> Answer {
    if event == BEFORE_AGENT_START {
        return prompt_answer(reply.system_prompt, guard);
    }
    let GuardReply {
        block,
        reason,
        modified_args: args,
        replace_text: text,
        ..
    } = reply;
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
        c.answer(0, Answer::Prompt(None));
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
            let reply = GuardReply {
                modified_args: args,
                replace_text: Some(text.into()),
                ..Default::default()
            };
            c.answer(0, answer_from(event, reply, "g"));
            c.advance()
        };
        assert_eq!(rewrite("turn_start", "t"), Step::Done(Default::default()));
        assert_eq!(
            rewrite("assistant_message", ""),
            Step::Done(Default::default())
        );
        let reply = GuardReply {
            block: Some(true),
            reason: Some(" ".into()),
            ..Default::default()
        };
        assert_eq!(
            answer_from("tool_call", reply, "g"),
            Answer::Block("blocked by extension g".into())
        );
    }

    #[test]
    fn before_agent_start_is_serial_and_keeps_the_prompt_on_bad_answers() {
        let payload = EventPayload {
            system_prompt: Some("base".into()),
            ..Default::default()
        };
        let mut c = Chain::new(BEFORE_AGENT_START, payload, 3);
        assert_eq!(c.first_round(), 0..1);
        c.answer(0, Answer::Prompt(Some("one".into())));
        assert_eq!(c.advance(), Step::Ask(1..2));
        assert_eq!(c.payload.system_prompt.as_deref(), Some("one"));
        c.answer(1, prompt_answer(Some(json!(7)), "g"));
        assert_eq!(c.advance(), Step::Ask(2..3));
        c.answer(2, Answer::Prompt(None));
        let Step::Done(out) = c.advance() else {
            panic!()
        };
        assert_eq!(out.system_prompt.as_deref(), Some("one"));
        assert!(
            out.warnings[0].contains("a number, not a string"),
            "{out:?}"
        );
        let huge = prompt_answer(Some(json!("x".repeat(MAX_SYSTEM_PROMPT))), "g");
        assert!(matches!(huge, Answer::Unusable(w) if w.contains("over the 1 MiB limit")));
    }
}
