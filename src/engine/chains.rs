//! The interception chains in flight (docs/PROTOCOL.md#interception):
//! [`Chains`], each [`Chain`] under its number with the guards it asks and
//! who gets its outcome. The engine runs them (`requests.rs`).

use super::idmap::IdMap;
use crate::intercept::{Chain, InterceptOutcome};
use crate::types::Reply;

/// The chains in flight, each under a number never used before.
#[derive(Default)]
pub(super) struct Chains {
    live: IdMap<u64, ChainState>,
    next: u64,
}

impl Chains {
    /// The number the next chain started will have.
    pub(super) fn next_id(&self) -> u64 {
        self.next
    }

    /// Keeps `state` under the next number, which it returns.
    pub(super) fn start(&mut self, state: ChainState) -> u64 {
        let id = self.next;
        self.next += 1;
        self.live.insert(id, state);
        id
    }

    pub(super) fn get(&self, id: u64) -> Option<&ChainState> {
        self.live.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut ChainState> {
        self.live.get_mut(&id)
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<ChainState> {
        self.live.remove(&id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Every chain in flight, taken out (numbers still never reused).
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = ChainState> {
        std::mem::take(&mut self.live).into_values()
    }
}

/// Who gets the outcome of an interception chain.
pub(super) enum Then {
    /// The embedder, who asked for the chain alone.
    Reply(Reply<InterceptOutcome>),
    /// The tool pipeline run (`pipeline.rs`) the chain guards.
    RunTool { job: u64 },
}

pub(super) struct ChainState {
    pub(super) chain: Chain,
    pub(super) guards: Vec<usize>,
    /// The request id each guard was last asked under.
    pub(super) ids: Vec<Option<String>>,
    pub(super) then: Then,
}
