//! The session's state, shared by the files that handle its parts, and
//! the requests they all send: a request the session waits for as its
//! job ([`Session::submit`], [`Session::intercept`],
//! [`Session::call_tool`]), one it does not ([`Session::submit_side`],
//! [`Session::emit`]), and how a tool call's outcome is shown.
//!
//! Fields are `pub(super)`: the session's `impl` is spread over the
//! folder (the loop in `mod.rs`, commands, events, turns, submissions),
//! and each part imports this file; this file imports only the data it
//! holds (the queue, the job table, the panels, the output).

use super::input::Lines;
use super::jobs::{Job, Jobs, Reply};
use super::panel::Panels;
use super::render::{Out, Tone};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;
use zot_host::order::Ordered;
use zot_host::{
    BuiltinVerdict, EventPayload, HostError, HostHandle, InterceptEvent, InterceptOutcome,
    InterceptRequest, Request, ToolOutcome, ToolRequest,
};

/// Why the session ends before its input does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Leave {
    /// `/quit`: what is running finishes first.
    Graceful,
    /// A second signal: the shutdown does not wait for requests.
    Now,
}

/// Everything the session keeps between one thing that comes and the
/// next: the host, the output, the job it waits for, the queue.
pub struct Session {
    pub(super) host: HostHandle,
    pub(super) out: Out,
    pub(super) agent_cmd: Option<String>,
    /// `--system-prompt`, as given (empty without it).
    pub(super) base_prompt: String,
    /// What `before_agent_start` made of it; `None` until it ran.
    pub(super) system_prompt: Option<String>,
    pub(super) cwd: PathBuf,
    /// The work the session waits for.
    pub(super) jobs: Jobs<Session>,
    /// Replies waiting for host events, to keep the host's order.
    pub(super) order: Ordered<Reply<Session>>,
    pub(super) queue: Lines,
    /// Startup readiness reached: input is held until then.
    pub(super) ready: bool,
    pub(super) eof: bool,
    pub(super) leave: Option<Leave>,
    /// When the last signal came, unless a line was typed since: the
    /// next one within `AGAIN_WITHIN` leaves at once.
    pub(super) armed: Option<Instant>,
    /// Turns started; the first also emits `session_start`.
    pub(super) step: u64,
    /// Notes shown and not retracted, counted per extension (`clear_notes`
    /// and `/clear` retract them): a count, so a flood costs no memory.
    pub(super) notes: HashMap<String, u64>,
    /// The open panels, and what the session keeps about them.
    pub(super) panels: Panels,
    /// What submits and interactive tools need (the `panels` feature).
    #[cfg(feature = "panels")]
    pub(super) asked: Asked,
    /// An `insert` on offer: an empty line on a terminal accepts it.
    pub(super) insert: Option<String>,
}

/// The session's part in submits and interactive tools (the `panels` feature).
#[cfg(feature = "panels")]
#[derive(Default)]
pub(super) struct Asked {
    /// The job during which a `/key` line went ahead of the queue.
    pub(super) keyed: Option<u64>,
    /// The job whose tool was looked up after EOF (interactive or not).
    pub(super) eof_checked: Option<u64>,
    /// After EOF: the interactive tool call nothing typed can answer any
    /// more (its job), and when it is cancelled unless answered.
    pub(super) stranded: Option<(u64, Instant)>,
    /// Submissions dropped because input had ended: said at 1, 10, 100...
    pub(super) after_eof: u64,
    /// Submissions dropped per extension (its queue was full): said at
    /// the 1st, 10th, 100th...
    pub(super) submits_dropped: HashMap<String, u64>,
}

impl Session {
    /// A session on `host`, showing on `out`, waiting for its jobs in
    /// `jobs`; nothing has happened yet.
    pub(super) fn new(
        host: HostHandle,
        out: Out,
        jobs: Jobs<Session>,
        agent_cmd: Option<String>,
        base_prompt: String,
        cwd: PathBuf,
    ) -> Session {
        Session {
            host,
            out,
            agent_cmd,
            base_prompt,
            system_prompt: None,
            cwd,
            jobs,
            order: Ordered::default(),
            queue: Lines::default(),
            ready: false,
            eof: false,
            leave: None,
            armed: None,
            step: 0,
            notes: HashMap::new(),
            panels: Panels::default(),
            #[cfg(feature = "panels")]
            asked: Asked::default(),
            insert: None,
        }
    }

