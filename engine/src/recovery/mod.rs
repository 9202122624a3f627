//! Recovery: reading a log directory back and deciding what it holds.
//!
//! `scan` reads every segment in name order and checks every record (the
//! header fits, the length fits, the CRC matches, the seq is the previous
//! plus one, the segment's name is its first record's seq, the batch
//! decodes, its first version is its stream's last plus one). The first
//! record that fails decides (`decide.rs`, FORMAT.md's decision list):
//!
//! - in an earlier segment, acknowledged bytes are damaged: `Corrupt`;
//! - in the last segment, it is a torn tail (an append that crashed before
//!   it was acknowledged), which `Log::open` truncates durably, unless the
//!   bytes prove it is not: see [`GROUP_BYTES_MAX`].
//!
//! Damage to the structure (a file named like a segment that is not one, a
//! missing segment, a seq gap) is corruption wherever it is. Entries that
//! are not the log's (`lost+found`, dot files, a README) are passed over
//! and listed. The scan itself never writes: `durlog verify` runs it alone.
//!
//! This module exposes what read-only tools need beyond the crate root:
//! [`verify`], [`check`], [`visit_records`] and [`RecordInfo`]. What a scan
//! reports (`Tail`, `RecoveryReport`, `Refusal`, in `report.rs`) and the
//! decision list (`Rule`, `GROUP_BYTES_MAX`, in `decide.rs`) are reached at
//! the root alone, one path each.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use durlog_vfs::{OpenMode, Vfs, VfsFile};

use crate::error::Error;
use crate::format::{
    BatchError, BatchView, HEADER_SIZE, Header, LogState, RecordError, Tables, event_ids,
    inspect_batch, parse_record,
};
use crate::index::{Index, Location};
use crate::segment::{IndexFile, SegmentMeta, Window};

pub(crate) mod decide;
mod index_files;
mod later;
mod names;
pub(crate) mod report;
mod reread;
mod state;

use names::{Names, segment_names};
use reread::{Read, read_until_two_agree};

// The items the crate root exports, reachable inside the crate at
// `crate::recovery::X` as well.
pub(crate) use decide::{GROUP_BYTES_MAX, Rule};
pub(crate) use index_files::read_index_file;
pub(crate) use report::{RecoveryReport, Refusal, Tail};
pub(crate) use state::{StateWrite, replace_file, write_state};

/// One valid record, as a scan visits it.
pub struct RecordInfo<'a> {
    /// The segment file it is in.
    pub file: &'a Path,
    /// Its offset in that file.
    pub offset: u64,
    /// Its seq.
    pub seq: u64,
    /// Bytes it takes, header included.
    pub len: u64,
    /// Its payload (a batch that is known to decode).
    pub payload: &'a [u8],
    /// The batch's stream, first version and count.
    pub batch: BatchView<'a>,
}

/// What a scan hands to `Log::open`.
pub(crate) struct Scanned {
    pub segments: Vec<SegmentMeta>,
    pub index: Index,
    pub report: RecoveryReport,
    /// A next segment prepared by an earlier life, to remove.
    pub next_segment: Option<PathBuf>,
    /// The state file's content (a fresh log's if there is none).
    pub state: LogState,
    /// Whether a state file, or a temporary one, is in the directory.
    pub state_files: StateFiles,
    /// The tables of stream metadata and consumer positions.
    pub tables: Tables,
    /// What a purge or a truncation under way left for Open to remove.
    pub leftovers: Leftovers,
}

/// The bookkeeping files found in a directory.
#[derive(Clone, Debug, Default)]
pub(crate) struct StateFiles {
    pub state: bool,
    /// The tables of stream metadata and of consumer positions.
    pub streams: bool,
    pub consumers: bool,
    /// New bookkeeping files a crash left before their rename: the old
    /// ones (or none) still rule, and Open removes these.
    pub temps: Vec<PathBuf>,
}

