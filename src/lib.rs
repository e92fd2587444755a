//! zot-host: a small, synchronous host for zot extensions.
//!
//! Extensions are external programs that speak newline-delimited JSON
//! over stdin/stdout. [`Host`] discovers and starts them, keeps their
//! registries of slash commands and tools, routes requests, delivers
//! lifecycle events and runs interception chains, all from one loop
//! thread; per extension a reader thread (and a writer once stdin fills).
//!
//! ```no_run
//! use zot_host::{Host, HostConfig};
//! let host = Host::start(HostConfig::new("/tmp/zot".into(), ".".into()))?;
//! host.wait_ready();
//! let outcome = host.command("hello", "world");
//! host.shutdown();
//! # Ok::<(), std::io::Error>(())
//! ```

#![warn(missing_docs)]

pub mod bundle;
mod config;
pub mod confine;
pub mod discovery;
mod engine;
mod host;
pub mod intercept;
pub mod log;
pub mod manifest;
// Without the `mcp` feature an empty stand-in: no extension can be an MCP server.
#[cfg_attr(not(feature = "mcp"), path = "no_mcp.rs")]
mod mcp_client;
pub mod process;
pub mod protocol;
pub mod registry;
pub mod tooldef;
pub mod toolresult;
pub mod trust;
mod types;
mod watchdog;

pub use config::{new_session_id, HostConfig, Timeouts, BUILTIN_TOOLS};
pub use host::{Host, HostHandle};
pub use intercept::InterceptOutcome;
pub use protocol::EventPayload;
pub use types::{
    BuiltinReply, CommandInfo, CommandOutcome, Exposure, ExtensionInfo, HostError, HostEvent,
    InFlight, InterceptRequest, NameConflict, ReloadReport, Reply, Request, Snapshot, Ticket,
    ToolInfo, ToolOutcome, ToolRequest,
};
