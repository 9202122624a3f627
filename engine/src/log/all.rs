//! Reading the whole log by position (seq): [`Commit`], the runs of
//! records a read covers, and [`Log::read_all`]. A record's seq is its
//! position: dense, in commit order, never reused. Positions are found
//! through each segment's record offsets (4 bytes a record); the bytes
//! come from the segment files, a run of records per read, each record
//! checked (CRC, seq) before any of it is returned.

use std::ops::ControlFlow;
use std::sync::Arc;

use durlog_vfs::{VfsFile, read_exact_at_onto};

use crate::error::Error;
use crate::format::{EventRef, parse_record};
use crate::segment::{Handles, read_record_bytes};

use super::commit::{Commit, CommitRef};
use super::filter::{Filter, Keep};
use super::group::Published;
use super::settings::Settings;
use super::{Log, lock};

/// The most records a read of the whole log places at a time (their
/// runs take 16 bytes a record until read): what it holds is bounded
/// however long the log and however many records it asks for.
const PLACED_RECORDS_MAX: u64 = 1 << 16;

/// Consecutive records of one segment, to read with one call.
pub(crate) struct Run {
    /// The segment's number and first seq (its name).
    pub(crate) segment: u32,
    pub(crate) segment_first_seq: u64,
    /// The seq of the first record, and each record's byte range.
    pub(crate) first: u64,
    pub(crate) ranges: Vec<(u64, u64)>,
}

impl Published {
    /// The runs that hold up to `count` acknowledged records from seq
    /// `from`, each within one segment and `run_bytes_max` bytes (unless a
    /// single record is larger: `Tuning::read_run_bytes_max`). Cheap:
    /// offsets only, no I/O.
    pub(crate) fn runs(&self, from: u64, count: u64, run_bytes_max: u64) -> Vec<Run> {
        let mut runs = Vec::new();
        let from = from.max(1);
        let last = self
            .last_seq
            .min(from.saturating_add(count).saturating_sub(1));
        let mut seq = from;
        let mut position = self
            .segments
            .partition_point(|segment| segment.first_seq <= seq)
            .saturating_sub(1);
        while seq <= last && position < self.segments.len() {
            let segment = &self.segments[position];
            let mut run = Run {
                segment: segment.id,
                segment_first_seq: segment.first_seq,
                first: seq,
                ranges: Vec::new(),
            };
            while seq <= last
                && let Some(range) = segment.record(seq)
            {
                let start = run.ranges.first().map_or(range.0, |first| first.0);
                if !run.ranges.is_empty() && range.1 - start > run_bytes_max {
                    break;
                }
                run.ranges.push(range);
                seq += 1;
            }
            if run.ranges.is_empty() {
                position += 1;
            } else {
                runs.push(run);
            }
        }
        runs
    }
}

impl Log {
    /// Acknowledged records with seq >= `max(from_seq, 1)`, in seq order,
    /// at most `limit` of them (0 returns none), each with all its events:
    /// `$all` is history, kept until a purge removes the segment, whatever
    /// metadata or deletion the stream has since (for those applied, see
    /// [`Filter::applying_metadata`]). Every record read is checked;
    /// damage is an error naming the file and offset, never wrong data.
    /// `Err(Error::Purged)` if a purge removed the record at `from_seq`.
    pub fn read_all(&self, from_seq: u64, limit: usize) -> Result<Vec<Commit>, Error> {
        self.read_all_filtered(from_seq, limit, &Filter::all())
    }