/// Files and bytes that a purge or a truncation under way had still to
/// remove when the log stopped.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    /// Segments below the first seq kept.
    pub purged: Vec<PathBuf>,
    /// Segments after the truncation's last seq.
    pub truncated: Vec<PathBuf>,
    /// The records after the truncation's last seq in the segment that
    /// holds it: the file and where they start.
    pub cut: Option<(PathBuf, u64)>,
}

/// Scans `dir` read-only and reports what `Log::open` would find and do:
/// `Ok` with the tail state, or `Corrupt` naming the file and offset.
pub fn verify(vfs: &dyn Vfs, dir: &Path) -> Result<RecoveryReport, Error> {
    check(vfs, dir, GROUP_BYTES_MAX).map_err(Error::from)
}

/// [`verify`], calling `visit` for every valid record in log order.
pub fn visit_records(
    vfs: &dyn Vfs,
    dir: &Path,
    visit: &mut dyn FnMut(&RecordInfo<'_>),
) -> Result<RecoveryReport, Error> {
    Ok(scan(vfs, dir, GROUP_BYTES_MAX, visit, false)?.report)
}

/// [`verify`] for a log whose writers never wrote a group of more than
/// `group_bytes_max` bytes (`Tuning::group_bytes_max`), with the rule of a
/// refusal. A window smaller than the writers' groups may refuse a torn
/// tail as damage; the default, [`GROUP_BYTES_MAX`], suits every writer.
pub fn check(vfs: &dyn Vfs, dir: &Path, group_bytes_max: u64) -> Result<RecoveryReport, Refusal> {
    Ok(scan(vfs, dir, group_bytes_max, &mut |_| {}, false)?.report)
}

/// [`check`] as a writer's Open with `Tuning::open_trusts_index_files`
/// reads the directory: sealed segments whose index files agree are taken
/// from them, their records not read, so damage in those records is not
/// seen. What a refusal of such an Open is held to.
pub fn check_trusting_index_files(
    vfs: &dyn Vfs,
    dir: &Path,
    group_bytes_max: u64,
) -> Result<RecoveryReport, Refusal> {
    Ok(scan(vfs, dir, group_bytes_max, &mut |_| {}, true)?.report)
}

/// With `trust_index_files` (a writer's Open, `Tuning::open_trusts_index_files`),
/// a sealed segment whose index file agrees with its length and last
/// record is taken from the index file, its records not read.
pub(crate) fn scan(
    vfs: &dyn Vfs,
    dir: &Path,
    group_bytes_max: u64,
    visit: &mut dyn FnMut(&RecordInfo<'_>),
    trust_index_files: bool,
) -> Result<Scanned, Refusal> {
    let Names {
        segments: names,
        next_segment,
        index_files,
        state_files,
        ignored,
    } = segment_names(vfs, dir)?;
    let state = state::read_state(vfs, dir, state_files.state)?;
    let tables = state::read_tables(vfs, dir, &state_files)?;
    let sorted = state::Sorted::new(names, &state);
    let mut scanner = Scanner {
        index: state::seeded_index(&state),
        next_seq: state.first_seq,
        stop_after: state.truncate_after.unwrap_or(u64::MAX),
        records: 0,
        record_bytes: 0,
        buf: Vec::new(),
        group_bytes_max,
        offsets: Vec::new(),
    };
    // A truncation under way reads every segment: it may end in any.
    let trusted: &[(u64, PathBuf)] = match trust_index_files && state.truncate_after.is_none() {
        true => &index_files,
        false => &[],
    };
    let ScannedSegments {
        mut segments,
        tail,
        decided_by,
        cut,
        distrusted,
        trusted,
    } = scan_segments(vfs, &sorted.kept, trusted, &mut scanner, visit)?;
    // A truncation under way ends in the last segment kept (the ones it
    // removes are not in `segments`), whose index file goes with the cut.
    let stale_index_files =
        index_files::check_index_files(vfs, &index_files, &mut segments, &distrusted)?;
    debug_assert_eq!(
        segments.iter().map(|segment| segment.len).sum::<u64>(),
        scanner.record_bytes,
        "the segments' lengths are their records' bytes"
    );
    let report = RecoveryReport {
        segments: segments.len(),
        records: scanner.records,
        record_bytes: scanner.record_bytes,
        first_seq: state.first_seq,
        last_seq: scanner.next_seq - 1,
        truncating: state.truncate_after,
        purged_leftovers: sorted.purged.len(),
        tail,
        bytes_truncated: 0,
        decided_by,
        ignored,
        index_files: segments
            .iter()
            .filter(|segment| segment.index_file == IndexFile::Written)
            .count(),
        stale_index_files,
        index_files_trusted: trusted,
    };
    Ok(Scanned {
        segments,
        index: scanner.index,
        report,
        next_segment,
        state,
        state_files,
        tables,
        leftovers: Leftovers {
            purged: sorted.purged,
            truncated: sorted.truncated,
            cut,
        },
    })
}

/// What the segments' scan found.
struct ScannedSegments {
    segments: Vec<SegmentMeta>,
    /// The last segment's tail.
    tail: Tail,
    /// The rule that decided what the tail's first damaged record meant.
    decided_by: Option<Rule>,
    /// Where a truncation under way cuts: the file, and the length its
    /// last record kept ends at.
    cut: Option<(PathBuf, u64)>,
    /// Segments (by first seq) whose trusted index file did not continue
    /// the streams' versions: read instead, and the file is stale.
    distrusted: Vec<u64>,
    /// Segments taken from their index files.
    trusted: usize,
}

/// Scans the segments `kept` in order with `scanner`.
fn scan_segments(
    vfs: &dyn Vfs,
    kept: &[(u64, PathBuf)],
    trusted: &[(u64, PathBuf)],
    scanner: &mut Scanner,
    visit: &mut dyn FnMut(&RecordInfo<'_>),
) -> Result<ScannedSegments, Refusal> {
    let mut segments = Vec::with_capacity(kept.len());
    let mut tail = (Tail::Clean, None);
    let mut cut = None;
    let (mut distrusted, mut taken) = (Vec::new(), 0);
    for (position, (first_seq, path)) in kept.iter().enumerate() {
        let is_last = position + 1 == kept.len();
        if *first_seq != scanner.next_seq {
            let reason = seq_gap_reason(position, *first_seq, scanner.next_seq);
            return Err(corrupt(Rule::Structure, path, 0, reason));
        }
        let id = position as u32;
        // Each index file is read as its segment comes, and dropped once
        // taken: a log's index files are never all in memory at once.
        let index_file = (trusted
            .binary_search_by_key(first_seq, |(seq, _)| *seq)
            .ok())
        .filter(|_| !is_last)
        .map(|at| &trusted[at].1);
        let index = match index_file {
            Some(index_file) => index_files::trusted(vfs, index_file, path, *first_seq)?,
            None => None,
        };
        if let Some(index) = index {
            // Parts only while every segment before is parts too: a
            // stream's parts come before its records.
            let as_parts = segments.iter().all(|segment: &SegmentMeta| segment.parts);
            if scanner.take_index(&index, id, as_parts) {
                taken += 1;
                segments.push(SegmentMeta {
                    id,
                    first_seq: *first_seq,
                    path: path.clone(),
                    len: index.segment_len,
                    offsets: index.offsets,
                    index_file: IndexFile::Written,
                    parts: as_parts,
                });
                continue;
            }
            distrusted.push(*first_seq);
        }
        let file = vfs.open(path, OpenMode::ReadOnly)?;
        let scanned = scanner.scan_segment(file.as_ref(), path, id, is_last, visit)?;
        let (len, segment_tail) = scanned;
        debug_assert!(
            is_last || segment_tail.0 == Tail::Clean,
            "damage in a sealed segment is refused, never a tail"
        );
        if len == 0 && !is_last {
            let reason = "a sealed segment holds no record".into();
            return Err(corrupt(Rule::Sealed, path, 0, reason));
        }
        if scanner.next_seq > scanner.stop_after {
            // The truncation's last record: what follows it goes.
            cut = Some((path.clone(), len));
        }
        segments.push(SegmentMeta {
            id,
            first_seq: *first_seq,
            path: path.clone(),
            len,
            offsets: std::mem::take(&mut scanner.offsets),
            index_file: IndexFile::Missing,
            parts: false,
        });
        tail = segment_tail;
    }
    let (tail, decided_by) = tail;
    Ok(ScannedSegments {
        segments,
        tail,
        decided_by,
        cut,
        distrusted,
        trusted: taken,
    })
}

fn seq_gap_reason(position: usize, named: u64, expected: u64) -> String {
    if position == 0 {
        format!(
            "the first segment is named for seq {named}, but the log starts at seq {expected} (1, or the first kept after a purge, as its state file says): a segment is missing"
        )
    } else {
        format!(
            "segment named for seq {named}, but the previous segment ends at seq {}: a segment is missing or misnamed",
            expected - 1
        )
    }
}

fn corrupt(rule: Rule, file: &Path, offset: u64, reason: String) -> Refusal {
    Refusal {
        error: Error::Corrupt {
            file: file.to_path_buf(),
            offset,
            reason,
        },
        rule: Some(rule),
    }
}

/// Why the bytes at an offset are not the next record of the log: what
/// the scan checks found wrong there. A defect, not yet damage: a torn
/// tail, a stale copy and a bit flipped at rest all show as one, and
/// `decide.rs` says which it is. (Not `durlog_vfs::Damage`, the simulated
/// disk's record of a fault it injected.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Defect {
    /// The bytes are not a record: short, or a CRC mismatch.
    Record(RecordError),
    /// A valid record, but not the one the seq chain expects.
    Seq { found: u64, expected: u64 },
    /// A valid record whose payload is not a batch.
    Batch(BatchError),
    /// A valid batch that does not continue its stream's versions.
    Version {
        stream: String,
        found: u64,
        expected: u64,
    },
    /// A record starting where no segment reaches (offsets are 32 bits).
    BeyondSegmentLimit,
}

impl fmt::Display for Defect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Defect::Record(error) => error.fmt(f),
            Defect::Seq { found, expected } => {
                write!(f, "record has seq {found}, expected {expected}")
            }
            Defect::Batch(error) => error.fmt(f),
            Defect::Version {
                stream,
                found,
                expected,
            } => write!(
                f,
                "batch of stream {stream:?} starts at version {found}, expected {expected}"
            ),
            Defect::BeyondSegmentLimit => {
                f.write_str("record starts beyond 4 GiB, where no segment reaches")
            }
        }
    }
}

