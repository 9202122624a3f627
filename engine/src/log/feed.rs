//! The feed: what the writers tell subscribers. After each group is
//! durable and published its leader stores the last acknowledged seq here;
//! a subscriber that has caught up sleeps on it until a later seq comes,
//! a truncation lowers it, or the log closes. Purges and truncations are
//! announced here before any file changes, so a subscriber that loses a
//! file mid-read knows to look again.

use std::time::Instant;

use crate::sync::{
    AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering, Rank, lock,
};

/// What writers tell subscribers: the last acknowledged seq, and whether
/// the log is closed. Its lock is a leaf: taken with no other held.
///
/// Waking a sleeper costs the waker a system call and, on a busy machine,
/// its core. So a leader takes the lock only if a subscriber sleeps or is
/// about to (`sleepers`), and then wakes one, the head (the first to fall
/// asleep); the head, once it runs, wakes the others. Leaders waking
/// every subscriber after each group cost a lone writer far more of its
/// appends, and a chain (each sleeper waking the next) more still, since
/// the last one waits for all (BENCHMARKS.md, "Reading the whole log and
/// following it", the table of writers' rates with 16 subscribers).
///
/// `last_seq` and `sleepers` pair as in Dekker's algorithm, both
/// `SeqCst`: a leader stores `last_seq`, then loads `sleepers`; a
/// subscriber, holding the lock, adds itself to `sleepers`, then loads
/// `last_seq`. At least one of the two sees the other's store, so either
/// the subscriber does not sleep or the leader takes the lock, which it
/// gets only once the subscriber is asleep, and wakes it. `publishing`
/// pairs with `sleepers` the same way for a truncation waiting on it.
pub(crate) struct Feed {
    /// The last seq acknowledged and published.
    last_seq: AtomicU64,
    /// Groups whose leader let go of the lead and has yet to publish.
    publishing: AtomicUsize,
    /// Subscribers asleep, or holding the lock on their way to sleep.
    sleepers: AtomicUsize,
    state: Mutex<FeedState>,
    /// The head's condition variable: at most one sleeper.
    head: Condvar,
    /// Every other sleeper's.
    moved: Condvar,
    /// The first seq the log keeps (a purge raises it), and how many
    /// truncations there were: read without the lock by subscribers,
    /// for which both rarely change.
    first_seq: AtomicU64,
    truncation_count: AtomicUsize,
    /// Some stream has metadata or a deletion: readers must take the
    /// tables into account (under the log's lock).
    stream_rules: AtomicBool,
}

struct FeedState {
    /// The last seq each truncation kept, in order.
    truncations: Vec<u64>,
    closed: bool,
    /// A sleeper on `head`.
    head_waiting: bool,
    /// Sleepers on `moved`.
    waiting: usize,
}

impl Feed {
    pub(crate) fn new(first_seq: u64, last_seq: u64) -> Feed {
        Feed {
            last_seq: AtomicU64::new(last_seq),
            publishing: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            first_seq: AtomicU64::new(first_seq),
            truncation_count: AtomicUsize::new(0),
            stream_rules: AtomicBool::new(false),
            state: Mutex::new(
                Rank::Leaf,
                FeedState {
                    truncations: Vec::new(),
                    closed: false,
                    head_waiting: false,
                    waiting: 0,
                },
            ),
            head: Condvar::new(),
            moved: Condvar::new(),
        }
    }

    /// A leader, still holding the lead, will publish its group.
    pub(crate) fn will_publish(&self) {
        self.publishing.fetch_add(1, Ordering::SeqCst);
    }

    /// Every record up to `last_seq` is durable and published. Leaders
    /// tell the feed after they release the shared lock, so a later
    /// group's leader may come first: the feed keeps the highest seq.
    pub(crate) fn publish(&self, last_seq: u64) {
        self.last_seq.fetch_max(last_seq, Ordering::SeqCst);
        self.publishing.fetch_sub(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.wake();
        }
    }

    /// Wakes the head, if one sleeps. No other sleeper needs the leader:
    /// each fell asleep behind a head, and a head wakes them all when it
    /// wakes, whatever woke it.
    fn wake(&self) {
        if lock(&self.state).head_waiting {
            self.head.notify_one();
        }
    }