    /// Runs `call` through the pipeline as a cancellable job: Ctrl-C (or
    /// EOF, for an interactive tool) cancels the call itself, not only
    /// the wait for it; `then` gets the outcome.
    pub(super) fn call_tool(
        &mut self,
        call: ToolRequest,
        then: impl FnOnce(&mut Session, Result<ToolOutcome, HostError>) + Send + 'static,
    ) {
        let ticket = self.host.ticket();
        let job = Job::Tool {
            ticket,
            #[cfg(feature = "panels")]
            name: call.name.clone(),
        };
        let request = |reply| Request::Cancellable {
            ticket,
            request: Box::new(Request::Tool {
                call,
                pipeline: true,
                reply,
            }),
        };
        self.submit(job, request, then);
    }

    /// Sends the request `make` builds around its reply, and waits for
    /// it as `job`; `then` gets the answer unless the job is cancelled
    /// first.
    pub(super) fn submit<T: Send + 'static>(
        &mut self,
        job: Job,
        make: impl FnOnce(zot_host::Reply<T>) -> Request,
        then: impl FnOnce(&mut Session, Result<T, HostError>) + Send + 'static,
    ) {
        let (id, back) = self.jobs.next();
        let host = self.host.clone();
        let reply: zot_host::Reply<T> = Box::new(move |result| {
            // Runs on the host loop, the only sender of events: exact.
            back.send(host.events_sent(), move |s| then(s, result));
        });
        self.jobs.begin(id, job);
        self.host.submit(make(reply));
    }

    /// Sends a request that is no job, while one may be pending: `then`
    /// gets its answer whatever the session waits for meanwhile.
    pub(super) fn submit_side<T: Send + 'static>(
        &mut self,
        make: impl FnOnce(zot_host::Reply<T>) -> Request,
        then: impl FnOnce(&mut Session, Result<T, HostError>) + Send + 'static,
    ) {
        let back = self.jobs.side();
        let host = self.host.clone();
        let reply: zot_host::Reply<T> = Box::new(move |result| {
            back.send(host.events_sent(), move |s| then(s, result));
        });
        self.host.submit(make(reply));
    }

    /// Asks the guards about `event`; `then` gets their verdict.
    pub(super) fn intercept(
        &mut self,
        job: Job,
        event: InterceptEvent,
        payload: EventPayload,
        then: impl FnOnce(&mut Session, Result<InterceptOutcome, HostError>) + Send + 'static,
    ) {
        let request = InterceptRequest { event, payload };
        let make = |reply| Request::Intercept { request, reply };
        self.submit(job, make, then);
    }

    /// Emits a lifecycle event; requests run in order, so it reaches
    /// subscribers before anything submitted after it.
    pub(super) fn emit(&self, event: &str, payload: EventPayload) {
        self.host.submit(Request::Emit {
            event: event.to_string(),
            payload,
            reply: Box::new(|_| {}),
        });
    }

    /// Shows the outcome of the call of tool `name`.
    pub(super) fn tool_done(&mut self, name: &str, result: &Result<ToolOutcome, HostError>) {
        match result {
            Ok(ToolOutcome::Builtin(BuiltinVerdict::Run { args })) => {
                self.out.text(
                    "allowed: ",
                    Tone::Green,
                    &format!("{name} {args} (built-in tool: this session does not run it)"),
                );
            }
            Ok(ToolOutcome::Builtin(BuiltinVerdict::Blocked { reason, .. })) => {
                self.out.blocked(reason)
            }
            Ok(ToolOutcome::Ran(result)) => self.out.tool_outcome(result),
            Err(e) => self.out.error(&about(&format!("/call {name}"), e.clone())),
        }
    }

    /// The answer to a request that only says whether it worked.
    pub(super) fn done(&mut self, result: Result<(), HostError>) {
        if let Err(e) = result {
            self.out.error(&e.to_string());
        }
    }
}

/// `error` about `what`, prefixed with `what: ` unless it names the
/// command or tool already (`unknown command /x` stays, `extension a
/// exited` does not).
pub fn about(what: &str, error: HostError) -> String {
    if error.is_unknown_name() || matches!(error, HostError::TimedOut { .. }) {
        error.to_string()
    } else {
        format!("{what}: {error}")
    }
}
