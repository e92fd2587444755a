//! The lifecycle rules with a made-up clock and no processes: a real
//! startup of manifests the test finds and starts itself, frames
//! fed as an extension's reader would hand them over, and the actions
//! the engine decides asserted (docs/PROTOCOL.md#handshake, docs/PROTOCOL.md#exits,
//! docs/PROTOCOL.md#shutdown, docs/PROTOCOL.md#supervision).

use super::action::{Action, Attached, Backlog, Discovered, Probe};
use super::Engine;
use crate::config::HostConfig;
use crate::ext::discovery::{Found, Scope, Status};
use crate::ext::manifest::Manifest;
use crate::intercept::{InterceptEvent, InterceptOutcome};
use crate::log::ExtLog;
use crate::process::{Inbound, InboundMsg};
use crate::types::{
    ExtensionState, HostError, HostEvent, InterceptRequest, ReadyVia, Reply, Request, ToolOutcome,
    ToolRequest,
};
use crate::wire::protocol::{parse_ext_frame, EventPayload};
use crossbeam_channel::Receiver;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// An engine started on manifests, with what a driver would hold: each
/// extension's process key and what was written to it.
struct Fake {
    e: Engine,
    events: Receiver<HostEvent>,
    /// What a discovery finds: one extension per manifest.
    manifests: Vec<String>,
    /// Extension `i`'s process key.
    keys: Vec<u64>,
    /// Actions other than writes, replies and events, in order.
    acts: Vec<Action>,
    /// Frames written to extension `i`, parsed, not yet looked at.
    written: Vec<Vec<Value>>,
}

/// Starts one extension per manifest at `t0`, the driver's part played
/// here: the manifests are found (in memory, nothing is read), every
/// start succeeds, with a made-up pid.
fn start(manifests: &[&str], t0: Instant) -> Fake {
    let dir = std::env::temp_dir().join("zot-rules");
    let mut cfg = HostConfig::new(dir.clone(), dir.join("home"));
    cfg.discover = false;
    let (events_tx, events) = crossbeam_channel::unbounded();
    let mut f = Fake {
        e: Engine::new(
            cfg,
            events_tx,
            #[cfg(feature = "ext-calls")]
            crossbeam_channel::unbounded().0,
        ),
        events,
        manifests: manifests.iter().map(|m| m.to_string()).collect(),
        keys: Vec::new(),
        acts: Vec::new(),
        written: vec![Vec::new(); manifests.len()],
    };
    f.e.start_all(None, Vec::new(), t0);
    f.act(t0);
    f
}

impl Fake {
    /// Carries out what the engine queued, as the driver does: writes
    /// are kept per extension, starts answered at `now`, the rest kept.
    fn act(&mut self, now: Instant) {
        loop {
            let actions = self.e.answer_inline();
            if actions.is_empty() {
                return;
            }
            for action in actions {
                match action {
                    Action::Write { ext, bytes } => {
                        let lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
                        let frames = lines.map(|l| serde_json::from_slice(l).expect("a JSON line"));
                        self.written[ext].extend(frames);
                    }
                    Action::Discover => {
                        let found = self.manifests.iter().enumerate().map(|(i, text)| {
                            let manifest = Manifest::parse(text.as_bytes()).expect("a manifest");
                            let name = manifest.name.clone();
                            let found = Found {
                                scope: Scope::Explicit,
                                dir: PathBuf::from(format!("/ext{i}")),
                                manifest: Some(manifest),
                                status: Status::Start,
                            };
                            let log = ExtLog::stderr(&name);
                            Discovered { name, found, log }
                        });
                        self.e.discovered(found.collect(), now);
                        self.e.settle_at(now);
                    }
                    Action::Spawn(batch) => {
                        let mut started = Vec::new();
                        for (idx, spawn) in &batch.spawns {
                            if self.keys.len() <= *idx {
                                self.keys.resize(idx + 1, u64::MAX);
                            }
                            self.keys[*idx] = spawn.key;
                            let pid = 1000 + *idx as u32;
                            let backlog = Backlog::default();
                            let confined = None;
                            started.push(Ok(Attached {
                                pid,
                                confined,
                                backlog,
                            }));
                        }
                        self.e.spawned(batch.then, started, now);
                        self.e.settle_at(now);
                    }
                    other => self.acts.push(other),
                }
            }
        }
    }

