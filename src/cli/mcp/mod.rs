//! `zot mcp`: the loaded extensions as an MCP server on stdio (docs/PROTOCOL.md#zot-mcp).
//!
//! stdin carries JSON-RPC requests and notifications, stdout nothing but
//! JSON-RPC messages, stderr diagnostics. Each line is read and written
//! as a `zot_host::internal::jsonrpc::Message`, the type the host's own MCP client
//! (`"protocol": "mcp"` extensions) uses. Three threads around the one
//! library `Host`: the stdin reader serves or submits each request
//! without waiting, the main thread runs the host loop (replies are
//! written from it as they come, out of order) and handles the host's
//! events after each, and one writer thread owns stdout.
//!
//! # Behaviour
//!
//! **What maps to what.**
//!
//! | zot | MCP |
//! |---|---|
//! | extension tools (built-in names `read write edit bash skill` are not served) | `tools/list`: `name`, `description`, `inputSchema` (the registered schema, `{"type":"object"}` when none) |
//! | the tool pipeline: `tool_call` event, every guard, then the tool | `tools/call {name, arguments}`: text blocks -> `{type:"text"}`, images -> `{type:"image", data, mimeType}`; `isError` when the tool failed or a guard blocked (one text block `blocked: <reason>`); a guard's `modified_args` is what the tool gets |
//! | an unknown tool or command | JSON-RPC error -32602; an extension that exits or times out gives a result with `isError: true` and the reason |
//! | slash commands | `prompts/list`, each with one optional argument `args` (the command's argument text) |
//! | running a command | `prompts/get {name, arguments: {args}}`: `prompt` and `insert` -> one user message, `display` -> one assistant message, `noop` / `open_panel` -> no message (the description says so); a command `error` -> JSON-RPC error -32603 with its text |
//! | notes (`notify`) | `notifications/message`, `logger` = the extension, `data` = the text, level info -> info, success -> notice, warn -> warning, error -> error |
//! | an extension registering late, exiting or crashing | `notifications/tools/list_changed` / `notifications/prompts/list_changed`, once per change, only for the list that changed |
//! | `session_start` | emitted to subscribers once, at the first request |
//!
//! **Protocol versions, both on one stream, decided per request.**
//! - Legacy handshake (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25):
//!   `initialize` answers with the client's version when it is one of
//!   these (else 2025-11-25), capabilities `tools {listChanged}`, `prompts
//!   {listChanged}`, `logging {}`, `serverInfo {name: "zot", version}`.
//!   Notes follow `logging/setLevel` (default: all); notes written before
//!   `notifications/initialized` wait for it (at most 100, the oldest
//!   dropped first and counted on stderr). List changes are plain
//!   notifications.
//! - Stateless 2026-07-28: `server/discover` lists every version above plus
//!   2026-07-28; a request whose `params._meta` names
//!   `io.modelcontextprotocol/protocolVersion` 2026-07-28 gets a result
//!   with `resultType: "complete"` and the server identity in
//!   `_meta["io.modelcontextprotocol/serverInfo"]`; list results (and
//!   discover) carry `ttlMs: 0` (the lists change whenever an extension
//!   comes or goes) and `cacheScope: "private"`. Another version there
//!   gets error -32022 with `data {supported, requested}`. A note goes out
//!   only while a request that opted in with
//!   `_meta["io.modelcontextprotocol/logLevel"]` is in flight, at or above
//!   that level. List changes reach a 2026 client only on a
//!   `subscriptions/listen` stream (acknowledged with
//!   `notifications/subscriptions/acknowledged`; each notification carries
//!   the listen request's id as `_meta["io.modelcontextprotocol/subscriptionId"]`);
//!   `notifications/cancelled` for the listen id ends it, and at shutdown
//!   the server answers the listen request.
//!
//! Requests run concurrently and may be answered out of order; those that
//! arrive before startup readiness wait for it, so the first `tools/list`
//! lists every extension that made it in time. Everything one extension
//! writes reaches the client in the order it wrote it: a note written
//! before a tool's result arrives before the result. `notifications/cancelled
//! {requestId}` means that request is never answered (a late answer is
//! dropped); its id stays taken until the extension answers or the call
//! times out, so a new request reusing it meanwhile gets -32600 rather
//! than the old answer. Ids come back exactly as they were sent: an
//! integer of any size (`123456789012345678901234567890`) stays that
//! integer. `tools/call` of a built-in tool name (`bash`, `read`...) is
//! -32602 before the pipeline runs: no subscriber or guard sees it. Bad input: not JSON -> -32700 with id null; not a request or
//! notification object (a batch array included) -> -32600; a request
//! whose id is that of a request still in flight or of an open listen
//! stream -> -32600 (the first is still answered); a 65th listen stream
//! open at once -> -32600 (each costs a notification per list change); an unknown method -> -32601; bad params -> -32602;
//! the stream always goes on.
//! At most 256 requests are served at once: more wait, in order, in a
//! queue of at most 16 MiB (their lines) and start as earlier ones are
//! answered, while notifications, `ping` and cancellations are always
//! handled at once (a cancelled waiting request leaves the queue and is
//! never answered); only a request that would overflow the queue is
//! answered at once with error -32000 (`too many requests waiting`). A client
//! that stops reading stops being read once 8 MiB of answers wait. Notes
//! (`notifications/message`) that find 8 MiB already waiting for such a
//! client are dropped, never answers: stderr says so when it first
//! happens and gives the number dropped at exit. Stdin EOF,
//! SIGTERM, SIGINT and a stdout that can no longer be written (the client
//! closed it; stderr says so) shut down gracefully: requests already read are
//! answered first (a second signal skips that wait and fails them), then
//! exit 0 with no extension left running.

