//! What a log is opened with: the caller's [`Options`] and [`Tuning`],
//! resolved once into [`Settings`] that every part of the log shares, and
//! the quota arithmetic, all of it in one place.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use durlog_vfs::Vfs;

use crate::error::Error;
use crate::format::file_names;
use crate::format::{INDEX_FILE_SUFFIX, LOCK_FILE_NAME, NEXT_SEGMENT_NAME};
use crate::recovery::GROUP_BYTES_MAX;

/// Default size limit of a segment file.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// Largest `segment_bytes` honoured: the index stores record offsets in 32
/// bits, and every record starts below the limit.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 32;

/// The failpoint between an append's write and its sync.
pub const FAILPOINT_AFTER_WRITE: &str = "dur/log/after-write-before-fsync";

/// A clock: Unix time in nanoseconds.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// A failpoint hook: called with the failpoint's name; an `Err` fails the
/// operation there (a test may also crash the disk or the process in it).
pub type Failpoint = Arc<dyn Fn(&str) -> io::Result<()> + Send + Sync>;

/// How a log is opened.
#[derive(Clone, Default)]
pub struct Options {
    /// Size limit of a segment file; 0 means [`DEFAULT_SEGMENT_BYTES`].
    /// Values above [`SEGMENT_BYTES_MAX`] are treated as that.
    pub segment_bytes: u64,
    /// Quota on the bytes of all segments; 0 means none.
    pub max_bytes: u64,
    /// Source of event times; `None` means the system clock.
    pub now: Option<Clock>,
    /// Failpoint hook (tests and the simulator); `None` means none.
    pub failpoint: Option<Failpoint>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("segment_bytes", &self.segment_bytes)
            .field("max_bytes", &self.max_bytes)
            .field("now", &self.now.as_ref().map(|_| "custom"))
            .field("failpoint", &self.failpoint.as_ref().map(|_| "set"))
            .finish()
    }
}

/// Knobs beyond [`Options`], for benchmarks and the simulator; the
/// defaults suit production (`Log::open` uses them).
///
/// `#[non_exhaustive]`, so that a knob added later breaks no caller: make
/// one from the defaults, `Tuning::default().with(|tuning|
/// tuning.group_bytes_max = 4096)`, or assign its fields. ([`Options`]
/// stays exhaustive: SPEC section 4 gives it four fields that users build
/// with struct-update syntax, which `#[non_exhaustive]` forbids outside
/// the crate; new knobs come here instead.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tuning {
    /// Preallocate once the active segment holds this many record bytes:
    /// extend it with zeros ahead of its records, written and synced with a
    /// group, so that later appends overwrite in place and their
    /// `fdatasync` changes no file size (no metadata journal commit).
    /// `u64::MAX` turns preallocation off. Small logs stay exact.
    pub preallocate_after_bytes: u64,
    /// Zeros added per extension, at most: never past `segment_bytes`, and
    /// never so that the files' total length passes the quota.
    pub preallocate_chunk_bytes: u64,
    /// Only a group this small extends the preallocation. Zeros cost disk
    /// bandwidth once and save a metadata commit per sync: that pays for
    /// the groups of 4 KiB events from 8 to 32 writers, not for larger
    /// ones, whose syncs a chunk of zeros lengthens (BENCHMARKS.md,
    /// "Reading these figures", on the 128 KiB limit).
    pub preallocate_group_bytes_max: u64,
    /// How many times a leader yields the CPU, at most, waiting for the
    /// threads of the last group to queue their next appends (only when
    /// that group held more than one append).
    pub gather_yields: usize,
    /// Who prepares the next segment file, and when.
    pub next_segment: NextSegment,
    /// The most record bytes one group commit writes (a single larger
    /// record is a group of its own), at most [`GROUP_BYTES_MAX`]. Recovery
    /// relies on it: a valid record further than this past damage proves
    /// the damage was synced. Every writer of a log must use a value no
    /// larger than the one its Opens use; the default suits all of them.
    /// The simulator lowers it so that rule is exercised on small logs.
    pub group_bytes_max: u64,
    /// The most bytes a reader of the whole log (`read_all*`,
    /// subscriptions) fetches with one read of a segment, unless a single
    /// record is larger: large enough to amortise the call, small enough
    /// that a reader's buffer stays modest. Records never cross a read:
    /// a read of many records is many runs. The simulator and the tests
    /// lower it so that every read of a small log crosses runs. At least 1.
    pub read_run_bytes_max: u64,
    /// Whether sealed segments get index files, and who writes them.
    pub index_files: IndexFiles,
    /// A writer's Open takes each sealed segment whose index file agrees
    /// with the segment's length and last record from the index file,
    /// without reading its records: Open then reads the index files and
    /// the last segment, not the whole log. The price: damage at rest
    /// inside such a segment is not found at Open (a read of the damaged
    /// record still fails on its CRC), where a full scan refuses the log
    /// (FORMAT.md, "Index files"). Off by default.
    pub open_trusts_index_files: bool,
}

