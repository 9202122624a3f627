//! Retention and truncation: the two ways a log shrinks (FORMAT.md,
//! "Retention and truncation").
//!
//! - A purge removes sealed segments from the front. The state file,
//!   naming the new first seq and the versions the removed records leave
//!   their streams at, is durable before any segment is removed, so a
//!   crash between leaves segments the state file already disowns, and
//!   Open removes them.
//! - A truncation removes the records after a seq. The state file names
//!   the truncation first; the later segments are removed and the one
//!   holding the last record kept is cut; only once that is durable does
//!   the state file stop naming it. Open finishes one a crash stopped.
//!
//! Both take the lead of the group commit ([`Claim`]): no group forms or
//! writes while one runs. A failure before the state file is renamed
//! changes nothing; one between its rename and its directory sync leaves
//! the outcome to the next recovery, so the log is poisoned and the call
//! fails. Once the state file is durable the change is decided: the call
//! returns `Ok` and readers see the change, and if a later step fails
//! the log is poisoned and Open finishes what it left.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::format::{LogState, SegmentIndex, decode_batch, parse_record};
use crate::recovery::{StateWrite, write_state};
use crate::segment::{IndexFile, read_record_bytes};
use crate::sync::{Rank, RankHeld, thread};

use super::group::{GroupFailure, Published};
use super::index_cache::Sealed;
use super::writer::WriterSide;
use super::{Lead, Log, lock};

/// What a log keeps, applied at each segment roll: the oldest sealed
/// segments are purged while the log is over either limit. The active
/// segment is never purged, so a log keeps at least its newest records.
///
/// `#[non_exhaustive]`, so that a limit added later breaks no caller:
/// `Retention::default().with(|retention| retention.max_bytes = Some(n))`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Retention {
    /// Keep at most this many bytes of records (`size()`); `None`: no limit.
    pub max_bytes: Option<u64>,
    /// Purge segments whose newest record is older than this, by the
    /// log's clock (`Options::now`); `None`: no limit.
    pub max_age: Option<Duration>,
}

impl Retention {
    /// This policy changed by `change`.
    pub fn with(mut self, change: impl FnOnce(&mut Retention)) -> Retention {
        change(&mut self);
        self
    }

    fn is_none(&self) -> bool {
        self.max_bytes.is_none() && self.max_age.is_none()
    }
}

/// A purge, planned under the shared lock and carried out without it.
pub(crate) struct PurgePlan {
    /// How many segments go, from the front.
    count: usize,
    /// Their files, oldest first.
    paths: Vec<PathBuf>,
    /// The first seq kept, and the id of its segment.
    first_seq: u64,
    first_id: u32,
    /// The state file that makes it durable.
    state: LogState,
}

/// A truncation, planned under the shared lock.
struct TruncatePlan {
    /// The last seq kept.
    last_seq: u64,
    /// The position of the segment that holds it (or the first segment
    /// kept, if no record is), and the end of its records kept.
    keep: usize,
    cut: u64,
    /// The segments after it, to remove.
    removed: Vec<PathBuf>,
    /// The state file that names the truncation, and the one after it.
    under_way: LogState,
}

impl Published {
    /// A purge of the sealed segments all of whose records have seq <
    /// `before`; `None` if there is none.
    pub(crate) fn purge_plan(&self, before: u64) -> Option<PurgePlan> {
        // A segment's records all precede the next segment's first seq;
        // the last (active) segment is never purged.
        let count = self
            .segments
            .windows(2)
            .take_while(|pair| pair[1].first_seq <= before)
            .count();
        (count > 0).then(|| self.plan_purge_of(count))
    }

    fn plan_purge_of(&self, count: usize) -> PurgePlan {
        debug_assert!(count > 0 && count < self.segments.len());
        let kept = &self.segments[count];
        PurgePlan {
            count,
            paths: self.segments[..count]
                .iter()
                .map(|segment| segment.path.clone())
                .collect(),
            first_seq: kept.first_seq,
            first_id: kept.id,
            state: LogState {
                first_seq: kept.first_seq,
                truncate_after: None,
                purged_versions: self.index.versions_before_segment(kept.id),
            },
        }
    }

