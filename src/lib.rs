//! zot-host: a small, synchronous host for zot extensions.
//!
//! Extensions are external programs that speak newline-delimited JSON
//! over stdin/stdout. [`Host`] discovers and starts them, keeps their
//! registries of slash commands and tools, routes requests, delivers
//! lifecycle events and runs interception chains from one loop, which the
//! thread whose call waits runs ([`Host::start`]; [`Host::start_threaded`]
//! gives it a thread of its own); per extension a reader thread (and a
//! writer once stdin fills).
//!
//! An embedding that runs as a doctest (`cargo test --doc`), with the
//! example weather tool from `fixtures/examples/weather` (Python 3):
//!
//! ```
//! use serde_json::json;
//! use zot_host::{Host, HostConfig, ToolOutcome, ToolRequest};
//!
//! let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
//! let home = std::env::temp_dir().join(format!("zot-doc-{}", std::process::id()));
//! let mut config = HostConfig::new(home, root.into());
//! config.ext_paths = vec![root.join("fixtures/examples/weather")]; // like `zot -e`
//! config.discover = false; // only ext_paths, like `zot --no-ext`
//! let host = Host::start(config)?;
//! assert_eq!(host.wait_ready(), ["weather"]);
//! let call = ToolRequest::new("weather", json!({"city": "Oslo"}));
//! // The tool_call event, every guard, then the tool (a built-in tool gets a verdict).
//! let ToolOutcome::Ran(result) = host.call_tool(call)? else { panic!("not an extension's") };
//! assert!(!result.is_error && result.content[0]["text"].as_str().unwrap().contains("Oslo"));
//! host.shutdown(); // every extension gets `shutdown`; nothing is left running
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

#[macro_use]
mod closed_set;
pub mod bundle;
mod config;
pub mod confine;
pub mod discovery;
mod engine;
mod host;
pub mod intercept;
// JSON-RPC for the MCP client and `zot mcp`: the CLI's, not an embedder's.
#[cfg(feature = "mcp")]
#[doc(hidden)]
pub mod jsonrpc;
pub mod log;
pub mod manifest;
pub mod order;
// Without the `mcp` feature an empty stand-in: no extension can be an MCP server.
#[cfg_attr(not(feature = "mcp"), path = "no_mcp.rs")]
mod mcp_client;
pub mod process;
pub mod protocol;
pub mod registry;
mod spawner;
pub mod tooldef;
pub mod toolresult;
pub mod trust;
mod types;
mod watchdog;

pub use config::{new_session_id, HostConfig, Timeouts, BUILTIN_TOOLS};
pub use discovery::Scope;
pub use host::{Host, HostHandle};
pub use intercept::{InterceptEvent, InterceptOutcome};
pub use protocol::EventPayload;
pub use types::{
    Action, BuiltinReply, BuiltinVerdict, CommandInfo, CommandOutcome, Exposure, ExtensionInfo,
    ExtensionState, HostError, HostEvent, InFlight, InterceptRequest, Level, NameConflict,
    NameKind, ReadyVia, ReloadReport, Reply, Request, Snapshot, Ticket, ToolInfo, ToolOutcome,
    ToolRequest, ToolResult,
};
