//! Every lock, condition variable, atomic and thread the engine uses, from
//! one place: std's, or under the `shuttle` feature shuttle's, whose
//! schedulers then run the real group commit, preparer, purges and
//! subscribers through chosen interleavings (`engine/tests/shuttle/`).
//!
//! The mutexes carry their rank in the lock order (the comment above
//! `struct Log` in log/mod.rs states it): in debug builds, taking a lock
//! whose rank is not above every rank the thread already holds panics,
//! naming both. A lock-order inversion is thus caught the first time its
//! two halves run on one thread, in any test, without the unlucky
//! schedule that deadlocks. Poisoning is ignored
//! (`lock` never fails): a panic elsewhere cannot leave these structures
//! half-updated in a way that matters more than refusing service, which
//! the log's own poisoning handles.

#[cfg(feature = "shuttle")]
use shuttle::sync as imp;
#[cfg(not(feature = "shuttle"))]
use std::sync as imp;

use std::ops::{Deref, DerefMut};
use std::time::Duration;

pub(crate) use imp::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(feature = "shuttle")]
pub(crate) use shuttle::thread;
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::thread;

/// A lock's place in the lock order: a thread holding a lock takes only
/// locks of a higher rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// The lead of the group commit (`log::Lead`): no mutex, but held by
    /// one thread across a group's I/O, a purge or a truncation, during
    /// which it takes the shared lock again. Claimed without waiting
    /// under the shared lock; waited for with nothing held.
    Lead = 0,
    /// `Log::index_files`: the writer of index files, held while one is
    /// written and by a purge or a truncation (under the lead) while it
    /// removes segments and their index files.
    IndexFiles = 1,
    /// `Log::tables_file`: the writer of the tables of stream metadata
    /// and consumer positions, held across the file's replacement, which
    /// then takes `shared` to publish what it wrote.
    Tables = 2,
    /// `Log::shared`: the group commit, the published state, the stats.
    Shared = 3,
    /// `WriterSide::writer`: the active segment, the next one's state.
    Writer = 4,
    /// `Preparer::thread`: the preparing thread's handle.
    PreparerThread = 5,
    /// A leaf: `handles`, `spare_payloads`, the feed. Nothing is taken
    /// while one is held, not even another leaf.
    Leaf = 6,
}

/// A mutex with a rank (see the module doc).
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    inner: imp::Mutex<T>,
    rank: Rank,
}

/// Holds a [`Mutex`]; gives its rank back when dropped.
pub(crate) struct MutexGuard<'a, T> {
    /// `None` only inside [`Condvar`]'s waits.
    inner: Option<imp::MutexGuard<'a, T>>,
    rank: Rank,
}

impl<T> Mutex<T> {
    pub(crate) fn new(rank: Rank, value: T) -> Mutex<T> {
        Mutex {
            inner: imp::Mutex::new(value),
            rank,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        ranks::acquire(self.rank);
        let inner = self
            .inner
            .lock()
            .unwrap_or_else(imp::PoisonError::into_inner);
        MutexGuard {
            inner: Some(inner),
            rank: self.rank,
        }
    }
}

/// `mutex.lock()`, for call sites that read better as a function.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock()
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.inner.as_ref().expect("held outside a wait")
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.inner.as_mut().expect("held outside a wait")
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        ranks::release(self.rank);
    }
}

/// A place in the lock order held by something that is not a [`Mutex`]
/// (the lead of the group commit: a flag claimed under another lock and
/// held across I/O), from its claim until this is dropped. Not `Send`: the
/// ranks held are the thread's own.
pub(crate) struct RankHeld {
    rank: Rank,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl RankHeld {
    /// Claims `rank` without waiting for it (a try-lock, taken under
    /// another lock): it cannot deadlock, so no order is checked, but from
    /// now on it counts as held.
    pub(crate) fn claimed(rank: Rank) -> RankHeld {
        ranks::push(rank);
        RankHeld {
            rank,
            _thread_bound: std::marker::PhantomData,
        }
    }

    /// About to wait for `rank` (parked until its holder hands it on):
    /// checked as if taking a lock of that rank, without holding it.
    pub(crate) fn before_waiting_for(rank: Rank) {
        ranks::acquire(rank);
        ranks::release(rank);
    }
}

impl Drop for RankHeld {
    fn drop(&mut self) {
        ranks::release(self.rank);
    }
}

/// A condition variable over a [`Mutex`]: a wait gives the rank back while
/// it sleeps and checks it again on waking.
#[derive(Debug, Default)]
pub(crate) struct Condvar(imp::Condvar);

impl Condvar {
    pub(crate) fn new() -> Condvar {
        Condvar(imp::Condvar::new())
    }

