//! zot-host: a small, synchronous host for zot extensions.
//!
//! Extensions are external programs that speak newline-delimited JSON
//! over stdin/stdout. [`Host`] discovers and starts them, keeps their
//! registries of slash commands and tools, routes requests, delivers
//! lifecycle events and runs interception chains from one loop, which the
//! thread whose call waits runs ([`Host::start`]; [`Host::start_threaded`]
//! gives it a thread of its own). Per extension a reader thread parses
//! its stdout into frames and a writer thread feeds its stdin, through
//! channels the loop selects on, with the next deadline as its timeout.
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
//! assert!(!result.is_error && result.content[0].text().is_some_and(|t| t.contains("Oslo")));
//! host.shutdown(); // every extension gets `shutdown`; nothing is left running
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`order`] handles pipelined replies in their place among the events.
//! Every request answers `Result<_, `[`HostError`]`>`, the one error type
//! of this API; starting fails only when the system refuses a thread
//! ([`std::io::Error`]). Closed sets of names are enums ([`ExtensionState`],
//! [`Scope`], [`Action`], [`Level`], [`InterceptEvent`]...).
//! The `zot` binary's own building blocks (frames, processes, discovery,
//! trust...) sit in a hidden `internal` module: not part of this API.

#![warn(missing_docs)]

// The layers, each file importing only from the layers below it (and
// `.ci/check-imports` failing on any circle): the embedder's API
// (`host`, `order`, the journal), the loop (`engine/`, with `intercept`),
// what crosses between them (`types`, `config`), then extensions on disk
// (`ext/`), their processes (`process/`), the wire (`wire/`), and at the
// bottom the logs and text for people (`log`) and `sys`, the only
// module with `unsafe`.
mod build;
#[macro_use]
mod closed_set;
mod config;
mod engine;
mod ext;
mod host;
mod intercept;
#[cfg(feature = "journal")]
pub mod journal;
mod log;
pub mod order;
mod process;
#[cfg(feature = "journal")]
mod recovery;
mod sys;
mod types;
mod wire;

pub use config::{new_session_id, HostConfig, Timeouts, BUILTIN_TOOLS};
pub use ext::discovery::Scope;
pub use host::{Host, HostHandle};
pub use intercept::{InterceptEvent, InterceptOutcome};
#[cfg(feature = "journal")]
pub use journal::InterruptedCall;
#[cfg(feature = "ext-calls")]
pub use types::BuiltinReply;
#[cfg(feature = "tool-extras")]
pub use types::Exposure;
pub use types::{
    Action, BuiltinVerdict, CommandInfo, CommandOutcome, ExtensionInfo, ExtensionState, HostError,
    HostEvent, InFlight, InterceptRequest, Level, NameConflict, NameKind, ReadyVia, ReloadReport,
    Reply, Request, Snapshot, Ticket, ToolInfo, ToolOutcome, ToolRequest, ToolResult,
};
#[cfg(feature = "journal")]
pub use types::{ReconcileState, Replay};
#[cfg(feature = "panels")]
pub use wire::panels::{OpenPanel, Panel, PanelKey};
pub use wire::protocol::EventPayload;
pub use wire::toolresult::Content;

