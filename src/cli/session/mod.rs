//! `zot`: the interactive line-based session (docs/PROTOCOL.md#session).
//!
//! The main thread runs the host loop and the session's: it takes input
//! lines (read by a thread), host events, replies to our own requests and
//! signals as they come, and runs the host loop while none waits, so
//! notes and panels show up while the user is typing. Whatever comes
//! from another thread (a line, a signal, the agent command's answer)
//! also rings a [`Bell`] the host loop waits on. At most one piece of
//! work (a command, a tool call, a turn...) is pending at a time; lines
//! typed meanwhile wait in a queue and run in order, which makes a piped
//! script behave like the same lines typed one by one. Two things reach
//! the pending work all the same: a `/key` line goes to the open panel
//! at once (the work may be an interactive tool waiting for that key),
//! and EOF ends an interactive tool call that only input could answer
//! (see `Session::settle_after_eof`). After EOF, what extensions
//! submit is not run: the session runs what the user queued and leaves.
//! Keys, interactive tools and submits are the `panels` feature's.
//!
//! Signals come through `ctrlc`, which does not say which one arrived,
//! so SIGINT (Ctrl-C), SIGTERM and SIGHUP mean the same: the first
//! cancels the pending work, or, when nothing is pending, leaves through
//! the host's graceful shutdown (docs/PROTOCOL.md#shutdown), as EOF and `/quit` do; a
//! second within [`AGAIN_WITHIN`], with no line typed between, and any
//! signal during the shutdown, leave at once (`shutdown_now`). SIGWINCH
//! cannot come that way: while a panel is open the terminal's size is
//! looked at every [`panel::SIZE_POLL`] (200 ms) instead, and a change
//! is sent as `panel_resize` (docs/PROTOCOL.md#panels).
//!
//! This file runs the loop and ties the parts together: what comes is
//! handed to the part that handles it, the queue is run when nothing is
//! pending, and cancelling and the shutdown are done here. The parts,
//! each owning its data:
//!
//! - `state.rs`: the [`Session`] every part works on, and the requests
//!   they all send (as the job the session waits for, or beside it);
//! - `input.rs`: the thread reading stdin, and the queue of lines typed
//!   and submitted; `bell.rs`: the [`Bell`];
//! - `jobs.rs`: the one job waited for and its replies, which knows no
//!   `Session` (it is generic over the state a reply runs on);
//! - `commands.rs`: what a line does (host commands, the extensions'
//!   commands and their actions, prompts); `turn.rs`: a turn, with
//!   `agent.rs`, the agent command; `submit.rs`: what extensions submit;
//!   `events.rs`: the host's events;
//! - `panel.rs`: the open panels, driven with the output and the host
//!   they are handed; `render.rs`: the output; `ext_log.rs`: lines for an
//!   extension's log.
//!
//! Imports go one way: this file imports its parts, the parts that
//! extend `Session` import `state.rs`, and no part imports this file or
//! a part that imports it (`.ci/check-imports`).

mod agent;
mod bell;
mod commands;
mod events;
#[cfg(feature = "panels")]
mod ext_log;
mod input;
mod jobs;
// Without the `panels` feature a stand-in: no panel is ever open.
#[cfg_attr(not(feature = "panels"), path = "no_panel.rs")]
mod panel;
mod render;
mod state;
// What extensions submit (the `panels` feature): without it the host drops them.
#[cfg(feature = "panels")]
mod submit;
mod turn;

use super::common::{CliError, HostOpts};
use bell::{bell, Bell};
use crossbeam_channel::{select, Receiver};
use input::{read_stdin, Input, Work};
use jobs::{Job, Jobs, Reply};
use render::Out;
use state::{Leave, Session};
use std::io::{self, IsTerminal};
use std::time::{Duration, Instant};
use zot_host::internal::surface;
use zot_host::order::{InOrder, Ordered};
use zot_host::{EventPayload, HostEvent, HostHandle, Request};
#[cfg(feature = "panels")]
use zot_host::{HostError, Snapshot};

/// How soon a second signal must follow the first to leave at once.
pub const AGAIN_WITHIN: Duration = Duration::from_secs(2);

