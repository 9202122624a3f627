//! The `Log`: a thin facade over the parts that do the work, each owning
//! its state and its lock.
//!
//! - `settings.rs`: the options, resolved once, and the quota arithmetic.
//! - `group.rs`: group commit as a state machine with no I/O.
//! - `writer.rs`: a group's write and sync, cut-back, roll, poisoning.
//! - `preparer.rs`: the next segment, prepared ahead.
//! - `read.rs`: reads through the index; `open.rs`: opening.
//!
//! An append, driven by threads or by the simulator through the same code:
//!
//! 1. [`Log::submit`] checks the arguments, encodes the batch and queues it.
//! 2. A leader forms a group from the queue, in order: each append's expected
//!    version and the quota are checked against the state the earlier
//!    members leave (so the result is exactly that of running them one by
//!    one), and each accepted append gets its seq and versions.
//! 3. The leader rolls the segment if needed, writes the whole group with
//!    one write, and syncs it with one `fdatasync`.
//! 4. Only then is the group published (index, versions, size) and each
//!    member acknowledged; on a failure the file is cut back and every
//!    member fails.
//!
//! [`Log::append`] is `submit`, then either leading the next group or
//! sleeping (parked) until the group that covers it is published. Appends
//! that arrive while a sync is in flight form the next group; a publish
//! wakes exactly the threads it finished, and the first queued one to lead
//! next. A leader whose last group had company yields a few times before
//! forming the next, so the threads it just woke can join; a lone writer
//! never waits. The simulator calls [`Log::submit`] and
//! [`Log::commit_next_group`] itself, in a seeded order, with no threads.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Expected};
use crate::format::{Event, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES, batch_encoded_len, encode_batch_at};
use crate::recovery::RecoveryReport;
use crate::segment::Handles;
use crate::stats::Stats;
pub(crate) use crate::sync::lock;
use crate::sync::{Mutex, MutexGuard, Ordering, Rank, RankHeld, thread};

mod all;
mod commit;
mod feed;
mod filter;
mod follower;
mod group;
mod idempotent;
mod index_cache;
mod index_files;
mod open;
mod preparer;
mod read;
mod retention;
mod settings;
mod streams;
mod subscribe;
mod writer;

pub use commit::{Commit, CommitRef};
pub use filter::Filter;
pub use follower::Follower;
pub use group::Ticket;
pub use retention::Retention;
pub use settings::{
    Clock, DEFAULT_SEGMENT_BYTES, FAILPOINT_AFTER_WRITE, Failpoint, IndexFiles, NextSegment,
    Options, READ_RUN_BYTES_DEFAULT, SEGMENT_BYTES_MAX, Tuning,
};

pub use streams::Deletion;
pub use subscribe::Subscription;

use feed::Feed;
use group::{GroupCommit, Member, Published};
use settings::Settings;
use writer::WriterSide;

