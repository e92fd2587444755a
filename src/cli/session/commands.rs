//! What a line does when its turn comes: a `/` line runs a host command
//! (`/help`, `/call`, `/key`, `/reload-ext`, `/quit`...; the list is
//! `cli::common::HOST_COMMANDS`), else the extensions' command of that
//! name, whose action (docs/PROTOCOL.md#commands-and-actions) is carried
//! out here; any other line is a prompt for a turn.

use super::jobs::Job;
use super::render::Tone;
use super::state::{about, Leave, Session};
use serde_json::Value;
#[cfg(feature = "journal")]
use zot_host::ToolOutcome;
use zot_host::{CommandOutcome, HostError, ReloadReport, Request, ToolRequest};

/// What a `/help`-like command shows.
#[derive(Debug, Clone, Copy)]
enum View {
    Help,
    Commands,
    Tools,
    Extensions,
}

impl Session {
    /// A line whose turn has come: a `/` command, or a prompt for a
    /// turn; an empty one takes the `insert` on offer, on a terminal.
    pub(super) fn line(&mut self, line: String) {
        let offered = self.insert.take();
        let mut text = line.trim().to_string();
        if text.is_empty() {
            match offered {
                Some(insert) if self.out.interactive() => text = insert,
                _ => return,
            }
        }
        match text.strip_prefix('/') {
            Some(rest) => {
                let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                self.slash(name, args.trim());
            }
            None => self.start_turn(text),
        }
    }

    /// `/NAME ARGS`: a host command, else the extensions' command.
    pub(super) fn slash(&mut self, name: &str, args: &str) {
        // Command names are case-insensitive, the host's too
        // (docs/PROTOCOL.md#names-and-precedence).
        match name.to_lowercase().as_str() {
            "help" => self.list(View::Help),
            "commands" => self.list(View::Commands),
            "tools" => self.list(View::Tools),
            "ext" => self.list(View::Extensions),
            "call" => self.call(args),
            "reload-ext" => {
                let request = |reply| Request::Reload { reply };
                self.submit(Job::Reload, request, Session::reloaded);
            }
            "clear" => {
                let n: u64 = self.notes.drain().map(|(_, n)| n).sum();
                self.out.line(&format!("notes cleared ({n} removed)"));
                // A cleared conversation starts from the base prompt again.
                self.prepare_prompt(None);
            }
            "quit" | "exit" => self.leave = Some(Leave::Graceful),
            "resume" | "abandon" => self.resolve(name == "resume", args),
            "key" => self.key(args),
            "prompt" => self.show_prompt(),
            "" => self.out.error("empty command (/help lists them)"),
            _ => {
                let (name, args) = (name.to_string(), args.to_string());
                let shown = name.clone();
                let request = |reply| Request::Command { name, args, reply };
                self.submit(Job::Request, request, move |s, r| s.command_done(&shown, r));
            }
        }
    }

    fn list(&mut self, view: View) {
        let request = |reply| Request::List { reply };
        self.submit(Job::Request, request, move |s, r| match r {
            Ok(snap) => match view {
                View::Help => s.out.help(&snap),
                View::Commands => s.out.commands(&snap),
                View::Tools => s.out.tools(&snap),
                View::Extensions => s.out.extensions(&snap),
            },
            Err(e) => s.out.error(&e.to_string()),
        });
    }

    /// `/call TOOL [JSON]`.
    fn call(&mut self, args: &str) {
        let (name, json) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
        if name.is_empty() {
            return self.out.error("usage: /call TOOL [JSON]");
        }
        let args = match json.trim() {
            "" => Value::Object(Default::default()),
            json => match serde_json::from_str(json) {
                Ok(v) => v,
                Err(e) => return self.out.error(&format!("/call {name}: invalid JSON: {e}")),
            },
        };
        // Built-in tools go through the same pipeline (event, guards);
        // the outcome says so, and this session does not run them.
        let name = name.to_string();
        self.call_tool(ToolRequest::new(name.clone(), args), move |s, r| {
            s.tool_done(&name, &r)
        });
    }

    /// `/key [EXT PANEL] KEY [TEXT]`, read by
    /// [`Panels::key`](super::panel::Panels::key): sent as a job when
    /// nothing waits, else as a side request, so a key reaches a panel
    /// while a job waits (for it, maybe: an interactive tool that waits
    /// for its user).
    fn key(&mut self, args: &str) {
        let Some(to_panel) = self.panels.key(&mut self.out, args) else {
            return;
        };
        let request = |reply| to_panel.request(reply);
        if self.jobs.busy() {
            self.submit_side(request, Session::done);
        } else {
            self.submit(Job::Request, request, Session::done);
        }
    }

