//! [`Keys`]: each start of an extension gets a key never used before
//! (across restarts and reloads), which tags what its process sends; the
//! table maps the keys of the processes still attached to the extension's
//! index, so a frame of a process since replaced is known as stale.

use super::idmap::IdMap;

#[derive(Default)]
pub(super) struct Keys {
    attached: IdMap<u64, usize>,
    next: u64,
}

impl Keys {
    /// A key for a new start.
    pub(super) fn fresh(&mut self) -> u64 {
        let key = self.next;
        self.next += 1;
        key
    }

    /// Extension `idx` now runs the process started under `key`; its
    /// earlier process's key no longer counts.
    pub(super) fn attach(&mut self, key: u64, idx: usize) {
        self.detach(idx);
        self.attached.insert(key, idx);
    }

    /// Extension `idx` has no process attached any more.
    pub(super) fn detach(&mut self, idx: usize) {
        self.attached.retain(|_, i| *i != idx);
    }

    /// No extension has a process attached (a reload renumbers them).
    pub(super) fn clear(&mut self) {
        self.attached.clear();
    }

    /// The extension the process started under `key` belongs to, while attached.
    pub(super) fn idx(&self, key: u64) -> Option<usize> {
        self.attached.get(&key).copied()
    }
}