/// A crash-safe, append-only, segmented event log. `Send + Sync`: share
/// it between threads behind an `Arc`; appends from several threads are
/// made durable together (group commit).
///
/// ```
/// use durlog::{Event, Expected, Log, Options};
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let dir = dir.path();
/// let log = Log::open(dir, Options::default())?;
/// let created = Event::new("created", b"{}".to_vec());
/// let version = log.append("order-42", Expected::NoStream, &[created])?;
/// assert_eq!(version, 1); // durable: it survives a crash from here on
/// let events = log.read("order-42", 1, 100)?;
/// assert_eq!(events[0].event_type, "created");
/// # Ok::<(), durlog::Error>(())
/// ```
///
/// [`Log::open`] works on the host's file system; [`Log::open_with_vfs`]
/// on any [`Vfs`](crate::vfs::Vfs), such as the simulated disk of the
/// `sim` feature; [`Log::open_read_only`] takes
/// [`PosixVfs`](crate::vfs::PosixVfs) (or any other) for a reader beside
/// the process that writes.
//
// The lock order (not the user's business, so not in the docs above): a
// thread holding one of these locks takes only locks ranked after it,
// never one before (each carries its `Rank`, and debug builds check every
// acquisition: `crate::sync`):
//
// 0. the lead of the group commit (`Lead`): not a mutex, but held by
//    one thread across a group's I/O, a purge's or a truncation's, during
//    which it takes `shared` again. Claimed without waiting, under
//    `shared`; waited for with nothing held.
// 1. `Indexer::files`: the writer of index files, held while one is
//    written (not while it is built) and by a purge or a truncation while
//    it removes segments, so that no index file outlives its segment.
// 2. `tables_file`: the writer of the tables of stream metadata and
//    consumer positions, held across a file's replacement.
// 3. `shared`: the group commit's queue and outcomes, the published state
//    and the stats. A leader releases it for its group's I/O.
// 4. the writer's lock (`WriterSide::writer`, with its condition variable
//    `wanted`): the active segment and the next segment's preparation.
// 5. the preparing thread's handle (`Preparer::thread`), taken under the
//    writer's lock when a segment first gets half full.
// 6. leaves: `handles`, `index_cache`, `spare_payloads`, the feed's
//    lock, and the indexing thread's wake-ups and handle (`Indexer::wake`,
//    `Indexer::thread`). No other lock is taken while one of them is held
//    (an index is read back with none held, then put in `index_cache`).
pub struct Log {
    settings: Arc<Settings>,
    recovery: RecoveryReport,
    /// Lock rank `Rank::Shared`. Shared with subscriptions, which read the
    /// committed state (segments and offsets) to find records.
    shared: Arc<Mutex<Shared>>,
    /// The last published seq, which subscriptions read without a lock,
    /// and a leaf lock for those that have caught up to sleep under.
    feed: Arc<Feed>,
    /// The writer side; `None` for a log opened read-only, which refuses
    /// every append.
    writer: Option<Arc<WriterSide>>,
    /// The writer of index files (its lock, rank `Rank::IndexFiles`, held
    /// while one is written and by a purge or a truncation while it
    /// removes segments), and its thread with `IndexFiles::Background`.
    indexer: Arc<index_files::Indexer>,
    /// Lock rank `Rank::Tables`: the writer of the tables' files (stream
    /// metadata and consumer positions), held across a file's replacement.
    tables_file: Mutex<streams::TablesFile>,
    /// A leaf lock: read handles of segments.
    handles: Mutex<Handles>,
    /// A leaf lock: sealed segments' indexes read back.
    index_cache: Mutex<index_cache::IndexCache>,
    /// A leaf lock: payload buffers of published appends, for the next
    /// ones to encode into (`submit` encodes before it takes `shared`).
    spare_payloads: Mutex<Vec<Vec<u8>>>,
    /// The writer's lock on the directory (`LOCK_FILE_NAME`), held for the
    /// log's life; declared last so that it goes last, after the files.
    lock: Option<Box<dyn durlog_vfs::FileLock>>,
}

/// Buffers kept in [`Log::spare_payloads`]: enough for one per writer of a
/// busy log, none so large that a one-off big event stays resident.
const SPARE_PAYLOADS_MAX: usize = 128;
const SPARE_PAYLOAD_BYTES_MAX: usize = 64 << 10;

/// What the shared lock guards.
struct Shared {
    commit: GroupCommit,
    state: Published,
    stats: Stats,
    /// What the log keeps, applied at rolls.
    retention: Retention,
}

impl Log {
    /// Appends `events` to `stream` as one record, if the stream is at the
    /// `expected` version; returns the stream's new version once the record
    /// is durable.
    ///
    /// Where every event carries an id ([`Event::with_id`]), for any
    /// `expected`: if the stream already holds events with exactly these
    /// ids, in this order, as consecutive versions, this is a retry that
    /// landed: it returns the last of those versions and writes nothing;
    /// if it holds some of them, or all in another order, it is a
    /// `VersionConflict`; if none, a new append, checked as usual. A
    /// purged event's id is forgotten with it.
    pub fn append(&self, stream: &str, expected: Expected, events: &[Event]) -> Result<u64, Error> {
        let ticket = self.submit(stream, expected, events)?;
        let mut shared = lock(&self.shared);
        loop {
            if let Some(outcome) = shared.commit.take_outcome(ticket) {
                return outcome;
            }
            if !shared.commit.is_led() {
                shared = self.lead(shared);
                // A leader that panicked took this append with it.
                let commit = &shared.commit;
                if commit.is_poisoned() && !commit.has_outcome(ticket) && !commit.is_queued(ticket)
                {
                    return Err(Error::Poisoned);
                }
                continue;
            }
            // Sleep until this append's group is published, or until this
            // thread is asked to lead the next group. Waking only those
            // threads (not every waiter) keeps 64 writers from thrashing
            // two cores with wake-ups that find nothing to do.
            shared.commit.wait(ticket, thread::current());
            drop(shared);
            thread::park();
            shared = lock(&self.shared);
            shared.commit.stop_waiting(ticket);
        }
    }

