//! MCP servers (docs/PROTOCOL.md#mcp-servers): the loop drives each one's client. It hands
//! the client the server's lines as it read them, the host's
//! frames as values (`Ext::send`) and the time (its deadlines are the
//! loop's); what the client makes is acted on here, on the loop thread.

use super::ext::{Phase, Stage};
use super::Engine;
use crate::wire::mcp_client::McpClient;
use std::time::Instant;

impl Engine {
    fn mcp(&mut self, idx: usize) -> Option<&mut McpClient> {
        match &mut self.exts[idx].phase {
            Phase::Running(run) => run.mcp.as_deref_mut(),
            Phase::Spawning | Phase::Gone { .. } => None,
        }
    }

    /// A line from MCP server `idx`.
    pub(super) fn mcp_line(&mut self, idx: usize, line: &[u8], now: Instant) {
        if let Some(client) = self.mcp(idx) {
            client.on_line(line, now);
        }
        self.mcp_output(idx, now);
    }

    /// A line from MCP server `idx` too long to read: `len` bytes, `head` its start.
    pub(super) fn mcp_too_long(&mut self, idx: usize, len: usize, head: &[u8], now: Instant) {
        if let Some(client) = self.mcp(idx) {
            client.on_too_long(len, head, now);
        }
        self.mcp_output(idx, now);
    }

    /// MCP server `idx`'s deadlines that passed, and what its client
    /// made meanwhile (its answers to the host's frames).
    pub(super) fn tick_mcp(&mut self, idx: usize, now: Instant) {
        let Some(client) = self.mcp(idx) else {
            return;
        };
        if client.next_deadline().is_some_and(|at| at <= now) {
            client.on_deadline(now);
            self.mcp_output(idx, now);
        }
    }

    /// Acts on what MCP server `idx`'s client made: lines for the
    /// server's stdin, frames as if the server had sent them, a failed
    /// handshake. Acting may make more (the `hello_ack` for its `hello`).
    pub(super) fn mcp_output(&mut self, idx: usize, now: Instant) {
        while let Some(client) = self.mcp(idx) {
            let (lines, frames) = (client.take_lines(), client.take_frames());
            let failed = client.take_failure();
            if lines.is_empty() && frames.is_empty() && failed.is_none() {
                return;
            }
            self.exts[idx].send_line(&lines);
            for frame in frames {
                self.frame(idx, frame, now);
            }
            if let Some(why) = failed {
                if matches!(self.exts[idx].stage(), Some(Stage::AwaitingHello { .. })) {
                    self.fail(idx, why, now);
                }
            }
        }
    }
}
