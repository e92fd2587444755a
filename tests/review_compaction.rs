//! Library behaviour the other tests do not pin down and a
//! restructuring of the engine could change.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;
use zot_host::{HostError, ToolRequest};

/// A timed-out command or tool is logged naming the frame the extension
/// owes (`command_response` / `tool_result`): what its author must send.
#[test]
fn a_timeout_is_logged_naming_the_frame_the_extension_owes() {
    let t = TempDir::new("review-timeout-log");
    let slow = ext_dir(
        &t.join("slow"),
        "slow",
        json!({"register": [command("wait"), tool("stall")],
               "commands": {"wait": {"hang": true}},
               "tools": {"stall": {"hang": true}}}),
    );
    let mut cfg = config(&t, &[slow]);
    cfg.timeouts.command = Duration::from_secs(1);
    cfg.timeouts.tool = Duration::from_secs(1);
    let host = start_ready(cfg);

    let command = host.command("wait", "");
    assert!(
        matches!(&command, Err(HostError::TimedOut { request, .. }) if request == "/wait"),
        "{command:?}"
    );
    let call = ToolRequest {
        name: "stall".into(),
        args: json!({}),
        tool_id: None,
    };
    let tool = host.call_tool_direct(call);
    assert!(
        matches!(&tool, Err(HostError::TimedOut { request, .. }) if request == "tool stall"),
        "{tool:?}"
    );
    // Logged before the reply was sent: the log is complete here.
    let log = log_of(&t, "slow");
    for line in [
        "no command_response for /wait within 1 s",
        "no tool_result for stall within 1 s",
    ] {
        assert!(log.contains(line), "no {line:?} in the log:\n{log}");
    }
    host.shutdown();
}
