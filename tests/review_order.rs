//! SPEC 3.17: a note an extension writes AFTER its
//! answer is shown after that answer, in the session and in `zot rpc`,
//! even when both arrive in one read (fixtures/order/after.py).

mod common;

use common::*;
use serde_json::json;
use std::path::PathBuf;

fn order_ext(t: &TempDir) -> PathBuf {
    let dir = t.join("order");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let exec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/order/after.py");
    let manifest = json!({"name": "order", "version": "1.0.0", "exec": exec});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    dir
}

#[test]
fn a_note_written_after_the_answer_prints_after_it_in_the_session() {
    let t = TempDir::new("order-after-session");
    let e = order_ext(&t).display().to_string();
    let input = "/x\n".repeat(30);
    let (code, lines) = run_zot(&t, &["--no-ext", "-e", &e], &input);
    assert_eq!(code, Some(0), "{lines:?}");
    let (mut notes, mut answers) = (0, 0);
    for line in &lines {
        if line.starts_with("[order] info: after") {
            notes += 1;
            assert!(
                answers >= notes,
                "note before the answer it followed: {lines:?}"
            );
        } else if line.starts_with("[/x] answer") {
            answers += 1;
        }
    }
    assert_eq!((notes, answers), (30, 30), "{lines:?}");
}

#[test]
fn a_note_written_after_the_answer_comes_after_it_in_rpc() {
    let t = TempDir::new("order-after-rpc");
    let ext = order_ext(&t);
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready event", |v| v["type"] == "ready");
    for i in 0..30 {
        rpc.call(&format!("s{i}"), json!({"type": "command", "name": "x"}));
    }
    for i in 0..30 {
        rpc.send(json!({"type": "command", "name": "x", "id": format!("c{i}")}));
    }
    for i in 0..30 {
        rpc.response(&format!("c{i}"));
    }
    rpc.send(json!({"type": "shutdown", "id": "end"}));
    rpc.response("end");
    let (mut notes, mut answers) = (0, 0);
    for v in &rpc.seen {
        if v["type"] == "notify" {
            notes += 1;
            assert!(
                answers >= notes,
                "note {} came before the answer it followed",
                v["message"]
            );
        } else if v["type"] == "response" && v["command"] == "command" {
            answers += 1;
        }
    }
    assert_eq!((notes, answers), (60, 60));
}
