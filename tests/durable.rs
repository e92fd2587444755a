//! Upstream's newest frames (`format` on text blocks, `register_tool.replay`,
//! `tool_call.operation_key` and `reconcile`) through the library, `zot
//! rpc`, `zot mcp`'s mapping and `zot ext check`, against a real
//! extension that records every frame it receives. The durable fields are
//! the `journal` feature's; tests/minimal_build.rs covers a build without.

#![allow(dead_code)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use zot_host::{Content, ToolOutcome, ToolRequest, ToolResult};
#[cfg(feature = "journal")]
use zot_host::{ReconcileState, Replay};

/// The durable fixture, configured by `cfg` (its record file filled in).
fn durable_ext(t: &TempDir, name: &str, mut cfg: Value) -> PathBuf {
    cfg["record"] = json!(t.join(&format!("{name}.record")));
    if cfg.get("effects").is_none() {
        cfg["effects"] = json!(t.join(&format!("{name}.effects")));
    }
    configured_ext(&t.join(name), name, &fixture_path("durable/ext.py"), cfg)
}

/// The `tool_call` frames extension `name` received.
fn tool_calls(t: &TempDir, name: &str) -> Vec<Value> {
    let got = recorded(&t.join(&format!("{name}.record")));
    got.into_iter()
        .filter(|f| f["type"] == "tool_call")
        .collect()
}

fn ran(outcome: ToolOutcome) -> ToolResult {
    outcome.ran().expect("an extension's result")
}

fn tools() -> Value {
    json!({
        "md": {"format": "markdown", "replay": "idempotent"},
        "odd": {"format": "asciidoc", "replay": "sometimes"},
        "plain": {},
        "safe": {"replay": "safe"},
        "rec": {"replay": "reconcile"},
        "unsure": {"replay": "reconcile", "state": "unknown"},
        "junk": {"replay": "reconcile", "state": "raw", "structured": {"state": 7}},
        "none": {"replay": "reconcile", "state": "raw"},
    })
}

#[test]
fn format_is_kept_as_sent() {
    both(|| {
        let t = TempDir::new("durable-format");
        let ext = durable_ext(&t, "d", json!({"tools": tools()}));
        let host = start_ready(config(&t, &[ext]));
        let md = ran(host
            .call_tool(ToolRequest::new("md", json!({"a": 1})))
            .unwrap());
        assert_eq!(md.content[0].format(), Some("markdown"));
        assert_eq!(
            md.content,
            [json!({"type": "text", "text": "md ran {\"a\": 1}", "format": "markdown"})]
        );
        let odd = ran(host.call_tool(ToolRequest::new("odd", json!({}))).unwrap());
        assert_eq!(odd.content[0].format(), Some("asciidoc"), "kept as sent");
        let plain = ran(host
            .call_tool(ToolRequest::new("plain", json!({})))
            .unwrap());
        assert!(matches!(&plain.content[0], Content::Text(_)));
        drop(host);
        // Nothing was sent that the embedder did not ask for.
        for call in tool_calls(&t, "d") {
            assert!(call.get("operation_key").is_none(), "{call}");
            assert!(call.get("reconcile").is_none(), "{call}");
        }
    });
}

#[cfg(feature = "journal")]
#[test]
fn replay_is_kept_and_an_unknown_policy_falls_back_to_never() {
    both(|| {
        let t = TempDir::new("durable-lib");
        let ext = durable_ext(&t, "d", json!({"tools": tools()}));
        let host = start_ready(config(&t, &[ext]));
        let snap = host.list().unwrap();
        let replay = |name: &str| snap.tools.iter().find(|t| t.name == name).map(|t| t.replay);
        assert_eq!(replay("md"), Some(Replay::Idempotent));
        assert_eq!(replay("safe"), Some(Replay::Safe));
        assert_eq!(replay("rec"), Some(Replay::Reconcile));
        assert_eq!(replay("plain"), Some(Replay::Never), "the default");
        assert_eq!(replay("odd"), Some(Replay::Never), "an unknown policy");
        drop(host);
        let log = log_of(&t, "d");
        assert!(
            log.contains("tool \"odd\": `replay` \"sometimes\" is not one of"),
            "{log}"
        );
    });
}

#[cfg(feature = "journal")]
#[test]
fn operation_key_and_reconcile_reach_the_extension_and_the_state_is_parsed() {
    both(|| {
        let t = TempDir::new("durable-rec");
        let ext = durable_ext(&t, "d", json!({"tools": tools()}));
        let host = start_ready(config(&t, &[ext]));
        let keyed = ToolRequest::new("rec", json!({"n": 1})).with_operation_key("k-1");
        let first = ran(host.call_tool(keyed.clone()).unwrap());
        assert_eq!(first.reconciled, None, "no reconcile state on a run");
        // It ran under k-1: a reconcile call finds it completed, and the
        // recovered result keeps the text blocks only.
        let done = ran(host.call_tool(keyed.clone().reconciling()).unwrap());
        assert_eq!(done.reconciled, Some(ReconcileState::Completed));
        assert_eq!(
            done.content,
            [json!({"type": "text", "text": "recovered k-1"})]
        );
        let fresh = ToolRequest::new("rec", json!({})).with_operation_key("k-2");
        let not = ran(host.call_tool(fresh.reconciling()).unwrap());
        assert_eq!(not.reconciled, Some(ReconcileState::NotStarted));
        assert_eq!(not.content.len(), 2, "other states keep every block");
        for tool in ["unsure", "junk", "none"] {
            let call = ToolRequest::new(tool, json!({})).with_operation_key("k-3");
            let got = ran(host.call_tool(call.reconciling()).unwrap());
            assert_eq!(got.reconciled, Some(ReconcileState::Unknown), "{tool}");
        }
        drop(host);
        let calls = tool_calls(&t, "d");
        assert_eq!(calls[0]["operation_key"], "k-1");
        assert!(calls[0].get("reconcile").is_none(), "{}", calls[0]);
        assert_eq!(calls[1]["operation_key"], "k-1");
        assert_eq!(calls[1]["reconcile"], true);
        assert_eq!(calls[1]["args"], json!({"n": 1}));
        // The reconcile calls performed nothing.
        let effects = recorded(&t.join("d.effects"));
        assert_eq!(effects.len(), 1, "{effects:?}");
    });
}

