//! The embedder's panel calls (docs/PROTOCOL.md#panels), in builds with
//! the `panels` feature: keys, sizes and closes sent to an extension's
//! panel.

use super::HostHandle;
use crate::types::{HostError, Request};
use crate::wire::panels::PanelKey;

impl HostHandle {
    /// Forwards a key pressed in `panel_id` to `extension`.
    pub fn panel_key(
        &self,
        extension: &str,
        panel_id: &str,
        key: PanelKey,
        text: Option<&str>,
    ) -> Result<(), HostError> {
        let (extension, panel_id) = (extension.into(), panel_id.into());
        let text = text.map(str::to_string);
        self.call(|reply| Request::PanelKey {
            extension,
            panel_id,
            key,
            text,
            reply,
        })
    }

    /// Tells `extension` that its panel `panel_id` has `width` columns and
    /// `height` rows (when it opens, and when the screen changes size).
    pub fn panel_resize(
        &self,
        extension: &str,
        panel_id: &str,
        width: u32,
        height: u32,
    ) -> Result<(), HostError> {
        let (extension, panel_id) = (extension.into(), panel_id.into());
        self.call(|reply| Request::PanelResize {
            extension,
            panel_id,
            width,
            height,
            reply,
        })
    }

    /// Tells `extension` its panel `panel_id` was closed.
    pub fn panel_close(&self, extension: &str, panel_id: &str) -> Result<(), HostError> {
        let (extension, panel_id) = (extension.into(), panel_id.into());
        self.call(|reply| Request::PanelClose {
            extension,
            panel_id,
            reply,
        })
    }
}