    /// Extension `idx` wrote `line` (a frame) at `now`.
    fn says(&mut self, idx: usize, line: &str, now: Instant) {
        let frame = parse_ext_frame(line.as_bytes()).expect("a valid frame");
        let msg = InboundMsg {
            key: self.keys[idx],
            msg: Inbound::Frame(frame),
        };
        self.e.inbound(msg, None, now);
        self.settle(now);
    }

    /// The pass after a turn at `now`, no process exited.
    fn settle(&mut self, now: Instant) {
        self.e.settle_at(now);
        self.act(now);
    }

    /// Extension `idx`'s stdout ends at `now`, its process found
    /// killed (by SIGKILL) when the driver looks.
    fn exited_at(&mut self, idx: usize, now: Instant) {
        let probe = Probe {
            exited: Some(status(libc::SIGKILL)),
            stdout_held: false,
        };
        self.inbound(idx, Inbound::Eof, probe, now);
    }

    /// Extension `idx`'s stdout ends at `now`, its process still running
    /// when the driver looks.
    fn stdout_ends(&mut self, idx: usize, now: Instant) {
        self.inbound(idx, Inbound::Eof, Probe::UNSEEN, now);
    }

    /// Extension `idx`'s waiter says at `now` that it exited with
    /// `status` (raw, as waitpid(2) has it); something (a grandchild)
    /// still holds its stdout when `held`.
    fn exits(&mut self, idx: usize, status: i32, held: bool, now: Instant) {
        let probe = Probe {
            exited: Some(self::status(status)),
            stdout_held: held,
        };
        self.inbound(idx, Inbound::Exited, probe, now);
    }

    /// `msg` from extension `idx`'s threads at `now`, its process looking
    /// like `probe`; then the pass after the turn.
    fn inbound(&mut self, idx: usize, msg: Inbound, probe: Probe, now: Instant) {
        let msg = InboundMsg {
            key: self.keys[idx],
            msg,
        };
        self.e.inbound(msg, Some(probe), now);
        self.settle(now);
    }

    /// The pass after a turn at `now` when the driver looked at the
    /// processes whose exit deadline is due, each looking like `probe`.
    fn settle_looked(&mut self, now: Instant, probe: Probe) {
        let due: Vec<usize> = self.e.probes_due(now).collect();
        let probes = due.into_iter().map(|idx| (idx, probe)).collect();
        self.e.settle(now, &probes);
        self.e.queue_writes();
        self.act(now);
    }

    /// Whether the driver was asked to reap extension `idx`.
    fn reaped(&self, idx: usize) -> bool {
        self.acts
            .iter()
            .any(|a| matches!(a, Action::Reap(i) if *i == idx))
    }

    fn request(&mut self, req: Request, now: Instant) {
        self.e.request(req, now);
        self.settle(now);
    }

    /// The frame types written to extension `idx` since last asked.
    fn sent(&mut self, idx: usize) -> Vec<String> {
        let frames = std::mem::take(&mut self.written[idx]);
        frames
            .iter()
            .map(|f| f["type"].as_str().unwrap_or("?").to_string())
            .collect()
    }

    /// The frames written to extension `idx` since last asked.
    fn frames(&mut self, idx: usize) -> Vec<Value> {
        std::mem::take(&mut self.written[idx])
    }

    /// The signals sent since last asked, as (extension, signal).
    fn signals(&mut self) -> Vec<(usize, libc::c_int)> {
        let (signals, rest) = std::mem::take(&mut self.acts)
            .into_iter()
            .partition::<Vec<_>, _>(|a| matches!(a, Action::Signal { .. }));
        self.acts = rest;
        let signal = |a: Action| match a {
            Action::Signal { ext, signal } => Some((ext, signal)),
            _ => None,
        };
        signals.into_iter().filter_map(signal).collect()
    }

    fn state(&self, idx: usize) -> ExtensionState {
        self.e.exts[idx].state()
    }

