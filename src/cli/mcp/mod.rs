//! `zot mcp`: the loaded extensions as an MCP server on stdio (SPEC 9).
//!
//! stdin carries JSON-RPC requests and notifications, stdout nothing but
//! JSON-RPC messages, stderr diagnostics. Three threads around the one
//! library `Host`, as in `zot rpc`: the stdin reader serves or submits
//! each request without waiting, replies are written from the host loop
//! as they come (out of order), the main thread handles the host's
//! events, and one writer thread owns stdout.

mod era;
mod jsonrpc;
mod mapping;
mod methods;
mod server;

use super::{CliError, HostOpts};
use crossbeam_channel::Select;
use jsonrpc::Incoming;
use server::Server;
use std::io::{self, Write};
use zot_host::protocol::{Line, LineReader, MAX_LINE};
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
    // (SPEC 13.3, 13.4).
    let host = super::start_host(&opts, |c| {
        c.runs_builtins = false;
        c.interactive_tools = false;
    })?;
    let (wake_tx, wake) = crossbeam_channel::bounded::<()>(1);
    let server = Server::new(host.events().clone(), host.handle(), wake_tx);
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
        graceful.submit(r)
    };
    super::signals::stop_on_signal("zot mcp", stop, host.handle())?;

    let events = host.events().clone();
    let reader = {
        let server = server.clone();
        std::thread::Builder::new()
            .name("zot-mcp-stdin".into())
            .spawn(move || read_messages(&server))
            .map_err(|e| CliError::Failed(format!("cannot start the input thread: {e}")))?
    };

    // Handle events as they come until the host loop ends: it ends only
    // after the graceful stop, so every reply before it is written.
    let mut select = Select::new();
    select.recv(&events);
    while !server.pump() {
        select.ready();
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
        match jsonrpc::classify(&line) {
            Incoming::Request { id, method, params } => {
                methods::request(server, id, &method, params)
            }
            Incoming::Notification { method, request_id } => {
                methods::notification(server, &method, request_id)
            }
            Incoming::Response => {}
            Incoming::Invalid { id, error } => server.respond(&id, Err(error)),
        }
    }
    // EOF: the graceful stop, as for a signal.
    server.end_session();
    server.submit(Request::Shutdown {
        reply: Box::new(|_| {}),
    });
}

/// One line on stderr; a closed stderr is no reason to stop serving.
pub fn diagnostic(message: &str) {
    let _ = writeln!(io::stderr(), "zot mcp: {message}");
}
