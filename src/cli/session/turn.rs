//! Turns (docs/PROTOCOL.md#session): `session_start` once, `turn_start` interception and
//! event, the agent command, `assistant_message` interception and
//! event, `turn_end`. Each step is a job whose reply moves the turn on,
//! so the session loop never blocks on one.

use super::agent::Agent;
use super::jobs::Job;
use super::render::Tone;
use super::state::Session;
#[cfg(feature = "tool-extras")]
use serde_json::Value;
#[cfg(feature = "tool-extras")]
use zot_host::{BuiltinVerdict, Content, ToolOutcome, ToolRequest};
use zot_host::{EventPayload, HostError, InterceptEvent, InterceptOutcome};

impl Session {
    #[cfg(feature = "tool-extras")]
    /// A `tool_prompt` action (docs/PROTOCOL.md#commands-and-actions): runs `tool` through the
    /// pipeline as `/call` does, prints its result, then starts a turn
    /// for `prompt` with that result in front of it, errors included (as
    /// upstream records them). Cancelling it (Ctrl-C) stops before the turn.
    pub(super) fn tool_prompt(&mut self, tool: String, args: Value, prompt: String) {
        self.out.text(
            "tool_prompt: ",
            Tone::Cyan,
            &format!("{tool} {args}, then the prompt"),
        );
        let call = ToolRequest::new(tool.clone(), args.clone());
        self.call_tool(call, move |s, r| {
            s.tool_done(&tool, &r);
            s.out.text("prompt: ", Tone::Cyan, &prompt);
            s.start_turn(with_tool_result(&tool, &args, &r, &prompt));
        });
    }

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
        if self.system_prompt.is_none() {
            // The first turn (or the first since /clear) prepares it.
            return self.prepare_prompt(Some((prompt, step)));
        }
        self.ask_turn_start(prompt, step);
    }

    /// `before_agent_start` on the session's own prompt (docs/PROTOCOL.md#system-prompt); then
    /// the turn that waits for it, if any.
    pub(super) fn prepare_prompt(&mut self, then: Option<(String, u64)>) {
        // Until it is ready (or if Ctrl-C cancels it) the old prompt is
        // gone: the next turn prepares it again rather than use it.
        self.system_prompt = None;
        let payload = EventPayload {
            system_prompt: Some(self.base_prompt.clone()),
            ..Default::default()
        };
        self.intercept(
            Job::Request,
            InterceptEvent::BeforeAgentStart,
            payload,
            move |s, r| {
                s.system_prompt = Some(match r {
                    Ok(o) => o.system_prompt.unwrap_or_default(),
                    Err(e) => {
                        s.out.error(&format!("before_agent_start: {e}"));
                        s.base_prompt.clone()
                    }
                });
                if let Some((prompt, step)) = then {
                    s.ask_turn_start(prompt, step);
                }
            },
        );
    }

    fn ask_turn_start(&mut self, prompt: String, step: u64) {
        let payload = EventPayload {
            step: Some(step),
            ..Default::default()
        };
        // No `turn_start` went out yet: cancelling this has nothing to end.
        self.intercept(
            Job::Request,
            InterceptEvent::TurnStart,
            payload,
            move |s, r| s.turn_allowed(prompt, step, r),
        );
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
        let system = self.system_prompt.clone().unwrap_or_default();
        match Agent::spawn(&cmd, &self.cwd, &prompt, &system, done) {
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
        self.intercept(
            Job::Turn(None),
            InterceptEvent::AssistantMessage,
            payload,
            |s, r| s.message_done(text, r),
        );
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

#[cfg(feature = "tool-extras")]
/// What the model gets for a `tool_prompt`: the tool call and its
/// result (text blocks, images as a line, `structured_content` as JSON),
/// then the prompt.
fn with_tool_result(
    tool: &str,
    args: &Value,
    result: &Result<ToolOutcome, HostError>,
    prompt: &str,
) -> String {
    let mut text = match result {
        Ok(o) if o.blocked() => format!("Tool {tool} {args} was blocked: "),
        Ok(ToolOutcome::Ran(o)) if o.is_error => format!("Tool {tool} {args} failed:\n"),
        Ok(_) => format!("Tool {tool} {args} returned:\n"),
        Err(_) => format!("Tool {tool} {args} could not run: "),
    };
    match result {
        Ok(ToolOutcome::Builtin(BuiltinVerdict::Blocked { reason, .. })) => text.push_str(reason),
        Ok(ToolOutcome::Builtin(BuiltinVerdict::Run { .. })) => {}
        Ok(ToolOutcome::Ran(o)) if o.blocked => text.push_str(o.reason.as_deref().unwrap_or("")),
        Ok(ToolOutcome::Ran(o)) => {
            let blocks = o.content.iter().map(|b| match b {
                Content::Image { mime_type, .. } => format!("[image {mime_type}]"),
                Content::Text(text) | Content::Formatted { text, .. } => text.clone(),
            });
            text.push_str(&blocks.collect::<Vec<_>>().join("\n"));
            #[cfg(feature = "tool-extras")]
            if let Some(structured) = &o.structured_content {
                text.push_str(&format!("\nstructured_content: {structured}"));
            }
        }
        Err(e) => text.push_str(&e.to_string()),
    }
    if !prompt.is_empty() {
        text.push_str("\n\n");
        text.push_str(prompt);
    }
    text
}
