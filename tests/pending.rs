//! The table of pending requests: an answer is taken only
//! by the extension that owes it and only in the frame its request
//! expects; anything else is dropped, logged, and changes nothing.

mod common;

use common::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use zot_host::{HostError, Request};

#[test]
fn answers_to_other_requests_are_dropped_and_leave_them_pending() {
    let t = TempDir::new("pending-thief");
    let rec = t.join("rec");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"record": rec, "register": [command("slow")], "commands": {"slow": {"hang": true}}}),
    );
    let thief = t.join("thief");
    std::fs::create_dir_all(&thief).expect("create ext dir");
    let exe = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pending/thief.py");
    let manifest = json!({"name": "thief", "exec": exe});
    std::fs::write(thief.join("extension.json"), manifest.to_string()).expect("write manifest");
    let mut cfg = config(&t, &[a, thief]);
    cfg.timeouts.command = Duration::from_secs(3);
    let host = start_ready(cfg);

    let (tx, slow) = crossbeam_channel::bounded(1);
    host.handle().submit(Request::Command {
        name: "slow".into(),
        args: String::new(),
        reply: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    });
    let mut victim = None;
    wait_for("a to get /slow", || {
        victim = recorded(&rec)
            .into_iter()
            .find(|f| f["type"] == "command_invoked")
            .and_then(|f| f["id"].as_str().map(String::from));
        victim.is_some()
    });
    let victim = victim.unwrap_or_default();

    // The thief's own command is answered by its right frame only: the
    // wrong frames before it left the request in the table.
    let mine = host.command("steal", &victim).expect("steal answered");
    assert_eq!(mine.display.as_deref(), Some("mine"));
    // a's request was not answered by the thief: it times out as a's.
    let slow = slow.recv_timeout(DEADLINE).expect("slow answered");
    assert_eq!(
        slow,
        Err(HostError::TimedOut {
            extension: "a".into(),
            request: "/slow".into(),
            limit: Duration::from_secs(3),
        })
    );
    host.shutdown();
    let log = log_of(&t, "thief");
    for dropped in [
        format!("dropped command_response: id {victim:?} is unknown, expired or already answered"),
        "dropped tool_result: id ".into(),
        "dropped event_intercept_response: id ".into(),
    ] {
        assert!(
            log.contains(&dropped),
            "no {dropped:?} in the thief's log:\n{log}"
        );
    }
    assert!(log.contains("expects a command_response"), "{log}");
}
