//! What the host knows of MCP servers in a build without the `mcp`
//! feature: nothing can be one. The types are empty, so no value of
//! them exists and every method is unreachable; they only keep the
//! engine's code the same in both builds.

use crate::log::ExtLog;
use crate::wire::protocol::{ExtFrame, HostFrame};
use std::time::Instant;

/// How an MCP server would be run: never constructed in this build.
pub(crate) enum McpOptions {}

/// The MCP client: never constructed in this build.
pub(crate) enum McpClient {}

impl McpClient {
    pub fn new(opts: McpOptions, _log: ExtLog, _now: Instant) -> McpClient {
        match opts {}
    }

    pub fn take_lines(&mut self) -> Vec<u8> {
        match *self {}
    }

    pub fn take_frames(&mut self) -> Vec<ExtFrame> {
        match *self {}
    }

    pub fn take_failure(&mut self) -> Option<String> {
        match *self {}
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        match *self {}
    }

    pub fn on_deadline(&mut self, _now: Instant) {
        match *self {}
    }

    pub fn on_line(&mut self, _line: &[u8], _now: Instant) {
        match *self {}
    }

    pub fn on_too_long(&mut self, _len: usize, _head: &[u8], _now: Instant) {
        match *self {}
    }

    pub fn on_host_frame(&mut self, _frame: &HostFrame, _now: Instant) {
        match *self {}
    }
}