/// What the `zot` binary (`src/cli`, a module of `src/main.rs`), the
/// tests and the benchmarks use beyond the embedder's API above: the
/// building blocks of its surfaces. Each submodule lists exactly the
/// items used; the rest of each module is crate-private. Not a stable
/// interface; hidden from the documentation.
#[doc(hidden)]
pub mod internal {
    /// Bundles: skills and themes (docs/PROTOCOL.md#bundles).
    #[cfg(feature = "bundles")]
    pub mod bundle {
        pub use crate::ext::bundle::Provides;
    }
    /// What a build without a feature says when asked for it.
    pub mod build {
        pub use crate::build::needs_feature;
    }
    /// Landlock confinement (without the `confine` feature: refused).
    #[cfg(any(feature = "confine", feature = "author"))]
    pub mod confine {
        pub use crate::process::confine::{kernel_abi, Confinement, Places, NET_ABI};
    }
    /// Where extensions live and which run (docs/PROTOCOL.md#discovery).
    pub mod discovery {
        pub use crate::ext::discovery::{
            discover, discover_with, global_dir, logs_dir, project_dir, scan, trust_notices,
            zot_home, Found, Status,
        };
    }
    /// JSON-RPC 2.0 messages, for `zot mcp`.
    #[cfg(feature = "mcp")]
    pub mod jsonrpc {
        pub use crate::wire::jsonrpc::{
            Id, Invalid, Message, Notification, Request, Response, RpcError, INTERNAL_ERROR,
            INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, SERVER_BUSY,
            UNSUPPORTED_PROTOCOL_VERSION,
        };
    }
    /// Per-extension logs and text made safe for a terminal.
    pub mod log {
        pub use crate::log::{inert, log_path, timestamp};
    }
    /// `extension.json` (docs/PROTOCOL.md#manifest).
    pub mod manifest {
        #[cfg(any(feature = "confine", feature = "author"))]
        pub use crate::ext::manifest::Permissions;
        pub use crate::ext::manifest::{
            read_file, strip_bom, valid_name, InvalidManifest, Manifest, ManifestError, Protocol,
            MANIFEST_FILE,
        };
    }
    /// Extension processes: spawning, groups, signals.
    pub mod process {
        pub use crate::process::{
            describe_status, end_group, exit, group_alive, read_lines, signal_group, spawn_group,
        };
    }
    /// Frames and lines of the wire protocol (docs/PROTOCOL.md#wire-format).
    pub mod protocol {
        pub use crate::wire::protocol::{
            event_payload, field_twice, frame_head, parse_ext_frame, parse_json, CommandResponse,
            ExtFrame, HostFrame, Line, LineReader, ToolExtras, EVENT_NAMES, HOST_CAPABILITIES,
            MAX_LINE, PROTOCOL_VERSION,
        };
    }
    /// Name registries and their bounds (docs/PROTOCOL.md#names-and-precedence,
    /// docs/PROTOCOL.md#limits-and-bounds).
    pub mod registry {
        pub use crate::wire::registry::{
            footprint, same_command, valid_name, MAX_NAMES, MAX_NAME_BYTES,
        };
    }
    /// `register_tool`'s fields
    /// (docs/PROTOCOL.md#structured-and-deferred-tools, docs/PROTOCOL.md#commands-and-actions).
    pub mod tooldef {
        pub use crate::wire::tooldef::tool_info;
        #[cfg(feature = "tool-extras")]
        pub use crate::wire::tooldef::tool_prompt_fields;
    }
    /// Tool result blocks.
    pub mod toolresult {
        pub use crate::wire::toolresult::{is_empty_text, map_content, Block};
    }
    /// Raw libc calls std has no safe form of.
    pub mod sys {
        pub use crate::sys::{process_exists, terminal_size};
    }
    /// Project trust (docs/PROTOCOL.md#trust).
    pub mod trust {
        pub use crate::ext::trust::{
            entry_key, update, Binding, Entry, Record, Snapshot, Untrusted,
        };
    }
    /// The host of a CLI surface (the session, `zot rpc`, `zot mcp`):
    /// its main thread runs the loop while it waits on its own channel,
    /// which the loop selects on with everything else.
    pub mod surface {
        use crate::Host;
        use crossbeam_channel::{Receiver, RecvError};
        use std::time::Instant;

        /// An inline host that only this thread drives; other threads'
        /// calls (the stdin reader's, the signal handler's) only wait.
        pub fn start(config: crate::HostConfig) -> std::io::Result<Host> {
            Host::start_owned(config)
        }

        /// Runs the loop on this thread until a message on `extra` (or
        /// its disconnection), a new host event, `deadline` or the end of
        /// the host; returns the message.
        pub fn poll_with<T>(
            host: &Host,
            extra: &Receiver<T>,
            deadline: Option<Instant>,
        ) -> Option<Result<T, RecvError>> {
            host.poll_with(extra, deadline)
        }
    }
}
