//! Upstream's structured, deferred and namespaced tools (SPEC 13.6) and
//! the `tool_prompt` action (SPEC 13.7), through every surface: the
//! library, `zot rpc`, `zot mcp` (raw and with the official Python and
//! TypeScript clients, which validate `structuredContent`), the session,
//! `zot ext check`, and a hosted MCP server written with the Python SDK.
//!
//! The extension is fixtures/structured/weather (its docstring lists its
//! tools and commands); it speaks the frames as upstream's Go SDK does.

// Some tests need the `mcp` or `author` feature; their helpers are unused without it.
#![cfg_attr(
    not(all(feature = "mcp", feature = "author")),
    allow(dead_code, unused_imports)
)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use zot_host::{Action, Exposure, HostError, HostEvent, ToolRequest};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn weather() -> PathBuf {
    repo().join("fixtures/structured/weather")
}

// ---- the library ----

#[test]
fn registrations_keep_upstream_fields_and_bad_ones_are_rejected() {
    let t = TempDir::new("structured-lib-list");
    let host = start(config(&t, &[weather()]));
    let snap = host.list().expect("list");
    let tool = |name: &str| {
        (snap.tools.iter().find(|t| t.name == name))
            .unwrap_or_else(|| panic!("no tool {name} in {:?}", snap.tools))
    };
    let w = tool("weather");
    assert_eq!(
        w.output_schema.as_ref().unwrap()["required"],
        json!(["city", "temperature"])
    );
    assert_eq!(w.namespace.as_deref(), Some("weather"));
    assert_eq!(w.namespace_description.as_deref(), Some("Weather lookups"));
    assert_eq!(
        w.namespace_instructions.as_deref(),
        Some("Ask for one city at a time.")
    );
    assert_eq!((w.exposure, w.active), (Exposure::Direct, true));
    // `deferred: true` alone, and `exposure: "deferred"`: not active.
    for name in ["forecast", "radar"] {
        assert_eq!(
            (tool(name).exposure, tool(name).active),
            (Exposure::Deferred, false)
        );
    }
    assert_eq!(tool("scripted").exposure, Exposure::Codemode);
    // An explicit exposure overrides the legacy flag.
    assert_eq!(
        (tool("modelonly").exposure, tool("modelonly").active),
        (Exposure::ModelOnly, true)
    );
    // Rejected registrations are not listed, and the log says why.
    for rejected in ["bad_output", "everywhere"] {
        assert!(
            snap.tools.iter().all(|t| t.name != rejected),
            "{rejected} registered"
        );
    }
    host.shutdown();
    let log = log_of(&t, "weather");
    assert!(
        log.contains("rejected tool \"bad_output\": `output_schema` must be a JSON object"),
        "{log}"
    );
    assert!(
        log.contains("rejected tool \"everywhere\": `exposure` \"everywhere\" is not one of direct, codemode, deferred, model-only"),
        "{log}"
    );
}

#[test]
fn structured_content_reaches_the_library_as_it_came() {
    let t = TempDir::new("structured-lib-call");
    let host = start(config(&t, &[weather()]));
    let o = host
        .call_tool(ToolRequest::new("weather", json!({"city": "Oslo"})))
        .expect("weather")
        .result();
    assert_eq!(
        o.structured_content,
        Some(json!({"city": "Oslo", "temperature": 21.0}))
    );
    assert!(o.declares_output && !o.is_error, "{o:?}");
    assert_eq!(
        o.content,
        vec![json!({"type": "text", "text": "Oslo: 21.0 C"})]
    );
    // Any JSON: an array too, from a tool without an output schema.
    let o = host
        .call_tool(ToolRequest::new("listing", json!({})))
        .expect("listing")
        .result();
    assert_eq!(o.structured_content, Some(json!([1, 2, 3])));
    assert!(!o.declares_output);
    let o = host
        .call_tool(ToolRequest::new("forgetful", json!({})))
        .expect("forgetful")
        .result();
    assert_eq!((o.structured_content, o.declares_output), (None, true));
    host.shutdown();
}

