//! What a scan reports: the tail of the last segment ([`Tail`]), what it
//! found and did ([`RecoveryReport`]), and why it refused a directory
//! ([`Refusal`]).

use std::io;
use std::path::PathBuf;

use crate::error::Error;
use crate::recovery::Rule;

/// What the end of the last segment looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tail {
    /// The last segment ends exactly at its last valid record.
    Clean,
    /// Only zero bytes follow the last valid record (preallocation, or a
    /// size change whose data never reached the disk): the end of the log,
    /// not damage. `Log::open` cuts them off like a torn tail, so that
    /// every segment ends at its last record; `durlog verify` calls it clean.
    Zeros {
        /// The last segment.
        file: PathBuf,
        /// Where the zeros start.
        offset: u64,
        /// How many zero bytes there are.
        bytes: u64,
    },
    /// A torn tail: an append that never completed. `Log::open` truncates
    /// the file at `offset` and makes the truncation durable.
    Torn {
        /// The last segment.
        file: PathBuf,
        /// Offset of the first record that fails.
        offset: u64,
        /// Bytes from there to the end of the file.
        bytes: u64,
        /// Why the record there fails.
        reason: String,
        /// One flipped bit would make the record there the valid next
        /// record: it may be an acknowledged record damaged at rest, which
        /// nothing after it can prove (FORMAT.md, "What stays ambiguous").
        /// Otherwise its bytes are not a record any append acknowledged.
        may_be_acknowledged: bool,
    },
}

/// What recovery found (and, from `Log::open`, what it did).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments: usize,
    /// Valid records read.
    pub records: u64,
    /// Bytes of valid records.
    pub record_bytes: u64,
    /// Seq of the first record kept: 1, or the first after a purge
    /// (the state file's).
    pub first_seq: u64,
    /// Seq of the last valid record (`first_seq - 1` if none is kept).
    pub last_seq: u64,
    /// A truncation was under way (the state file names its last seq):
    /// the records after it are not the log's, and `Log::open` finishes
    /// removing them. `None` from a writer's open once it has.
    pub truncating: Option<u64>,
    /// Segment files below `first_seq` that a purge had still to remove
    /// (`Log::open` removes them).
    pub purged_leftovers: usize,
    /// The state of the last segment's end.
    pub tail: Tail,
    /// Bytes `Log::open` cut off the last segment (0 from a read-only scan).
    pub bytes_truncated: u64,
    /// The rule of FORMAT.md's decision list that decided what the first
    /// damaged record meant (`ZeroTail`, `Repeated` or `Torn`); `None` if
    /// none failed.
    pub decided_by: Option<Rule>,
    /// Entries of the directory that are not the log's, passed over and
    /// left untouched.
    pub ignored: Vec<PathBuf>,
    /// Index files that agree with their sealed segments (FORMAT.md,
    /// "Index files").
    pub index_files: usize,
    /// Of them, those a trusting Open took its segments from, their
    /// records not read (`Tuning::open_trusts_index_files`).
    pub index_files_trusted: usize,
    /// Index files that do not, each with why (damaged, of a segment since
    /// cut or gone, of the last segment, written to the wrong name):
    /// `Log::open` removes them; the segments are read instead.
    pub stale_index_files: Vec<(PathBuf, String)>,
}

/// Why a scan refused a directory: the error (`Corrupt` naming the file
/// and offset, or an I/O error), and for damage, the rule that decided.
#[derive(Debug)]
pub struct Refusal {
    /// What `Log::open` returns.
    pub error: Error,
    /// The rule that found the damage; `None` for an I/O error.
    pub rule: Option<Rule>,
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Error {
        refusal.error
    }
}

impl From<Error> for Refusal {
    fn from(error: Error) -> Refusal {
        Refusal { error, rule: None }
    }
}

impl From<io::Error> for Refusal {
    fn from(error: io::Error) -> Refusal {
        Refusal::from(Error::Io(error))
    }
}