    /// The state the log is in: what its state file says, or would.
    fn log_state(&self) -> LogState {
        let first_id = self.segments.first().map_or(self.next_id, |s| s.id);
        LogState {
            first_seq: self.first_seq,
            truncate_after: None,
            purged_versions: self.index.versions_before_segment(first_id),
        }
    }

    /// Moves past a durable purge.
    fn apply_purge(&mut self, plan: &PurgePlan) {
        let removed: u64 = self.segments[..plan.count].iter().map(|s| s.len).sum();
        self.segments.drain(..plan.count);
        debug_assert_eq!(self.segments[0].first_seq, plan.first_seq);
        self.index.drop_segments_before(plan.first_id);
        self.first_seq = plan.first_seq;
        self.size -= removed;
        self.changes += 1;
        // A segment without an index file may have gone from before those
        // with one.
        self.seal_indexed();
    }

    fn truncate_plan(&self, last_seq: u64) -> TruncatePlan {
        debug_assert!(last_seq + 1 >= self.first_seq && last_seq < self.last_seq);
        let keep = self
            .segments
            .partition_point(|segment| segment.first_seq <= last_seq)
            .max(1)
            - 1;
        let segment = &self.segments[keep];
        let cut = match segment.record(last_seq) {
            Some((_, end)) => end,
            None => 0, // the first segment kept, emptied
        };
        TruncatePlan {
            last_seq,
            keep,
            cut,
            removed: self.segments[keep + 1..]
                .iter()
                .map(|segment| segment.path.clone())
                .collect(),
            under_way: LogState {
                truncate_after: Some(last_seq),
                ..self.log_state()
            },
        }
    }

    /// Moves back past a durable truncation.
    fn apply_truncate(&mut self, plan: &TruncatePlan, sealed: Option<&SegmentIndex>) {
        self.segments.truncate(plan.keep + 1);
        let segment = &mut self.segments[plan.keep];
        let kept = (plan.last_seq + 1).saturating_sub(segment.first_seq) as usize;
        segment.offsets.truncate(kept);
        segment.len = plan.cut;
        segment.index_file = IndexFile::Missing;
        segment.parts = false;
        let cut32 = u32::try_from(plan.cut).expect("a cut is within a segment");
        let id = segment.id;
        self.index.truncate_from(id, cut32, sealed);
        self.last_seq = plan.last_seq;
        self.size = self.segments.iter().map(|segment| segment.len).sum();
        self.changes += 1;
    }
}

/// How a purge or a truncation that was decided ended (its state file is
/// durable, so `Ok` to its caller either way).
enum Change {
    /// Every step done, durably.
    Done,
    /// A step after the decision failed: the log is poisoned, and Open
    /// finishes what was left.
    DoneThenPoisoned,
}

/// Why a purge or a truncation was not decided.
enum Undecided {
    /// It failed before its state file changed: nothing changed.
    Unchanged(Error),
    /// Its state file was renamed but the rename not made durable: the
    /// next recovery decides, and the log is poisoned until then.
    Unknown(Error),
}

impl Undecided {
    fn into_error(self) -> Error {
        match self {
            Undecided::Unchanged(error) | Undecided::Unknown(error) => error,
        }
    }
}

impl Log {
    /// Removes every sealed segment all of whose records have seq <
    /// `before`, oldest first; never the active segment. Returns
    /// `first_seq()` after it. Durable before it returns; a crash at any
    /// step leaves the log as it was before or as it is after.
    pub fn purge_before(&self, before: u64) -> Result<u64, Error> {
        self.writable()?;
        let _lead = self.wait_for_lead()?;
        let plan = lock(&self.shared).state.purge_plan(before);
        if let Some(plan) = plan {
            self.purge(&plan).map_err(Undecided::into_error)?;
        }
        Ok(self.first_seq())
    }

