//! Subscribers in a run: started at seeded positions, polled without
//! waiting (some take one record at a time, slow), polled again between
//! every group commit's write and its sync (where a record not yet durable
//! must not be delivered), drained and ended with the log at a restart,
//! and re-created at their positions after every reopen. The oracle checks
//! each delivery (`Oracle::check_delivery`).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use durlog::{Commit, Error, Log, Subscription};

/// The most subscribers a run keeps: a new one replaces the oldest.
const FOLLOWERS_MAX: usize = 6;

/// One subscriber.
pub(crate) struct Follower {
    /// `None` between a power loss and the reopen that re-creates it.
    pub(crate) subscription: Option<Subscription>,
    /// The seq it must consider next: every record before it was
    /// delivered or (another stream's) passed over.
    pub(crate) next: u64,
    /// Only streams starting with this ("" for all).
    pub(crate) prefix: String,
    /// The last seq a truncation kept, after this follower was handed
    /// records it removed: its subscription owes it `Error::Truncated`.
    pub(crate) truncated: Option<u64>,
}

/// The run's subscribers, shared with the failpoint hook, and what they
/// were handed there, during a commit.
#[derive(Default)]
pub(crate) struct Followers {
    pub(crate) list: Vec<Follower>,
    pub(crate) during_commit: Vec<(usize, Commit)>,
    /// A purge or truncation that a follower learnt of there.
    pub(crate) told_during_commit: Vec<(usize, Error)>,
}

pub(crate) type SharedFollowers = Arc<Mutex<Followers>>;

pub(crate) fn lock(followers: &SharedFollowers) -> MutexGuard<'_, Followers> {
    followers.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Followers {
    pub(crate) fn start(&mut self, log: &Log, prefix: String, from: u64) {
        if self.list.len() == FOLLOWERS_MAX {
            self.list.remove(0);
        }
        self.list.push(Follower {
            subscription: Some(log.subscribe_streams(&prefix, from)),
            next: from.max(1),
            prefix,
            truncated: None,
        });
    }

    /// A truncation kept seqs up to `seq`: followers handed records after
    /// it are owed an `Error::Truncated`.
    pub(crate) fn truncated(&mut self, seq: u64) {
        for follower in &mut self.list {
            if follower.next > seq + 1 {
                follower.truncated = Some(follower.truncated.map_or(seq, |t| t.min(seq)));
            }
        }
    }

    /// Follower `index`'s subscription, answered `Purged`, starts again at
    /// the first seq kept.
    pub(crate) fn restart_at(&mut self, index: usize, log: &Log, first_seq: u64) {
        let follower = &mut self.list[index];
        follower.next = first_seq;
        follower.subscription = Some(log.subscribe_streams(&follower.prefix, first_seq));
    }

    /// Up to `max` records that follower `index` can take now, each with
    /// the follower's index; an error ends the take.
    pub(crate) fn take(&mut self, index: usize, max: u32) -> (Vec<Commit>, Option<Error>) {
        let mut taken = Vec::new();
        let Some(subscription) = self.list[index].subscription.as_mut() else {
            return (taken, None);
        };
        while taken.len() < max as usize {
            match subscription.next_timeout(Duration::ZERO) {
                Ok(Some(commit)) => taken.push(commit),
                Ok(None) => break,
                Err(error) => return (taken, Some(error)),
            }
        }
        (taken, None)
    }

    /// In the failpoint, between a group's write and its sync: whatever
    /// any follower is handed now is kept for the oracle.
    pub(crate) fn poll_during_commit(&mut self) {
        for index in 0..self.list.len() {
            let (taken, error) = self.take(index, u32::MAX);
            self.during_commit
                .extend(taken.into_iter().map(|commit| (index, commit)));
            // Other errors here are the commit's own faults, which its
            // outcome answers for.
            if let Some(error @ (Error::Purged { .. } | Error::Truncated { .. })) = error {
                self.told_during_commit.push((index, error));
            }
        }
    }

    /// After a power loss the subscriptions died with the process.
    pub(crate) fn drop_subscriptions(&mut self) {
        for follower in &mut self.list {
            follower.subscription = None;
        }
    }

    /// Re-creates every follower on the reopened `log`, from where it
    /// was, or from the end of the log if recovery lost what it had seen
    /// (an excused loss).
    pub(crate) fn resume(&mut self, log: &Log) {
        let end = log.last_seq() + 1;
        for follower in &mut self.list {
            // A new subscription learns of no earlier truncation: it
            // starts after the last seq kept.
            if let Some(seq) = follower.truncated.take() {
                follower.next = follower.next.min(seq + 1);
            }
            follower.next = follower.next.min(end);
            follower.subscription = Some(log.subscribe_streams(&follower.prefix, follower.next));
        }
    }
}