/// After EOF, how long an interactive tool call that was sent keys (or
/// has a panel open, or keys waiting for one) may take to answer before
/// it is cancelled.
#[cfg(feature = "panels")]
pub const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// Runs the session until `/quit`, EOF, or a signal while idle.
pub fn run(opts: HostOpts) -> Result<i32, CliError> {
    let (bell, rung) = bell();
    let (signal_tx, signals) = crossbeam_channel::bounded(16);
    let ring = bell.clone();
    super::common::on_signal(move || {
        let _ = signal_tx.try_send(());
        ring.ring();
    })?;
    let cwd = super::common::project_dir(opts.cwd.as_deref())?;
    // Panels show here, so interactive tools may wait for the user; the
    // session runs no built-in tools (docs/PROTOCOL.md#interactive-tools,
    // docs/PROTOCOL.md#calls-from-extensions).
    let host = super::common::start_host(&opts, |c| {
        #[cfg(feature = "ext-calls")]
        {
            c.runs_builtins = false;
        }
        super::common::journal_origin(c, "session");
    })?;
    let mut input = read_stdin(bell.clone())?;
    let tty = io::stdout().is_terminal();
    let color = tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let ring = bell.clone();
    let stdout = super::stdout::Stdout::start(move || ring.ring())
        .map_err(|e| CliError::Failed(format!("cannot start the output thread: {e}")))?;
    let out = Out::new(color, tty && io::stdin().is_terminal(), stdout);
    let (jobs, done) = Jobs::new(bell.clone());
    let mut s = Session::new(
        host.handle(),
        out,
        jobs,
        opts.agent_cmd.clone(),
        opts.system_prompt.clone().unwrap_or_default(),
        cwd,
    );
    #[cfg(feature = "journal")]
    for line in super::journal::startup_lines(&host) {
        s.out.toned(render::Tone::Yellow, &line);
    }
    let events = host.events().clone();
    // When the terminal's size is next looked at while a panel is open.
    let mut size_due = Instant::now();
    while !s.finished() {
        s.out_prompt();
        // Lines are read only while few wait: a fast pipe is not read
        // into memory ahead of the work.
        let reading = if s.queue.has_room() {
            input.clone()
        } else {
            crossbeam_channel::never()
        };
        // Events wait in the host (within its event budget) while the
        // terminal does not take what was shown.
        let taking = if s.out.has_room() {
            events.clone()
        } else {
            crossbeam_channel::never()
        };
        select! {
            recv(reading) -> line => {
                let line = line.unwrap_or(Input::Eof);
                if matches!(line, Input::Eof) {
                    // The input thread is gone and a disconnected channel
                    // is always ready: stop selecting on it, or the loop
                    // spins while work is pending.
                    input = crossbeam_channel::never();
                }
                s.on_input(line);
            }
            recv(taking) -> event => match event {
                Ok(event) => s.host_event(event, &done),
                Err(_) => break, // the host loop is gone
            },
            recv(done) -> msg => if let Ok(msg) = msg {
                s.host_reply(msg, &events);
            },
            recv(signals) -> sig => match sig {
                Ok(()) => s.on_signal(),
                Err(_) => break,
            },
            // Nothing waits: run the host loop until something comes.
            default => {
                let sizing = (!s.panels.is_empty()).then_some(size_due);
                #[cfg(feature = "panels")]
                let due = match (sizing, s.asked.stranded.map(|(_, at)| at)) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                #[cfg(not(feature = "panels"))]
                let due = sizing;
                let before = host.events_sent();
                let rang = surface::poll_with(&host, &rung, due).is_some();
                let stuck = !rang && due.is_none() && host.events_sent() == before;
                if stuck && !s.out.has_room() {
                    // The host is done and its last events wait for room
                    // on stdout: only a ring can change anything now.
                    let _ = rung.recv();
                }
            }
        }
        if !s.panels.is_empty() && Instant::now() >= size_due {
            s.panels.poll_size(&s.host);
            size_due = Instant::now() + panel::SIZE_POLL;
        }
        s.run_queue();
    }
    s.close(&host, &rung, &bell, (&events, &done, &signals));
    // The shutdown has been answered: this runs the loop to its end.
    drop(host);
    // Whatever the extensions said on their way out, and any reply
    // still waiting for it.
    s.drain(&done, &events);
    for event in events.try_iter() {
        s.take_event(event);
    }
    s.out.finish();
    // A reader that left (EPIPE) is a quiet end; any other failure to
    // write (a full disk...) lost output the user expected.
    match s.out.write_error() {
        Some(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(CliError::Failed(format!("cannot write to stdout: {e}")))
        }
        _ => Ok(0),
    }
}