    /// Step 1 of an append: checks the arguments, encodes the batch and
    /// queues it. The outcome comes from a later group commit
    /// ([`Log::commit_next_group`], or any thread's `append`) and is
    /// collected with [`Log::take_outcome`].
    pub fn submit(
        &self,
        stream: &str,
        expected: Expected,
        events: &[Event],
    ) -> Result<Ticket, Error> {
        let payload_len = check_arguments(stream, events)?;
        if self.writer.is_none() {
            return Err(Error::ReadOnly {
                dir: self.settings.dir.clone(),
            });
        }
        let at = self.settings.now();
        let mut payload = lock(&self.spare_payloads).pop().unwrap_or_default();
        payload.clear();
        payload.reserve(payload_len as usize);
        encode_batch_at(&mut payload, stream, 0, events, at);
        // Only an append all of whose events carry ids is a retry by ids.
        let ids: Option<Vec<_>> = events.iter().map(Event::id).collect();
        let mut shared = lock(&self.shared);
        if shared.commit.is_poisoned() {
            return Err(Error::Poisoned);
        }
        Ok(shared
            .commit
            .enqueue(expected, payload, events.len() as u32, ids))
    }

    /// Steps 2 to 4 for the next group of queued appends, on the calling
    /// thread. Returns how many appends got an outcome (0 if the queue is
    /// empty or another thread's group is in flight).
    pub fn commit_next_group(&self) -> usize {
        let shared = lock(&self.shared);
        if shared.commit.is_led() {
            return 0;
        }
        let before = shared.commit.outcomes();
        let shared = self.lead(shared);
        shared.commit.outcomes() - before
    }

    /// The outcome of a submitted append, once its group was committed.
    pub fn take_outcome(&self, ticket: Ticket) -> Option<Result<u64, Error>> {
        lock(&self.shared).commit.take_outcome(ticket)
    }

    /// Appends queued and not yet in a group.
    pub fn queued(&self) -> usize {
        lock(&self.shared).commit.queued()
    }

