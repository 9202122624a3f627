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
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::format::parse_record;
use crate::sync::{Mutex, thread};

use super::all::{OwnHandles, read_run};
use super::commit::Commit;
use super::feed::Feed;
use super::filter::{Filter, Keep};
use super::settings::Settings;
use super::{Log, Shared, lock};

/// Records read ahead of the subscriber, at most (one run's worth).
const AHEAD_MAX: u64 = 256;

/// Bytes a live subscriber reads where its last record ended, at least
/// and at most.
const FOLLOW_BYTES_MIN: usize = 4 << 10;
const FOLLOW_BYTES_MAX: usize = 1 << 20;

/// Where the record a subscription reads next starts, in the segment of
/// the last one it read.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    segment: u32,
    segment_first_seq: u64,
    offset: u64,
}

/// Where a subscription reads next: the seq of the next record to deliver
/// (or to pass over), and whether it knows where that record starts.
#[derive(Clone, Copy, Debug)]
enum Position {
    /// The record's place is looked up in the published state, under the
    /// log's lock: at first, past a segment's end, after a purge or a
    /// truncation, or where the bytes were not the records expected.
    Seek { next_seq: u64 },
    /// The record starts where the last one read ended: read with no lock.
    Follow { next_seq: u64, cursor: Cursor },
}

impl Position {
    fn next_seq(self) -> u64 {
        match self {
            Position::Seek { next_seq } | Position::Follow { next_seq, .. } => next_seq,
        }
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
    /// Only the records and events this keeps.
    filter: Filter,
    /// Where it reads next.
    position: Position,
    /// Records read ahead, all with seqs below the position's, in order.
    ahead: VecDeque<Commit>,
    /// The seq of the last record delivered (`from_seq - 1` at first).
    delivered: u64,
    /// Truncations of the log already taken into account.
    truncations_seen: usize,
    buf: Vec<u8>,
    /// How many bytes the next read of a following subscription asks for:
    /// what the last read used, with room to grow (a run's read, its
    /// size). Kept apart from `buf`, which reads fill without zeroing.
    next_read: usize,
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
        self.subscribe_filtered(from_seq, Filter::all().stream_prefix(prefix))
    }

