//! Subscribers in a run: started at seeded positions, polled without
//! waiting (some take one record at a time, slow), polled again between
//! every group commit's write and its sync (where a record not yet durable
//! must not be delivered), drained and ended with the log at a restart,
//! and re-created at their positions after every reopen. The oracle checks
//! each delivery (`Oracle::check_delivery`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use durlog::{Commit, Error, Log, Subscription};

use super::World;
use super::oracle::excuse::{self, Evidence};
use super::oracle::{Check, SubFilter};

/// The most subscribers a run keeps: a new one replaces the oldest.
const FOLLOWERS_MAX: usize = 6;

/// One subscriber.
pub(crate) struct Follower {
    /// `None` between a power loss and the reopen that re-creates it.
    pub(crate) subscription: Option<Subscription>,
    /// The seq it must consider next: every record before it was
    /// delivered or (another stream's) passed over.
    pub(crate) next: u64,
    /// What it subscribed to.
    pub(crate) filter: SubFilter,
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
    pub(crate) fn start(&mut self, log: &Log, filter: SubFilter, from: u64) {
        if self.list.len() == FOLLOWERS_MAX {
            self.list.remove(0);
        }
        self.list.push(Follower {
            subscription: Some(filter.subscribe(log, from)),
            next: from.max(1),
            filter,
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
    /// the first seq kept, under the rules of now (`floors`).
    pub(crate) fn restart_at(
        &mut self,
        index: usize,
        log: &Log,
        first_seq: u64,
        floors: &BTreeMap<String, u64>,
    ) {
        let follower = &mut self.list[index];
        follower.next = first_seq;
        follower.filter.set_floors(floors);
        follower.subscription = Some(follower.filter.subscribe(log, first_seq));
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
            // Judged after the commit: a purge or truncation once the model
            // knows of it, any other error by the commit's faults.
            if let Some(error) = error {
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
    /// (an excused loss), under the rules of now (`floors`).
    pub(crate) fn resume(&mut self, log: &Log, floors: &BTreeMap<String, u64>) {
        let end = log.last_seq() + 1;
        for follower in &mut self.list {
            follower.filter.set_floors(floors);
            // A new subscription learns of no earlier truncation: it
            // starts after the last seq kept.
            if let Some(seq) = follower.truncated.take() {
                follower.next = follower.next.min(seq + 1);
            }
            follower.next = follower.next.min(end);
            follower.subscription = Some(follower.filter.subscribe(log, follower.next));
        }
    }
}

/// The followers as the run drives them.
impl World<'_> {
    /// Once the log is gone, each follower takes what is left of what
    /// was acknowledged, then ends with `Closed` (or stops at damage, which
    /// the oracle must excuse).
    pub(super) fn check_followers_closed(&mut self) -> Check {
        // Within the step that closes it: a truncation that returned
        // before the close may have widened what the rules show.
        self.lower_floors();
        let count = lock(&self.node.followers).list.len();
        for index in 0..count {
            let mark = self.node.vfs.fault_log_len();
            let mut followers = lock(&self.node.followers);
            let follower = &mut followers.list[index];
            let Some(subscription) = follower.subscription.as_mut() else {
                continue;
            };
            let error = loop {
                match subscription.next_timeout(std::time::Duration::ZERO) {
                    Ok(Some(commit)) => {
                        self.oracle.check_delivery(
                            &mut follower.next,
                            &follower.filter,
                            &commit,
                        )?;
                    }
                    Err(Error::Closed) => break None,
                    Err(error @ (Error::Purged { .. } | Error::Truncated { .. })) => {
                        return Err(format!(
                            "a subscriber at seq {} got {error} after its log closed, with no purge or truncation since its last poll",
                            follower.next
                        ));
                    }
                    Err(error) => break Some(error),
                    Ok(None) => {
                        return Err(format!(
                            "a subscriber at seq {} waits on a log that is closed",
                            follower.next
                        ));
                    }
                }
            };
            drop(followers);
            if let Some(error) = error {
                let faults = self.node.vfs.fault_log_since(mark);
                let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
                self.oracle.excuse_read_error(&error, &evidence, &faults)?;
            }
        }
        Ok(())
    }

    /// A subscriber starts `back` records before the end of the log.
    /// A subscriber from `back` records before the end; the plan's mask
    /// says whether it applies the streams' metadata (by how many
    /// subscribers the run started before it).
    pub(super) fn subscribe(&mut self, back: u32, mut filter: SubFilter) {
        filter.applying_metadata =
            (self.plan.applying_metadata >> (self.subscribers % 64)) & 1 == 1;
        filter.set_floors(&self.oracle.shown_floors());
        self.subscribers += 1;
        let end = self.oracle.model().last_seq() + 1;
        let from = end - u64::from(back).min(end);
        let log = self
            .node
            .log
            .as_ref()
            .expect("the log is open between actions");
        lock(&self.node.followers).start(log, filter.clone(), from);
        self.start_twin(&filter, from);
    }

    /// After every step, and before a follower reads within a step: what
    /// the rules show may have widened (a change, a truncation taking
    /// versions back); each follower that applies them may be handed what
    /// they show from now on.
    pub(super) fn lower_floors(&mut self) {
        let mut followers = lock(&self.node.followers);
        if followers
            .list
            .iter()
            .all(|follower| follower.filter.floors.is_empty())
        {
            return;
        }
        let now = self.oracle.shown_floors();
        for follower in &mut followers.list {
            follower.filter.floors.retain(|stream, floor| {
                *floor = (*floor).min(now.get(stream).copied().unwrap_or(1));
                *floor > 1
            });
        }
    }

    /// Follower `index` takes up to `max` records; the oracle checks each.
    pub(super) fn poll(&mut self, index: usize, max: u32) -> Check {
        self.lower_floors();
        let mark = self.node.vfs.fault_log_len();
        let mut followers = lock(&self.node.followers);
        let (taken, error) = followers.take(index, max);
        let follower = &mut followers.list[index];
        for commit in &taken {
            self.oracle
                .check_delivery(&mut follower.next, &follower.filter, commit)?;
        }
        // A take that ended on "nothing new" (not on `max` or an error)
        // has passed everything published: the subscription must say so.
        if error.is_none()
            && taken.len() < max as usize
            && (follower.subscription.as_ref())
                .is_some_and(|subscription| !subscription.is_caught_up())
        {
            return Err(format!(
                "subscriber {index} at seq {} found nothing new, but says it has not caught up",
                follower.next
            ));
        }
        self.result.counters.deliveries += taken.len() as u64;
        drop(followers);
        match error {
            None => {
                let faults = self.node.vfs.fault_log_since(mark);
                excuse::no_read_error_swallowed(|| format!("subscriber {index}'s poll"), &faults)
            }
            Some(error) => self.follower_error(index, error, mark),
        }
    }

    /// A subscription's error: `Purged` only for one whose next record was
    /// purged (it starts again at the first seq kept), `Truncated` only
    /// for one handed records a truncation then removed (it goes on), any
    /// other only on damage or a fault that explains it.
    fn follower_error(&mut self, index: usize, error: Error, mark: usize) -> Check {
        let mut followers = lock(&self.node.followers);
        let follower = &mut followers.list[index];
        let first = self.oracle.model().first_seq();
        match error {
            Error::Purged { first_seq } if first_seq == first && follower.next < first => {
                let log = self
                    .node
                    .log
                    .as_ref()
                    .expect("the log is open between actions");
                followers.restart_at(index, log, first, &self.oracle.shown_floors());
                Ok(())
            }
            Error::Truncated { seq } if follower.truncated == Some(seq) => {
                follower.truncated = None;
                follower.next = seq + 1;
                Ok(())
            }
            Error::Purged { .. } | Error::Truncated { .. } => Err(format!(
                "a subscriber at seq {} (owed a truncation: {:?}) got {error}; the log keeps seqs from {first}",
                follower.next, follower.truncated
            )),
            error => {
                drop(followers);
                let faults = self.node.vfs.fault_log_since(mark);
                let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
                self.oracle.excuse_read_error(&error, &evidence, &faults)
            }
        }
    }

    /// What followers were handed between a group's write and its sync
    /// must have been acknowledged before that commit.
    pub(super) fn check_deliveries_during_commit(&mut self) -> Check {
        let mut followers = lock(&self.node.followers);
        let delivered = std::mem::take(&mut followers.during_commit);
        for (index, commit) in &delivered {
            let follower = &mut followers.list[*index];
            self.oracle
                .check_delivery(&mut follower.next, &follower.filter, commit)
                .map_err(|error| format!("between a write and its sync: {error}"))?;
        }
        self.result.counters.deliveries += delivered.len() as u64;
        Ok(())
    }

    /// What followers met during a commit (since fault `mark`): a purge
    /// (by the retention) or truncation, judged once the model knows of
    /// it; any other error, by a fault the disk injected during the
    /// commit (a read error, a bit flipped on a read). Nothing, if the
    /// commit lost power and the subscriptions with it.
    pub(super) fn check_told_during_commit(&mut self, mark: usize) -> Check {
        let told = std::mem::take(&mut lock(&self.node.followers).told_during_commit);
        if self.node.vfs.is_halted() {
            return Ok(());
        }
        for (index, error) in told {
            let mark = match error {
                Error::Purged { .. } | Error::Truncated { .. } => self.node.vfs.fault_log_len(),
                _ => mark,
            };
            self.follower_error(index, error, mark)
                .map_err(|error| format!("between a write and its sync: {error}"))?;
        }
        Ok(())
    }
}