    /// Sleeps until woken or `deadline` passes (`None`: until woken),
    /// unless `ready` holds once
    /// this thread counts as a sleeper (see [`Feed`]): as the head if
    /// there is none, which then wakes the others on its way out,
    /// whatever woke it; else as one of the others.
    fn sleep<'a>(
        &self,
        mut state: MutexGuard<'a, FeedState>,
        deadline: Option<Instant>,
        ready: impl Fn(&Feed) -> bool,
    ) -> MutexGuard<'a, FeedState> {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        if !ready(self) {
            if state.head_waiting {
                state.waiting += 1;
                state = self.moved.wait_until(state, deadline);
                state.waiting -= 1;
            } else {
                state.head_waiting = true;
                state = self.head.wait_until(state, deadline);
                state.head_waiting = false;
                if state.waiting > 0 {
                    self.moved.notify_all();
                }
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        state
    }

    pub(super) fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::SeqCst)
    }

    /// Whether some stream has metadata or a deletion.
    pub(crate) fn has_stream_rules(&self) -> bool {
        self.stream_rules.load(Ordering::Acquire)
    }

    /// Some stream has metadata or a deletion now (or none has).
    pub(crate) fn set_stream_rules(&self, any: bool) {
        self.stream_rules.store(any, Ordering::Release);
    }

    /// A purge made `first_seq` the first record kept.
    pub(crate) fn purged(&self, first_seq: u64) {
        self.first_seq.store(first_seq, Ordering::Release);
    }

    /// A truncation removed every record after `last_seq`; it is durable,
    /// and no later record is published yet.
    pub(crate) fn truncated(&self, last_seq: u64) {
        let mut state = lock(&self.state);
        self.last_seq.store(last_seq, Ordering::SeqCst);
        state.truncations.push(last_seq);
        self.truncation_count
            .store(state.truncations.len(), Ordering::Release);
        // A sleeper past `last_seq` waits for a seq above the one it
        // delivered: it must hear of the truncation now, not once the
        // log grows past it again. Rare enough to wake them all.
        drop(state);
        self.head.notify_all();
        self.moved.notify_all();
    }

    /// Waits until every group whose leader let go of the lead is
    /// published here. A truncation, which then holds the lead (so no
    /// other group is under way), lowers the last seq: a group published
    /// after that, but cut by it, would raise it again over records that
    /// are gone, and over their places, where new records go before they
    /// are durable (found by shuttle: `a_truncation_races_...`).
    pub(crate) fn wait_published(&self) {
        let mut state = lock(&self.state);
        while self.publishing.load(Ordering::SeqCst) > 0 {
            state = self.sleep(state, None, |feed| {
                feed.publishing.load(Ordering::SeqCst) == 0
            });
        }
    }

    /// The first seq kept, and how many truncations there were.
    pub(super) fn changes(&self) -> (u64, usize) {
        (
            self.first_seq.load(Ordering::Acquire),
            self.truncation_count.load(Ordering::Acquire),
        )
    }

    /// The lowest last seq kept by the truncations after the first `seen`,
    /// and how many there were in all.
    pub(super) fn truncated_since(&self, seen: usize) -> (Option<u64>, usize) {
        let state = lock(&self.state);
        let lowest = state.truncations[seen..].iter().copied().min();
        (lowest, state.truncations.len())
    }

    /// The log is gone: subscribers end once they have caught up.
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
        self.head.notify_all();
        self.moved.notify_all();
    }

    /// Waits until a record past `delivered` is published, the log closes,
    /// a truncation after the first `truncations_seen` comes, or
    /// `deadline` passes; returns the last published seq and whether the
    /// log is closed. No lock unless it must sleep.
    pub(super) fn wait_past(
        &self,
        delivered: u64,
        truncations_seen: usize,
        deadline: Option<Instant>,
    ) -> (u64, bool) {
        let published = self.last_seq();
        if published > delivered {
            return (published, false);
        }
        let truncated = || self.truncation_count.load(Ordering::Acquire) != truncations_seen;
        let mut state = lock(&self.state);
        while self.last_seq() <= delivered && !state.closed && !truncated() {
            if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
                break;
            }
            state = self.sleep(state, deadline, |feed| feed.last_seq() > delivered);
        }
        (self.last_seq(), state.closed)
    }
}