struct Scanner {
    index: Index,
    next_seq: u64,
    /// The last seq of a truncation under way (`u64::MAX`: none): records
    /// after it are not the log's, and the scan stops there.
    stop_after: u64,
    records: u64,
    record_bytes: u64,
    buf: Vec<u8>,
    /// The most bytes a group commit of the log's writers wrote at once.
    group_bytes_max: u64,
    /// The offsets of the valid records of the segment being scanned.
    offsets: Vec<u32>,
}

impl Scanner {
    /// Scans one segment; returns the end of its last valid record, the
    /// state of its tail and the rule that decided it (`None` if clean).
    fn scan_segment(
        &mut self,
        file: &dyn VfsFile,
        path: &Path,
        segment: u32,
        is_last: bool,
        visit: &mut dyn FnMut(&RecordInfo<'_>),
    ) -> Result<(u64, (Tail, Option<Rule>)), Refusal> {
        let file_len = file.len()?;
        let mut window = Window::new(file, file_len, std::mem::take(&mut self.buf));
        let mut offset = 0;
        let mut outcome = Ok((Tail::Clean, None));
        while offset < file_len && self.next_seq <= self.stop_after {
            match self.check_record(&mut window, path, offset, segment, visit) {
                Ok(Read::Accepted(len)) => offset += len,
                Ok(Read::Suspect(defect)) => {
                    outcome = self
                        .decide(&mut window, path, offset, is_last, defect)
                        .map(|(tail, rule)| (tail, Some(rule)));
                    break;
                }
                Err(error) => {
                    outcome = Err(Refusal::from(error));
                    break;
                }
            }
        }
        self.buf = window.into_buf();
        outcome.map(|tail| (offset, tail))
    }

    /// Checks the record at `offset`: the next record of the log, this
    /// many bytes long and now indexed, or why it is not. Suspected damage
    /// is re-read until two reads agree (on why, and on the bytes).
    fn check_record(
        &mut self,
        window: &mut Window<'_>,
        path: &Path,
        offset: u64,
        segment: u32,
        visit: &mut dyn FnMut(&RecordInfo<'_>),
    ) -> Result<Read<u64, Defect>, Error> {
        let agreed = read_until_two_agree(path, Some(offset), |again| {
            if again {
                window.invalidate();
            }
            Ok(
                match self.try_record(window, path, offset, segment, visit)? {
                    Read::Accepted(len) => Read::Accepted(len),
                    Read::Suspect(defect) => {
                        Read::Suspect((defect, record_bytes(window, offset)?.to_vec()))
                    }
                },
            )
        })?;
        Ok(match agreed {
            Read::Accepted(len) => Read::Accepted(len),
            Read::Suspect((defect, _)) => Read::Suspect(defect),
        })
    }

    /// One read of the record at `offset`: accepted (then indexed and
    /// visited), or why it is not the next record of the log.
    fn try_record(
        &mut self,
        window: &mut Window<'_>,
        path: &Path,
        offset: u64,
        segment: u32,
        visit: &mut dyn FnMut(&RecordInfo<'_>),
    ) -> io::Result<Read<u64, Defect>> {
        let bytes = record_bytes(window, offset)?;
        let record = match parse_record(bytes) {
            Ok(record) => record,
            Err(error) => return Ok(Read::Suspect(Defect::Record(error))),
        };
        if record.seq != self.next_seq {
            return Ok(Read::Suspect(Defect::Seq {
                found: record.seq,
                expected: self.next_seq,
            }));
        }
        let batch = match inspect_batch(record.payload) {
            Ok(batch) => batch,
            Err(error) => return Ok(Read::Suspect(Defect::Batch(error))),
        };
        // The stream is looked up once a record (a third of Open's time
        // went to comparing names, BENCHMARKS.md); a stream met for the
        // first time is added only once its record is accepted.
        let stream = self.index.streams.get_mut(batch.stream);
        let expected_version = stream.as_ref().map_or(0, |stream| stream.version) + 1;
        if batch.first_version != expected_version {
            return Ok(Read::Suspect(Defect::Version {
                stream: batch.stream.to_owned(),
                found: batch.first_version,
                expected: expected_version,
            }));
        }
        let Ok(offset32) = u32::try_from(offset) else {
            return Ok(Read::Suspect(Defect::BeyondSegmentLimit));
        };
        let len = record.len as u64;
        visit(&RecordInfo {
            file: path,
            offset,
            seq: record.seq,
            len,
            payload: record.payload,
            batch,
        });
        let location = Location {
            first_version: batch.first_version,
            segment,
            offset: offset32,
        };
        let ids = event_ids(record.payload).expect("a batch inspect_batch took");
        if let Some(stream) = stream {
            stream.push(batch.count, location);
            stream.remember_ids(&ids);
        } else {
            self.index.push(batch.stream, batch.count, location);
            self.index.remember_ids(batch.stream, &ids);
        }
        self.offsets.push(offset32);
        self.next_seq += 1;
        self.records += 1;
        self.record_bytes += len;
        Ok(Read::Accepted(len))
    }
}

/// The bytes the record at `offset` claims by its length field, bounded by
/// the end of the file (a damaged length never reads past it).
fn record_bytes<'w>(window: &'w mut Window<'_>, offset: u64) -> io::Result<&'w [u8]> {
    let header = window.bytes(offset, HEADER_SIZE as u64)?;
    let claimed = Header::peek(header).map_or(0, |header| u64::from(header.len));
    window.bytes(offset, HEADER_SIZE as u64 + claimed)
}