mod era;
mod mapping;
mod methods;
mod server;

use super::common::{CliError, HostOpts};
use server::{diagnostic, Server};
use std::io::{self, Write};
use std::time::Duration;
use zot_host::internal::jsonrpc::{self, Message};
use zot_host::internal::protocol::{Line, LineReader, MAX_LINE};
use zot_host::Request;

/// `zot mcp --help`.
pub const HELP: &str = "\
usage: zot mcp [-e PATH]... [--no-ext] [--cwd DIR] [--tool-timeout SECS] [--command-timeout SECS]
               [--startup-timeout SECS] [--hello-timeout SECS] [--provider NAME] [--model NAME]
               [--session-id ID] [--confine] [--trust-project]

Serves the loaded extensions to an MCP client over stdio: their tools
as MCP tools (through the guards), their commands as prompts, their
notes as log messages. Speaks the initialize handshake (2024-11-05 to
2025-11-25) and the stateless 2026-07-28 revision on the same stream.
Put it in an MCP client's server configuration, e.g.
  claude mcp add zot -- zot mcp
EOF on stdin, Ctrl-C and SIGTERM shut down gracefully: requests already
read are answered first (a second Ctrl-C skips that wait).
";

/// Runs the MCP server until EOF or a signal.
pub fn run(opts: HostOpts) -> Result<i32, CliError> {
    // An MCP client shows no panels and runs no built-ins for extensions
    // (docs/PROTOCOL.md#interactive-tools, docs/PROTOCOL.md#calls-from-extensions).
    // No channel of its own: its main thread only waits for events.
    let host = super::common::start_host(&opts, |c| {
        #[cfg(feature = "ext-calls")]
        {
            c.runs_builtins = false;
        }
        #[cfg(feature = "panels")]
        {
            c.interactive_tools = false;
        }
        super::common::journal_origin(c, "mcp");
    })?;
    let (wake_tx, wake) = crossbeam_channel::bounded::<()>(1);
    let server = Server::new(
        host.events().clone(),
        host.handle(),
        wake_tx,
        methods::request,
    );
    let writer = {
        let server = server.clone();
        std::thread::Builder::new()
            .name("zot-mcp-stdout".into())
            .spawn(move || {
                let mut stdout = io::stdout().lock();
                while wake.recv().is_ok() {
                    let (out, end) = server.take_output();
                    let failed = stdout.write_all(&out).and_then(|()| stdout.flush());
                    server.written(out.len());
                    if failed.is_err() {
                        // The client closed it: nobody can read answers
                        // any more, so stop as on EOF.
                        diagnostic("stdout is closed, shutting down");
                        server.submit(Request::Shutdown {
                            reply: Box::new(|_| {}),
                        });
                        break;
                    }
                    if end {
                        break;
                    }
                }
            })
            .map_err(|e| CliError::Failed(format!("cannot start the output thread: {e}")))?
    };

    // Through the server: behind any request still waiting for startup
    // readiness, so those are served before the stop.
    let graceful = server.clone();
    let stop = move |r| {
        graceful.end_session();
        graceful.after_waiting(r)
    };
    super::common::stop_on_signal("zot mcp", stop, host.handle())?;

    let reader = {
        let server = server.clone();
        std::thread::Builder::new()
            .name("zot-mcp-stdin".into())
            .spawn(move || read_messages(&server))
            .map_err(|e| CliError::Failed(format!("cannot start the input thread: {e}")))?
    };

    // Run the host loop, handling events as they come, until it ends:
    // only after the graceful stop, so every reply before it is written.
    while !server.pump() {
        host.poll(Duration::MAX);
    }
    server.close_listens();
    server.report_dropped();
    drop(host);
    drop(reader); // blocked on stdin at worst; the process exits anyway
    server.close();
    let _ = writer.join();
    Ok(0)
}

fn read_messages(server: &Server) {
    let mut lines = LineReader::new(io::stdin().lock(), MAX_LINE);
    loop {
        // A client that does not read stdout is not read either.
        server.wait_for_room();
        let line = match lines.next_line() {
            Ok(Some(Line::Text(line))) => line,
            Ok(Some(Line::TooLong(n))) => {
                let error = jsonrpc::RpcError::new(
                    jsonrpc::INVALID_REQUEST,
                    format!("message of {n} bytes is longer than {MAX_LINE}"),
                );
                server.respond(&jsonrpc::Id::null(), Err(error));
                continue;
            }
            Ok(None) | Err(_) => break,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match Message::parse(&line) {
            // One the host serves takes an in-flight slot or waits for one.
            Ok(Message::Request(r)) if methods::takes_slot(&r.method) => {
                if server.admit(&r.id, line)
                    && !methods::request(server, r.id.clone(), &r.method, r.params)
                {
                    server.unused(&r.id);
                }
            }
            Ok(Message::Request(r)) => {
                methods::request(server, r.id, &r.method, r.params);
            }
            Ok(Message::Notification(n)) => methods::notification(server, &n.method, n.request_id),
            // A response to a request of ours: we send none.
            Ok(Message::Response(_)) => {}
            Err(invalid) => {
                if let Some(id) = &invalid.reply_to {
                    server.respond(id, Err(invalid.error()));
                }
            }
        }
    }
    // EOF: the graceful stop, as for a signal.
    server.end_session();
    server.after_waiting(Request::Shutdown {
        reply: Box::new(|_| {}),
    });
}
