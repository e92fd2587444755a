//! Upstream's optional tool fields on a `tool_result`
//! (docs/PROTOCOL.md#structured-and-deferred-tools): `activate_tools`
//! makes deferred tools active; an `output_schema` asks MCP callers for
//! `structured_content`. Compiled with the `tool-extras` feature only.

use super::Engine;
use crate::types::{Exposure, HostEvent};

impl Engine {
    /// A `tool_result` of extension `idx` answers `job`: activates the
    /// tools it names (before its caller hears of it, so that the caller
    /// may call them next), and says whether the called tool declares an
    /// `output_schema`.
    pub(super) fn answered_extras(&mut self, idx: usize, job: u64, activate: Vec<String>) -> bool {
        self.activate_tools(idx, activate);
        let tool = (self.jobs.get(job)).and_then(|j| self.tools.claim_of(&j.name, idx));
        tool.is_some_and(|t| t.output_schema.is_some())
    }

    /// A `tool_result` of extension `idx` names tools in `activate_tools`:
    /// its own deferred tools that are not active yet become active; any
    /// other name is ignored and logged (docs/PROTOCOL.md#structured-and-deferred-tools).
    fn activate_tools(&mut self, idx: usize, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        let mut activated = Vec::new();
        let mut ignored = Vec::new();
        for name in names {
            let owner = self.tools.owner(&name).filter(|c| c.rank == idx);
            match owner.map(|c| (c.info.exposure, c.info.active)) {
                Some((Exposure::Deferred, false)) => {
                    if let Some(tool) = self.tools.claim_mut(&name, idx) {
                        tool.active = true;
                    }
                    activated.push(name);
                }
                // Active already: nothing changes, nothing to say.
                Some((Exposure::Deferred, true)) => {}
                Some(_) => ignored.push(format!("{name:?} (not deferred)")),
                None => ignored.push(format!("{name:?} (not a tool of this extension)")),
            }
        }
        let ext = &mut self.exts[idx];
        if !ignored.is_empty() {
            ext.log
                .line(&format!("activate_tools: ignored {}", ignored.join(", ")));
        }
        if !activated.is_empty() {
            ext.log
                .line(&format!("activated tools {}", activated.join(", ")));
            let extension = ext.name.clone();
            // Not a note: never dropped under the event budget.
            self.event(HostEvent::ToolsActivated {
                extension,
                names: activated,
            });
        }
    }
}