/// Who writes a sealed segment's index file (FORMAT.md, "Index files").
///
/// An index file is derived from its segment's bytes once the segment is
/// sealed: what a log too large for memory will need to open and read
/// without reading every record. Open checks every index file it finds
/// against its segment and removes one that does not belong there.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexFiles {
    /// None is written (Open still removes stale ones it finds).
    Off,
    /// [`Log::write_index_files`](crate::Log::write_index_files) writes
    /// those missing, when the caller calls it (a deterministic
    /// simulator, which runs no threads, or a thread of the caller's).
    OnCall,
    /// A thread of the log's own writes those missing after each roll
    /// (and at Open those an earlier life left without), asleep between;
    /// closing the log waits for the file under way. An append never
    /// waits for one.
    Background,
}

/// How the file of the next segment comes to exist.
///
/// Prepared, it is written as zeros under [`NEXT_SEGMENT_NAME`] (as long as
/// a preallocation chunk, within the quota) and synced once the active
/// segment is half full; the roll renames it and syncs the directory. The
/// roll then creates nothing, and the new segment's first appends
/// overwrite zeros instead of growing the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextSegment {
    /// The roll creates the new file itself.
    CreateAtRoll,
    /// A thread of the log's own prepares it, started the first time a
    /// segment is half full and asleep between segments.
    Background,
    /// `Log::prepare_next_segment` prepares it, when the caller calls it
    /// (a deterministic simulator, which runs no threads).
    OnCall,
}

impl Tuning {
    /// This tuning changed by `change`.
    pub fn with(mut self, change: impl FnOnce(&mut Tuning)) -> Tuning {
        change(&mut self);
        self
    }
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            preallocate_after_bytes: 64 << 10,
            preallocate_chunk_bytes: 1 << 20,
            preallocate_group_bytes_max: 128 << 10,
            gather_yields: 4,
            next_segment: NextSegment::Background,
            group_bytes_max: GROUP_BYTES_MAX,
            read_run_bytes_max: READ_RUN_BYTES_DEFAULT,
            index_files: IndexFiles::Off,
            open_trusts_index_files: false,
        }
    }
}

/// [`Tuning::read_run_bytes_max`] by default: 1 MiB.
pub const READ_RUN_BYTES_DEFAULT: u64 = 1 << 20;

/// A log's settings, resolved once at open and shared (behind one `Arc`)
/// by the facade, the writer and the thread that prepares segments.
pub(crate) struct Settings {
    pub vfs: Arc<dyn Vfs>,
    pub dir: PathBuf,
    /// The resolved segment size limit, in `1..=SEGMENT_BYTES_MAX`.
    pub segment_bytes: u64,
    pub quota: Quota,
    pub tuning: Tuning,
    /// `Tuning::group_bytes_max`, within `1..=GROUP_BYTES_MAX`.
    pub group_bytes_max: u64,
    /// `Tuning::read_run_bytes_max`, at least 1.
    pub read_run_bytes_max: u64,
    now: Option<Clock>,
    failpoint: Option<Failpoint>,
    /// Where the next segment is prepared: `dir/NEXT_SEGMENT_NAME`.
    pub next_path: PathBuf,
    /// The file a writer locks: `dir/LOCK_FILE_NAME`.
    pub lock_path: PathBuf,
}