    /// Takes the lead, if no one holds it, and commits one group; called
    /// with the lock, returns with it.
    fn lead<'a>(&'a self, shared: MutexGuard<'a, Shared>) -> MutexGuard<'a, Shared> {
        // Bound after the lead, the guard goes first on an unwind, so the
        // lead's drop can take the lock to poison the log.
        let (lead, mut shared) = match Lead::take(&self.shared, shared) {
            Ok(taken) => taken,
            Err(shared) => return shared,
        };
        if shared.commit.is_poisoned() {
            shared.commit.fail_queued();
            lead.hand_on(&mut shared);
            shared.commit.wake_finished_and_next_leader();
            return shared;
        }
        shared = self.gather(shared);
        let Shared {
            commit,
            state,
            stats,
            ..
        } = &mut *shared;
        let group = group::form_group(commit, state, &self.settings);
        if group.members.is_empty() {
            commit.end_empty_group(group, stats);
            lead.hand_on(&mut shared);
            shared.commit.wake_finished_and_next_leader();
            return shared;
        }
        drop(shared);

        let writer = self
            .writer
            .as_ref()
            .expect("only a writable log queues appends");
        let started = Instant::now();
        let result = match group.roll_to {
            Some(_) => self.retain(group.bytes),
            None => Ok(()),
        };
        let result = result.and_then(|()| writer.write_group(&group));
        let result = result.map(|()| started.elapsed().as_nanos() as u64);

        let mut shared = lock(&self.shared);
        lead.hand_on(&mut shared);
        let Shared {
            commit,
            state,
            stats,
            ..
        } = &mut *shared;
        let durable = result.is_ok();
        let segment = group.segment;
        let rolled = group.roll_to.is_some();
        let mut members = group::publish(commit, state, stats, &self.settings, group, result);
        let published = state.last_seq;
        let segment_kept = state.find_segment(segment).is_some();
        let publishing = durable && segment_kept;
        if publishing {
            // Before the lead goes: a truncation that takes it next waits
            // for this publish to land rather than be overtaken by it.
            self.feed.will_publish();
        }
        // Wake outside the lock: the next leader, woken first, can form its
        // group while this thread is still waking the rest.
        let mut threads = commit.threads_to_wake();
        drop(shared);
        for thread in threads.drain(..) {
            thread.unpark();
        }
        if publishing {
            self.feed.publish(published);
        }
        if rolled {
            // The segment rolled away from is sealed: its index file next.
            self.indexer.wake();
        }
        self.recycle_payloads(&mut members);
        let mut shared = lock(&self.shared);
        shared.commit.recycle(threads, members);
        shared
    }

    /// If the last group had company, yields a few times so that its
    /// threads, woken a moment ago, can queue their next appends in time
    /// to share this group's sync. Never a sleep, and never for a lone
    /// writer. The caller holds the lead.
    fn gather<'a>(&'a self, mut shared: MutexGuard<'a, Shared>) -> MutexGuard<'a, Shared> {
        let company = shared.commit.last_group_size;
        let mut yields = 0;
        while company > 1
            && shared.commit.queued() < company
            && yields < self.settings.tuning.gather_yields
        {
            drop(shared);
            thread::yield_now();
            shared = lock(&self.shared);
            yields += 1;
        }
        shared
    }

    /// Keeps a published group's payload buffers for the appends to come
    /// (outside the shared lock: submitters take them concurrently) and
    /// empties `members` for reuse.
    fn recycle_payloads(&self, members: &mut Vec<Member>) {
        let mut spare = lock(&self.spare_payloads);
        for member in members.drain(..) {
            let payload = member.pending.payload;
            if spare.len() < SPARE_PAYLOADS_MAX && payload.capacity() <= SPARE_PAYLOAD_BYTES_MAX {
                spare.push(payload);
            }
        }
    }

    /// Prepares the next segment file now if the log wants one (its active
    /// segment is half full and no file is prepared): `Ok(true)` if this
    /// call wrote one. For [`NextSegment::OnCall`]. A failure changes
    /// nothing the log relies on: the roll then creates its file.
    pub fn prepare_next_segment(&self) -> Result<bool, Error> {
        match &self.writer {
            Some(writer) if !self.is_poisoned() => writer.prepare().map_err(Error::Io),
            _ => Ok(false),
        }
    }

    /// The stream's version: its number of events (0 if unknown).
    pub fn version(&self, stream: &str) -> u64 {
        lock(&self.shared).state.index.version(stream)
    }

    /// Names of the streams that start with `prefix`, sorted; deleted
    /// streams (hard, or soft with nothing appended since) are left out.
    pub fn streams(&self, prefix: &str) -> Vec<String> {
        let shared = lock(&self.shared);
        let state = &shared.state;
        let mut names = state.index.names_with_prefix(prefix);
        names.retain(|name| !state.is_deleted(name));
        names
    }

    /// Seq of the last acknowledged record (0 for an empty log).
    pub fn last_seq(&self) -> u64 {
        lock(&self.shared).state.last_seq
    }

    /// Bytes of acknowledged records in all segments (never counts
    /// preallocated or torn bytes).
    pub fn size(&self) -> u64 {
        lock(&self.shared).state.size
    }