    pub(crate) fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        let rank = guard.rank;
        let inner = guard.inner.take().expect("held outside a wait");
        drop(guard);
        let inner = self
            .0
            .wait(inner)
            .unwrap_or_else(imp::PoisonError::into_inner);
        ranks::acquire(rank);
        MutexGuard {
            inner: Some(inner),
            rank,
        }
    }

    /// Waits at most `timeout` (under shuttle, which does not model time,
    /// until notified); true if it timed out.
    pub(crate) fn wait_timeout<'a, T>(
        &self,
        mut guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, bool) {
        let rank = guard.rank;
        let inner = guard.inner.take().expect("held outside a wait");
        drop(guard);
        let (inner, result) = self
            .0
            .wait_timeout(inner, timeout)
            .unwrap_or_else(imp::PoisonError::into_inner);
        ranks::acquire(rank);
        let guard = MutexGuard {
            inner: Some(inner),
            rank,
        };
        (guard, result.timed_out())
    }

    /// Waits until notified or `deadline` passes (`None`: until
    /// notified; under shuttle, always until notified).
    pub(crate) fn wait_until<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<std::time::Instant>,
    ) -> MutexGuard<'a, T> {
        match deadline {
            None => self.wait(guard),
            Some(deadline) => {
                let timeout = deadline.saturating_duration_since(std::time::Instant::now());
                self.wait_timeout(guard, timeout).0
            }
        }
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// Runs `f` as if on another thread as far as the lock order goes: what
/// `f` locks is not ranked against what the caller holds. Only for hooks
/// that stand for the rest of the world acting at a point (a failpoint:
/// the simulator delivers to subscribers there, as their own threads would
/// between two steps of a commit). `f` must not take a lock the caller
/// holds (that deadlocks, and is no inversion this can hide).
pub(crate) fn as_another_thread<R>(f: impl FnOnce() -> R) -> R {
    ranks::as_another_thread(f)
}

/// The ranks each thread holds, checked in debug builds only.
mod ranks {
    use super::Rank;

    // Under shuttle every simulated thread runs on one OS thread: its own
    // `thread_local!` gives each of them their own list.
    #[cfg(all(debug_assertions, not(feature = "shuttle")))]
    thread_local! {
        static HELD: std::cell::RefCell<Vec<Rank>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    #[cfg(all(debug_assertions, feature = "shuttle"))]
    shuttle::thread_local! {
        static HELD: std::cell::RefCell<Vec<Rank>> = std::cell::RefCell::new(Vec::new());
    }

    /// About to take a lock of `rank`: every lock held must rank below it.
    #[cfg(debug_assertions)]
    pub(super) fn acquire(rank: Rank) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(&highest) = held.iter().max() {
                assert!(
                    rank > highest && highest != Rank::Leaf,
                    "lock order violated: taking {rank:?} while holding {highest:?} (engine/src/sync.rs, Log's lock order)"
                );
            }
            held.push(rank);
        });
    }

    /// Counts `rank` as held without checking the order (see
    /// `RankHeld::claimed`).
    #[cfg(debug_assertions)]
    pub(super) fn push(rank: Rank) {
        HELD.with(|held| held.borrow_mut().push(rank));
    }

    #[cfg(debug_assertions)]
    pub(super) fn release(rank: Rank) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|&r| r == rank) {
                held.remove(at);
            }
        });
    }

    /// Runs `f` with this thread's held ranks set aside, as if on another
    /// thread, and puts them back. (One function for both builds, so that
    /// a mutant of it is one the tests can see.)
    pub(super) fn as_another_thread<R>(f: impl FnOnce() -> R) -> R {
        #[cfg(debug_assertions)]
        let held = HELD.with(|held| std::mem::take(&mut *held.borrow_mut()));
        let result = f();
        #[cfg(debug_assertions)]
        HELD.with(|now| {
            let mut now = now.borrow_mut();
            debug_assert!(now.is_empty(), "a lock taken in {now:?} outlived its scope");
            *now = held;
        });
        result
    }

    #[cfg(not(debug_assertions))]
    pub(super) fn acquire(_rank: Rank) {}

    #[cfg(not(debug_assertions))]
    pub(super) fn push(_rank: Rank) {}

    #[cfg(not(debug_assertions))]
    pub(super) fn release(_rank: Rank) {}
}

