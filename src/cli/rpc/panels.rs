//! `zot rpc`'s panel requests (docs/PROTOCOL.md#panels), in builds with
//! the `panels` feature: `panel_key`, `panel_resize`, `panel_close`.

use super::{field, reply, required, Output};
use serde_json::{Map, Value};
use zot_host::{HostHandle, PanelKey, Request};

impl Output {
    /// The request of type `kind`, `panel_key`, `panel_resize` or
    /// `panel_close` (what any other type is read as), answered through
    /// this output.
    pub(super) fn panel_request(
        &self,
        host: &HostHandle,
        id: Option<String>,
        kind: &str,
        obj: &Map<String, Value>,
    ) -> Result<Request, String> {
        let extension = required(obj, "extension")?;
        let panel_id = required(obj, "panel_id")?;
        let request = match kind {
            "panel_key" => {
                let key = required(obj, "key")?;
                let Some(key) = PanelKey::parse(&key) else {
                    let keys = PanelKey::NAMES.join(" ");
                    return Err(format!("unknown key {key:?} (one of {keys})"));
                };
                Request::PanelKey {
                    extension,
                    panel_id,
                    key,
                    text: field(obj, "text")?,
                    reply: reply(host, self, id, kind, |()| b"{}".to_vec()),
                }
            }
            "panel_resize" => Request::PanelResize {
                extension,
                panel_id,
                width: size(obj, "width")?,
                height: size(obj, "height")?,
                reply: reply(host, self, id, kind, |()| b"{}".to_vec()),
            },
            _ => Request::PanelClose {
                extension,
                panel_id,
                reply: reply(host, self, id, kind, |()| b"{}".to_vec()),
            },
        };
        Ok(request)
    }
}

/// A panel dimension: a whole number of columns or rows.
fn size(obj: &Map<String, Value>, key: &str) -> Result<u32, String> {
    let value = obj.get(key).and_then(Value::as_u64);
    value
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("`{key}` must be a whole number (columns or rows)"))
}