impl Settings {
    pub fn new(vfs: Arc<dyn Vfs>, dir: &Path, options: Options, tuning: Tuning) -> Settings {
        let segment_bytes = match options.segment_bytes {
            0 => DEFAULT_SEGMENT_BYTES,
            bytes => bytes.min(SEGMENT_BYTES_MAX),
        };
        Settings {
            vfs,
            dir: dir.to_path_buf(),
            segment_bytes,
            quota: Quota {
                max_bytes: options.max_bytes,
            },
            tuning,
            group_bytes_max: tuning.group_bytes_max.clamp(1, GROUP_BYTES_MAX),
            read_run_bytes_max: tuning.read_run_bytes_max.max(1),
            now: options.now,
            failpoint: options.failpoint,
            next_path: file_names::join(dir, NEXT_SEGMENT_NAME),
            lock_path: file_names::join(dir, LOCK_FILE_NAME),
        }
    }

    pub fn segment_path(&self, first_seq: u64) -> PathBuf {
        file_names::segment_path(&self.dir, first_seq)
    }

    /// The index file of the segment whose first seq is `first_seq`.
    pub fn index_path(&self, first_seq: u64) -> PathBuf {
        file_names::file_path(&self.dir, first_seq, INDEX_FILE_SUFFIX)
    }

    /// The time an append stamps on its events.
    pub fn now(&self) -> i64 {
        self.now.as_ref().map_or_else(system_now, |now| now())
    }

    /// Passes the failpoint `name`: an error there fails the operation.
    /// The hook acts for other threads (the simulator runs subscribers
    /// there), so the locks held here do not rank what it takes.
    pub fn failpoint(&self, name: &str) -> io::Result<()> {
        self.failpoint
            .as_ref()
            .map_or(Ok(()), |hook| crate::sync::as_another_thread(|| hook(name)))
    }

    /// The next segment's length: a preallocation chunk once the log is
    /// past the preallocation threshold, and never more than the quota
    /// leaves once the active segment is full. Records count against the
    /// quota, zeros do not, so the file must leave the active segment the
    /// room its records may still take.
    pub fn next_segment_len(&self, sealed: u64, active_allocated: u64) -> u64 {
        if sealed + active_allocated < self.tuning.preallocate_after_bytes {
            return 0;
        }
        let active_max = active_allocated.max(self.segment_bytes);
        self.tuning
            .preallocate_chunk_bytes
            .min(self.segment_bytes)
            .min(self.quota.room(sealed.saturating_add(active_max)))
    }

    /// How far a group's write, ending at `end` of its segment, should
    /// extend the segment with zeros: 0 while preallocation is off, the
    /// segment small or the group big; else a chunk past `end`, never past
    /// `segment_bytes` nor the quota, which the segments before (`sealed`
    /// record bytes) and the prepared next segment (`reserved`) share.
    pub fn preallocation_end(&self, group_bytes: u64, end: u64, sealed: u64, reserved: u64) -> u64 {
        let tuning = &self.tuning;
        if end < tuning.preallocate_after_bytes || group_bytes > tuning.preallocate_group_bytes_max
        {
            return 0;
        }
        self.segment_bytes
            .min(end.saturating_add(tuning.preallocate_chunk_bytes))
            .min(self.quota.room(sealed.saturating_add(reserved)))
    }
}

/// The quota: a cap on the record bytes of all segments (`max_bytes`, 0 for
/// none). Records count against it; zeros ahead of them must fit in what it
/// leaves, so that they never take room a record may still need.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Quota {
    max_bytes: u64,
}

impl Quota {
    /// Whether a log of `needed` record bytes stays within the quota; a
    /// record that fits exactly is accepted.
    pub fn check(self, needed: u64) -> Result<(), Error> {
        if self.max_bytes > 0 && needed > self.max_bytes {
            return Err(Error::Quota {
                limit: self.max_bytes,
                needed,
            });
        }
        Ok(())
    }

    /// Bytes the quota leaves once `used` are spoken for (unlimited
    /// without a quota).
    pub fn room(self, used: u64) -> u64 {
        match self.max_bytes {
            0 => u64::MAX,
            max => max.saturating_sub(used),
        }
    }
}

pub(crate) fn system_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}