#[cfg(all(test, debug_assertions, not(feature = "shuttle")))]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_in_rank_order_pass() {
        let (shared, writer, leaf) = (
            Mutex::new(Rank::Shared, ()),
            Mutex::new(Rank::Writer, ()),
            Mutex::new(Rank::Leaf, ()),
        );
        let _a = shared.lock();
        let _b = writer.lock();
        let _c = leaf.lock();
    }

    #[test]
    #[should_panic(expected = "lock order violated: taking Shared while holding Writer")]
    fn taking_a_lower_rank_panics() {
        let (shared, writer) = (Mutex::new(Rank::Shared, ()), Mutex::new(Rank::Writer, ()));
        let _b = writer.lock();
        let _a = shared.lock();
    }

    /// A hook run as if on another thread may take any lock the caller
    /// does not hold.
    #[test]
    fn another_threads_hook_is_not_ranked() {
        let (shared, writer) = (Mutex::new(Rank::Shared, ()), Mutex::new(Rank::Writer, ()));
        let _b = writer.lock();
        as_another_thread(|| drop(shared.lock()));
    }

    /// Once the hook returns, the caller's ranks are back.
    #[test]
    #[should_panic(expected = "lock order violated: taking Shared while holding Writer")]
    fn the_callers_ranks_are_back_after_the_hook() {
        let (shared, writer) = (Mutex::new(Rank::Shared, ()), Mutex::new(Rank::Writer, ()));
        let _b = writer.lock();
        as_another_thread(|| ());
        let _a = shared.lock();
    }

    #[test]
    #[should_panic(expected = "lock order violated: taking Leaf while holding Leaf")]
    fn two_leaves_at_once_panic() {
        let (one, two) = (Mutex::new(Rank::Leaf, ()), Mutex::new(Rank::Leaf, ()));
        let _a = one.lock();
        let _b = two.lock();
    }

    /// The lead, claimed under the shared lock, stays held after it: the
    /// shared lock may be taken again, and waiting for the lead while
    /// holding it (a re-entrant purge from inside a commit) is caught.
    #[test]
    fn a_claimed_rank_is_held_and_checked() {
        let shared = Mutex::new(Rank::Shared, ());
        let guard = shared.lock();
        let lead = RankHeld::claimed(Rank::Lead);
        drop(guard);
        drop(shared.lock());
        let waited = std::panic::catch_unwind(|| RankHeld::before_waiting_for(Rank::Lead));
        assert!(waited.is_err(), "waiting for the lead while holding it");
        drop(lead);
        RankHeld::before_waiting_for(Rank::Lead);
    }

    #[test]
    #[should_panic(expected = "lock order violated: taking Lead while holding Shared")]
    fn waiting_for_the_lead_with_a_lock_held_panics() {
        let shared = Mutex::new(Rank::Shared, ());
        let _guard = shared.lock();
        RankHeld::before_waiting_for(Rank::Lead);
    }

    #[test]
    fn a_wait_gives_the_rank_back() {
        let (writer, shared) = (Mutex::new(Rank::Writer, 0), Mutex::new(Rank::Shared, ()));
        let condvar = Condvar::new();
        let guard = writer.lock();
        let (guard, timed_out) = condvar.wait_timeout(guard, Duration::from_millis(1));
        assert!(timed_out);
        drop(guard);
        // Released by the drop: a lower rank may be taken again.
        let _a = shared.lock();
        let _b = writer.lock();
    }
}