impl Session {
    /// The host's graceful shutdown (docs/PROTOCOL.md#shutdown): the request still
    /// pending finishes and its answer is shown; a turn's agent is
    /// stopped; a signal meanwhile skips the wait.
    fn close(
        &mut self,
        host: &zot_host::Host,
        rung: &Receiver<()>,
        bell: &Bell,
        (events, done, signals): (
            &Receiver<HostEvent>,
            &Receiver<Reply<Session>>,
            &Receiver<()>,
        ),
    ) {
        self.queue.clear();
        let hurry = self.leave == Some(Leave::Now);
        if hurry || matches!(self.jobs.current(), Some(Job::Turn(Some(_)))) {
            self.cancel(false);
        }
        let (stopped_tx, stopped) = crossbeam_channel::bounded(2);
        let stop = |now: bool, host: &HostHandle| {
            let (tx, bell) = (stopped_tx.clone(), bell.clone());
            let reply: zot_host::Reply<()> = Box::new(move |_| {
                let _ = tx.send(());
                bell.ring();
            });
            host.submit(if now {
                Request::ShutdownNow { reply }
            } else {
                Request::Shutdown { reply }
            });
        };
        // Queued before `shutdown`, so every subscriber gets it (docs/PROTOCOL.md#events).
        let mut end = EventPayload::default();
        end.extra.insert("reason".into(), "shutdown".into());
        self.emit("session_end", end);
        stop(hurry, &self.host);
        let mut hurried = hurry;
        loop {
            select! {
                recv(stopped) -> _ => return,
                recv(events) -> event => match event {
                    Ok(event) => {
                        self.host_event(event, done);
                        self.queue.clear();
                    }
                    Err(_) => return,
                },
                recv(done) -> msg => {
                    if let Ok(msg) = msg {
                        self.host_reply(msg, events);
                    }
                    // Follow-ups (a prompt action...) are not started now.
                    self.queue.clear();
                }
                recv(signals) -> _ => {
                    if !hurried {
                        hurried = true;
                        self.out.interrupted();
                        self.cancel(false);
                        stop(true, &self.host);
                    }
                }
                default => {
                    surface::poll_with(host, rung, None);
                }
            }
        }
    }
}

impl Session {
    fn finished(&self) -> bool {
        self.leave.is_some()
            || self.out.closed()
            || (self.eof && !self.jobs.busy() && self.queue.is_empty())
    }

    fn out_prompt(&mut self) {
        if self.ready && !self.jobs.busy() && self.queue.is_empty() && !self.eof {
            self.out.prompt();
        }
    }

    // ----- input ----------------------------------------------------

    fn on_input(&mut self, input: Input) {
        self.out.input_taken(matches!(input, Input::Eof));
        match input {
            Input::Line(line) => {
                self.armed = None;
                self.queue.push_back(Work::Typed(line));
            }
            Input::TooLong(n) => self.out.error(&format!("input line of {n} bytes ignored")),
            Input::Eof => {
                self.eof = true;
                // The user is gone: nothing an extension submits runs any
                // more (it could keep the session busy for ever).
                #[cfg(feature = "panels")]
                {
                    let n = self.queue.drop_submitted();
                    self.dropped_after_eof(n);
                }
            }
        }
    }

    fn run_queue(&mut self) {
        while self.ready && !self.jobs.busy() && self.leave.is_none() {
            match self.queue.pop_front() {
                Some(Work::Typed(line)) => self.line(line),
                #[cfg(feature = "panels")]
                Some(Work::Submitted {
                    extension,
                    text,
                    slash,
                }) => self.run_submitted(&extension, text, slash),
                None => break,
            }
        }
        #[cfg(feature = "panels")]
        {
            self.run_keys();
            self.settle_after_eof();
        }
    }

