//! Turns (SPEC 6): `session_start` once, `turn_start` interception and
//! event, the agent command, `assistant_message` interception and
//! event, `turn_end`. Each step is a job whose reply moves the turn on,
//! so the session loop never blocks on one.

use super::agent::Agent;
use super::render::Tone;
use super::{Job, Session};
use zot_host::{EventPayload, HostError, InterceptOutcome};

impl Session {
    /// Starts a turn for `prompt`: first the `turn_start` interception.
    pub(super) fn start_turn(&mut self, prompt: String) {
        // Notes are one-shot: the next prompt clears them.
        self.notes.clear();
        if self.step == 0 {
            self.emit("session_start", EventPayload::default());
        }
        let submitted = EventPayload {
            text: Some(prompt.clone()),
            ..Default::default()
        };
        self.emit("user_prompt_submit", submitted);
        self.step += 1;
        let step = self.step;
        let payload = EventPayload {
            step: Some(step),
            ..Default::default()
        };
        // No `turn_start` went out yet: cancelling this has nothing to end.
        self.intercept(Job::Request, "turn_start", payload, move |s, r| {
            s.turn_allowed(prompt, step, r)
        });
    }

    fn turn_allowed(
        &mut self,
        prompt: String,
        step: u64,
        result: Result<InterceptOutcome, HostError>,
    ) {
        match result {
            Ok(o) if o.block => return self.out.blocked(o.reason.as_deref().unwrap_or("")),
            Ok(_) => {}
            Err(e) => return self.out.error(&e.to_string()),
        }
        let payload = EventPayload {
            step: Some(step),
            ..Default::default()
        };
        self.emit("turn_start", payload);
        let Some(cmd) = self.agent_cmd.clone() else {
            self.out.text("would submit: ", Tone::Cyan, &prompt);
            return self.end_turn("end_turn", None);
        };
        let (id, back) = self.jobs.next();
        // The agent is no extension: its answer follows no event.
        let done = move |r| back.send(0, move |s: &mut Session| s.agent_done(r));
        match Agent::spawn(&cmd, &self.cwd, &prompt, done) {
            Ok(agent) => self.jobs.begin(id, Job::Turn(Some(agent))),
            Err(e) => {
                self.out.error(&format!("agent command failed: {e}"));
                self.end_turn("error", Some(e));
            }
        }
    }

    fn agent_done(&mut self, result: Result<String, String>) {
        let text = match result {
            Ok(text) => text,
            Err(e) => {
                self.out.error(&format!("agent command failed: {e}"));
                return self.end_turn("error", Some(e));
            }
        };
        let payload = EventPayload {
            text: Some(text.clone()),
            ..Default::default()
        };
        self.intercept(Job::Turn(None), "assistant_message", payload, |s, r| {
            s.message_done(text, r)
        });
    }

    fn message_done(&mut self, text: String, result: Result<InterceptOutcome, HostError>) {
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
        self.end_turn("end_turn", None);
    }

    /// Ends the turn under way, whose `turn_start` went out.
    pub(super) fn end_turn(&mut self, stop: &str, error: Option<String>) {
        let payload = EventPayload {
            stop: Some(stop.to_string()),
            error,
            ..Default::default()
        };
        self.emit("turn_end", payload);
    }
}
