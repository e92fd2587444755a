//! The bell that wakes the session's main thread while it runs the host
//! loop.

use crossbeam_channel::{Receiver, Sender};

/// Wakes the main thread while it runs the host loop: whatever sends
/// the session something from another thread rings it after sending.
/// The loop selects on its channel with everything else.
#[derive(Clone)]
pub struct Bell(Sender<()>);

impl Bell {
    pub fn ring(&self) {
        // One ring waiting is enough: the session then looks at all.
        let _ = self.0.try_send(());
    }
}

/// A bell, and what the host loop waits on for it.
pub fn bell() -> (Bell, Receiver<()>) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    (Bell(tx), rx)
}
