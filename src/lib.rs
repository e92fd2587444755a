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
//!
//! [`order`] handles pipelined replies in their place among the events.
//! The `zot` binary's own building blocks (frames, processes, discovery,
//! trust...) sit in a hidden `internal` module: not part of this API.

#![warn(missing_docs)]

#[macro_use]
mod closed_set;
mod bundle;
mod config;
mod confine;
mod discovery;
mod engine;
mod host;
mod intercept;
// JSON-RPC for the MCP client and `zot mcp`: the CLI's, not an embedder's.
#[cfg(feature = "mcp")]
mod jsonrpc;
mod log;
mod manifest;
pub mod order;
// Without the `mcp` feature an empty stand-in: no extension can be an MCP server.
#[cfg_attr(not(feature = "mcp"), path = "no_mcp.rs")]
mod mcp_client;
mod process;
mod protocol;
mod registry;
mod spawner;
mod tooldef;
mod toolresult;
mod trust;
mod types;
mod watchdog;

pub use config::{new_session_id, HostConfig, Timeouts, BUILTIN_TOOLS};
pub use discovery::Scope;
pub use host::{Host, HostHandle};
pub use intercept::{InterceptEvent, InterceptOutcome};
pub use protocol::{EventPayload, OpenPanel, Panel, PanelKey};
pub use types::{
    Action, BuiltinReply, BuiltinVerdict, CommandInfo, CommandOutcome, Exposure, ExtensionInfo,
    ExtensionState, HostError, HostEvent, InFlight, InterceptRequest, Level, NameConflict,
    NameKind, ReadyVia, ReloadReport, Reply, Request, Snapshot, Ticket, ToolInfo, ToolOutcome,
    ToolRequest, ToolResult,
};

/// What the `zot` binary (`src/cli`, a module of `src/main.rs`) uses
/// beyond the embedder's API above: the building blocks of its
/// surfaces. Not a stable interface; hidden from the documentation.
#[doc(hidden)]
pub mod internal {
    /// Bundles: skills and themes (SPEC 14.6).
    pub mod bundle {
        pub use crate::bundle::*;
    }
    /// Landlock confinement (SPEC 16).
    pub mod confine {
        pub use crate::confine::*;
    }
    /// Where extensions live and which run (SPEC 4, 3.1).
    pub mod discovery {
        pub use crate::discovery::*;
    }
    /// JSON-RPC 2.0 messages, for `zot mcp`.
    #[cfg(feature = "mcp")]
    pub mod jsonrpc {
        pub use crate::jsonrpc::*;
    }
    /// Per-extension logs and text made safe for a terminal.
    pub mod log {
        pub use crate::log::*;
    }
    /// `extension.json` (SPEC 5).
    pub mod manifest {
        pub use crate::manifest::*;
    }
    /// Extension processes: spawning, groups, signals.
    pub mod process {
        pub use crate::process::*;
    }
    /// Frames and lines of the wire protocol (SPEC 6-7, 13-14).
    pub mod protocol {
        pub use crate::protocol::*;
    }
    /// Name registries and their bounds (SPEC 3.7, 9).
    pub mod registry {
        pub use crate::registry::*;
    }
    /// `register_tool`'s fields (SPEC 13.6-13.7).
    pub mod tooldef {
        pub use crate::tooldef::*;
    }
    /// Tool result blocks.
    pub mod toolresult {
        pub use crate::toolresult::*;
    }
    /// Project trust (SPEC 15).
    pub mod trust {
        pub use crate::trust::*;
    }
}