    fn events(&self) -> Vec<HostEvent> {
        self.events.try_iter().collect()
    }
}

/// An exit status as waitpid(2) has it: `exit code 3` is `3 << 8`.
fn status(raw: i32) -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    std::process::ExitStatus::from_raw(raw)
}

/// Where a reply lands.
type Slot<T> = Arc<Mutex<Option<Result<T, HostError>>>>;

fn slot<T: Send + 'static>() -> (Slot<T>, Reply<T>) {
    let got: Slot<T> = Arc::default();
    let fill = got.clone();
    (got, Box::new(move |r| *fill.lock().unwrap() = Some(r)))
}

fn taken<T>(got: &Slot<T>) -> Option<Result<T, HostError>> {
    got.lock().unwrap().take()
}

const PLAIN: &str = r#"{"name": "x", "exec": "./x"}"#;

#[test]
fn an_extension_without_a_ready_frame_is_ready_after_250_ms_of_silence() {
    let t0 = Instant::now();
    let mut f = start(&[PLAIN], t0);
    assert_eq!(f.state(0), ExtensionState::Starting);
    f.says(0, r#"{"type": "hello", "name": "x"}"#, t0);
    assert_eq!(f.sent(0), ["hello_ack"]);
    // Each frame starts the silence over.
    let t1 = t0 + 200 * MS;
    f.says(0, r#"{"type": "register_command", "name": "go"}"#, t1);
    assert_eq!(f.e.next_deadline(), Some(t1 + 250 * MS));
    f.settle(t1 + 249 * MS);
    assert_eq!(f.state(0), ExtensionState::Starting);
    assert!(f.events().is_empty(), "the startup waits for it");
    f.settle(t1 + 250 * MS);
    assert_eq!(f.state(0), ExtensionState::Ready);
    assert_eq!(f.e.exts[0].ready_via, Some(ReadyVia::Watchdog));
    let ready = f.events();
    assert!(
        matches!(&ready[..], [HostEvent::Ready { extensions }] if extensions == &["x"]),
        "the startup ends with it ready: {ready:?}"
    );
}

#[test]
fn no_hello_within_10_s_fails_the_extension_and_kills_its_group() {
    let t0 = Instant::now();
    let mut f = start(&[PLAIN], t0);
    assert_eq!(f.e.exts[0].deadline(), Some(t0 + 10 * S));
    f.settle(t0 + 10 * S - MS);
    let failed = |e: &HostEvent| matches!(e, HostEvent::ExtensionFailed { .. });
    assert!(f.signals().is_empty() && !f.events().iter().any(failed));
    f.settle(t0 + 10 * S);
    assert_eq!(f.signals(), [(0, libc::SIGKILL)]);
    let why = "no hello within 10 s";
    assert_eq!(f.state(0), ExtensionState::Failed { reason: why.into() });
    let failed = f.events();
    assert!(
        failed.iter().any(|e| matches!(e,
            HostEvent::ExtensionFailed { extension, error } if extension == "x" && error == why)),
        "{failed:?}"
    );
    // Nothing is polled: its exit comes as a message, after the end of
    // its stdout here, and its process is reaped then.
    assert_eq!(f.e.exts[0].deadline(), None);
    f.stdout_ends(0, t0 + 10 * S + MS);
    assert!(!f.reaped(0) && f.e.exts[0].run().is_some());
    f.exits(0, libc::SIGKILL, false, t0 + 10 * S + 2 * MS);
    assert!(f.reaped(0), "reaped");
    assert!(f.e.exts[0].run().is_none());
}

#[test]
fn a_shutdown_sends_shutdown_then_sigterm_at_2_s_then_sigkill_1_s_later() {
    let t0 = Instant::now();
    let mut f = start(&[PLAIN], t0);
    f.says(0, r#"{"type": "hello", "name": "x"}"#, t0);
    f.says(0, r#"{"type": "ready"}"#, t0);
    f.sent(0);
    let (done, reply) = slot();
    let t1 = t0 + S;
    f.request(Request::Shutdown { reply }, t1);
    assert_eq!(f.sent(0), ["shutdown"]);
    f.settle(t1 + 2 * S - MS);
    assert!(f.signals().is_empty(), "within the shutdown grace");
    f.settle(t1 + 2 * S);
    assert_eq!(f.signals(), [(0, libc::SIGTERM)]);
    f.settle(t1 + 3 * S - MS);
    assert!(f.signals().is_empty(), "within the SIGTERM grace");
    f.settle(t1 + 3 * S);
    assert_eq!(f.signals(), [(0, libc::SIGKILL)]);
    assert!(taken(&done).is_none(), "done once it is gone");
    f.exited_at(0, t1 + 3 * S + MS);
    assert!(matches!(taken(&done), Some(Ok(()))));
    assert!(f.e.is_done());
}

#[test]
fn a_shutdown_ack_closes_stdin_and_a_ready_extension_is_not_signalled_once_gone() {
    let t0 = Instant::now();
    let mut f = start(&[PLAIN], t0);
    f.says(0, r#"{"type": "hello", "name": "x"}"#, t0);
    f.says(0, r#"{"type": "ready"}"#, t0);
    let (done, reply) = slot();
    f.request(Request::Shutdown { reply }, t0);
    f.says(0, r#"{"type": "shutdown_ack"}"#, t0 + 10 * MS);
    assert!(
        f.acts.iter().any(|a| matches!(a, Action::CloseStdin(0))),
        "stdin closed after shutdown_ack"
    );
    f.exited_at(0, t0 + 20 * MS);
    assert!(matches!(taken(&done), Some(Ok(()))));
    assert!(f.signals().is_empty());
}

/// Two guards of `tool_call`, both ready.
fn two_guards(t0: Instant) -> Fake {
    let mut f = start(&[PLAIN, r#"{"name": "y", "exec": "./y"}"#], t0);
    for (idx, name) in [(0, "x"), (1, "y")] {
        f.says(
            idx,
            &format!(r#"{{"type": "hello", "name": "{name}"}}"#),
            t0,
        );
        let subscribe = r#"{"type": "subscribe", "intercept": ["tool_call"]}"#;
        f.says(idx, subscribe, t0);
        f.says(idx, r#"{"type": "ready"}"#, t0);
        f.sent(idx);
    }
    f
}

#[test]
fn an_interception_round_asks_every_guard_at_once_under_one_5_s_deadline() {
    let t0 = Instant::now();
    let mut f = two_guards(t0);
    let (got, reply) = slot::<InterceptOutcome>();
    let payload = EventPayload {
        tool_name: Some("bash".into()),
        ..Default::default()
    };
    let request = InterceptRequest::new(InterceptEvent::ToolCall, payload);
    let t1 = t0 + S;
    f.request(Request::Intercept { request, reply }, t1);
    assert_eq!(f.sent(0), ["event_intercept"]);
    assert_eq!(f.sent(1), ["event_intercept"], "asked at once, not in turn");
    f.settle(t1 + 5 * S - MS);
    assert!(taken(&got).is_none());
    // Both silent: the round ends at its one deadline, each counted as allow.
    f.settle(t1 + 5 * S);
    let outcome = taken(&got).expect("decided at 5 s").expect("an outcome");
    assert!(!outcome.block);
}

#[test]
fn a_rewrite_asks_the_later_guards_again_with_a_new_deadline() {
    let t0 = Instant::now();
    let mut f = two_guards(t0);
    let (got, reply) = slot::<InterceptOutcome>();
    let payload = EventPayload {
        tool_name: Some("bash".into()),
        tool_args: Some(serde_json::json!({"cmd": "ls"})),
        ..Default::default()
    };
    let request = InterceptRequest::new(InterceptEvent::ToolCall, payload);
    f.request(Request::Intercept { request, reply }, t0);
    let asked = f.frames(0);
    let id = asked[0]["id"].as_str().expect("an id").to_string();
    f.sent(1);
    // The first guard rewrites at 1 s: the second is asked again with the
    // new args, and its round has a deadline of its own.
    let t1 = t0 + S;
    let rewrite = format!(
        r#"{{"type": "event_intercept_response", "id": "{id}", "modified_args": {{"cmd": "ls -l"}}}}"#
    );
    f.says(0, &rewrite, t1);
    let again = f.frames(1);
    assert_eq!(again.len(), 1, "asked again: {again:?}");
    assert_eq!(again[0]["tool_args"]["cmd"], "ls -l", "{again:?}");
    f.settle(t1 + 5 * S - MS);
    assert!(taken(&got).is_none(), "its new round runs until 6 s");
    f.settle(t1 + 5 * S);
    let outcome = taken(&got).expect("decided").expect("an outcome");
    assert!(!outcome.block);
}

/// An extension that owns tools `a`, `b` and `c` and may call tools.
fn caller(t0: Instant) -> Fake {
    let mut f = start(&[PLAIN], t0);
    let hello = r#"{"type": "hello", "name": "x", "capabilities": ["call_tool"]}"#;
    f.says(0, hello, t0);
    for tool in ["a", "b", "c"] {
        let line = format!(r#"{{"type": "register_tool", "name": "{tool}"}}"#);
        f.says(0, &line, t0);
    }
    f.says(0, r#"{"type": "ready"}"#, t0);
    f.sent(0);
    f
}

/// The embedder calls tool `name`; the id of the `tool_call` it gets.
fn call(f: &mut Fake, name: &str, now: Instant) -> (Slot<ToolOutcome>, String) {
    let (got, reply) = slot();
    let call = ToolRequest::new(name, serde_json::json!({}));
    let req = Request::Tool {
        call,
        pipeline: false,
        reply,
    };
    f.request(req, now);
    let frames = f.frames(0);
    assert_eq!(frames.len(), 1, "{frames:?}");
    (got, frames[0]["id"].as_str().expect("an id").to_string())
}

#[cfg(feature = "ext-calls")]
#[test]
fn a_call_tool_chain_may_not_repeat_a_tool_and_its_result_goes_back_to_the_caller() {
    let t0 = Instant::now();
    let mut f = caller(t0);
    let (outer, id_a) = call(&mut f, "a", t0);
    // Serving `a`, it calls `b` as part of that call.
    let call_b =
        format!(r#"{{"type": "call_tool", "id": "c1", "name": "b", "parent_id": "{id_a}"}}"#);
    f.says(0, &call_b, t0 + MS);
    let frames = f.frames(0);
    let id_b = frames[0]["id"].as_str().expect("an id").to_string();
    assert_eq!((frames.len(), &frames[0]["name"]), (1, &"b".into()));
    // Serving `b`, it calls `a` again: refused, a -> b -> a.
    let call_a =
        format!(r#"{{"type": "call_tool", "id": "c2", "name": "a", "parent_id": "{id_b}"}}"#);
    f.says(0, &call_a, t0 + 2 * MS);
    let refused = f.frames(0);
    assert_eq!(refused[0]["type"], "tool_result");
    assert_eq!(refused[0]["id"], "c2");
    assert_eq!(refused[0]["is_error"], true);
    let text = refused[0]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("a -> b -> a"), "{text}");
    // `b` answers: its result goes to the caller's `call_tool`.
    let result_b = format!(
        r#"{{"type": "tool_result", "id": "{id_b}", "content": [{{"type": "text", "text": "B"}}]}}"#
    );
    f.says(0, &result_b, t0 + 3 * MS);
    let back = f.frames(0);
    assert_eq!(
        (&back[0]["type"], &back[0]["id"]),
        (&"tool_result".into(), &"c1".into())
    );
    assert_eq!(back[0]["content"][0]["text"], "B");
    assert!(taken(&outer).is_none(), "the outer call still runs");
}

#[cfg(feature = "ext-calls")]
#[test]
fn a_call_tool_times_out_at_the_tool_timeout_and_the_caller_is_told() {
    let t0 = Instant::now();
    let mut f = caller(t0);
    let (outer, id_a) = call(&mut f, "a", t0);
    let call_b =
        format!(r#"{{"type": "call_tool", "id": "c1", "name": "b", "parent_id": "{id_a}"}}"#);
    let t1 = t0 + 30 * S;
    f.says(0, &call_b, t1);
    f.frames(0);
    // `a`'s own limit (60 s from t0) comes first: it ends, and the call
    // made while serving it is cancelled with it.
    f.settle(t0 + 60 * S);
    assert!(matches!(
        taken(&outer),
        Some(Err(HostError::TimedOut { .. }))
    ));
    let told = f.frames(0);
    let cancelled = told
        .iter()
        .find(|fr| fr["type"] == "tool_result" && fr["id"] == "c1")
        .unwrap_or_else(|| panic!("the caller's call_tool is answered: {told:?}"));
    assert_eq!(cancelled["is_error"], true);
}

#[cfg(not(feature = "ext-calls"))]
#[test]
fn without_ext_calls_a_call_tool_is_refused_at_once_naming_the_feature() {
    let t0 = Instant::now();
    let mut f = caller(t0);
    let (outer, id_a) = call(&mut f, "a", t0);
    let call_b =
        format!(r#"{{"type": "call_tool", "id": "c1", "name": "b", "parent_id": "{id_a}"}}"#);
    f.says(0, &call_b, t0 + MS);
    let refused = f.frames(0);
    assert_eq!(refused.len(), 1, "only the refusal: {refused:?}");
    assert_eq!(
        (&refused[0]["type"], &refused[0]["id"], &refused[0]["name"]),
        (&"tool_result".into(), &"c1".into(), &"b".into())
    );
    assert_eq!(refused[0]["is_error"], true);
    let text = refused[0]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("it needs the `ext-calls` feature"), "{text}");
    // A cancel of it is ignored; the embedder's call runs on.
    f.says(
        0,
        r#"{"type": "call_tool_cancel", "id": "c1"}"#,
        t0 + 2 * MS,
    );
    assert!(f.frames(0).is_empty());
    assert!(taken(&outer).is_none(), "the outer call still runs");
    let result_a = format!(
        r#"{{"type": "tool_result", "id": "{id_a}", "content": [{{"type": "text", "text": "A"}}]}}"#
    );
    f.says(0, &result_a, t0 + 3 * MS);
    let Some(Ok(ToolOutcome::Ran(r))) = taken(&outer) else {
        panic!("the embedder's call is answered");
    };
    assert!(!r.is_error);
}

#[test]
fn an_idle_ready_extension_has_no_deadline_its_exit_comes_as_a_message() {
    let t0 = Instant::now();
    let mut f = start(&[PLAIN], t0);
    f.says(0, r#"{"type": "hello", "name": "x"}"#, t0);
    f.says(0, r#"{"type": "ready"}"#, t0);
    f.events();
    // No liveness check: nothing wakes the loop while all is quiet.
    assert_eq!(f.e.next_deadline(), None);
    f.exits(0, 3 << 8, false, t0 + 60 * S);
    // Its stdout has not ended: the frames still in its pipe come first.
    assert!(!f.reaped(0));
    f.says(
        0,
        r#"{"type": "register_command", "name": "late"}"#,
        t0 + 60 * S,
    );
    assert!(f.e.commands.owner("late").is_some(), "a last frame counts");
    f.stdout_ends(0, t0 + 60 * S + MS);
    assert!(f.reaped(0), "reaped at the end of its stdout");
    let exited = HostEvent::ExtensionExited {
        extension: "x".into(),
        status: "exit code 3".into(),
    };
    assert!(f.events().contains(&exited));
    assert!(
        f.e.commands.owner("late").is_none(),
        "what it registered left with it"
    );
}

#[test]
fn an_exit_while_a_grandchild_holds_stdout_fails_its_calls_once_the_drain_ends() {
    let t0 = Instant::now();
    let mut f = caller(t0);
    let (got, _id) = call(&mut f, "a", t0);
    let t1 = t0 + S;
    f.exits(0, 3 << 8, true, t1);
    assert!(taken(&got).is_none(), "its last frames may still come");
    // The drain waits for `exit_silence`; a grandchild holds the pipe.
    let held = Probe {
        exited: Some(status(3 << 8)),
        stdout_held: true,
    };
    assert_eq!(f.e.next_deadline(), Some(t1 + 250 * MS));
    f.settle_looked(t1 + 249 * MS, held);
    assert!(taken(&got).is_none() && !f.reaped(0));
    f.settle_looked(t1 + 250 * MS, held);
    assert!(f.reaped(0), "reaped without the end of its stdout");
    match taken(&got) {
        Some(Err(e)) => assert_eq!(e.to_string(), "extension x exited (exit code 3)"),
        other => panic!("the call fails with the exit: {other:?}"),
    }
}

#[test]
fn a_crash_restarts_after_the_backoff_as_a_new_process() {
    let t0 = Instant::now();
    let mut f = start(&[PLAIN], t0);
    f.says(0, r#"{"type": "hello", "name": "x"}"#, t0);
    f.says(0, r#"{"type": "ready"}"#, t0);
    let first = f.keys[0];
    f.events();
    f.exited_at(0, t0 + S);
    assert!(matches!(f.state(0), ExtensionState::Exited { .. }));
    assert_eq!(f.e.next_deadline(), Some(t0 + S + 500 * MS));
    f.settle(t0 + S + 499 * MS);
    assert_eq!(f.keys[0], first, "not restarted before the backoff");
    f.settle(t0 + S + 500 * MS);
    assert_ne!(f.keys[0], first, "started again under a new key");
    assert_eq!(f.state(0), ExtensionState::Starting);
    let events = f.events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, HostEvent::ExtensionRestarted { attempt: 1, .. })),
        "{events:?}"
    );
}

#[test]
fn a_failed_write_fails_what_the_extension_owes_2_s_later_unless_answered() {
    let t0 = Instant::now();
    let mut f = caller(t0);
    let (got, id_a) = call(&mut f, "a", t0);
    let failed = InboundMsg {
        key: f.keys[0],
        msg: Inbound::WriteFailed("Broken pipe".into()),
    };
    f.e.inbound(failed, None, t0 + S);
    f.settle(t0 + S);
    assert!(
        f.acts.iter().any(|a| matches!(a, Action::CloseStdin(0))),
        "its stdin is closed"
    );
    // Nothing more can be written to it: new requests are refused.
    let (refused, reply) = slot::<ToolOutcome>();
    let call = ToolRequest::new("b", serde_json::json!({}));
    let req = Request::Tool {
        call,
        pipeline: false,
        reply,
    };
    f.request(req, t0 + S);
    assert!(matches!(
        taken(&refused),
        Some(Err(HostError::NotServing(_)))
    ));
    f.settle(t0 + 3 * S - MS);
    assert!(taken(&got).is_none(), "it may still answer {id_a}");
    f.settle(t0 + 3 * S);
    assert!(matches!(taken(&got), Some(Err(HostError::NotServing(_)))));
}

#[test]
fn a_cancelled_tool_call_tells_an_extension_that_asked_for_tool_cancel() {
    let t0 = Instant::now();
    let mut f = start(&[PLAIN], t0);
    let hello = r#"{"type": "hello", "name": "x", "capabilities": ["tool_cancel"]}"#;
    f.says(0, hello, t0);
    f.says(0, r#"{"type": "register_tool", "name": "a"}"#, t0);
    f.says(0, r#"{"type": "ready"}"#, t0);
    f.sent(0);
    let ticket = crate::types::Ticket(7);
    let (got, reply) = slot::<ToolOutcome>();
    let call = ToolRequest::new("a", serde_json::json!({}));
    let request = Box::new(Request::Tool {
        call,
        pipeline: false,
        reply,
    });
    f.request(Request::Cancellable { ticket, request }, t0);
    let asked = f.frames(0);
    let id = asked[0]["id"].clone();
    let (found, reply) = slot::<bool>();
    f.request(Request::Cancel { ticket, reply }, t0 + MS);
    assert!(matches!(taken(&found), Some(Ok(true))));
    assert!(matches!(taken(&got), Some(Err(HostError::CallCancelled))));
    let told = f.frames(0);
    assert_eq!(
        (&told[0]["type"], &told[0]["id"]),
        (&"tool_cancel".into(), &id)
    );
}