/// The feed alone under shuttle's schedulers: every interleaving of
/// leaders publishing, subscribers falling asleep and truncations, with
/// no log around it. A lost wake-up leaves a thread asleep forever, which
/// shuttle reports as a deadlock (its timed waits never time out).
/// `cargo test -p durlog --features shuttle --lib feed`.
#[cfg(all(test, feature = "shuttle"))]
mod tests {
    use std::sync::Arc;

    use shuttle::scheduler::{PctScheduler, RandomScheduler};
    use shuttle::{Config, MaxSteps, Runner, thread};

    use super::Feed;

    fn check(test: impl Fn() + Send + Sync + 'static) {
        let iterations = std::env::var("DURLOG_SHUTTLE_ITERATIONS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(2000);
        let test = Arc::new(test);
        let mut config = Config::new();
        config.max_steps = MaxSteps::FailAfter(100_000);
        let pct = Arc::clone(&test);
        Runner::new(PctScheduler::new(3, iterations), config.clone()).run(move || pct());
        Runner::new(RandomScheduler::new(iterations), config).run(move || test());
    }

    /// Three subscribers wait for the last of a leader's publishes, with
    /// no deadline: each must wake for it (the head and the others it
    /// wakes), whatever the order of stores and sleeps.
    #[test]
    fn every_sleeper_wakes_for_the_last_publish() {
        check(|| {
            let feed = Arc::new(Feed::new(1, 0));
            let subscribers: Vec<_> = (0..3)
                .map(|_| {
                    let feed = Arc::clone(&feed);
                    thread::spawn(move || {
                        let mut delivered = 0;
                        while delivered < 3 {
                            let (published, closed) = feed.wait_past(delivered, 0, None);
                            assert!(!closed && published > delivered, "woken for nothing new");
                            delivered = published;
                        }
                    })
                })
                .collect();
            for seq in 1..=3 {
                feed.will_publish();
                feed.publish(seq);
            }
            for subscriber in subscribers {
                subscriber.join().unwrap();
            }
        });
    }

    /// A subscriber asleep past the seq a truncation keeps wakes for the
    /// truncation itself, not for a later publish (there is none here).
    #[test]
    fn a_truncation_wakes_a_sleeper_past_it() {
        check(|| {
            let feed = Arc::new(Feed::new(1, 5));
            // Taken before the truncation can come, as a subscriber that
            // delivered seq 5 took it.
            let (_, truncations) = feed.changes();
            let subscriber = {
                let feed = Arc::clone(&feed);
                thread::spawn(move || {
                    let (published, _) = feed.wait_past(5, truncations, None);
                    let (lowest, now) = feed.truncated_since(truncations);
                    assert!(published == 3 && lowest == Some(3) && now == 1);
                })
            };
            feed.truncated(3);
            subscriber.join().unwrap();
        });
    }

    /// A truncation waits for a group that left the lead to publish: it
    /// never returns while one is under way.
    #[test]
    fn a_truncation_waits_for_publishes_under_way() {
        check(|| {
            let feed = Arc::new(Feed::new(1, 0));
            feed.will_publish();
            let published = Arc::new(shuttle::sync::atomic::AtomicBool::new(false));
            let leader = {
                let (feed, published) = (Arc::clone(&feed), Arc::clone(&published));
                thread::spawn(move || {
                    published.store(true, shuttle::sync::atomic::Ordering::SeqCst);
                    feed.publish(1);
                })
            };
            feed.wait_published();
            assert!(published.load(shuttle::sync::atomic::Ordering::SeqCst));
            assert_eq!(
                feed.last_seq(),
                1,
                "the publish landed before the wait ended"
            );
            leader.join().unwrap();
        });
    }

    /// Closing wakes every sleeper, which then sees the log closed.
    #[test]
    fn a_close_wakes_every_sleeper() {
        check(|| {
            let feed = Arc::new(Feed::new(1, 0));
            let subscribers: Vec<_> = (0..2)
                .map(|_| {
                    let feed = Arc::clone(&feed);
                    thread::spawn(move || assert!(feed.wait_past(0, 0, None).1, "closed"))
                })
                .collect();
            feed.close();
            for subscriber in subscribers {
                subscriber.join().unwrap();
            }
        });
    }
}