/// `resume` and `abandon` without `--journal` say how to start one.
#[cfg(feature = "journal")]
#[test]
fn rpc_without_a_journal_says_to_start_it_with_one() {
    let t = TempDir::new("durable-no-journal");
    let mut rpc = Rpc::start(&t, &[]);
    for kind in ["resume", "abandon"] {
        let r = rpc.call(kind, json!({"type": kind, "call": "x"}));
        let want = "this zot rpc has no journal: start it with --journal PATH";
        assert_eq!((&r["success"], &r["error"]), (&json!(false), &json!(want)));
    }
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

#[cfg(feature = "journal")]
#[test]
fn rpc_passes_the_new_fields_and_answers_reconciled() {
    let t = TempDir::new("durable-rpc");
    let ext = durable_ext(&t, "d", json!({"tools": tools()}));
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.wait_ready(1);
    let list = rpc.call("l", json!({"type": "list"}));
    let tools = list["data"]["tools"].as_array().expect("tools").clone();
    let replay = |name: &str| {
        let tool = tools.iter().find(|t| t["name"] == name).expect("listed");
        tool["replay"].clone()
    };
    assert_eq!(replay("md"), "idempotent");
    assert_eq!(replay("plain"), "never");
    assert_eq!(replay("odd"), "never");
    let md = rpc.call("1", json!({"type": "tool_call", "name": "md", "args": {}}));
    assert_eq!(md["data"]["content"][0]["format"], "markdown", "{md}");
    let run =
        json!({"type": "tool_call", "name": "rec", "args": {"x": 2}, "operation_key": "op-9"});
    let ran = rpc.call("2", run);
    assert!(ran["data"].get("reconciled").is_none(), "{ran}");
    let ask = json!({"type": "tool_call", "name": "rec", "args": {"x": 2},
                     "operation_key": "op-9", "reconcile": true});
    let rec = rpc.call("3", ask);
    assert_eq!(rec["data"]["reconciled"], "completed", "{rec}");
    assert_eq!(
        rec["data"]["content"],
        json!([{"type": "text", "text": "recovered op-9"}])
    );
    let unknown = json!({"type": "tool_call", "name": "junk", "args": {},
                         "operation_key": "op-1", "reconcile": true});
    assert_eq!(rpc.call("4", unknown)["data"]["reconciled"], "unknown");
    // Bad fields are named; the host keeps going.
    let bad = rpc.call(
        "5",
        json!({"type": "tool_call", "name": "rec", "reconcile": "yes"}),
    );
    assert!(
        bad["error"]
            .as_str()
            .is_some_and(|e| e.contains("`reconcile`")),
        "{bad}"
    );
    let keyless = rpc.call(
        "6",
        json!({"type": "tool_call", "name": "rec", "reconcile": true}),
    );
    assert!(
        keyless["error"]
            .as_str()
            .is_some_and(|e| e.contains("operation_key")),
        "{keyless}"
    );
    let bad_key = rpc.call(
        "7",
        json!({"type": "tool_call", "name": "rec", "operation_key": 5}),
    );
    assert!(
        bad_key["error"]
            .as_str()
            .is_some_and(|e| e.contains("`operation_key`")),
        "{bad_key}"
    );
    assert_eq!(rpc.call("8", json!({"type": "ping"}))["data"]["pong"], true);
    rpc.close_stdin();
    rpc.wait();
    let calls = tool_calls(&t, "d");
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(calls[1]["operation_key"], "op-9");
    assert_eq!(calls[2]["reconcile"], true);
}

#[cfg(feature = "author")]
#[test]
fn ext_check_reports_the_display_hint() {
    let t = TempDir::new("durable-check");
    let ext = durable_ext(&t, "d", json!({"tools": {"md": {"format": "markdown"}}}));
    let dir = ext;
    let out = zot()
        .args(["ext", "check"])
        .arg(&dir)
        .args(["--call", "md", "{}"])
        .env("ZOT_HOME", t.join("home"))
        .output()
        .expect("zot ext check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[markdown] md ran {}"), "{text}");
}

#[allow(unused)]
fn _unused(_: &Path) {}