    /// While a job waits, the user's `/key` lines go to the open panel
    /// at once instead of waiting behind it: the job may be an
    /// interactive tool waiting for that very key. Without an open panel
    /// they keep their place (the job may be what opens one).
    #[cfg(feature = "panels")]
    fn run_keys(&mut self) {
        if !self.ready || self.leave.is_some() {
            return;
        }
        while let Some(job) = self.jobs.current_id() {
            if self.panels.is_empty() {
                break;
            }
            let Some(line) = self.queue.take_key() else {
                break;
            };
            self.asked.keyed = Some(job);
            self.line(line);
        }
    }

    /// After EOF, a `/call` (or `tool_prompt`) of an interactive tool
    /// waits for input that will not come: once the tool is known to be
    /// interactive, the keys still queued go to its panel, then the open
    /// panels are closed (the extension is told, and may answer), and
    /// the call is cancelled unless answered within [`ANSWER_GRACE`], at
    /// once when it was neither sent a key nor has a panel to get one.
    #[cfg(feature = "panels")]
    fn settle_after_eof(&mut self) {
        let Some(id) = self.jobs.current_id() else {
            self.asked.stranded = None;
            return;
        };
        let Some(Job::Tool { name, .. }) = self.jobs.current() else {
            return;
        };
        if !self.eof || self.leave.is_some() {
            return;
        }
        let name = name.clone();
        if self.asked.eof_checked != Some(id) {
            self.asked.eof_checked = Some(id);
            let request = |reply| Request::List { reply };
            return self.submit_side(request, move |s, r: Result<Snapshot, HostError>| {
                let interactive = r.ok().is_some_and(|snap| {
                    (snap.tools.iter()).any(|t| t.name == name && t.interactive)
                });
                if interactive && s.jobs.current_id() == Some(id) {
                    let hope =
                        s.queue.has_key() || s.asked.keyed == Some(id) || !s.panels.is_empty();
                    let grace = if hope { ANSWER_GRACE } else { Duration::ZERO };
                    s.asked.stranded = Some((id, Instant::now() + grace));
                    s.settle_after_eof();
                }
            });
        }
        let Some((stranded, at)) = self.asked.stranded else {
            return;
        };
        if stranded != id {
            self.asked.stranded = None;
            return;
        }
        if !self.queue.has_key() && !self.panels.is_empty() {
            self.panels.close_all(&mut self.out, &self.host);
        }
        if Instant::now() >= at {
            self.asked.stranded = None;
            self.out.error(&format!(
                "input ended while /call {name} waited for an answer: cancelled"
            ));
            self.cancel(false);
        }
    }

    // ----- cancelling -----------------------------------------------

    /// Ctrl-C, SIGTERM or SIGHUP (the module docs say why they are one).
    fn on_signal(&mut self) {
        self.out.interrupted();
        if self.armed.is_some_and(|at| at.elapsed() < AGAIN_WITHIN) {
            self.leave = Some(Leave::Now);
            return;
        }
        self.armed = Some(Instant::now());
        if self.jobs.busy() || !self.queue.is_empty() {
            self.cancel(true);
        } else {
            self.out.line("leaving (Ctrl-C again to exit)");
            self.leave = Some(Leave::Graceful);
        }
    }

    /// Drops the pending work and queued lines; a late reply is ignored.
    fn cancel(&mut self, say: bool) {
        self.queue.clear();
        self.insert = None;
        let Some(job) = self.jobs.cancel() else {
            return;
        };
        match job {
            Job::Turn(agent) => {
                if let Some(agent) = agent {
                    agent.kill();
                }
                self.end_turn("cancelled", None);
            }
            Job::Tool { ticket, .. } => self.host.submit(Request::Cancel {
                ticket,
                reply: Box::new(|_| {}),
            }),
            Job::Request | Job::Reload => {}
        }
        if say {
            self.out.line("cancelled");
        }
    }
}

/// Host events and replies reach the session in the host's order.
impl InOrder for Session {
    type Reply = Reply<Session>;

    fn ordered(&mut self) -> &mut Ordered<Reply<Session>> {
        &mut self.order
    }

    fn after(reply: &Reply<Session>) -> u64 {
        reply.after
    }

    fn handle_event(&mut self, event: HostEvent) {
        self.on_event(event);
    }

    fn handle_reply(&mut self, reply: Reply<Session>) {
        if let Some(then) = self.jobs.finish(reply) {
            then(self);
        }
    }
}
