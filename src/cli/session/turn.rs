//! Turns (SPEC 6): `session_start` once, `turn_start` interception and
//! event, the agent command, `assistant_message` interception and
//! event, `turn_end`. Each step is a request whose reply moves the turn
//! on, so the session loop never blocks on one.

use super::agent::Agent;
use super::render::Tone;
use super::{Done, Pending, Session, Turn};
use zot_host::{EventPayload, HostError, InterceptOutcome};

impl Session {
    /// Starts a turn for `prompt`: first the `turn_start` interception.
    pub(super) fn start_turn(&mut self, prompt: String) {
        // Notes are one-shot: the next prompt clears them.
        self.notes.clear();
        if !self.session_started {
            self.session_started = true;
            self.emit("session_start", EventPayload::default());
        }
        self.step += 1;
        let turn = Turn {
            prompt,
            step: self.step,
            started: false,
        };
        let payload = EventPayload {
            step: Some(turn.step),
            ..Default::default()
        };
        self.intercept(Pending::TurnStart(turn), "turn_start", payload);
    }

    pub(super) fn turn_allowed(
        &mut self,
        mut turn: Turn,
        result: Result<InterceptOutcome, HostError>,
    ) {
        match result {
            Ok(o) if o.block => return self.out.blocked(o.reason.as_deref().unwrap_or("")),
            Ok(_) => {}
            Err(e) => return self.out.error(&e.to_string()),
        }
        let payload = EventPayload {
            step: Some(turn.step),
            ..Default::default()
        };
        self.emit("turn_start", payload);
        turn.started = true;
        let Some(cmd) = self.agent_cmd.clone() else {
            self.out.text("would submit: ", Tone::Cyan, &turn.prompt);
            return self.end_turn(&turn, "end_turn", None);
        };
        let (tx, job) = (self.done_tx.clone(), self.next_job + 1);
        let done = move |r| {
            // The agent is no extension: its answer follows no event.
            let _ = tx.send((job, 0, Done::Agent(r)));
        };
        match Agent::spawn(&cmd, &self.cwd, &turn.prompt, done) {
            Ok(agent) => {
                self.next_job += 1;
                self.current = Some((job, Pending::Agent(turn, agent)));
            }
            Err(e) => {
                self.out.error(&format!("agent command failed: {e}"));
                self.end_turn(&turn, "error", Some(e));
            }
        }
    }

    pub(super) fn agent_done(&mut self, turn: Turn, result: Result<String, String>) {
        let text = match result {
            Ok(text) => text,
            Err(e) => {
                self.out.error(&format!("agent command failed: {e}"));
                return self.end_turn(&turn, "error", Some(e));
            }
        };
        let payload = EventPayload {
            text: Some(text.clone()),
            ..Default::default()
        };
        self.intercept(Pending::Message(turn, text), "assistant_message", payload);
    }

    pub(super) fn message_done(
        &mut self,
        turn: Turn,
        text: String,
        result: Result<InterceptOutcome, HostError>,
    ) {
        let shown = match result {
            Ok(o) if o.block => {
                self.out.blocked(o.reason.as_deref().unwrap_or(""));
                None
            }
            Ok(o) => Some(o.replace_text.unwrap_or(text)),
            Err(e) => {
                self.out.error(&e.to_string());
                Some(text)
            }
        };
        if let Some(shown) = shown {
            self.out.text("assistant: ", Tone::Bold, &shown);
            let payload = EventPayload {
                text: Some(shown),
                ..Default::default()
            };
            self.emit("assistant_message", payload);
        }
        self.end_turn(&turn, "end_turn", None);
    }

    pub(super) fn end_turn(&mut self, turn: &Turn, stop: &str, error: Option<String>) {
        if turn.started {
            let payload = EventPayload {
                stop: Some(stop.to_string()),
                error,
                ..Default::default()
            };
            self.emit("turn_end", payload);
        }
    }
}