#[cfg(all(feature = "author", feature = "journal"))]
#[test]
fn ext_doctor_shows_each_tools_replay_policy() {
    let t = TempDir::new("durable-doctor");
    let ext = durable_ext(&t, "d", json!({"tools": tools()}));
    let run = |json: bool| {
        let mut cmd = zot();
        cmd.args(["ext", "doctor", "--no-ext", "-e"]).arg(&ext);
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .arg("--cwd")
            .arg(t.path())
            .env("ZOT_HOME", t.join("home"))
            .env("ZOT_HELLO_TIMEOUT", "60")
            .output()
            .expect("zot ext doctor");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report: Value = serde_json::from_str(&run(true)).expect("doctor --json");
    let replay = &report["extensions"][0]["replay"];
    assert_eq!(replay["md"], "idempotent", "{report:#}");
    assert_eq!(replay["rec"], "reconcile");
    assert!(
        replay.get("plain").is_none(),
        "never is the default: not listed"
    );
    let text = run(false);
    assert!(text.contains("safe=safe"), "{text}");
}

// ----- the journal ------------------------------------------------------

#[cfg(feature = "journal")]
mod journal {
    use super::*;
    use std::collections::HashMap;
    use zot_host::{Host, HostError};

    /// Journal records, parsed (a torn last line left out).
    fn records(path: &Path) -> Vec<Value> {
        recorded(path)
    }

    /// The journal's keys with no `finished`, by tool.
    fn open_keys(path: &Path) -> HashMap<String, String> {
        let mut open = HashMap::new();
        for r in records(path) {
            let key = r["call"].as_str().unwrap_or("").to_string();
            match r["step"].as_str() {
                Some("accepted") => {
                    open.insert(key, r["tool"].as_str().unwrap_or("").to_string());
                }
                Some("finished") => {
                    open.remove(&key);
                }
                _ => {}
            }
        }
        open
    }

    fn effects_of(t: &TempDir, key: &str) -> usize {
        let all = recorded(&t.join("d.effects"));
        all.iter().filter(|e| e["key"] == key).count()
    }

    /// The durable fixture with one blocking tool per replay policy.
    fn blocking_ext(t: &TempDir) -> PathBuf {
        let gate = t.join("gate");
        let tool = |replay: &str| json!({"replay": replay, "wait": gate});
        durable_ext(
            t,
            "d",
            json!({
                "started": t.join("d.started"),
                "tools": {
                    "s_never": tool("never"),
                    "s_safe": tool("safe"),
                    "s_idem": tool("idempotent"),
                    "s_rec": tool("reconcile"),
                    "s_rec2": {"replay": "reconcile", "wait": gate, "wait_first": true},
                    "quick": {"replay": "safe"},
                },
            }),
        )
    }

    fn rpc_with_journal(t: &TempDir, ext: &Path, journal: &Path) -> Rpc {
        let mut cmd = Rpc::command(t, &[ext.to_path_buf()]);
        cmd.arg("--journal").arg(journal);
        Rpc::spawn(&mut cmd)
    }

    #[test]
    fn kill_9_mid_call_then_each_policy_recovers_as_it_says() {
        let t = TempDir::new("journal-kill");
        let ext = blocking_ext(&t);
        let path = t.join("calls.journal");
        let mut rpc = rpc_with_journal(&t, &ext, &path);
        rpc.wait_ready(1);
        let tools = ["s_never", "s_safe", "s_idem", "s_rec", "s_rec2"];
        // A finished call first: it is not reported after the crash.
        let done = rpc.call(
            "q",
            json!({"type": "tool_call", "name": "quick", "args": {}}),
        );
        assert_eq!(done["success"], true, "{done}");
        for (i, tool) in tools.iter().enumerate() {
            let args = json!({"n": i});
            rpc.send(
                json!({"type": "tool_call", "id": format!("c{i}"), "name": tool, "args": args}),
            );
        }
        wait_for("every call started in its extension", || {
            recorded(&t.join("d.started")).len() == tools.len() + 1
        });
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).expect("journal").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        // Between dispatched and finished: kill -9 the real binary.
        rpc.child.kill().expect("kill -9");
        rpc.child.wait().expect("reaped");
        let open = open_keys(&path);
        assert_eq!(open.len(), tools.len(), "{open:?}");
        // The frames carried the journal's keys.
        let sent: Vec<Value> = tool_calls(&t, "d");
        for call in &sent {
            let key = call["operation_key"].as_str().expect("operation_key sent");
            assert!(call["name"] == "quick" || open.contains_key(key), "{call}");
        }
        let key_of = |tool: &str| {
            (open.iter())
                .find(|(_, t)| *t == tool)
                .map(|(k, _)| k.clone())
                .expect("key")
        };
        // The blocked calls may now end; the old processes are gone or going.
        std::fs::write(t.join("gate"), "").expect("gate");

        let mut rpc = rpc_with_journal(&t, &ext, &path);
        rpc.wait_ready(1);
        let event = rpc.until("interrupted_calls", |v| v["type"] == "interrupted_calls");
        let calls = event["calls"].as_array().expect("calls");
        assert_eq!(calls.len(), tools.len(), "{event}");
        let listed = |tool: &str| {
            calls
                .iter()
                .find(|c| c["tool"] == tool)
                .expect("listed")
                .clone()
        };
        assert_eq!(listed("s_idem")["replay"], "idempotent");
        assert_eq!(listed("s_never")["args"], json!({"n": 0}));
        assert_eq!(listed("s_rec")["extension"], "d");
        assert!(listed("s_safe")["accepted_at"].as_u64().is_some());
        // None ran by itself.
        let before = recorded(&t.join("d.started")).len();

        let never = rpc.call("r0", json!({"type": "resume", "call": key_of("s_never")}));
        let why = never["error"].as_str().unwrap_or("");
        assert!(why.contains("never"), "{never}");
        let gone = rpc.call("a0", json!({"type": "abandon", "call": key_of("s_never")}));
        assert_eq!(gone["success"], true, "{gone}");
        let again = rpc.call("a1", json!({"type": "abandon", "call": key_of("s_never")}));
        assert!(again["error"]
            .as_str()
            .is_some_and(|e| e.contains("no interrupted call")));

        let safe = rpc.call("r1", json!({"type": "resume", "call": key_of("s_safe")}));
        assert_eq!(
            safe["data"]["content"][0]["text"], "s_safe ran {\"n\": 1}",
            "{safe}"
        );
        let idem = rpc.call("r2", json!({"type": "resume", "call": key_of("s_idem")}));
        assert_eq!(idem["success"], true, "{idem}");
        assert_eq!(
            effects_of(&t, &key_of("s_idem")),
            2,
            "run again under its key"
        );
        // It ran before the crash: the extension says so, and it does not run twice.
        let rec = rpc.call("r3", json!({"type": "resume", "call": key_of("s_rec")}));
        assert_eq!(rec["data"]["reconciled"], "completed", "{rec}");
        assert_eq!(effects_of(&t, &key_of("s_rec")), 1);
        // It never got as far as its effect: not started, so it runs.
        assert_eq!(effects_of(&t, &key_of("s_rec2")), 0);
        let rec2 = rpc.call("r4", json!({"type": "resume", "call": key_of("s_rec2")}));
        assert_eq!(rec2["data"]["reconciled"], "not_started", "{rec2}");
        assert_eq!(effects_of(&t, &key_of("s_rec2")), 1);
        let started = recorded(&t.join("d.started")).len();
        assert_eq!(
            started,
            before + 3,
            "safe, idempotent and the not-started one ran"
        );
        // The new frames carried the same keys.
        let calls = tool_calls(&t, "d");
        let rec_probe = calls
            .iter()
            .rev()
            .find(|c| c["reconcile"] == true)
            .expect("reconcile");
        assert_eq!(rec_probe["operation_key"], key_of("s_rec2").as_str());
        rpc.close_stdin();
        rpc.wait();
        assert!(open_keys(&path).is_empty(), "{:?}", open_keys(&path));

        // Nothing is left to recover.
        let mut rpc = rpc_with_journal(&t, &ext, &path);
        rpc.wait_ready(1);
        let event = rpc.until("interrupted_calls", |v| v["type"] == "interrupted_calls");
        assert_eq!(event["calls"], json!([]));
        rpc.close_stdin();
        rpc.wait();

        // The audit view.
        let out = zot()
            .args(["journal"])
            .arg(&path)
            .arg("--json")
            .output()
            .expect("zot journal");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        let status = |tool: &str| {
            let all: Vec<&Value> = lines.iter().filter(|l| l["tool"] == tool).collect();
            all.iter()
                .map(|l| l["status"].as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(status("s_never"), ["abandoned"]);
        assert_eq!(status("quick"), ["completed"]);
        assert_eq!(status("s_safe"), ["completed (resumed)"]);
        let text = zot()
            .args(["journal"])
            .arg(&path)
            .output()
            .expect("zot journal");
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("s_rec  d  rpc  -  completed"), "{text}");
        let unfinished = zot()
            .args(["journal", "--unfinished"])
            .arg(&path)
            .output()
            .expect("run");
        assert!(
            unfinished.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&unfinished.stdout)
        );
    }

    /// The `event_intercept` frames guard `g` received.
    fn intercepts(t: &TempDir) -> usize {
        let got = recorded(&t.join("g.record"));
        got.iter()
            .filter(|f| f["type"] == "event_intercept")
            .count()
    }

    #[test]
    fn kill_9_while_the_guards_decide_then_each_policy_recovers() {
        let t = TempDir::new("journal-kill-guards");
        let ext = blocking_ext(&t);
        // A guard that never answers (then one that allows): the calls
        // stop between `accepted` and `dispatched`.
        let guard = |silent: bool| {
            ext_dir(
                &t.join("g"),
                "g",
                json!({"register": [subscribe(&[], &["tool_call"])],
                       "guard": {"silent": silent}, "record": t.join("g.record")}),
            )
        };
        let path = t.join("calls.journal");
        let start = |guard: PathBuf| {
            let mut cmd = Rpc::command(&t, &[ext.clone(), guard]);
            cmd.arg("--journal").arg(&path);
            let mut rpc = Rpc::spawn(&mut cmd);
            rpc.wait_ready(2);
            rpc
        };
        let mut rpc = start(guard(true));
        let tools = ["s_never", "s_safe", "s_idem", "s_rec"];
        for (i, tool) in tools.iter().enumerate() {
            let args = json!({"n": i});
            rpc.send(
                json!({"type": "tool_call", "id": format!("c{i}"), "name": tool, "args": args}),
            );
        }
        wait_for("the guard holds every call", || {
            intercepts(&t) == tools.len()
        });
        // The guard heard of each call only once its `accepted` was on disk.
        assert_eq!(open_keys(&path).len(), tools.len(), "{:?}", records(&path));
        rpc.child.kill().expect("kill -9");
        rpc.child.wait().expect("reaped");
        assert!(!records(&path).iter().any(|r| r["step"] == "dispatched"));
        assert!(tool_calls(&t, "d").is_empty(), "nothing reached the tool");
        let open = open_keys(&path);
        let key_of = |tool: &str| {
            (open.iter())
                .find(|(_, t)| *t == tool)
                .map(|(k, _)| k.clone())
                .expect("key")
        };
        std::fs::write(t.join("gate"), "").expect("gate");

        let mut rpc = start(guard(false));
        let event = rpc.until("interrupted_calls", |v| v["type"] == "interrupted_calls");
        assert_eq!(event["calls"].as_array().map(Vec::len), Some(4), "{event}");
        let never = rpc.call("r0", json!({"type": "resume", "call": key_of("s_never")}));
        assert!(
            never["error"].as_str().is_some_and(|e| e.contains("never")),
            "{never}"
        );
        let asked = intercepts(&t);
        let safe = rpc.call("r1", json!({"type": "resume", "call": key_of("s_safe")}));
        assert_eq!(safe["success"], true, "{safe}");
        assert_eq!(intercepts(&t), asked + 1, "safe asks the guards again");
        let idem = rpc.call("r2", json!({"type": "resume", "call": key_of("s_idem")}));
        assert_eq!(idem["success"], true, "{idem}");
        assert_eq!(
            effects_of(&t, &key_of("s_idem")),
            1,
            "ran once, under its key"
        );
        let rec = rpc.call("r3", json!({"type": "resume", "call": key_of("s_rec")}));
        assert_eq!(rec["data"]["reconciled"], "not_started", "{rec}");
        assert_eq!(effects_of(&t, &key_of("s_rec")), 1);
        rpc.close_stdin();
        rpc.wait();
        let left: Vec<String> = open_keys(&path).into_values().collect();
        assert_eq!(left, ["s_never"], "never stays open until abandoned");
    }

    #[test]
    fn kill_9_before_accepted_is_durable_leaves_nothing_unrecorded() {
        let t = TempDir::new("journal-kill-early");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {"replay": "safe"}}}));
        let path = t.join("j");
        for round in 0..3 {
            let mut rpc = rpc_with_journal(&t, &ext, &path);
            rpc.wait_ready(1);
            let call =
                json!({"type": "tool_call", "id": "c", "name": "quick", "args": {"r": round}});
            rpc.send(call);
            // At once: most likely before the host read the line.
            rpc.child.kill().expect("kill -9");
            rpc.child.wait().expect("reaped");
            // Every frame the tool got has its `accepted` and `dispatched` on disk.
            let steps = records(&path);
            for frame in tool_calls(&t, "d") {
                let key = &frame["operation_key"];
                for step in ["accepted", "dispatched"] {
                    assert!(
                        steps.iter().any(|r| r["call"] == *key && r["step"] == step),
                        "{frame} ran without {step} on disk: {steps:?}"
                    );
                }
            }
        }
        // What a restart reports is exactly what the journal left open.
        let host = start_ready(journaled_config(&t, &ext, &path));
        let mut reported: Vec<String> = host
            .interrupted_calls()
            .into_iter()
            .map(|c| c.call)
            .collect();
        let mut open: Vec<String> = open_keys(&path).into_keys().collect();
        reported.sort();
        open.sort();
        assert_eq!(reported, open);
        for key in &open {
            host.abandon(key).expect("abandon");
        }
        assert!(host.interrupted_calls().is_empty());
    }

    #[test]
    fn kill_9_while_the_result_is_returned() {
        let t = TempDir::new("journal-kill-late");
        let path = t.join("j");
        // The client got its answer, then the host died: `finished` was on disk.
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {"replay": "safe"}}}));
        let mut rpc = rpc_with_journal(&t, &ext, &path);
        rpc.wait_ready(1);
        let got = rpc.call(
            "c",
            json!({"type": "tool_call", "name": "quick", "args": {}}),
        );
        assert_eq!(got["success"], true, "{got}");
        rpc.child.kill().expect("kill -9");
        rpc.child.wait().expect("reaped");
        let steps = records(&path);
        let finished = steps
            .iter()
            .find(|r| r["step"] == "finished")
            .expect("finished");
        assert_eq!(finished["status"], "completed");
        assert_eq!(finished["result"]["content"][0]["text"], "quick ran {}");
        assert!(open_keys(&path).is_empty());

        // The tool answers and kills the host at once: the answer is on
        // its way in. Either the host journaled `finished` (and only then
        // could the client have been told) or the call is interrupted.
        let spec = json!({"replay": "idempotent", "kill_host": true});
        let ext = durable_ext(&t, "d", json!({"tools": {"dies": spec}}));
        let mut rpc = rpc_with_journal(&t, &ext, &path);
        rpc.wait_ready(1);
        rpc.send(json!({"type": "tool_call", "id": "k", "name": "dies", "args": {}}));
        rpc.child.wait().expect("killed by its extension");
        let mut told = false;
        while let Some(line) = rpc.next_within(std::time::Duration::from_secs(2)) {
            told |= line["id"] == "k";
        }
        let key = tool_calls(&t, "d").last().expect("the call ran")["operation_key"].clone();
        let steps = records(&path);
        let done = steps
            .iter()
            .any(|r| r["call"] == key && r["step"] == "finished");
        assert!(
            !told || done,
            "the client was told before `finished` was on disk"
        );
        // The same tool, no longer killing its host.
        let ext = durable_ext(
            &t,
            "d",
            json!({"tools": {"dies": {"replay": "idempotent"}}}),
        );
        let host = start_ready(journaled_config(&t, &ext, &path));
        let open = host.interrupted_calls();
        match done {
            true => assert!(open.is_empty(), "{open:?}"),
            false => {
                assert_eq!(open.len(), 1, "{open:?}");
                assert!(open[0].dispatched);
                let again = ran(host.resume(&open[0].call).expect("resume"));
                assert!(!again.is_error, "{again:?}");
                assert!(host.interrupted_calls().is_empty());
            }
        }
    }

    /// Writes a journal of `bytes` or a little more: an open call `old`
    /// of tool `quick`, then finished calls with results cut at 64 KiB.
    fn fill(path: &Path, bytes: u64) {
        use std::io::Write;
        let file = std::fs::File::create(path).expect("journal");
        let mut out = std::io::BufWriter::new(file);
        let old = json!({"step": "accepted", "at": 1, "call": "old", "tool": "quick",
                         "extension": "d", "args": {"a": 1}, "origin": "embedder",
                         "replay": "safe"});
        writeln!(out, "{old}").expect("write");
        let text = "x".repeat(60 * 1024);
        let (mut written, mut n) = (0u64, 0u64);
        while written < bytes {
            let accepted = json!({"step": "accepted", "at": 2, "call": format!("k{n}"),
                                  "tool": "quick", "extension": "d", "args": {},
                                  "origin": "embedder", "replay": "safe"});
            let finished = json!({"step": "finished", "at": 3, "call": format!("k{n}"),
                                  "status": "completed", "result_text": text,
                                  "truncated": true, "size": 100_000});
            let lines = format!("{accepted}\n{finished}\n");
            out.write_all(lines.as_bytes()).expect("write");
            written += lines.len() as u64;
            n += 1;
        }
        out.flush().expect("flush");
    }

    #[test]
    fn rotation_past_the_bound_carries_the_unfinished_calls_over() {
        let t = TempDir::new("journal-rotate");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {"replay": "safe"}}}));
        let path = t.join("j");
        let bound = zot_host::journal::ROTATE_BYTES;
        fill(&path, bound - 200 * 1024);
        let host = start_ready(journaled_config(&t, &ext, &path));
        assert_eq!(host.interrupted_calls().len(), 1);
        for _ in 0..4 {
            let big = json!({"pad": "y".repeat(60 * 1024)});
            let got = ran(host
                .call_tool(ToolRequest::new("quick", big))
                .expect("call"));
            assert!(!got.is_error, "{got:?}");
        }
        drop(host);
        let mut old = path.clone().into_os_string();
        old.push(".1");
        let old = PathBuf::from(old);
        let rotated = std::fs::metadata(&old).expect("PATH.1").len();
        assert!(
            rotated > bound - 400 * 1024 && rotated <= bound,
            "{rotated}"
        );
        let now = records(&path);
        assert!(std::fs::metadata(&path).expect("PATH").len() < 1024 * 1024);
        assert_eq!(now[0]["call"], "old", "{:?}", now[0]);
        assert_eq!(
            (&now[0]["origin"], &now[0]["carried"]),
            (&json!("embedder"), &json!(true))
        );
        assert_eq!(now[0]["args"], json!({"a": 1}));
        let host = start_ready(journaled_config(&t, &ext, &path));
        let open = host.interrupted_calls();
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(open[0].call, "old");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).expect("journal").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    /// The size of the big journal a start reads: `ZOT_TEST_JOURNAL_BYTES`,
    /// else 1 GiB.
    fn big_journal_bytes() -> u64 {
        std::env::var("ZOT_TEST_JOURNAL_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1 << 30)
    }

    #[test]
    fn a_start_on_a_big_journal_stays_bounded_in_memory() {
        let t = TempDir::new("journal-huge");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {"replay": "safe"}}}));
        let path = t.join("j");
        let bytes = big_journal_bytes();
        fill(&path, bytes);
        let mut rpc = rpc_with_journal(&t, &ext, &path);
        rpc.wait_ready(1);
        let event = rpc.until("interrupted_calls", |v| v["type"] == "interrupted_calls");
        assert_eq!(event["calls"][0]["call"], "old", "{event}");
        let peak = peak_rss_kb(rpc.child.id()).expect("VmHWM");
        // A line at a time: the file's size is not the host's.
        assert!(peak < 64 * 1024, "peak {peak} kB reading {bytes} bytes");
        eprintln!("started on a journal of {bytes} bytes: peak rss {peak} kB");
        let got = rpc.call(
            "c",
            json!({"type": "tool_call", "name": "quick", "args": {}}),
        );
        assert_eq!(got["success"], true, "{got}");
        rpc.close_stdin();
        rpc.wait();
        let _ = std::fs::remove_file(&path);
    }

    fn journaled_config(t: &TempDir, ext: &Path, journal: &Path) -> zot_host::HostConfig {
        let mut cfg = config(t, &[ext.to_path_buf()]);
        cfg.journal = Some(journal.to_path_buf());
        cfg
    }

    fn start_err(cfg: zot_host::HostConfig) -> String {
        match Host::start(cfg) {
            Ok(_) => panic!("the host started"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_journal_that_cannot_be_written_fails_the_call_and_nothing_runs() {
        both(|| {
            let t = TempDir::new("journal-full");
            let ext = durable_ext(&t, "d", json!({"tools": {"quick": {}}}));
            let host = start_ready(journaled_config(&t, &ext, Path::new("/dev/full")));
            let got = host.call_tool(ToolRequest::new("quick", json!({})));
            match got {
                Err(HostError::Journal(why)) => assert!(why.contains("/dev/full"), "{why}"),
                other => panic!("expected a journal error, got {other:?}"),
            }
            // The host keeps going; the call never reached the extension.
            assert!(host.list().is_ok());
            drop(host);
            assert!(tool_calls(&t, "d").is_empty());
        });
    }

    #[test]
    fn a_read_only_path_or_a_second_host_is_refused_naming_the_file() {
        let t = TempDir::new("journal-refused");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {}}}));
        let ro = Path::new("/proc/zot-journal-test");
        let why = start_err(journaled_config(&t, &ext, ro));
        assert!(
            why.contains("cannot open journal /proc/zot-journal-test"),
            "{why}"
        );
        let path = t.join("j");
        let first = start_ready(journaled_config(&t, &ext, &path));
        let why = start_err(journaled_config(&t, &ext, &path));
        assert!(
            why.contains("in use by another host") && why.contains(&*path.to_string_lossy()),
            "{why}"
        );
        // The binary says so too, and exits.
        let out = zot()
            .args(["rpc", "--no-ext", "--journal"])
            .arg(&path)
            .env("ZOT_HOME", t.join("home"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("zot rpc");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("in use by another host"),
            "{stderr}"
        );
        drop(first);
        let again = start_ready(journaled_config(&t, &ext, &path));
        assert!(again.interrupted_calls().is_empty());
    }

    /// `zot rpc` on a journal it cannot use: a full disk fails each call
    /// naming the file (nothing reaches the tool); a path it cannot open
    /// or a line edited into garbage stops the start naming the file (and
    /// the line); a torn last line is said once, in the event's notes.
    #[test]
    fn zot_rpc_on_a_full_disk_a_read_only_path_and_a_hand_edited_journal() {
        let t = TempDir::new("journal-rpc-faults");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {"replay": "safe"}}}));
        let mut rpc = rpc_with_journal(&t, &ext, Path::new("/dev/full"));
        rpc.wait_ready(1);
        for id in ["a", "b"] {
            let got = rpc.call(
                id,
                json!({"type": "tool_call", "name": "quick", "args": {}}),
            );
            let why = got["error"].as_str().unwrap_or("");
            assert!(why.contains("cannot write journal /dev/full"), "{got}");
        }
        assert_eq!(rpc.call("p", json!({"type": "ping"}))["success"], true);
        rpc.close_stdin();
        rpc.wait();
        assert!(tool_calls(&t, "d").is_empty(), "nothing ran unrecorded");

        let refused = |journal: &Path| {
            let out = Rpc::command(&t, std::slice::from_ref(&ext))
                .arg("--journal")
                .arg(journal)
                .stdin(std::process::Stdio::null())
                .output()
                .expect("zot rpc");
            assert!(!out.status.success());
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        let why = refused(Path::new("/proc/zot-journal-test"));
        assert!(
            why.contains("cannot open journal /proc/zot-journal-test"),
            "{why}"
        );
        let path = t.join("edited");
        let accepted = json!({"step": "accepted", "at": 5, "call": "k1", "tool": "quick",
                              "extension": "d", "args": {}, "origin": "rpc", "replay": "safe"});
        std::fs::write(
            &path,
            format!("{accepted}\n{{\"step\": \"oops\"}}\n{accepted}\n"),
        )
        .expect("write");
        let why = refused(&path);
        assert!(
            why.contains(&*path.to_string_lossy()) && why.contains("line 2"),
            "{why}"
        );
        std::fs::write(&path, format!("{accepted}\n{{\"step\":\"fin")).expect("write");
        let mut rpc = rpc_with_journal(&t, &ext, &path);
        rpc.wait_ready(1);
        let event = rpc.until("interrupted_calls", |v| v["type"] == "interrupted_calls");
        assert_eq!(event["calls"][0]["call"], "k1", "{event}");
        let notes = event["notes"].to_string();
        assert!(notes.contains("cut short"), "{event}");
        rpc.close_stdin();
        rpc.wait();
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_any_other_bad_line_stops_the_start() {
        let t = TempDir::new("journal-lines");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {"replay": "safe"}}}));
        let path = t.join("j");
        let accepted = json!({"step": "accepted", "at": 5, "call": "k1", "tool": "quick",
                              "extension": "d", "args": {"a": 1}, "origin": "embedder",
                              "replay": "safe"});
        let torn = format!("{accepted}\n{{\"step\":\"verdict\",\"ca");
        std::fs::write(&path, &torn).expect("write");
        both(|| {
            let host = start_ready(journaled_config(&t, &ext, &path));
            let open = host.interrupted_calls();
            assert_eq!(open.len(), 1);
            assert_eq!(
                (open[0].call.as_str(), &open[0].args),
                ("k1", &json!({"a": 1}))
            );
            // The library resumes it as rpc does: safe runs under its key.
            let done = ran(host.resume("k1").expect("resumed"));
            assert_eq!(done.content[0].text(), Some("quick ran {\"a\": 1}"));
            assert!(host.interrupted_calls().is_empty());
            assert!(matches!(host.resume("k1"), Err(HostError::Journal(_))));
            drop(host);
            let sent = tool_calls(&t, "d");
            assert_eq!(sent.last().expect("sent")["operation_key"], "k1");
            std::fs::write(&path, &torn).expect("write");
        });
        let host = start_ready(journaled_config(&t, &ext, &path));
        let notes = host.journal_notes();
        assert!(
            notes.iter().any(|n| n.contains("last line was cut short")),
            "{notes:?}"
        );
        drop(host);
        let bad = format!("{accepted}\nnot json\n{accepted}\n");
        std::fs::write(&path, bad).expect("write");
        let why = start_err(journaled_config(&t, &ext, &path));
        assert!(
            why.contains(&*path.to_string_lossy()) && why.contains("line 2"),
            "{why}"
        );
        let out = zot()
            .args(["journal"])
            .arg(&path)
            .output()
            .expect("zot journal");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("line 2"),
            "{stderr}"
        );
    }

    /// Calls in flight together share the journal's syncs: each call's
    /// `accepted` and `dispatched` go to disk with one sync (before its
    /// frame is written), and answers that come together share one.
    #[test]
    fn the_records_of_a_turn_share_one_sync() {
        both(|| {
            const CALLS: usize = 64;
            let t = TempDir::new("journal-batch");
            let tool = json!({"replay": "safe", "batch": CALLS});
            let ext = durable_ext(&t, "d", json!({"tools": {"held": tool}}));
            let path = t.join("j");
            let host = start_ready(journaled_config(&t, &ext, &path));
            let callers: Vec<_> = (0..CALLS)
                .map(|i| {
                    let handle = host.handle();
                    std::thread::spawn(move || {
                        handle.call_tool(ToolRequest::new("held", json!({"i": i})))
                    })
                })
                .collect();
            for caller in callers {
                let got = ran(caller.join().expect("caller").expect("call"));
                assert!(!got.is_error, "{got:?}");
            }
            let (records, syncs) = host.journal_counts().expect("a journal");
            assert_eq!(records, 3 * CALLS as u64, "accepted, dispatched, finished");
            // One sync per record would be three per call.
            assert!(
                syncs <= 2 * CALLS as u64,
                "{syncs} syncs for {records} records"
            );
            eprintln!("{records} records, {syncs} syncs");
            drop(host);
            assert!(open_keys(&path).is_empty());
        });
    }

    #[test]
    fn calls_in_flight_on_a_journal_that_cannot_be_written_all_fail() {
        both(|| {
            let t = TempDir::new("journal-full-batch");
            let ext = durable_ext(&t, "d", json!({"tools": {"quick": {}}}));
            let host = start_ready(journaled_config(&t, &ext, Path::new("/dev/full")));
            let callers: Vec<_> = (0..8)
                .map(|_| {
                    let handle = host.handle();
                    std::thread::spawn(move || {
                        handle.call_tool(ToolRequest::new("quick", json!({})))
                    })
                })
                .collect();
            for caller in callers {
                match caller.join().expect("caller") {
                    Err(HostError::Journal(why)) => assert!(why.contains("/dev/full"), "{why}"),
                    other => panic!("expected a journal error, got {other:?}"),
                }
            }
            assert_eq!(host.journal_counts(), Some((0, 0)));
            drop(host);
            assert!(tool_calls(&t, "d").is_empty(), "nothing ran unrecorded");
        });
    }

    #[test]
    fn guard_verdicts_are_journaled() {
        let t = TempDir::new("journal-guard");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {}}}));
        let guard = ext_dir(
            &t.join("g"),
            "g",
            json!({"register": [subscribe(&[], &["tool_call"])],
                   "guard": {"block_events": ["tool_call"], "reason": "no quick"}}),
        );
        let path = t.join("j");
        let mut cfg = journaled_config(&t, &ext, &path);
        cfg.ext_paths.push(guard);
        let host = start_ready(cfg);
        let got = ran(host
            .call_tool(ToolRequest::new("quick", json!({})))
            .unwrap());
        assert!(got.blocked, "{got:?}");
        drop(host);
        let steps: Vec<Value> = records(&path);
        let verdict = steps
            .iter()
            .find(|r| r["step"] == "verdict")
            .expect("verdict");
        assert_eq!(verdict["decision"], "block", "{steps:?}");
        assert_eq!(verdict["reason"], "no quick");
        let finished = steps
            .iter()
            .find(|r| r["step"] == "finished")
            .expect("finished");
        assert_eq!(finished["status"], "blocked");
        assert!(!steps.iter().any(|r| r["step"] == "dispatched"));
    }

    #[test]
    fn the_session_says_which_calls_were_interrupted() {
        let t = TempDir::new("journal-session");
        let ext = durable_ext(
            &t,
            "d",
            json!({"tools": {"quick": {"replay": "idempotent"}}}),
        );
        let path = t.join("j");
        let accepted = json!({"step": "accepted", "at": 5, "call": "k9", "tool": "quick",
                              "extension": "d", "args": {}, "origin": "embedder",
                              "replay": "idempotent"});
        std::fs::write(&path, format!("{accepted}\n")).expect("write");
        let out = zot()
            .args(["--no-ext", "-e"])
            .arg(&ext)
            .arg("--journal")
            .arg(&path)
            .arg("--cwd")
            .arg(t.path())
            .env("ZOT_HOME", t.join("home"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("zot");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("call k9 of tool quick (d, replay idempotent) was interrupted"),
            "{text}"
        );
        // It did not run by itself.
        assert!(tool_calls(&t, "d").is_empty());

        // `/resume` lists them, `/resume CALL` runs one by its policy,
        // `/abandon CALL` closes one; both journaled.
        let other = json!({"step": "accepted", "at": 6, "call": "k8", "tool": "quick",
                           "extension": "d", "args": {"b": 2}, "origin": "embedder",
                           "replay": "never"});
        std::fs::write(&path, format!("{accepted}\n{other}\n")).expect("write");
        let (_, lines) = run_zot(
            &t,
            &[
                "--no-ext",
                "-e",
                &ext.to_string_lossy(),
                "--journal",
                &path.to_string_lossy(),
            ],
            "/resume\n/resume k8\n/resume k9\n/abandon k8\n/abandon k8\n",
        );
        let text = lines.join("\n");
        let at = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("no {needle:?} in:\n{text}"))
        };
        let listed = at("interrupted calls:");
        assert!(at("k9  quick (d, replay idempotent) {}") > listed);
        assert!(at("k8  quick (d, replay never) {\"b\":2}") > listed);
        assert!(at("/resume k8: ") > listed, "never is refused");
        assert!(at("quick ran {}") > at("/resume k8: "));
        assert!(at("abandoned: k8") > at("quick ran {}"));
        assert!(at("/abandon k8: ") > at("abandoned: k8"), "only once");
        let sent = tool_calls(&t, "d");
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["operation_key"], "k9");
        assert!(open_keys(&path).is_empty(), "{:?}", records(&path));
        let steps = records(&path);
        let resumed = steps.iter().filter(|r| r["step"] == "accepted").nth(2);
        assert_eq!(
            resumed.map(|r| &r["origin"]),
            Some(&json!("session")),
            "{steps:?}"
        );
    }

    #[cfg(feature = "mcp")]
    #[test]
    fn zot_mcp_journals_the_calls_of_its_client() {
        let t = TempDir::new("journal-mcp");
        let ext = durable_ext(&t, "d", json!({"tools": {"md": {"format": "markdown"}}}));
        let path = t.join("j");
        let mut cmd = Rpc::mcp_command(&t, &[ext], 60);
        cmd.arg("--journal").arg(&path);
        let mut mcp = Rpc::spawn(&mut cmd);
        let request = |id: u64, method: &str, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        mcp.send(request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}),
        ));
        mcp.until("initialize", |v| v["id"] == 0);
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}));
        mcp.send(request(
            1,
            "tools/call",
            json!({"name": "md", "arguments": {}}),
        ));
        let answer = mcp.until("tools/call", |v| v["id"] == 1);
        // MCP has no display hint: the text only.
        assert_eq!(
            answer["result"]["content"],
            json!([{"type": "text", "text": "md ran {}"}]),
            "{answer}"
        );
        mcp.close_stdin();
        mcp.wait();
        let steps: Vec<String> = records(&path)
            .iter()
            .map(|r| r["step"].as_str().unwrap_or("").to_string())
            .collect();
        // No guard: no verdict to record.
        assert_eq!(steps, ["accepted", "dispatched", "finished"]);
        assert_eq!(records(&path)[0]["origin"], "mcp");
    }

    /// Who asked is journaled: the surface, or the extension whose
    /// `call_tool` made the call; `zot journal` shows it.
    #[cfg(feature = "ext-calls")]
    #[test]
    fn the_origin_of_each_call_is_journaled_and_shown() {
        let t = TempDir::new("journal-origin");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {"replay": "safe"}}}));
        let relay = json!({"kind": "call", "target": "quick", "args": {"via": "relay"}});
        let caller = tools_ext(&t.join("c"), "caller", json!({"tools": {"relay": relay}}));
        let path = t.join("j");
        let mut cmd = Rpc::command(&t, &[ext, caller]);
        cmd.arg("--journal").arg(&path);
        let mut rpc = Rpc::spawn(&mut cmd);
        rpc.wait_ready(2);
        let got = rpc.call(
            "r",
            json!({"type": "tool_call", "name": "relay", "args": {}}),
        );
        assert_eq!(got["success"], true, "{got}");
        rpc.close_stdin();
        rpc.wait();
        let origins: Vec<(Value, Value)> = records(&path)
            .iter()
            .filter(|r| r["step"] == "accepted")
            .map(|r| (r["tool"].clone(), r["origin"].clone()))
            .collect();
        assert_eq!(
            origins,
            [
                (json!("relay"), json!("rpc")),
                (json!("quick"), json!("extension:caller"))
            ]
        );
        assert!(open_keys(&path).is_empty());
        let out = zot()
            .arg("journal")
            .arg(&path)
            .output()
            .expect("zot journal");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("  relay  caller  rpc  -  completed"),
            "{text}"
        );
        assert!(
            text.contains("  quick  d  extension:caller  -  completed"),
            "{text}"
        );
        let out = zot()
            .arg("journal")
            .arg(&path)
            .arg("--json")
            .output()
            .expect("zot journal");
        let first: Value = serde_json::from_str(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .unwrap_or(""),
        )
        .expect("json");
        assert_eq!(first["origin"], "rpc");
    }

    #[test]
    fn the_library_is_the_embedder_unless_it_says_otherwise() {
        let t = TempDir::new("journal-origin-lib");
        let ext = durable_ext(&t, "d", json!({"tools": {"quick": {}}}));
        let path = t.join("j");
        for origin in [None, Some("my-agent")] {
            let mut cfg = journaled_config(&t, &ext, &path);
            if let Some(origin) = origin {
                cfg.journal_origin = origin.into();
            }
            let host = start_ready(cfg);
            host.call_tool(ToolRequest::new("quick", json!({})))
                .expect("call");
        }
        let origins: Vec<Value> = records(&path)
            .iter()
            .filter(|r| r["step"] == "accepted")
            .map(|r| r["origin"].clone())
            .collect();
        assert_eq!(origins, [json!("embedder"), json!("my-agent")]);
    }
}
