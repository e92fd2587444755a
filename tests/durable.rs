//! Upstream's newest frames (`format` on text blocks, `register_tool.replay`,
//! `tool_call.operation_key` and `reconcile`) through the library, `zot
//! rpc`, `zot mcp`'s mapping and `zot ext check`, against a real
//! extension that records every frame it receives.

#![allow(dead_code)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use zot_host::{Content, ReconcileState, Replay, ToolOutcome, ToolRequest, ToolResult};

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
fn format_and_replay_are_kept_and_unknown_values_fall_back() {
    both(|| {
        let t = TempDir::new("durable-lib");
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
        // Nothing was sent that the embedder did not ask for.
        for call in tool_calls(&t, "d") {
            assert!(call.get("operation_key").is_none(), "{call}");
            assert!(call.get("reconcile").is_none(), "{call}");
        }
    });
}

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