    /// The seq of the first record still kept (`last_seq() + 1` if none is).
    pub fn first_seq(&self) -> u64 {
        lock(&self.shared).state.first_seq
    }

    /// Removes every record with seq > `seq` (for consensus logs, whose
    /// uncommitted suffix is replaced by a new leader's): the streams they
    /// held go back to their earlier versions. `seq` before `first_seq() -
    /// 1` is refused with `Error::Purged` and changes nothing; `seq` at or
    /// after `last_seq()` changes nothing. Durable before it returns; a
    /// crash at any step leaves the log as it was before or as it is after.
    pub fn truncate_after(&self, seq: u64) -> Result<(), Error> {
        let writer = self.writable()?;
        let _lead = self.wait_for_lead()?;
        let plan = {
            let shared = lock(&self.shared);
            let state = &shared.state;
            if seq < state.first_seq - 1 {
                return Err(Error::Purged {
                    first_seq: state.first_seq,
                });
            }
            if seq >= state.last_seq {
                return Ok(());
            }
            state.truncate_plan(seq)
        };
        self.feed.wait_published();
        self.truncate(writer, &plan)
            .map(|_| ())
            .map_err(Undecided::into_error)
    }

    /// Sets what the log keeps from now on, applied at each segment roll
    /// (by the append that rolls, which no other append waits behind any
    /// longer than for its roll).
    pub fn set_retention(&self, retention: Retention) {
        lock(&self.shared).retention = retention;
    }

    pub(super) fn writable(&self) -> Result<&Arc<WriterSide>, Error> {
        self.writer.as_ref().ok_or_else(|| Error::ReadOnly {
            dir: self.settings.dir.clone(),
        })
    }

