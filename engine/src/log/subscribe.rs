//! Subscriptions: every record from a position on, first those already in
//! the log (catch-up), then each new one once it is acknowledged (live),
//! in seq order, with no gap and no repeat.
//!
//! A subscription keeps only its next seq and a small buffer: records come
//! from the segment files, a run at a time, so a slow subscriber costs the
//! writers nothing and memory does not grow with how far behind it is. The
//! writers publish the last acknowledged seq to a [`Feed`] after each group
//! is durable and published; a subscriber that has caught up sleeps on the
//! feed's condition variable. A record cut back after a failed write was
//! never published, so it is never delivered.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::sync::{AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, Rank};

use super::all::{Commit, OwnHandles, Run, read_run};
use super::settings::Settings;
use super::{Log, Shared, lock};

/// Records read ahead of the subscriber, at most (one run's worth).
const AHEAD_MAX: u64 = 256;

/// Positions of the most recent records the feed keeps, so that a live
/// subscriber finds its next record without the writers' lock.
const RECENT_MAX: usize = 4096;

/// Where a published record lies.
#[derive(Clone, Copy, Debug)]
struct Position {
    seq: u64,
    segment: u32,
    segment_first_seq: u64,
    start: u64,
    end: u64,
}

/// A published group, as the feed records it: its seqs, its segment, and
/// its records' lengths from `offset` on.
pub(crate) struct PublishedGroup<'a> {
    pub(crate) seqs: Range<u64>,
    pub(crate) segment: u32,
    pub(crate) segment_first_seq: u64,
    pub(crate) offset: u64,
    pub(crate) lengths: &'a mut dyn Iterator<Item = u64>,
}

/// What writers tell subscribers: the last acknowledged seq, and whether
/// the log is closed. Its lock is a leaf: taken with no other held.
pub(crate) struct Feed {
    state: Mutex<FeedState>,
    moved: Condvar,
    /// The first seq the log keeps (a purge raises it), and how many
    /// truncations there were: read without the lock by subscribers,
    /// for which both rarely change.
    first_seq: AtomicU64,
    truncation_count: AtomicUsize,
}

struct FeedState {
    last_seq: u64,
    /// The last seq each truncation kept, in order.
    truncations: Vec<u64>,
    closed: bool,
    /// Subscribers asleep on `moved`: writers skip the wake-up if none.
    waiting: usize,
    /// The latest records' positions, in seq order with no gap.
    recent: VecDeque<Position>,
}

impl Feed {
    pub(crate) fn new(first_seq: u64, last_seq: u64) -> Feed {
        Feed {
            first_seq: AtomicU64::new(first_seq),
            truncation_count: AtomicUsize::new(0),
            state: Mutex::new(
                Rank::Leaf,
                FeedState {
                    last_seq,
                    truncations: Vec::new(),
                    closed: false,
                    waiting: 0,
                    recent: VecDeque::with_capacity(RECENT_MAX),
                },
            ),
            moved: Condvar::new(),
        }
    }

    /// `group` is durable and published. Leaders tell the feed after
    /// they release the shared lock, so a later group's leader may come
    /// first: the feed keeps the highest seq, and keeps positions only
    /// while they follow each other (a subscriber that finds none for its
    /// next seq looks them up under the shared lock).
    pub(crate) fn publish(&self, group: PublishedGroup<'_>) {
        let mut state = lock(&self.state);
        state.last_seq = state.last_seq.max(group.seqs.end - 1);
        let follows = state
            .recent
            .back()
            .is_none_or(|back| back.seq + 1 == group.seqs.start);
        if !follows {
            state.recent.clear();
        }
        let mut start = group.offset;
        for (seq, len) in group.seqs.zip(group.lengths) {
            if state.recent.len() == RECENT_MAX {
                state.recent.pop_front();
            }
            state.recent.push_back(Position {
                seq,
                segment: group.segment,
                segment_first_seq: group.segment_first_seq,
                start,
                end: start + len,
            });
            start += len;
        }
        if state.waiting > 0 {
            self.moved.notify_all();
        }
    }

    /// A purge made `first_seq` the first record kept.
    pub(crate) fn purged(&self, first_seq: u64) {
        let mut state = lock(&self.state);
        self.first_seq.store(first_seq, Ordering::Release);
        state.recent.retain(|position| position.seq >= first_seq);
    }

    /// A truncation removed every record after `last_seq`; it is durable,
    /// and no later record is published yet.
    pub(crate) fn truncated(&self, last_seq: u64) {
        let mut state = lock(&self.state);
        state.last_seq = last_seq;
        state.recent.retain(|position| position.seq <= last_seq);
        state.truncations.push(last_seq);
        self.truncation_count
            .store(state.truncations.len(), Ordering::Release);
    }