    /// What recovery found and did when this log was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Counters and histograms since open.
    pub fn stats(&self) -> Stats {
        let mut stats = lock(&self.shared).stats.clone();
        // Not under the writer's lock, which a leader holds through a sync.
        stats.segments_prepared = self
            .writer
            .as_ref()
            .map_or(0, |writer| writer.prepared_rolls.load(Ordering::Relaxed));
        stats
    }

    /// True once a failed append could not be undone durably.
    pub fn is_poisoned(&self) -> bool {
        lock(&self.shared).commit.is_poisoned()
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.settings.dir
    }

    /// Closes the log. Every acknowledged append is already durable, so
    /// this only releases the files.
    pub fn close(self) -> Result<(), Error> {
        drop(self);
        Ok(())
    }
}

/// The checks on an append's arguments, before anything is encoded: the
/// payload's length if they pass.
fn check_arguments(stream: &str, events: &[Event]) -> Result<u64, Error> {
    if stream.is_empty() {
        return Err(Error::EmptyStreamName);
    }
    if events.is_empty() {
        return Err(Error::EmptyBatch {
            stream: stream.to_owned(),
        });
    }
    if stream.len() > MAX_NAME_BYTES {
        return Err(Error::NameTooLong {
            what: "stream name",
            len: stream.len(),
        });
    }
    if let Some(event) = events
        .iter()
        .find(|event| event.event_type.len() > MAX_NAME_BYTES)
    {
        return Err(Error::NameTooLong {
            what: "event type",
            len: event.event_type.len(),
        });
    }
    if let Some(len) = events
        .iter()
        .filter_map(|event| event.content_type().map(str::len))
        .find(|&len| len > MAX_NAME_BYTES)
    {
        return Err(Error::NameTooLong {
            what: "content type",
            len,
        });
    }
    let payload_len = batch_encoded_len(stream, events);
    if payload_len > MAX_PAYLOAD_BYTES || u32::try_from(events.len()).is_err() {
        return Err(Error::RecordTooLarge {
            stream: stream.to_owned(),
            bytes: payload_len,
        });
    }
    Ok(payload_len)
}

impl Drop for Log {
    fn drop(&mut self) {
        if let Some(writer) = &self.writer {
            writer.stop_preparer();
        }
        self.indexer.stop();
        self.feed.close();
    }
}

/// The lead of the group commit: while a thread holds it, no other forms
/// or writes a group, purges or truncates. Taken only with
/// [`Lead::take`], without waiting, under the shared lock; a purge or
/// truncation that finds it taken waits for it holding nothing (lock rank
/// 0, `Log`'s lock order).
///
/// Dropping it hands it on: it is free again and the next leader (or a
/// thread waiting to purge) is woken. If its holder panics (a failpoint
/// hook may, in the middle of a group's I/O), what is on disk is unknown:
/// the log is poisoned and every waiting thread is woken to find it so.
struct Lead<'a> {
    shared: &'a Mutex<Shared>,
    /// Given up with the shared lock already held: nothing left to do.
    handed_on: bool,
    _rank: RankHeld,
}

impl<'a> Lead<'a> {
    /// The lead, with the shared lock given back, if no one holds it; the
    /// lock alone if someone does.
    fn take(
        mutex: &'a Mutex<Shared>,
        mut shared: MutexGuard<'a, Shared>,
    ) -> Result<(Lead<'a>, MutexGuard<'a, Shared>), MutexGuard<'a, Shared>> {
        if !shared.commit.start_lead() {
            return Err(shared);
        }
        let lead = Lead {
            shared: mutex,
            handed_on: false,
            _rank: RankHeld::claimed(Rank::Lead),
        };
        Ok((lead, shared))
    }

    /// Gives the lead up under the shared lock, which the caller holds
    /// (and wakes the next leader with, once it has published).
    fn hand_on(mut self, shared: &mut Shared) {
        shared.commit.end_lead();
        self.handed_on = true;
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if self.handed_on {
            return;
        }
        let mut shared = lock(self.shared);
        shared.commit.end_lead();
        if thread::panicking() {
            shared.commit.poison();
            for waiter in shared.commit.take_all_waiters() {
                waiter.unpark();
            }
        } else {
            shared.commit.wake_finished_and_next_leader();
        }
    }
}