    /// `/resume [CALL]`, `/abandon CALL`: a call a crash interrupted,
    /// resolved on a thread of its own (a resume runs the call, which
    /// may take long); lines typed meanwhile wait, as for `/call`.
    #[cfg(feature = "journal")]
    fn resolve(&mut self, resume: bool, key: &str) {
        let word = if resume { "resume" } else { "abandon" };
        if self.host.journal_path().is_none() {
            return self
                .out
                .error(&format!("/{word}: this session has no --journal"));
        }
        if key.is_empty() {
            let open = self.host.interrupted_calls();
            if open.is_empty() {
                return self.out.line("interrupted calls: none");
            }
            self.out.toned(Tone::Bold, "interrupted calls:");
            for c in open {
                self.out.line(&format!(
                    "  {}  {} ({}, replay {}) {}",
                    c.call, c.tool, c.extension, c.replay, c.args
                ));
            }
            if !resume {
                self.out.error("usage: /abandon CALL");
            }
            return;
        }
        let (id, back) = self.jobs.next();
        self.jobs.begin(id, Job::Request);
        let (host, key) = (self.host.clone(), key.to_string());
        let spawned = std::thread::Builder::new()
            .name("zot-session-resume".into())
            .spawn(move || {
                let result = match resume {
                    true => host.resume(&key).map(Some),
                    false => host.abandon(&key).map(|()| None),
                };
                back.send(host.events_sent(), move |s| match result {
                    Ok(Some(outcome)) => {
                        if let ToolOutcome::Ran(r) = &outcome {
                            if let Some(state) = r.reconciled {
                                s.out.line(&format!("reconciled: {key} {state}"));
                            }
                        }
                        s.tool_done(&key, &Ok(outcome));
                    }
                    Ok(None) => s.out.line(&format!("abandoned: {key}")),
                    Err(e) => s.out.error(&format!("/{word} {key}: {e}")),
                });
            });
        if let Err(e) = spawned {
            self.jobs.cancel();
            self.out
                .error(&format!("/{word}: cannot start a thread: {e}"));
        }
    }

    #[cfg(not(feature = "journal"))]
    fn resolve(&mut self, resume: bool, _: &str) {
        let word = if resume { "resume" } else { "abandon" };
        let why = zot_host::internal::build::needs_feature("the journal", "journal");
        self.out.error(&format!("/{word}: {why}"));
    }

    fn reloaded(&mut self, result: Result<ReloadReport, HostError>) {
        match result {
            Ok(report) => {
                self.panels.clear();
                self.out.line(&format!(
                    "reloaded: {} stopped, {} loaded ({} ready)",
                    report.stopped, report.loaded, report.ready
                ));
                for e in &report.errors {
                    self.out.error(e);
                }
                // New extensions, maybe new guards: prepare it again.
                self.prepare_prompt(None);
            }
            Err(e) => self.out.error(&e.to_string()),
        }
    }

    /// `/prompt`: the system prompt, as `before_agent_start` left it.
    fn show_prompt(&mut self) {
        let (text, how) = match &self.system_prompt {
            Some(p) => (p.clone(), "after before_agent_start"),
            None => (
                self.base_prompt.clone(),
                "before_agent_start runs before the first turn",
            ),
        };
        if text.is_empty() {
            return self.out.line(&format!("system prompt: (empty; {how})"));
        }
        let head = format!("system prompt ({} bytes, {how}): ", text.len());
        self.out.text(&head, Tone::Cyan, &text);
    }

    fn command_done(&mut self, name: &str, result: Result<CommandOutcome, HostError>) {
        let o = match result {
            Ok(o) => o,
            Err(e) => {
                return self.out.error(&about(&format!("/{name}"), e));
            }
        };
        if let Some(e) = o.error.as_deref().filter(|e| !e.is_empty()) {
            self.out.error(e);
        }
        match o.action.as_str() {
            "display" => {
                let text = o.display.unwrap_or_default();
                self.out.text(&format!("[/{name}] "), Tone::Cyan, &text);
            }
            "insert" => {
                let text = o.insert.unwrap_or_default();
                self.out.text("insert: ", Tone::Cyan, &text);
                self.out
                    .hint("Enter on an empty line sends it; type anything else to discard it");
                self.insert = Some(text);
            }
            "prompt" => {
                // An empty prompt runs no turn, as upstream.
                if let Some(text) = o.prompt.filter(|p| !p.trim().is_empty()) {
                    self.out.text("prompt: ", Tone::Cyan, &text);
                    self.start_turn(text);
                }
            }
            #[cfg(feature = "tool-extras")]
            "tool_prompt" => {
                let (tool, args) = (o.tool_name.unwrap_or_default(), o.tool_args);
                self.tool_prompt(tool, args.unwrap_or_default(), o.prompt.unwrap_or_default());
            }
            #[cfg(feature = "panels")]
            "open_panel" => {
                if let Some(p) = o.open_panel {
                    (self.panels).opened(&mut self.out, &self.host, o.extension, p);
                }
            }
            _ => {} // noop
        }
    }
}