    /// Waits until every record up to `last_seq` is published here: a
    /// leader tells the feed after it lets go of the lead, so a truncation
    /// that takes the lead next must not overtake it.
    pub(crate) fn wait_published(&self, last_seq: u64) {
        let mut state = lock(&self.state);
        while state.last_seq < last_seq {
            state.waiting += 1;
            state = self.moved.wait(state);
            state.waiting -= 1;
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

    /// A run of published records from `from`, at most `count`, from the
    /// recent positions, if they hold `from`.
    fn recent_run(&self, from: u64, count: u64) -> Option<Run> {
        let state = lock(&self.state);
        if from < self.first_seq.load(Ordering::Acquire) {
            return None;
        }
        let first = state.recent.front()?.seq;
        let skip = usize::try_from(from.checked_sub(first)?).ok()?;
        let head = *state.recent.get(skip)?;
        let ranges = state
            .recent
            .range(skip..)
            .take(count as usize)
            .take_while(|position| {
                position.segment == head.segment
                    && position.seq <= state.last_seq
                    && position.end - head.start <= 1 << 20
            })
            .map(|position| (position.start, position.end))
            .collect();
        Some(Run {
            segment: head.segment,
            segment_first_seq: head.segment_first_seq,
            first: from,
            ranges,
        })
    }

    /// The log is gone: subscribers end once they have caught up.
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
        self.moved.notify_all();
    }

    /// Waits until a record past `delivered` is published, the log closes,
    /// or `deadline` passes; returns the last published seq and whether
    /// the log is closed.
    fn wait_past(&self, delivered: u64, deadline: Option<Instant>) -> (u64, bool) {
        let mut state = lock(&self.state);
        while state.last_seq <= delivered && !state.closed {
            let now = Instant::now();
            let timeout = match deadline {
                Some(deadline) if deadline <= now => break,
                Some(deadline) => deadline - now,
                None => Duration::from_secs(3600),
            };
            state.waiting += 1;
            state = self.moved.wait_timeout(state, timeout).0;
            state.waiting -= 1;
        }
        (state.last_seq, state.closed)
    }
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
    /// Records read ahead, all with seqs below `next_seq`, in order.
    ahead: VecDeque<Commit>,
    /// The seq of the last record delivered (`from_seq - 1` at first).
    delivered: u64,
    /// Truncations of the log already taken into account.
    truncations_seen: usize,
    buf: Vec<u8>,
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
            ahead: VecDeque::new(),
            delivered: from_seq.max(1) - 1,
            truncations_seen,
            buf: Vec::new(),
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
                self.ahead.clear();
                return Err(Error::Purged { first_seq });
            }
            if let Some(commit) = self.ahead.pop_front() {
                self.delivered = commit.seq;
                return Ok(Some(commit));
            }
            let (published, closed) = self.feed.wait_past(self.next_seq - 1, deadline);
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
            } else {
                return Ok(None);
            }
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
        self.next_seq = self.next_seq.min(seq + 1);
        if self.delivered > seq {
            self.delivered = seq;
            return Err(Error::Truncated { seq });
        }
        Ok(())
    }

    /// Reads the next run of published records (up to `published`) into
    /// `ahead`, keeping those of matching streams.
    fn read_ahead(&mut self, published: u64) -> Result<(), Error> {
        let (first_seq, _) = self.feed.changes();
        if self.next_seq < first_seq {
            return Err(Error::Purged { first_seq });
        }
        let count = (published - self.next_seq + 1).min(AHEAD_MAX);
        let recent = self.feed.recent_run(self.next_seq, count);
        let run = match recent {
            Some(run) if !run.ranges.is_empty() => run,
            _ => match lock(&self.shared)
                .state
                .runs(self.next_seq, count)
                .into_iter()
                .next()
            {
                Some(run) => run,
                None => return Ok(()),
            },
        };
        let run = &run;
        let file = self.handles.file(&self.settings, run)?;
        let (prefix, ahead, next_seq) = (&self.prefix, &mut self.ahead, &mut self.next_seq);
        read_run(
            &self.settings,
            file.as_ref(),
            run,
            &mut self.buf,
            &mut |commit| {
                debug_assert_eq!(commit.seq, *next_seq, "subscriptions skip no seq");
                *next_seq = commit.seq + 1;
                if commit.stream.starts_with(prefix.as_str()) {
                    ahead.push_back(commit);
                }
            },
        )
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
