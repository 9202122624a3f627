//! Subscriptions: every record from a position on, first those already in
//! the log (catch-up), then each new one once it is acknowledged (live),
//! in seq order, with no gap and no repeat.
//!
//! A subscription keeps only its next seq, where that record starts if it
//! is in the same segment as the last one read, and a small buffer:
//! records come from the segment files, a run at a time, so a slow
//! subscriber costs the writers nothing and memory does not grow with how
//! far behind it is. The writers publish the last acknowledged seq to a
//! [`Feed`] after each group is durable and published; a subscriber that
//! has caught up sleeps on the feed. A record cut back after a failed
//! write was never published, so it is never delivered.
//!
//! What a leader pays for subscribers is kept to an atomic store when none
//! sleeps, and a lock and one wake-up when some do: a live subscriber
//! reads its next records where the last one ended, with no lock, and
//! looks positions up under the log's lock only at a segment's end, after
//! a truncation, or where the bytes there are not the records it expects.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::format::parse_record;
use crate::sync::{AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering, Rank, thread};

use super::all::{Commit, OwnHandles, commit_of, read_run};
use super::settings::Settings;
use super::{Log, Shared, lock};

/// Records read ahead of the subscriber, at most (one run's worth).
const AHEAD_MAX: u64 = 256;

/// Bytes a live subscriber reads where its last record ended, at least
/// and at most.
const FOLLOW_BYTES_MIN: usize = 4 << 10;
const FOLLOW_BYTES_MAX: usize = 1 << 20;

/// What writers tell subscribers: the last acknowledged seq, and whether
/// the log is closed. Its lock is a leaf: taken with no other held.
///
/// Waking a sleeper costs the waker a system call and, on a busy machine,
/// its core. So a leader takes the lock only if a subscriber sleeps or is
/// about to (`sleepers`), and then wakes one, the head (the first to fall
/// asleep); the head, once it runs, wakes the others. With leaders waking
/// all 16 of a benchmark's subscribers after each group (under the lock),
/// one writer on 2 cores kept 0.44-0.54 of its appends; waking the head
/// alone, 0.63-0.64 (BENCHMARKS.md). A chain (each sleeper waking the
/// next) was tried and was worse still: the last one waits for all.
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

    /// Sleeps until woken or `timeout` passes, unless `ready` holds once
    /// this thread counts as a sleeper (see [`Feed`]): as the head if
    /// there is none, which then wakes the others on its way out,
    /// whatever woke it; else as one of the others.
    fn sleep<'a>(
        &self,
        mut state: MutexGuard<'a, FeedState>,
        timeout: Duration,
        ready: impl Fn(&Feed) -> bool,
    ) -> MutexGuard<'a, FeedState> {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        if !ready(self) {
            if state.head_waiting {
                state.waiting += 1;
                state = self.moved.wait_timeout(state, timeout).0;
                state.waiting -= 1;
            } else {
                state.head_waiting = true;
                state = self.head.wait_timeout(state, timeout).0;
                state.head_waiting = false;
                if state.waiting > 0 {
                    self.moved.notify_all();
                }
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        state
    }

    fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::SeqCst)
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
            state = self.sleep(state, Duration::from_secs(3600), |feed| {
                feed.publishing.load(Ordering::SeqCst) == 0
            });
        }
    }

    /// The first seq kept, and how many truncations there were.
    fn changes(&self) -> (u64, usize) {
        (
            self.first_seq.load(Ordering::Acquire),
            self.truncation_count.load(Ordering::Acquire),
        )
    }

    /// The lowest last seq kept by the truncations after the first `seen`,
    /// and how many there were in all.
    fn truncated_since(&self, seen: usize) -> (Option<u64>, usize) {
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
    fn wait_past(
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
            let now = Instant::now();
            let timeout = match deadline {
                Some(deadline) if deadline <= now => break,
                Some(deadline) => deadline - now,
                None => Duration::from_secs(3600),
            };
            state = self.sleep(state, timeout, |feed| feed.last_seq() > delivered);
        }
        (self.last_seq(), state.closed)
    }
}

/// Where the record a subscription reads next starts, if it is in the
/// segment of the last one it read.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    segment: u32,
    segment_first_seq: u64,
    offset: u64,
}

/// Every record from a position on, in seq order (see the module doc).
/// `Send + 'static`: it holds the log's shared state, not a borrow of it,
/// and may outlive the `Log` to deliver what was acknowledged before the
/// log closed.
pub struct Subscription {
    settings: Arc<Settings>,
    shared: Arc<Mutex<Shared>>,
    feed: Arc<Feed>,
    handles: OwnHandles,
    /// Only records of streams starting with this.
    prefix: String,
    /// The seq of the next record to deliver (or to pass over).
    next_seq: u64,
    /// Where that record starts, if known.
    cursor: Option<Cursor>,
    /// Records read ahead, all with seqs below `next_seq`, in order.
    ahead: VecDeque<Commit>,
    /// The seq of the last record delivered (`from_seq - 1` at first).
    delivered: u64,
    /// Truncations of the log already taken into account.
    truncations_seen: usize,
    buf: Vec<u8>,
    /// How long a caught-up subscription lets records gather before it
    /// looks for them (`set_batching`).
    batching: Duration,
    /// Whether the last record delivered was the last one published then.
    drained: bool,
}