#[test]
fn deferred_tools_are_refused_until_a_tool_result_activates_them() {
    let t = TempDir::new("structured-lib-deferred");
    let host = start(config(&t, &[weather()]));
    let early = host.call_tool(ToolRequest::new("forecast", json!({})));
    assert_eq!(early, Err(HostError::InactiveTool("forecast".into())));
    assert!(early.unwrap_err().to_string().contains("activate_tools"));

    // Unknown and non-deferred names are ignored (logged); the rest count.
    let names = json!({"names": ["nope", "weather", "forecast", "radar"]});
    let o = host
        .call_tool(ToolRequest::new("loader", names))
        .expect("loader")
        .result();
    assert!(!o.is_error, "{o:?}");
    // The event comes before the result, so it is already waiting.
    let event = host
        .events()
        .try_iter()
        .find(|e| matches!(e, HostEvent::ToolsActivated { .. }));
    assert_eq!(
        event,
        Some(HostEvent::ToolsActivated {
            extension: "weather".into(),
            names: vec!["forecast".into(), "radar".into()],
        })
    );
    let o = host
        .call_tool(ToolRequest::new("forecast", json!({})))
        .expect("forecast once active")
        .result();
    assert_eq!(o.content[0]["text"], "forecast ran");
    let snap = host.list().expect("list");
    assert!(snap
        .tools
        .iter()
        .filter(|t| t.exposure == Exposure::Deferred)
        .all(|t| t.active));

    // Activating again, or only unknown names: no event.
    let again = json!({"names": ["forecast", "ghost"]});
    host.call_tool(ToolRequest::new("loader", again))
        .expect("loader again");
    assert!(
        host.events()
            .try_iter()
            .all(|e| !matches!(e, HostEvent::ToolsActivated { .. })),
        "an activation that changed nothing was announced"
    );
    host.shutdown();
    let log = log_of(&t, "weather");
    assert!(
        log.contains(
            "activate_tools: ignored \"nope\" (not a tool of this extension), \"weather\" (not deferred)"
        ),
        "{log}"
    );
    assert!(log.contains("activate_tools: ignored \"ghost\""), "{log}");
}

#[test]
fn a_structured_result_over_the_frame_limit_fails_at_once_and_the_host_goes_on() {
    let t = TempDir::new("structured-lib-huge");
    // Were the oversized result only dropped, the call would end with its
    // 60 s timeout, an error, not this result.
    let host = start(config(&t, &[weather()]));
    // 20 MiB of structured_content: the line is over the 16 MiB limit.
    let o = host
        .call_tool(ToolRequest::new("huge", json!({})))
        .expect("huge answers")
        .result();
    assert!(o.is_error, "{o:?}");
    let text = o.content[0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("the result of tool huge from extension weather was ")
            && text.ends_with("bytes, over the 16 MiB frame limit: dropped"),
        "{text}"
    );
    // Just under the limit passes whole.
    let o = host
        .call_tool(ToolRequest::new("huge", json!({"bytes": 15 << 20})))
        .expect("15 MiB")
        .result();
    let blob = o
        .structured_content
        .as_ref()
        .and_then(|s| s["blob"].as_str());
    assert_eq!(blob.map(str::len), Some(15 << 20));
    let o = host
        .call_tool(ToolRequest::new("weather", json!({"city": "Berlin"})))
        .expect("still works")
        .result();
    assert_eq!(o.structured_content.unwrap()["temperature"], 16.5);
    host.shutdown();
    assert!(log_of(&t, "weather").contains("-byte line: longer than 16777216 bytes"));
}

#[test]
fn tool_prompt_comes_back_as_it_came_and_a_bad_one_names_its_field() {
    let t = TempDir::new("structured-lib-prompt");
    let host = start(config(&t, &[weather()]));
    let o = host.command("brief", "and push").expect("brief");
    assert_eq!(o.action, Action::ToolPrompt);
    assert_eq!(o.prompt.as_deref(), Some("and push"));
    assert_eq!(o.tool_name.as_deref(), Some("weather"));
    assert_eq!(o.tool_args, Some(json!({"city": "Berlin"})));
    assert_eq!(o.error, None);
    for (command, why) in [
        ("noargs", "tool_prompt: missing object `tool_args`"),
        (
            "textargs",
            "tool_prompt: `tool_args` must be a JSON object, not a string",
        ),
    ] {
        let o = host.command(command, "").expect(command);
        assert_eq!(o.error.as_deref(), Some(why), "/{command}");
        assert_eq!(
            (o.action, &o.tool_args),
            (Action::Noop, &None),
            "/{command}"
        );
    }
    host.shutdown();
}

// ---- zot rpc ----

