//! What travels between the host and an extension: the frames and the
//! line reader (`protocol`), tool definitions and result blocks
//! (`tooldef`, `toolresult`), the names extensions register
//! (`registry`), panels' frames (`panels`, with the `panels` feature),
//! and for `"protocol": "mcp"` extensions JSON-RPC (`jsonrpc`) and the
//! client that turns it into frames (`mcp_client`).
//! Nothing here does I/O.

// JSON-RPC for the MCP client and `zot mcp`: the CLI's, not an embedder's.
#[cfg(feature = "mcp")]
pub(crate) mod jsonrpc;
#[cfg(feature = "mcp")]
pub(crate) mod mcp_client;
#[cfg(feature = "panels")]
pub(crate) mod panels;
pub(crate) mod protocol;
pub(crate) mod registry;
pub(crate) mod tooldef;
pub(crate) mod toolresult;
