//! Panels' frames (docs/PROTOCOL.md#panels), in builds with the `panels`
//! feature: the key forwarded to a panel, the panel a command or an
//! extension opens, and the panel an extension renders.

use serde::{Deserialize, Serialize};

closed_set! {
    /// A key forwarded to an open panel (`panel_key.key`, docs/PROTOCOL.md#panels).
    pub enum PanelKey {
        /// Arrow up.
        Up = "up",
        /// Arrow down.
        Down = "down",
        /// Arrow left.
        Left = "left",
        /// Arrow right.
        Right = "right",
        /// Enter.
        Enter = "enter",
        /// Escape (the session closes the panel instead of forwarding it).
        Esc = "esc",
        /// Tab.
        Tab = "tab",
        /// Backspace.
        Backspace = "backspace",
        /// Delete.
        Delete = "delete",
        /// Home.
        Home = "home",
        /// End.
        End = "end",
        /// Page up.
        PageUp = "pageup",
        /// Page down.
        PageDown = "pagedown",
        /// A character typed: the text goes beside it.
        Rune = "rune",
    }
}

/// `command_response.open_panel`.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OpenPanel {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<String>,
}

/// `panel_render` from an extension.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Panel {
    pub panel_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<String>,
}

/// `open_panel`'s `panel` field, the panel it opens.
pub(crate) fn panel_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<OpenPanel, D::Error> {
    #[derive(Deserialize)]
    struct Field {
        panel: OpenPanel,
    }
    Field::deserialize(d).map(|f| f.panel)
}