#[test]
fn rpc_lists_the_fields_passes_structured_content_and_announces_activation() {
    let t = TempDir::new("structured-rpc");
    let mut rpc = Rpc::start(&t, &[weather()]);
    let list = rpc.call("1", json!({"type": "list"}));
    let tools = list["data"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_default()
    };
    let w = tool("weather");
    assert_eq!(w["output_schema"]["type"], "object", "{w}");
    assert_eq!(
        (w["namespace"].as_str(), w["exposure"].as_str()),
        (Some("weather"), Some("direct"))
    );
    assert_eq!(w["active"], true);
    let f = tool("forecast");
    assert_eq!(
        (f["exposure"].as_str(), &f["active"]),
        (Some("deferred"), &json!(false)),
        "{f}"
    );
    assert_eq!(tool("modelonly")["exposure"], "model-only");

    let r = rpc.call(
        "2",
        json!({"type": "tool_call", "name": "weather", "args": {"city": "Berlin"}}),
    );
    assert_eq!(
        r["data"]["structured_content"],
        json!({"city": "Berlin", "temperature": 16.5})
    );
    let r = rpc.call("3", json!({"type": "tool_call", "name": "radar"}));
    assert_eq!(r["success"], false);
    assert!(
        r["error"]
            .as_str()
            .unwrap_or_default()
            .contains("deferred and not active"),
        "{r}"
    );

    let r = rpc.call(
        "4",
        json!({"type": "tool_call", "name": "loader", "args": {"names": ["radar"]}}),
    );
    assert_eq!(r["success"], true, "{r}");
    let event = rpc.until("tools_activated", |v| v["type"] == "tools_activated");
    assert_eq!(
        event,
        json!({"type": "tools_activated", "extension": "weather", "names": ["radar"]})
    );
    // Written before the loader's response.
    let at = |pred: &dyn Fn(&Value) -> bool| rpc.seen.iter().position(pred);
    let (event_at, response_at) = (
        at(&|v| v["type"] == "tools_activated"),
        at(&|v| v["type"] == "response" && v["id"] == "4"),
    );
    assert!(event_at < response_at, "{:?}", rpc.seen);
    let r = rpc.call("5", json!({"type": "tool_call", "name": "radar"}));
    assert_eq!(r["data"]["content"][0]["text"], "radar ran", "{r}");

    let r = rpc.call(
        "6",
        json!({"type": "command", "name": "brief", "args": "and then?"}),
    );
    let data = &r["data"];
    assert_eq!(data["action"], "tool_prompt", "{r}");
    assert_eq!(
        (data["tool_name"].as_str(), &data["tool_args"]),
        (Some("weather"), &json!({"city": "Berlin"}))
    );
    assert_eq!(data["prompt"], "and then?");
    let r = rpc.call("7", json!({"type": "command", "name": "noargs"}));
    assert_eq!(
        r["data"]["error"], "tool_prompt: missing object `tool_args`",
        "{r}"
    );

    let r = rpc.call("8", json!({"type": "tool_call", "name": "huge"}));
    assert_eq!(r["data"]["is_error"], true, "{r}");
    assert!(r["data"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .contains("16 MiB frame limit"));
    assert_eq!(rpc.call("9", json!({"type": "ping"}))["data"]["pong"], true);
}

// ---- zot mcp, raw ----

fn mcp_call(rpc: &mut Rpc, id: u64, method: &str, params: Value) -> Value {
    rpc.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    rpc.until(&format!("answer {id}"), |v| v["id"] == id)
}

fn listed(rpc: &mut Rpc, id: u64) -> Vec<Value> {
    let list = mcp_call(rpc, id, "tools/list", json!({}));
    list["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_maps_structured_output_and_hides_deferred_tools_until_activated() {
    let t = TempDir::new("structured-mcp");
    let mut rpc = Rpc::mcp(&t, &[weather()]);
    let tools = listed(&mut rpc, 1);
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        !names.contains(&"forecast") && !names.contains(&"radar"),
        "{names:?}"
    );
    assert!(
        names.contains(&"scripted") && names.contains(&"modelonly"),
        "{names:?}"
    );
    let w = tools
        .iter()
        .find(|t| t["name"] == "weather")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        w["outputSchema"]["properties"]["temperature"],
        json!({"type": "number"}),
        "{w}"
    );
    let plain = tools
        .iter()
        .find(|t| t["name"] == "listing")
        .cloned()
        .unwrap_or_default();
    assert!(plain.get("outputSchema").is_none(), "{plain}");

    let r = mcp_call(
        &mut rpc,
        2,
        "tools/call",
        json!({"name": "weather", "arguments": {"city": "Berlin"}}),
    );
    assert_eq!(
        r["result"]["structuredContent"],
        json!({"city": "Berlin", "temperature": 16.5}),
        "{r}"
    );
    assert_eq!(r["result"]["isError"], false);
    let r = mcp_call(&mut rpc, 3, "tools/call", json!({"name": "forgetful"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        r["result"]["content"][0]["text"],
        "tool forgetful declares an output_schema but returned no structured_content"
    );
    // No output schema: MCP carries only objects, the array stays out.
    let r = mcp_call(&mut rpc, 4, "tools/call", json!({"name": "listing"}));
    assert!(
        r["result"].get("structuredContent").is_none() && r["result"]["isError"] == false,
        "{r}"
    );
    let r = mcp_call(&mut rpc, 5, "tools/call", json!({"name": "forecast"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");

    let r = mcp_call(&mut rpc, 6, "tools/call", json!({"name": "loader"}));
    assert_eq!(r["result"]["isError"], false, "{r}");
    rpc.until("tools/list_changed", |v| {
        v["method"] == "notifications/tools/list_changed"
    });
    let names: Vec<String> = listed(&mut rpc, 7)
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    assert!(
        names.iter().any(|n| n == "forecast") && names.iter().any(|n| n == "radar"),
        "{names:?}"
    );

    let r = mcp_call(&mut rpc, 8, "tools/call", json!({"name": "huge"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .contains("16 MiB frame limit"));

    let p = mcp_call(
        &mut rpc,
        9,
        "prompts/get",
        json!({"name": "brief", "arguments": {"args": "and push"}}),
    );
    assert_eq!(
        p["result"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "and push"}}]),
        "{p}"
    );
    assert!(p["result"]["description"]
        .as_str()
        .unwrap_or_default()
        .contains("tool weather (not run here)"));
    let p = mcp_call(&mut rpc, 10, "prompts/get", json!({"name": "textargs"}));
    assert!(
        p["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("`tool_args`"),
        "{p}"
    );
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

// ---- zot mcp, the official clients ----

/// Runs a client script of fixtures/structured against `zot mcp -e weather`.
fn run_client(tag: &str, interpreter: &Path, script: &str) {
    let t = TempDir::new(tag);
    let args = json!([
        "mcp",
        "--no-ext",
        "--startup-timeout",
        "120",
        "--cwd",
        t.path(),
        "-e",
        weather()
    ]);
    let mut cmd = Command::new(interpreter);
    cmd.env("ZOT_HELLO_TIMEOUT", "120");
    let script_path = repo().join("fixtures/structured").join(script);
    let (status, out) = run_client_script(cmd, &script_path, &args, &t);
    let steps = [
        "outputSchema listed, deferred tools hidden",
        "structuredContent",
        "missing structured content is an error",
        "activated",
        "tool_prompt as a prompt",
    ];
    assert_client_passed(script, status, &out, &steps);
}

#[cfg(feature = "mcp")]
#[test]
fn python_sdk_client_validates_structured_content() {
    run_client(
        "structured-py",
        &mcp_deps().join("py1/bin/python"),
        "py_client.py",
    );
}

#[cfg(feature = "mcp")]
#[test]
fn typescript_sdk_client_validates_structured_content() {
    run_client("structured-ts", Path::new("node"), "ts_client.cjs");
}

// ---- a hosted MCP server ----

#[cfg(feature = "mcp")]
#[test]
fn a_hosted_mcp_servers_structured_tool_maps_to_output_schema_and_structured_content() {
    let t = TempDir::new("structured-hosted");
    let dir = t.join("structured-mcp");
    let script = repo().join("fixtures/structured/mcp_server.py");
    let manifest = json!({"name": "structured-mcp", "protocol": "mcp",
                          "exec": mcp_deps().join("py1/bin/python"), "args": [script]});
    write_manifest(&dir, &manifest);
    let mut cfg = config(&t, &[dir]);
    cfg.timeouts.hello = Duration::from_secs(120);
    let host = start(cfg);
    let snap = host.list().expect("list");
    let tool = snap.tools.iter().find(|t| t.name == "weather");
    let tool = tool.unwrap_or_else(|| panic!("no weather tool: {snap:?}"));
    let schema = tool
        .output_schema
        .as_ref()
        .expect("outputSchema became output_schema");
    assert_eq!(
        schema["properties"]["temperature"]["type"], "number",
        "{schema}"
    );
    let o = host
        .call_tool(ToolRequest::new("weather", json!({"city": "Berlin"})))
        .expect("weather")
        .result();
    assert_eq!(
        o.structured_content,
        Some(json!({"city": "Berlin", "temperature": 16.5})),
        "{o:?}"
    );
    assert!(o.declares_output && !o.is_error, "{o:?}");
    // The Python SDK writes a response's id before its result: a result
    // over the frame limit fails its call at once, not at the timeout.
    let o = host
        .call_tool(ToolRequest::new("huge", json!({})))
        .expect("huge answers")
        .result();
    assert!(o.is_error, "{o:?}");
    let text = o.content[0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("bytes, over the 16 MiB frame limit: dropped"),
        "{text}"
    );
    let o = host
        .call_tool(ToolRequest::new("weather", json!({"city": "Oslo"})))
        .expect("still works")
        .result();
    assert_eq!(o.structured_content.unwrap()["city"], "Oslo");
    host.shutdown();
}

// ---- the session ----

#[test]
fn the_session_marks_deferred_tools_and_runs_a_tool_prompt_with_its_result_first() {
    let t = TempDir::new("structured-session");
    let ext = weather();
    // Startup waits for the extension, however busy the machine.
    let args = [
        "--no-ext",
        "--startup-timeout",
        "120",
        "--hello-timeout",
        "120",
        "-e",
        ext.to_str().expect("utf-8"),
        "--agent-cmd",
        "cat",
    ];
    let input = "/tools\n/brief and push\n/textargs\n/call loader\n/tools\n";
    let (code, lines) = run_zot(&t, &args, input);
    assert_eq!(code, Some(0), "{lines:#?}");
    let forecast: Vec<&String> = lines
        .iter()
        .filter(|l| l.trim_start().starts_with("forecast()"))
        .collect();
    assert_eq!(forecast.len(), 2, "{lines:#?}");
    assert!(
        forecast[0].ends_with("[deferred: not active yet]"),
        "{forecast:?}"
    );
    assert!(
        !forecast[1].contains("deferred"),
        "still marked once activated: {forecast:?}"
    );
    let at = |text: &str| {
        lines
            .iter()
            .position(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no {text:?} in {lines:#?}"))
    };
    // The tool runs and its result is printed, then the turn: the agent
    // (`cat`) echoes what it got, the tool result in front of the prompt.
    let result = at("result: Berlin: 16.5 C");
    let structured = at(r#"structured: {"city":"Berlin","temperature":16.5}"#);
    let assistant = at(r#"assistant: Tool weather {"city":"Berlin"} returned:"#);
    assert!(result < structured && structured < assistant, "{lines:#?}");
    let echoed = &lines[assistant..];
    assert!(
        echoed.iter().any(|l| l.trim() == "Berlin: 16.5 C"),
        "{lines:#?}"
    );
    assert!(echoed.iter().any(|l| l.trim() == "and push"), "{lines:#?}");
    at("error: tool_prompt: `tool_args` must be a JSON object, not a string");
    at("tools activated by weather: forecast, radar");
}

// ---- zot ext check ----

#[cfg(feature = "author")]
#[test]
fn ext_check_shows_the_fields_and_fails_the_rejected_registrations() {
    let t = TempDir::new("structured-check");
    let ext = weather();
    let args = [
        "ext",
        "check",
        ext.to_str().expect("utf-8"),
        "--command",
        "brief",
        "x",
        "--command",
        "noargs",
        "",
    ];
    // The hello limit, however busy the machine.
    let out = zot()
        .args(args)
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "120")
        .output()
        .expect("run zot ext check");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = |needle: &str| {
        lines
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
    };
    assert!(
        line("tool weather").contains("namespace weather, an output schema"),
        "{text}"
    );
    assert!(
        line("tool forecast").contains("exposure deferred"),
        "{text}"
    );
    assert!(
        line("tool bad_output").contains("`output_schema` must be a JSON object: the host rejects"),
        "{text}"
    );
    assert!(
        line("tool everywhere").contains("`exposure` \"everywhere\" is not one of"),
        "{text}"
    );
    assert!(
        line("run /brief").contains("command_response tool_prompt: x"),
        "{text}"
    );
    assert!(
        line("run /noargs").contains("missing object `tool_args`"),
        "{text}"
    );
}
