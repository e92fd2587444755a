//! The session's jobs: the one request (or agent command) it waits
//! for, by id, and the replies that come back for it.
//!
//! A reply carries its own continuation, made with the request and
//! typed for it, so an answer can only reach the code written for that
//! request. Replies come back on one channel tagged with their job id;
//! one whose job is no longer current (cancelled meanwhile) is dropped.
//! A side request (a panel key sent while a job waits) is no job: its
//! reply always runs, and the current job stays current.
//! The table keeps only what the rest of the session must know about
//! the current job: what cancelling it undoes, and whether it is a
//! reload. It does not know the session itself: a reply's continuation
//! runs on whatever state `S` the loop hands it (the session's).

use super::agent::Agent;
use super::bell::Bell;
use crossbeam_channel::{Receiver, Sender};

/// What the current job is, apart from what its reply does.
pub enum Job {
    /// A request: cancelling it undoes nothing.
    Request,
    /// `/call` (or a `tool_prompt`'s tool) of `name`: cancelling it
    /// cancels the tool call under `ticket`, so its extension gets
    /// `tool_cancel` (docs/PROTOCOL.md#cancellation).
    Tool {
        ticket: zot_host::Ticket,
        /// Looked up after EOF: an interactive tool (the `panels` feature).
        #[cfg(feature = "panels")]
        name: String,
    },
    /// `/reload-ext`: its report lists what registers or fails meanwhile.
    Reload,
    /// A step of a turn whose `turn_start` went out: cancelling it ends
    /// the turn, and kills the agent command when that is the step.
    Turn(Option<Agent>),
}

/// The job id of side requests' replies.
const SIDE: u64 = 0;

/// What a reply does on the loop's state `S`, with the answer inside.
pub type Then<S> = Box<dyn FnOnce(&mut S) + Send>;

/// A reply on its way back to the session loop.
pub struct Reply<S> {
    job: u64,
    /// Host events sent when the host replied: they are handled first.
    pub after: u64,
    then: Then<S>,
}

/// The way back for one job's reply.
pub struct Back<S> {
    job: u64,
    tx: Sender<Reply<S>>,
    bell: Bell,
}

impl<S> Back<S> {
    /// Sends the reply: `then` runs on the loop, after the first `after`
    /// host events, if the job is still current.
    pub fn send(self, after: u64, then: impl FnOnce(&mut S) + Send + 'static) {
        let then = Box::new(then);
        let _ = self.tx.send(Reply {
            job: self.job,
            after,
            then,
        });
        self.bell.ring();
    }
}

/// At most one job at a time (lines typed meanwhile wait), by id.
pub struct Jobs<S> {
    tx: Sender<Reply<S>>,
    bell: Bell,
    last: u64,
    current: Option<(u64, Job)>,
}

impl<S> Jobs<S> {
    /// The table, and where the replies arrive (`bell` rung after each).
    pub fn new(bell: Bell) -> (Jobs<S>, Receiver<Reply<S>>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let jobs = Jobs {
            tx,
            bell,
            last: 0,
            current: None,
        };
        (jobs, rx)
    }

    /// A new job id and the way back for its reply; [`Jobs::begin`]
    /// makes it current once it is under way.
    pub fn next(&mut self) -> (u64, Back<S>) {
        self.last += 1;
        let back = Back {
            job: self.last,
            tx: self.tx.clone(),
            bell: self.bell.clone(),
        };
        (self.last, back)
    }

    /// The way back for a side request's reply, which runs whatever
    /// job is current (id 0 is never a job's: ids start at 1).
    pub fn side(&self) -> Back<S> {
        Back {
            job: SIDE,
            tx: self.tx.clone(),
            bell: self.bell.clone(),
        }
    }

    /// Job `id` is the one the session now waits for.
    pub fn begin(&mut self, id: u64, job: Job) {
        self.current = Some((id, job));
    }

    pub fn current(&self) -> Option<&Job> {
        self.current.as_ref().map(|(_, job)| job)
    }

    /// The id of the current job.
    #[cfg(any(test, feature = "panels"))]
    pub fn current_id(&self) -> Option<u64> {
        self.current.as_ref().map(|(id, _)| *id)
    }

    pub fn busy(&self) -> bool {
        self.current.is_some()
    }

    /// Stops waiting: a reply that still comes is dropped.
    pub fn cancel(&mut self) -> Option<Job> {
        self.current.take().map(|(_, job)| job)
    }

    /// What `reply` does, if its job is the current one (which it then
    /// no longer is); None for a job cancelled meanwhile.
    pub fn finish(&mut self, reply: Reply<S>) -> Option<Then<S>> {
        if reply.job == SIDE {
            return Some(reply.then);
        }
        match self.current {
            Some((id, _)) if id == reply.job => {
                self.current = None;
                Some(reply.then)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::bell::bell;
    use super::*;

    /// What the replies ran, in order: the state a test table runs on.
    type Ran = Vec<&'static str>;

    #[test]
    fn a_reply_runs_on_the_state_while_its_job_is_current() {
        let (ring, rung) = bell();
        let (mut jobs, replies) = Jobs::<Ran>::new(ring);
        let (id, back) = jobs.next();
        jobs.begin(id, Job::Request);
        back.send(3, |ran| ran.push("answer"));
        let reply = replies.try_recv().expect("the reply is sent");
        assert_eq!(reply.after, 3);
        assert!(rung.try_recv().is_ok(), "the bell rang");
        let then = jobs.finish(reply).expect("its job is current");
        let mut ran = Ran::new();
        then(&mut ran);
        assert_eq!(ran, ["answer"]);
        assert!(!jobs.busy(), "the job is done");
    }

    #[test]
    fn a_reply_for_a_cancelled_job_is_dropped() {
        let (ring, _rung) = bell();
        let (mut jobs, replies) = Jobs::<Ran>::new(ring);
        let (old, old_back) = jobs.next();
        jobs.begin(old, Job::Reload);
        assert!(matches!(jobs.cancel(), Some(Job::Reload)));
        let (new, _new_back) = jobs.next();
        jobs.begin(new, Job::Request);
        old_back.send(0, |ran| ran.push("late"));
        let reply = replies.try_recv().expect("the reply is sent");
        assert!(jobs.finish(reply).is_none());
        assert_eq!(jobs.current_id(), Some(new), "the new job still waits");
    }

    #[test]
    fn a_side_reply_runs_and_the_job_stays_current() {
        let (ring, _rung) = bell();
        let (mut jobs, replies) = Jobs::<Ran>::new(ring);
        let (id, _back) = jobs.next();
        jobs.begin(id, Job::Request);
        jobs.side().send(0, |ran| ran.push("side"));
        let reply = replies.try_recv().expect("the reply is sent");
        let then = jobs.finish(reply).expect("a side reply always runs");
        let mut ran = Ran::new();
        then(&mut ran);
        assert_eq!(ran, ["side"]);
        assert_eq!(jobs.current_id(), Some(id));
    }
}
