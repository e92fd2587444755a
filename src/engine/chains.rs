//! The interception chains in flight (docs/PROTOCOL.md#interception):
//! each [`Chain`] with the guards it asks and who gets its outcome. The
//! engine runs them (`requests.rs`).

use crate::intercept::{Chain, InterceptOutcome};
use crate::types::Reply;

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
