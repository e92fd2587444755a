//! What the host knows of MCP servers in a build without the `mcp`
//! feature: nothing can be one. The types are empty, so no value of
//! them exists and every method is unreachable; they only keep the
//! process layer's signatures the same in both builds.

use crate::log::ExtLog;
use crate::process::{InboundMsg, OutChunk};
use crossbeam_channel::Sender;
use std::io;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// How an MCP server would be run: never constructed in this build.
pub(crate) enum McpOptions {}

/// The MCP translator: never constructed in this build.
pub(crate) enum Adapter {}

pub(crate) fn start(
    _key: u64,
    opts: McpOptions,
    _log: ExtLog,
    _inbound: Sender<InboundMsg>,
    _stdin: Sender<OutChunk>,
    _queued: Arc<AtomicUsize>,
) -> io::Result<Arc<Adapter>> {
    match opts {}
}

impl Adapter {
    pub fn stdin_backlogged(&self) -> bool {
        match *self {}
    }

    pub fn close_stdin(&self) {
        match *self {}
    }

    pub fn on_server_line(&self, _line: &[u8]) -> bool {
        match *self {}
    }

    pub fn on_too_long(&self, _len: usize, _head: &[u8]) {
        match *self {}
    }

    pub fn on_host_chunk(&self, _chunk: &[u8]) {
        match *self {}
    }
}