impl Log {
    /// Every record with seq >= `from_seq`, in seq order, with no gap and
    /// no repeat: first those already in the log (catch-up), then each new
    /// one once it is acknowledged (live). Never a record not yet durable.
    pub fn subscribe(&self, from_seq: u64) -> Subscription {
        self.subscribe_streams("", from_seq)
    }

    /// [`Log::subscribe`], for the records of streams whose name starts
    /// with `prefix`.
    pub fn subscribe_streams(&self, prefix: &str, from_seq: u64) -> Subscription {
        let (_, truncations_seen) = self.feed.changes();
        Subscription {
            settings: Arc::clone(&self.settings),
            shared: Arc::clone(&self.shared),
            feed: Arc::clone(&self.feed),
            handles: OwnHandles::new(),
            prefix: prefix.to_owned(),
            next_seq: from_seq.max(1),
            cursor: None,
            ahead: VecDeque::new(),
            delivered: from_seq.max(1) - 1,
            truncations_seen,
            buf: Vec::new(),
            batching: Duration::ZERO,
            drained: false,
        }
    }
}

impl Subscription {
    /// The next record; `Ok(None)` if none arrived within `timeout`;
    /// `Err(Error::Closed)` once the log is closed (or dropped) and every
    /// record acknowledged before that was delivered. A subscription whose
    /// next record was purged returns `Err(Error::Purged)` (every call
    /// after, too); one that delivered records a truncation then removed
    /// returns `Err(Error::Truncated)` once and goes on after its last seq.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Commit>, Error> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            self.follow_truncations()?;
            let (first_seq, _) = self.feed.changes();
            if self
                .ahead
                .front()
                .is_some_and(|commit| commit.seq < first_seq)
            {
                // Read ahead before a purge removed it: not the log's now.
                self.next_seq = self.ahead[0].seq;
                self.cursor = None;
                self.ahead.clear();
                return Err(Error::Purged { first_seq });
            }
            if let Some(commit) = self.ahead.pop_front() {
                self.delivered = commit.seq;
                self.drained = self.ahead.is_empty() && self.feed.last_seq() < self.next_seq;
                return Ok(Some(commit));
            }
            self.let_records_gather(deadline);
            let (published, closed) =
                self.feed
                    .wait_past(self.next_seq - 1, self.truncations_seen, deadline);
            if published >= self.next_seq {
                let before = self.feed.changes();
                if let Err(error) = self.read_ahead(published) {
                    // A purge or a truncation while it read explains a
                    // file gone or cut short: look again.
                    if self.feed.changes() == before {
                        return Err(error);
                    }
                }
            } else if closed {
                return Err(Error::Closed);
            } else if self.feed.changes().1 == self.truncations_seen {
                return Ok(None);
            }
            // Else a truncation woke it: take it into account first.
        }
    }

    /// Once it has delivered the last record published, waits `window`
    /// before it looks for the next ones (at most until the deadline of
    /// the call), so that it reads them a run at a time instead of being
    /// woken for each group: a record is delivered up to `window` later,
    /// and the subscription's thread wakes about once per `window` while
    /// the log is busy. Zero (the default) delivers each group as soon as
    /// it is published. On a machine with few cores, where every thread
    /// that runs slows the writers (BENCHMARKS.md, "Reading the whole log
    /// and following it"), a millisecond makes many subscribers cheaper
    /// at a low write rate, not at a high one.
    pub fn set_batching(&mut self, window: Duration) {
        self.batching = window;
    }

    /// The pause of [`Subscription::set_batching`], if the last record
    /// delivered was the last one published.
    fn let_records_gather(&mut self, deadline: Option<Instant>) {
        if self.batching.is_zero() || !std::mem::take(&mut self.drained) {
            return;
        }
        let left = deadline.map_or(self.batching, |deadline| {
            deadline.saturating_duration_since(Instant::now())
        });
        let pause = self.batching.min(left);
        if !pause.is_zero() {
            thread::sleep(pause);
        }
    }

    /// The seq from which this subscription goes on: the next record it
    /// delivers has this seq or a later one (of a stream it skips).
    pub fn position(&self) -> u64 {
        self.ahead
            .front()
            .map_or(self.next_seq, |commit| commit.seq)
    }

    /// Takes into account the truncations since the last call: records
    /// read ahead after a truncation's last seq go, and if some were
    /// delivered, `Err(Error::Truncated)` says so (once).
    fn follow_truncations(&mut self) -> Result<(), Error> {
        if self.feed.changes().1 == self.truncations_seen {
            return Ok(());
        }
        let (lowest, seen) = self.feed.truncated_since(self.truncations_seen);
        self.truncations_seen = seen;
        let Some(seq) = lowest else {
            return Ok(());
        };
        self.ahead.retain(|commit| commit.seq <= seq);
        if self.next_seq > seq + 1 {
            self.next_seq = seq + 1;
            self.cursor = None;
        }
        if self.delivered > seq {
            self.delivered = seq;
            return Err(Error::Truncated { seq });
        }
        Ok(())
    }

    /// Reads the next published records (up to `published`) into
    /// `ahead`, keeping those of matching streams: where the last record
    /// read ended if that holds them, else the run the log's positions
    /// give. A purge or a truncation during the read throws what it read
    /// away, for the caller to read again: after a truncation, the bytes
    /// read may be records not yet durable, in the places of those cut.
    fn read_ahead(&mut self, published: u64) -> Result<(), Error> {
        let before = self.feed.changes();
        if self.next_seq < before.0 {
            return Err(Error::Purged {
                first_seq: before.0,
            });
        }
        // Loaded after `before`: a truncation that `before` missed is
        // seen after the read. Never past it: the committed state and the
        // files hold the records a truncation cuts until a moment after
        // the feed has lowered its last seq.
        let published = published.min(self.feed.last_seq());
        if published < self.next_seq {
            return Ok(());
        }
        let (kept, next_seq) = (self.ahead.len(), self.next_seq);
        let followed = match self.cursor {
            Some(cursor) => self.read_following(cursor, published)?,
            None => false,
        };
        if !followed {
            self.read_positioned(published)?;
        }
        if self.feed.changes() != before {
            self.ahead.truncate(kept);
            self.next_seq = next_seq;
            self.cursor = None;
        }
        Ok(())
    }

    /// Reads the run of records from `next_seq` up to `published` that
    /// the committed state places, under the log's lock.
    fn read_positioned(&mut self, published: u64) -> Result<(), Error> {
        let count = (published - self.next_seq + 1).min(AHEAD_MAX);
        let run = lock(&self.shared)
            .state
            .runs(self.next_seq, count)
            .into_iter()
            .next();
        let Some(run) = run else {
            return Ok(());
        };
        let file = self
            .handles
            .file(&self.settings, run.segment, run.segment_first_seq)?;
        let (prefix, ahead, next_seq) = (&self.prefix, &mut self.ahead, &mut self.next_seq);
        read_run(
            &self.settings,
            file.as_ref(),
            &run,
            &mut self.buf,
            &mut |commit| {
                debug_assert_eq!(commit.seq, *next_seq, "subscriptions skip no seq");
                *next_seq = commit.seq + 1;
                if commit.stream.starts_with(prefix.as_str()) {
                    ahead.push_back(commit);
                }
            },
        )?;
        let &(_, end) = run.ranges.last().expect("a run holds a record");
        self.cursor = Some(Cursor {
            segment: run.segment,
            segment_first_seq: run.segment_first_seq,
            offset: end,
        });
        Ok(())
    }

    /// Reads the records from `next_seq` up to `published` at `cursor`,
    /// with no lock; false if the bytes there do not start with the
    /// record `next_seq` (the segment ended, or the read was unlucky),
    /// for the caller to look its position up instead.
    fn read_following(&mut self, cursor: Cursor, published: u64) -> Result<bool, Error> {
        let file = self
            .handles
            .file(&self.settings, cursor.segment, cursor.segment_first_seq)?;
        let last = published.min(self.next_seq + AHEAD_MAX - 1);
        let guess = self.buf.len().clamp(FOLLOW_BYTES_MIN, FOLLOW_BYTES_MAX);
        self.buf.resize(guess, 0);
        let Ok(read) = file.read_at(&mut self.buf, cursor.offset) else {
            return Ok(false);
        };
        let (prefix, ahead) = (self.prefix.as_str(), &mut self.ahead);
        let (mut at, mut seq) = (0, self.next_seq);
        while seq <= last {
            let Ok(record) = parse_record(&self.buf[at..read]) else {
                break;
            };
            let Ok(commit) = commit_of(&record, seq) else {
                break;
            };
            if commit.stream.starts_with(prefix) {
                ahead.push_back(commit);
            }
            at += record.len;
            seq += 1;
        }
        if seq == self.next_seq {
            return Ok(false);
        }
        // Sized for the next read: what this one used, with room to grow.
        self.buf.truncate((2 * at).max(FOLLOW_BYTES_MIN));
        self.next_seq = seq;
        self.cursor = Some(Cursor {
            offset: cursor.offset + at as u64,
            ..cursor
        });
        Ok(true)
    }
}

impl Iterator for Subscription {
    type Item = Result<Commit, Error>;

    /// Blocks for the next record; `None` once the log is closed and
    /// everything acknowledged before was delivered.
    fn next(&mut self) -> Option<Result<Commit, Error>> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Ok(Some(commit)) => return Some(Ok(commit)),
                Ok(None) => continue,
                Err(Error::Closed) => return None,
                Err(error) => return Some(Err(error)),
            }
        }
    }
}