    /// Takes the lead of the group commit, waiting for a leader's group to
    /// finish first (with nothing held: `Rank::Lead`).
    fn wait_for_lead(&self) -> Result<Lead<'_>, Error> {
        let mut shared = lock(&self.shared);
        loop {
            if shared.commit.is_poisoned() {
                return Err(Error::Poisoned);
            }
            match Lead::take(&self.shared, shared) {
                Ok((lead, _)) => return Ok(lead),
                Err(mut taken) => {
                    taken.commit.wait_to_claim(thread::current());
                    drop(taken);
                }
            }
            RankHeld::before_waiting_for(Rank::Lead);
            thread::park();
            shared = lock(&self.shared);
        }
    }

    /// Carries out a purge, with the lead held; the state moves once it
    /// is durable. Also called by a leader applying the retention.
    fn purge(&self, plan: &PurgePlan) -> Result<Change, Undecided> {
        let (vfs, dir) = (self.settings.vfs.as_ref(), self.settings.dir.as_path());
        // Held to the end: no index file is written for a segment going.
        let _files = lock(&self.indexer.files);
        let index_files = self.index_files_of(0..plan.count);
        self.write_state(&plan.state)?;
        // Decided: the state file disowns these segments. Readers learn it
        // before any file goes, so one that loses a file looks again and
        // finds the purge, never a missing segment.
        // The feed first: a subscriber must never find the log without the
        // records its feed still promises (it would look for them again
        // and again).
        self.feed.purged(plan.first_seq);
        let mut shared = lock(&self.shared);
        shared.state.apply_purge(plan);
        shared.stats.purges += 1;
        shared.stats.segments_purged += plan.count as u64;
        drop(shared);
        lock(&self.handles).forget_before(plan.first_id);
        lock(&self.index_cache).clear();
        // A crash from here leaves files that Open removes, in any order,
        // and a failure only leaves them to it (the log is poisoned).
        // Index files first: one left by a crash is removed by Open
        // anyway, a segment's is never left without it.
        let removed = index_files
            .iter()
            .chain(&plan.paths)
            .try_for_each(|path| vfs.remove_file(path))
            .and_then(|()| vfs.sync_dir(dir));
        Ok(self.finish(removed))
    }

    /// Carries out a truncation, with the lead held. The writer cuts its
    /// own files; this only orders the steps around it.
    fn truncate(&self, writer: &WriterSide, plan: &TruncatePlan) -> Result<Change, Undecided> {
        let (vfs, dir) = (self.settings.vfs.as_ref(), self.settings.dir.as_path());
        // Held to the end: no index file is written for a segment cut.
        let _files = lock(&self.indexer.files);
        let index_files = self.index_files_of(plan.keep..plan.keep + 1 + plan.removed.len());
        // Before anything is decided: the cut segment's records, if the
        // index holds them as parts, come back one by one. Looked up under
        // `files`, which a writer of index files holds until its segment
        // is sealed so.
        let sealed = {
            let shared = lock(&self.shared);
            let segment = &shared.state.segments[plan.keep];
            segment.parts.then_some(Sealed {
                id: segment.id,
                first_seq: segment.first_seq,
                len: segment.len,
            })
        };
        let sealed = (sealed.as_ref())
            .map(|sealed| self.segment_index(sealed))
            .transpose()
            .map_err(Undecided::Unchanged)?;
        self.write_state(&plan.under_way)?;
        // Decided: the state file names the truncation, so Open finishes
        // it whatever happens from here. Readers learn it before any byte
        // goes; no group forms while this holds the lead.
        // The feed first, as for a purge.
        self.feed.truncated(plan.last_seq);
        let (keep_path, keep_id) = {
            let mut shared = lock(&self.shared);
            let segment = &shared.state.segments[plan.keep];
            let kept = (segment.path.clone(), segment.id);
            shared.state.apply_truncate(plan, sealed.as_deref());
            shared.stats.truncations += 1;
            kept
        };
        lock(&self.handles).forget_after(keep_id);
        lock(&self.index_cache).clear();
        let finished = LogState {
            truncate_after: None,
            ..plan.under_way.clone()
        };
        // The positions past it go back with the records they named:
        // their seqs will be used again.
        // The index files before the bytes they index: the segment cut
        // becomes the last, which has none.
        let done = index_files
            .iter()
            .try_for_each(|path| vfs.remove_file(path))
            .and_then(|()| writer.cut_to(&keep_path, plan.cut, &plan.removed))
            .and_then(|()| self.take_back_positions(plan.last_seq))
            .and_then(|()| write_state(vfs, dir, &finished).map_err(StateWrite::into_io));
        Ok(self.finish(done))
    }

    /// Writes the state file that decides a change.
    fn write_state(&self, state: &LogState) -> Result<(), Undecided> {
        let (vfs, dir) = (self.settings.vfs.as_ref(), self.settings.dir.as_path());
        match write_state(vfs, dir, state) {
            Ok(()) => Ok(()),
            Err(StateWrite::Before(error)) => Err(Undecided::Unchanged(Error::Io(error))),
            Err(StateWrite::After(error)) => Err(Undecided::Unknown(self.poison(error))),
        }
    }

    /// How a decided change ended, given the outcome of its later steps.
    fn finish(&self, later_steps: std::io::Result<()>) -> Change {
        match later_steps {
            Ok(()) => Change::Done,
            // A failure only leaves the rest to Open.
            Err(error) => {
                durlog_vfs::mark!("retention: a decided change poisoned by a later step");
                self.poison(error);
                Change::DoneThenPoisoned
            }
        }
    }

    /// A failure after the state file changed: what is on disk is for a
    /// reopen's recovery to decide, so the log stops.
    fn poison(&self, error: std::io::Error) -> Error {
        lock(&self.shared).commit.poison();
        log::error!(
            "durlog: {}: a purge or truncation failed after its state file changed ({error}); the log refuses appends until it is reopened, which finishes or undoes it",
            self.settings.dir.display()
        );
        Error::Io(error)
    }

    /// Applies the retention before a roll, for the leader of the group
    /// that rolls: a failure that changed nothing is only logged (the
    /// next roll tries again); one that poisoned the log fails the group.
    pub(super) fn retain(&self, group_bytes: u64) -> Result<(), GroupFailure> {
        let Some(plan) = self.retention_plan(group_bytes) else {
            return Ok(());
        };
        match self.purge(&plan) {
            Ok(Change::Done) => Ok(()),
            Ok(Change::DoneThenPoisoned) => Err(GroupFailure {
                error: Error::Poisoned,
                poisoned: true,
                rolled: false,
            }),
            Err(Undecided::Unknown(error)) => Err(GroupFailure {
                error,
                poisoned: true,
                rolled: false,
            }),
            Err(Undecided::Unchanged(error)) => {
                log::warn!(
                    "durlog: {}: the retention's purge failed ({error}); the next roll tries again",
                    self.settings.dir.display()
                );
                Ok(())
            }
        }
    }

    /// The purge the retention asks for before a roll to a new segment,
    /// given the bytes the rolling group adds: the oldest segments while
    /// the log is over a limit, never the one being rolled away from (its
    /// records are the newest). Called by the leader, which holds the
    /// lead, so the segments cannot change under it; reads the newest
    /// record of the oldest segments for their age without the shared lock.
    pub(super) fn retention_plan(&self, group_bytes: u64) -> Option<PurgePlan> {
        let (retention, candidates, size) = {
            let shared = lock(&self.shared);
            if shared.retention.is_none() {
                return None;
            }
            let segments = &shared.state.segments;
            let sealed = &segments[..segments.len().saturating_sub(1)];
            let candidates: Vec<SealedSegment> = sealed
                .iter()
                .map(|segment| SealedSegment {
                    id: segment.id,
                    first_seq: segment.first_seq,
                    len: segment.len,
                    newest: segment.record(segment.first_seq + segment.offsets.len() as u64 - 1),
                })
                .collect();
            (shared.retention, candidates, shared.state.size)
        };
        let oldest_kept = retention
            .max_age
            .map(|age| self.settings.now().saturating_sub(age.as_nanos() as i64));
        let mut remaining = size + group_bytes;
        let mut count = 0;
        for candidate in &candidates {
            let over_size = retention.max_bytes.is_some_and(|max| remaining > max);
            let too_old = oldest_kept
                .is_some_and(|oldest| self.newest_time(candidate).is_some_and(|at| at < oldest));
            if !over_size && !too_old {
                break;
            }
            remaining -= candidate.len;
            count += 1;
        }
        (count > 0).then(|| lock(&self.shared).state.plan_purge_of(count))
    }

    /// The time of a segment's newest record (`None` if it cannot be
    /// read: the retention then keeps the segment). The one read of the
    /// engine whose failure fails no call: the group it runs in is not
    /// the reader, and keeping a segment longer loses nothing; the next
    /// roll asks again.
    fn newest_time(&self, candidate: &SealedSegment) -> Option<i64> {
        let (start, end) = candidate.newest?;
        let at = self.read_newest_time(candidate, start, end);
        if at.is_none() {
            durlog_vfs::mark!("retention: a segment kept, its newest record unread");
        }
        at
    }

    fn read_newest_time(&self, candidate: &SealedSegment, start: u64, end: u64) -> Option<i64> {
        let vfs = self.settings.vfs.as_ref();
        let path = || self.settings.segment_path(candidate.first_seq);
        let file = lock(&self.handles).get(vfs, candidate.id, path).ok()?;
        let mut buf = Vec::new();
        let bytes = read_record_bytes(file.as_ref(), start, end - start, &mut buf).ok()?;
        let record = parse_record(bytes).ok()?;
        let batch = decode_batch(record.payload).ok()?;
        batch.events.last().map(|event| event.at)
    }
}

/// A sealed segment the retention may purge.
struct SealedSegment {
    id: u32,
    first_seq: u64,
    len: u64,
    /// The byte range of its newest record.
    newest: Option<(u64, u64)>,
}