    /// [`Log::subscribe`] through `filter`: a record none of whose events
    /// match is passed over; one some of whose events match is delivered
    /// with those alone, its seq and first version as stored.
    pub fn subscribe_filtered(&self, from_seq: u64, filter: Filter) -> Subscription {
        let (_, truncations_seen) = self.feed.changes();
        Subscription {
            settings: Arc::clone(&self.settings),
            shared: Arc::clone(&self.shared),
            feed: Arc::clone(&self.feed),
            handles: OwnHandles::new(),
            filter,
            position: Position::Seek {
                next_seq: from_seq.max(1),
            },
            ahead: VecDeque::new(),
            delivered: from_seq.max(1) - 1,
            truncations_seen,
            buf: Vec::new(),
            next_read: 0,
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
        self.next_until(Instant::now().checked_add(timeout))
    }

    /// [`Subscription::next_timeout`] until `deadline` (`None`: no limit).
    fn next_until(&mut self, deadline: Option<Instant>) -> Result<Option<Commit>, Error> {
        loop {
            self.follow_truncations()?;
            let (first_seq, _) = self.feed.changes();
            if self
                .ahead
                .front()
                .is_some_and(|commit| commit.seq < first_seq)
            {
                // Read ahead before a purge removed it: not the log's now.
                self.position = Position::Seek {
                    next_seq: self.ahead[0].seq,
                };
                self.ahead.clear();
                return Err(Error::Purged { first_seq });
            }
            if let Some(commit) = self.ahead.pop_front() {
                self.delivered = commit.seq;
                self.drained =
                    self.ahead.is_empty() && self.feed.last_seq() < self.position.next_seq();
                return Ok(Some(commit));
            }
            self.let_records_gather(deadline);
            let next_seq = self.position.next_seq();
            let (published, closed) =
                self.feed
                    .wait_past(next_seq - 1, self.truncations_seen, deadline);
            if published >= next_seq {
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

    /// Whether it has delivered, or passed over by its filter, every
    /// record acknowledged so far: the moment a catch-up turns live
    /// (KurrentDB's "caught up"). A snapshot, true after a call that found
    /// nothing new, false again once a record is acknowledged. It reads
    /// nothing: a record its filter will pass over counts as still to
    /// come until a call passes over it.
    pub fn is_caught_up(&self) -> bool {
        self.ahead.is_empty()
            && self.feed.changes().1 == self.truncations_seen
            && self.feed.last_seq() < self.position.next_seq()
    }

    /// The seq from which this subscription goes on: the next record it
    /// delivers has this seq or a later one (of a stream it skips).
    pub fn position(&self) -> u64 {
        self.ahead
            .front()
            .map_or(self.position.next_seq(), |commit| commit.seq)
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
        if self.ahead.back().is_some_and(|commit| commit.seq > seq) {
            durlog_vfs::mark!("subscribe: records read ahead past a truncation dropped");
        }
        self.ahead.retain(|commit| commit.seq <= seq);
        if self.position.next_seq() > seq + 1 {
            self.position = Position::Seek { next_seq: seq + 1 };
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
        if self.position.next_seq() < before.0 {
            return Err(Error::Purged {
                first_seq: before.0,
            });
        }
        // Loaded after `before`: a truncation that `before` missed is
        // seen after the read. Never past it: the committed state and the
        // files hold the records a truncation cuts until a moment after
        // the feed has lowered its last seq.
        let published = published.min(self.feed.last_seq());
        let (kept, position) = (self.ahead.len(), self.position);
        if published < position.next_seq() {
            return Ok(());
        }
        // The streams' metadata as of now, taken under the log's lock only
        // when the filter applies it and some stream has any.
        let filter = self.filter.clone();
        let keep = match filter.applies_metadata() && self.feed.has_stream_rules() {
            true => Keep::new(&filter, &lock(&self.shared).state, || self.settings.now()),
            false => Keep::unshown(&filter),
        };
        let followed = match position {
            Position::Follow { next_seq, cursor } => {
                self.read_following(next_seq, cursor, published, &keep)?
            }
            Position::Seek { .. } => false,
        };
        if !followed {
            self.read_positioned(position.next_seq(), published, &keep)?;
        }
        if self.feed.changes() != before {
            self.ahead.truncate(kept);
            self.position = Position::Seek {
                next_seq: position.next_seq(),
            };
        }
        Ok(())
    }

    /// Reads the run of records from `next_seq` up to `published` that
    /// the published state places, under the log's lock.
    fn read_positioned(
        &mut self,
        mut next_seq: u64,
        published: u64,
        keep: &Keep<'_>,
    ) -> Result<(), Error> {
        let count = (published - next_seq + 1).min(AHEAD_MAX);
        let run = lock(&self.shared)
            .state
            .runs(next_seq, count, self.settings.read_run_bytes_max)
            .into_iter()
            .next();
        let Some(run) = run else {
            return Ok(());
        };
        let file = self
            .handles
            .file(&self.settings, run.segment, run.segment_first_seq)?;
        let ahead = &mut self.ahead;
        self.next_read = (run.ranges[run.ranges.len() - 1].1 - run.ranges[0].0) as usize;
        let read = read_run(
            &self.settings,
            file.as_ref(),
            &run,
            keep,
            &mut self.buf,
            &mut |seq, commit| {
                debug_assert_eq!(seq, next_seq, "subscriptions skip no seq");
                next_seq = seq + 1;
                ahead.extend(commit.map(|commit| commit.to_commit()));
                ControlFlow::Continue(())
            },
        );
        // Past what was read ahead, even if the run failed part way: those
        // records are delivered, never read twice.
        self.position = match read {
            Ok(()) => {
                let &(_, end) = run.ranges.last().expect("a run holds a record");
                let cursor = Cursor {
                    segment: run.segment,
                    segment_first_seq: run.segment_first_seq,
                    offset: end,
                };
                Position::Follow { next_seq, cursor }
            }
            Err(_) => Position::Seek { next_seq },
        };
        read
    }

    /// Reads the records from `next_seq` up to `published` at `cursor`,
    /// with no lock; false if the bytes there do not start with the
    /// record `next_seq` (the segment ended, or the read was unlucky),
    /// for the caller to look its position up instead. A read the disk
    /// fails is an error, as for every reader: the engine retries no read
    /// (a retried read that succeeds may hand back bytes the disk could
    /// not vouch for), and the position stays for the next call.
    fn read_following(
        &mut self,
        next_seq: u64,
        cursor: Cursor,
        published: u64,
        keep: &Keep<'_>,
    ) -> Result<bool, Error> {
        let file = self
            .handles
            .file(&self.settings, cursor.segment, cursor.segment_first_seq)?;
        let last = published.min(next_seq + AHEAD_MAX - 1);
        let guess = self.next_read.clamp(FOLLOW_BYTES_MIN, FOLLOW_BYTES_MAX);
        self.next_read = guess;
        self.buf.clear();
        let read = file.read_at_onto(&mut self.buf, guess, cursor.offset)?;
        let (mut at, mut seq) = (0, next_seq);
        while seq <= last {
            let Ok(record) = parse_record(&self.buf[at..read]) else {
                break;
            };
            let Ok(commit) = keep.commit(&record, seq) else {
                break;
            };
            self.ahead.extend(commit);
            at += record.len;
            seq += 1;
        }
        if seq == next_seq {
            durlog_vfs::mark!("subscribe: a follower's next bytes were not its records");
            return Ok(false);
        }
        // Sized for the next read: what this one used, with room to grow.
        self.next_read = guess.min((2 * at).max(FOLLOW_BYTES_MIN));
        self.position = Position::Follow {
            next_seq: seq,
            cursor: Cursor {
                offset: cursor.offset + at as u64,
                ..cursor
            },
        };
        Ok(true)
    }
}

impl Iterator for Subscription {
    type Item = Result<Commit, Error>;

    /// Blocks for the next record; `None` once the log is closed and
    /// everything acknowledged before was delivered.
    fn next(&mut self) -> Option<Result<Commit, Error>> {
        loop {
            match self.next_until(None) {
                Ok(Some(commit)) => return Some(Ok(commit)),
                Ok(None) => continue,
                Err(Error::Closed) => return None,
                Err(error) => return Some(Err(error)),
            }
        }
    }
}