    /// [`Log::read_all`] through `filter`: a record none of whose events
    /// match is passed over; one some of whose events match is returned
    /// with those alone, its seq and first version as stored. `limit`
    /// counts the records returned. The filter is applied before any
    /// event's data is copied.
    pub fn read_all_filtered(
        &self,
        from_seq: u64,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Commit>, Error> {
        let mut commits = Vec::new();
        self.visit(from_seq, limit, filter, &mut |commit| {
            commits.push(commit.to_commit());
            match commits.len() < limit {
                true => ControlFlow::Continue(()),
                false => ControlFlow::Break(()),
            }
        })?;
        Ok(commits)
    }

    /// Lends `visit` each record [`Log::read_all_filtered`] would return
    /// (at most `limit`), in seq order, borrowed from the bytes read
    /// (checked as every read checks them), until it answers `Break` or
    /// the acknowledged records end: a projection folds the whole log with
    /// no copy of an event. A record lent stays lent when a later one
    /// fails: the error comes after it. `Err(Error::Purged)` as for
    /// `read_all`.
    pub fn visit_all(
        &self,
        from_seq: u64,
        limit: usize,
        filter: &Filter,
        mut visit: impl FnMut(&CommitRef<'_>) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        self.visit(from_seq, limit, filter, &mut visit)
    }

    /// Lends `visit` at most `limit` records from `from_seq` through
    /// `filter`, or fewer if it answers `Break`.
    fn visit(
        &self,
        from_seq: u64,
        limit: usize,
        filter: &Filter,
        visit: &mut dyn FnMut(&CommitRef<'_>) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        let (mut lent, mut seq) = (0, from_seq.max(1));
        let mut buf = Vec::new();
        while lent < limit {
            let (changes, runs, keep) = {
                let shared = lock(&self.shared);
                let state = &shared.state;
                if seq < state.first_seq {
                    return Err(Error::Purged {
                        first_seq: state.first_seq,
                    });
                }
                // What is left to fetch, or more once some were filtered
                // out: few records of a busy log may match.
                let wanted = (limit - lent) as u64;
                let count = if seq == from_seq.max(1) {
                    wanted
                } else {
                    wanted.max(256)
                };
                // A read of a long log places its runs a part at a time.
                let count = count.min(PLACED_RECORDS_MAX);
                let keep = Keep::new(filter, state, || self.settings.now());
                let run_bytes_max = self.settings.read_run_bytes_max;
                (state.changes, state.runs(seq, count, run_bytes_max), keep)
            };
            if runs.is_empty() {
                break;
            }
            let mut flow = ControlFlow::Continue(());
            let outcome = runs.iter().try_for_each(|run| {
                if flow.is_break() {
                    return Ok(());
                }
                let file = self.segment_file(run)?;
                read_run(
                    &self.settings,
                    file.as_ref(),
                    run,
                    &keep,
                    &mut buf,
                    &mut |seen, commit| {
                        if commit.is_some() && lent == limit {
                            flow = ControlFlow::Break(());
                            return flow;
                        }
                        seq = seen + 1;
                        let Some(commit) = commit else {
                            return ControlFlow::Continue(());
                        };
                        lent += 1;
                        flow = visit(&commit);
                        flow
                    },
                )
            });
            match outcome {
                // A purge or a truncation explains a file gone or cut short:
                // read on from the record that failed.
                Err(_) if lock(&self.shared).state.changes != changes => {}
                Err(error) => return Err(error),
                Ok(()) if flow.is_break() => break,
                Ok(()) => {}
            }
        }
        Ok(())
    }

    fn segment_file(&self, run: &Run) -> Result<Arc<dyn VfsFile>, Error> {
        let path = || self.settings.segment_path(run.segment_first_seq);
        let vfs = self.settings.vfs.as_ref();
        Ok(lock(&self.handles).get(vfs, run.segment, path)?)
    }
}

/// Reads `run` from `file` (its segment) with one call and lends each
/// record to `deliver`, in seq order, until it answers `Break`: its seq,
/// and its commit with the events `keep` keeps (`None` if none). A record
/// that fails its check is read again alone, once, before it is reported:
/// a flaky read is not damage.
pub(crate) fn read_run(
    settings: &Settings,
    file: &dyn VfsFile,
    run: &Run,
    keep: &Keep<'_>,
    buf: &mut Vec<u8>,
    deliver: &mut dyn FnMut(u64, Option<CommitRef<'_>>) -> ControlFlow<()>,
) -> Result<(), Error> {
    let (base, end) = (run.ranges[0].0, run.ranges[run.ranges.len() - 1].1);
    buf.clear();
    read_exact_at_onto(file, buf, (end - base) as usize, base)?;
    let (mut events, mut again) = (Vec::new(), Vec::new());
    for (position, &(start, end)) in run.ranges.iter().enumerate() {
        let seq = run.first + position as u64;
        let bytes = &buf[(start - base) as usize..(end - base) as usize];
        let flow = match check_commit(bytes, seq, keep, &mut events) {
            Ok(commit) => deliver(seq, commit),
            Err(_) => {
                let bytes = read_record_bytes(file, start, end - start, &mut again)?;
                let mut events = Vec::new();
                let commit = check_commit(bytes, seq, keep, &mut events).map_err(|reason| {
                    Error::Corrupt {
                        file: settings.segment_path(run.segment_first_seq),
                        offset: start,
                        reason,
                    }
                })?;
                deliver(seq, commit)
            }
        };
        if flow.is_break() {
            break;
        }
    }
    Ok(())
}

/// The record in `bytes` as a [`CommitRef`] of the events `keep` keeps
/// (held in `events`), if it is valid, whole and the one with `seq`.
fn check_commit<'r: 'e, 'e>(
    bytes: &'r [u8],
    seq: u64,
    keep: &Keep<'_>,
    events: &'e mut Vec<EventRef<'r>>,
) -> Result<Option<CommitRef<'e>>, String> {
    let record = parse_record(bytes).map_err(|error| error.to_string())?;
    if record.len != bytes.len() {
        return Err(format!(
            "record holds seq {} in {} bytes, the log expects seq {seq} in {}",
            record.seq,
            record.len,
            bytes.len()
        ));
    }
    keep.lend(&record, seq, events)
}

/// A reader's own handles to segment files, for readers that outlive a
/// borrow of the `Log` (subscriptions).
pub(crate) struct OwnHandles {
    handles: Handles,
}

impl OwnHandles {
    pub(crate) fn new() -> OwnHandles {
        OwnHandles {
            handles: Handles::default(),
        }
    }

    /// The handle of segment number `segment`, whose first seq is
    /// `segment_first_seq`.
    pub(crate) fn file(
        &mut self,
        settings: &Settings,
        segment: u32,
        segment_first_seq: u64,
    ) -> Result<Arc<dyn VfsFile>, Error> {
        let path = || settings.segment_path(segment_first_seq);
        Ok(self.handles.get(settings.vfs.as_ref(), segment, path)?)
    }
}
