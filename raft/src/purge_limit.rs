//! How far a store may purge: no further than the state machine's last
//! durable snapshot, for a state machine that keeps its state only in
//! snapshots.
//!
//! openraft 0.9 purges the log up to a snapshot it receives as soon as it
//! has handed the snapshot to the state machine's task, without waiting
//! for the state machine to install it (`install_full_snapshot` in its
//! following handler queues `PurgeLog` with no condition). A power loss in
//! between leaves the log purged past the snapshot on disk: the entries in
//! between are in neither, the node cannot apply them, and openraft stops
//! it at every start (a defensive `LogIndexNotFound`) until a leader sends
//! it a snapshot; with no snapshot on disk at all, openraft builds an
//! empty one at start that claims nothing was applied. The cluster
//! simulator found both (`durlog-raft-sim`, seeds 498 and 1198).
//!
//! So such a state machine reports each snapshot it has made durable to a
//! [`PurgeLimit`], and the store's purge waits until the snapshot it
//! purges up to is reported (or its install is reported failed, which
//! fails the purge). It must wait, not purge less: openraft appends the
//! entries after a received snapshot next, which a log still holding
//! entries before it cannot place. What waits is openraft's core task, for
//! as long as the state machine's task takes to save the snapshot; that
//! task never waits for the core, so the wait ends, provided the state
//! machine reports every install it was given, saved or failed. (openraft's
//! state machine task stops at the first error it gets: a state machine
//! whose `apply` can fail must report `snapshot_failed` then too, or a
//! purge queued behind the install waits for good. The events state
//! machine's `apply` never fails.)

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use openraft::{LogId, NodeId};

/// The last snapshot a state machine holds durably, shared by it and its
/// store: see the module doc. Clones share one limit.
#[derive(Clone, Debug, Default)]
pub struct PurgeLimit<NID: NodeId> {
    held: Arc<Mutex<Held<NID>>>,
}

#[derive(Debug, Default)]
struct Held<NID: NodeId> {
    /// Off until the store hands the limit out: a store whose state
    /// machine keeps its state otherwise purges what openraft asks.
    enforced: bool,
    /// The last log id of the last snapshot reported durable.
    durable: Option<LogId<NID>>,
    /// Why the state machine could not make a snapshot durable, if it
    /// could not: no purge waits after that.
    failed: Option<String>,
    /// The purges waiting.
    waiting: Vec<Waker>,
}

impl<NID: NodeId> PurgeLimit<NID> {
    /// The state machine holds a snapshot up to `last` durably (on disk,
    /// synced, under its final name). A limit only rises: a report of an
    /// older snapshot changes nothing.
    pub fn snapshot_saved(&self, last: Option<LogId<NID>>) {
        let mut held = self.lock();
        if last > held.durable {
            held.durable = last;
        }
        held.waiting.drain(..).for_each(Waker::wake);
    }

    /// The state machine could not make a snapshot durable (`why`): a
    /// purge waiting for it fails, and so does every later one of this
    /// store, which openraft stops.
    pub fn snapshot_failed(&self, why: String) {
        let mut held = self.lock();
        held.failed.get_or_insert(why);
        held.waiting.drain(..).for_each(Waker::wake);
    }

    /// The last snapshot reported durable.
    pub fn durable(&self) -> Option<LogId<NID>> {
        self.lock().durable.clone()
    }

    pub(crate) fn enforce(&self) {
        self.lock().enforced = true;
    }

    /// Ready when a purge up to `upto` may go ahead: at once if the limit
    /// is not enforced, else once a snapshot reaching `upto` is durable;
    /// `Err` (why) once a snapshot failed.
    pub(crate) fn reached(&self, upto: u64) -> Reached<'_, NID> {
        Reached { limit: self, upto }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held<NID>> {
        // Every change is one assignment or one push: a panic cannot leave
        // it half-made.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// See [`PurgeLimit::reached`].
pub(crate) struct Reached<'a, NID: NodeId> {
    limit: &'a PurgeLimit<NID>,
    upto: u64,
}

impl<NID: NodeId> Future for Reached<'_, NID> {
    type Output = Result<(), String>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let mut held = self.limit.lock();
        if !held.enforced
            || held
                .durable
                .as_ref()
                .is_some_and(|id| id.index >= self.upto)
        {
            return Poll::Ready(Ok(()));
        }
        if let Some(why) = &held.failed {
            return Poll::Ready(Err(why.clone()));
        }
        held.waiting.push(context.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn id(index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    /// Polls `future` once, with a waker that counts its wakes.
    fn poll_once<F: Future + Unpin>(future: &mut F, wakes: &Arc<Wakes>) -> Poll<F::Output> {
        let waker = Waker::from(Arc::clone(wakes));
        Pin::new(future).poll(&mut Context::from_waker(&waker))
    }

    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicU64);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn a_limit_not_handed_out_lets_every_purge_through() {
        let limit = PurgeLimit::<u64>::default();
        let wakes = Arc::new(Wakes::default());
        assert_eq!(
            poll_once(&mut limit.reached(90), &wakes),
            Poll::Ready(Ok(()))
        );
    }

    /// A limit its store handed out, and a waker that counts its wakes.
    fn enforced() -> (PurgeLimit<u64>, Arc<Wakes>) {
        let limit = PurgeLimit::<u64>::default();
        limit.enforce();
        (limit, Arc::new(Wakes::default()))
    }

    #[test]
    fn a_purge_waits_for_a_durable_snapshot_that_reaches_it() {
        let (limit, wakes) = enforced();
        let mut purge = limit.reached(90);
        assert_eq!(
            poll_once(&mut purge, &wakes),
            Poll::Pending,
            "no snapshot yet"
        );
        limit.snapshot_saved(Some(id(60)));
        assert_eq!(wakes.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(poll_once(&mut purge, &wakes), Poll::Pending, "60 < 90");
        limit.snapshot_saved(Some(id(95)));
        assert_eq!(poll_once(&mut purge, &wakes), Poll::Ready(Ok(())));
        limit.snapshot_saved(Some(id(50)));
        assert_eq!(limit.durable(), Some(id(95)), "a limit only rises");
    }

    #[test]
    fn a_failed_snapshot_fails_the_purge_waiting_for_it() {
        let (limit, wakes) = enforced();
        let mut purge = limit.reached(90);
        assert_eq!(poll_once(&mut purge, &wakes), Poll::Pending);
        limit.snapshot_failed("fsync failed".to_owned());
        assert_eq!(
            poll_once(&mut purge, &wakes),
            Poll::Ready(Err("fsync failed".to_owned()))
        );
    }
}
