//! The `Log`: opening (with recovery), appending with group commit, and
//! reading through the index.
//!
//! An append is a small state machine so that threads and the simulator
//! drive the same code:
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

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle, Thread};
use std::time::Instant;

use durlog_vfs::{OpenMode, PosixVfs, Vfs, VfsFile};

use crate::error::{Error, Expected};
use crate::format::{
    Event, HEADER_SIZE, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES, NEXT_SEGMENT_NAME, append_record,
    batch_encoded_len, batch_stream, decode_batch, encode_batch_at, first_version_offset,
    parse_record, segment_name,
};
use crate::index::{Index, Location};
use crate::recovery::{self, GROUP_BYTES_MAX, RecoveryReport, Tail};
use crate::segment::{Handles, SegmentMeta, read_record_bytes};
use crate::stats::Stats;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// bandwidth once and save a metadata commit per sync. On ext4 here
    /// that paid for groups of 4 KiB events from 8 to 32 writers (up to
    /// ~120 KiB), against a 16 KiB limit: 21-85% more appends/s at 8 and
    /// 16 writers, 5-22% at 32. At 64 writers (~230 KiB groups) throughput
    /// came out the same either way, and the syncs that carried a chunk of
    /// zeros lengthened the tail.
    pub preallocate_group_bytes_max: u64,
    /// How many times a leader yields the CPU, at most, waiting for the
    /// threads of the last group to queue their next appends (only when
    /// that group held more than one append).
    pub gather_yields: usize,
    /// Who prepares the next segment file, and when.
    pub next_segment: NextSegment,
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
    /// [`Log::prepare_next_segment`] prepares it, when the caller calls it
    /// (a deterministic simulator, which runs no threads).
    OnCall,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            preallocate_after_bytes: 64 << 10,
            preallocate_chunk_bytes: 1 << 20,
            preallocate_group_bytes_max: 128 << 10,
            gather_yields: 4,
            next_segment: NextSegment::Background,
        }
    }
}

/// A queued append's handle, to collect its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

/// A crash-safe, append-only, segmented event log. `Send + Sync`.
pub struct Log {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    segment_bytes: u64,
    max_bytes: u64,
    now: Option<Clock>,
    failpoint: Option<Failpoint>,
    recovery: RecoveryReport,
    shared: Mutex<Shared>,
    /// The writer side: the current leader's, and the preparing thread's.
    writer: Arc<WriterSide>,
    /// The thread that prepares the next segment, once it is started.
    preparer: Mutex<Option<JoinHandle<()>>>,
    handles: Mutex<Handles>,
    tuning: Tuning,
    /// Payload buffers of published appends, for the next ones to encode
    /// into (a lock of its own: `submit` encodes before it takes `shared`).
    spare_payloads: Mutex<Vec<Vec<u8>>>,
}

/// Buffers kept in [`Log::spare_payloads`]: enough for one per writer of a
/// busy log, none so large that a one-off big event stays resident.
const SPARE_PAYLOADS_MAX: usize = 128;
const SPARE_PAYLOAD_BYTES_MAX: usize = 64 << 10;

/// State every caller sees, under one lock.
struct Shared {
    index: Index,
    segments: Vec<SegmentMeta>,
    last_seq: u64,
    /// Bytes of acknowledged records in all segments.
    size: u64,
    queue: VecDeque<Pending>,
    outcomes: BTreeMap<Ticket, Result<u64, Error>>,
    /// Threads parked in `append`, by the ticket they wait for.
    waiters: BTreeMap<Ticket, Thread>,
    /// Waiters whose outcome was published, to unpark.
    to_wake: Vec<Thread>,
    /// Emptied vectors kept for reuse, so that a steady append allocates
    /// nothing of its own: the threads to wake, and a group's members.
    spare_wake: Vec<Thread>,
    spare_members: Vec<Member>,
    next_ticket: u64,
    /// A leader is writing or syncing a group.
    committing: bool,
    /// Appends in the last group committed.
    last_group_size: usize,
    poisoned: bool,
    /// Opened with `open_read_only`: appends are refused.
    read_only: bool,
    stats: Stats,
}

/// The writer state and what preparing the next segment needs, shared
/// with the thread that prepares it.
struct WriterSide {
    writer: Mutex<Writer>,
    /// Signalled when the next segment is wanted, and when the log closes.
    wanted: Condvar,
    vfs: Arc<dyn Vfs>,
    /// Where the next segment is prepared: `dir/NEXT_SEGMENT_NAME`.
    next_path: PathBuf,
    segment_bytes: u64,
    max_bytes: u64,
    tuning: Tuning,
    /// Rolls that renamed a prepared file instead of creating one.
    prepared_rolls: AtomicU64,
}

struct Writer {
    /// Read-write handle of the last segment, if any exists.
    file: Option<Arc<dyn VfsFile>>,
    /// The last segment's length on disk: its records and the zeros
    /// preallocated after them.
    allocated: u64,
    /// Record bytes of the segments before the last (sealed: no zeros).
    sealed: u64,
    /// The group's bytes; reused so steady appends do not allocate here.
    buf: Vec<u8>,
    next: Next,
    /// The Vfs cannot rename: every roll creates its file.
    cannot_rename: bool,
    /// The log is being dropped: the preparing thread ends.
    closing: bool,
}

/// A prepared next segment, renamed into place: its handle, and its
/// length of zeros.
type PreparedFile = (Box<dyn VfsFile>, u64);

/// The next segment's zeros are written and synced this much at a time:
/// a writer's sync that meets the preparation's waits for one piece's
/// flush, not the whole file's.
const ZERO_PIECE_BYTES: u64 = 128 << 10;

/// Where the next segment's preparation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Not wanted yet (the active segment is less than half full).
    Idle,
    /// Wanted: the active segment is half full.
    Wanted,
    /// Being written, this long: the length counts against the quota.
    Preparing(u64),
    /// Zeros of this length, synced, at `WriterSide::next_path`.
    Ready(u64),
    /// Preparing failed; not tried again before the next roll.
    Failed,
}

impl Next {
    /// Bytes the next segment's file takes on disk (or will, once written).
    fn reserved(self) -> u64 {
        match self {
            Next::Preparing(len) | Next::Ready(len) => len,
            Next::Idle | Next::Wanted | Next::Failed => 0,
        }
    }
}

impl WriterSide {
    fn lock(&self) -> MutexGuard<'_, Writer> {
        lock(&self.writer)
    }

    /// Prepares the next segment if it is wanted: `Ok(true)` if this call
    /// did. Runs without the writer lock while it writes and syncs, so a
    /// leader is never held up; a roll that comes first creates its file.
    fn prepare(&self) -> io::Result<bool> {
        let len = {
            let mut writer = self.lock();
            if writer.next != Next::Wanted {
                return Ok(false);
            }
            let len = self.next_len(&writer);
            writer.next = Next::Preparing(len);
            len
        };
        let mut ended = PreparationEnd {
            side: self,
            next: Next::Failed,
        };
        let result = self.write_zeros(len);
        if result.is_ok() {
            ended.next = Next::Ready(len);
        }
        result.map(|()| true)
    }

    /// The next segment's length: a preallocation chunk once the log is
    /// past the preallocation threshold, and never more than the quota
    /// leaves once the active segment is full. Records count against the
    /// quota, zeros do not, so the file must leave the active segment the
    /// room its records may still take.
    fn next_len(&self, writer: &Writer) -> u64 {
        if writer.sealed + writer.allocated < self.tuning.preallocate_after_bytes {
            return 0;
        }
        let mut len = self.tuning.preallocate_chunk_bytes.min(self.segment_bytes);
        if self.max_bytes > 0 {
            let active_max = writer.allocated.max(self.segment_bytes);
            len = len.min(
                self.max_bytes
                    .saturating_sub(writer.sealed)
                    .saturating_sub(active_max),
            );
        }
        len
    }

    fn write_zeros(&self, len: u64) -> io::Result<()> {
        let file = match self.vfs.open(&self.next_path, OpenMode::CreateNew) {
            // Left by a preparation that failed and could not clean up.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                self.vfs.remove_file(&self.next_path)?;
                self.vfs.open(&self.next_path, OpenMode::CreateNew)?
            }
            opened => opened?,
        };
        // Real zeros, synced: the new segment's appends then overwrite
        // allocated, written blocks, and their fdatasync changes no size.
        let piece = vec![0; len.min(ZERO_PIECE_BYTES) as usize];
        let mut result = Ok(());
        let mut at = 0;
        while at < len && result.is_ok() {
            let n = (len - at).min(ZERO_PIECE_BYTES);
            result = file
                .write_at(&piece[..n as usize], at)
                .and_then(|()| file.sync_data());
            at += n;
        }
        if result.is_err() {
            // Best effort: a file left here is removed by the next
            // preparation, or by the next Open.
            let _ = self.vfs.remove_file(&self.next_path);
        }
        result
    }

    /// The preparing thread: asleep until a segment is half full.
    fn run(&self) {
        loop {
            let mut writer = self.lock();
            while writer.next != Next::Wanted && !writer.closing {
                writer = self
                    .wanted
                    .wait(writer)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if writer.closing {
                return;
            }
            drop(writer);
            if let Err(error) = self.prepare() {
                log::warn!(
                    "durlog: preparing the next segment failed ({error}); the roll will create it"
                );
            }
        }
    }
}

/// Ends a preparation, even one that panicked: a roll may be waiting for
/// it.
struct PreparationEnd<'a> {
    side: &'a WriterSide,
    next: Next,
}

impl Drop for PreparationEnd<'_> {
    fn drop(&mut self) {
        self.side.lock().next = self.next;
        self.side.wanted.notify_all();
    }
}

impl Shared {
    /// Records an append's outcome, and its thread for waking.
    fn finish(&mut self, ticket: Ticket, outcome: Result<u64, Error>) {
        self.outcomes.insert(ticket, outcome);
        if let Some(waiter) = self.waiters.remove(&ticket) {
            self.to_wake.push(waiter);
        }
    }

    /// Unparks the threads whose appends finished and, if appends are
    /// queued, the first of their threads to lead the next group.
    fn wake_finished_and_next_leader(&mut self) {
        let mut threads = self.threads_to_wake();
        for thread in threads.drain(..) {
            thread.unpark();
        }
        self.spare_wake = threads;
    }

    /// The threads [`Shared::wake_finished_and_next_leader`] wakes, the next
    /// leader first, for waking after the lock is released.
    fn threads_to_wake(&mut self) -> Vec<Thread> {
        let mut threads = std::mem::take(&mut self.spare_wake);
        if !self.committing
            && let Some(next) = self
                .queue
                .iter()
                .find_map(|pending| self.waiters.get(&pending.ticket))
        {
            threads.push(next.clone());
        }
        threads.append(&mut self.to_wake);
        threads
    }
}

/// An append whose arguments were checked, waiting for a group.
struct Pending {
    ticket: Ticket,
    expected: Expected,
    /// The encoded batch, with `first_version` still to be patched in.
    payload: Vec<u8>,
    count: u32,
}

impl Pending {
    fn record_len(&self) -> u64 {
        (HEADER_SIZE + self.payload.len()) as u64
    }

    /// The stream, read back from the encoded batch (which starts with it)
    /// rather than kept as a second, allocated copy.
    fn stream(&self) -> &str {
        std::str::from_utf8(self.stream_bytes()).expect("encoded from a &str")
    }

    /// The stream's bytes, for comparing without re-checking UTF-8 (a
    /// group's formation compares every pair of its appends).
    fn stream_bytes(&self) -> &[u8] {
        batch_stream(&self.payload)
    }
}

/// The appends one leader commits together.
struct Group {
    /// Create the segment for this seq first.
    roll_to: Option<u64>,
    /// Segment number the records go to, and where.
    segment: u32,
    offset: u64,
    /// Length of the current last segment's records (cut to before a roll).
    previous_len: u64,
    /// Record bytes in the segments before the one written to: the quota
    /// leaves the written segment's file `max_bytes - sealed_bytes` bytes,
    /// zero tail included.
    sealed_bytes: u64,
    members: Vec<Member>,
    /// Appends refused while forming the group; their outcome waits for the
    /// group's, because they were checked against its members.
    refused: Vec<(Pending, Error)>,
    bytes: u64,
}

struct Member {
    pending: Pending,
    seq: u64,
    first_version: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these structures half-updated in a way
    // that matters more than refusing service, which `poisoned` handles.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn system_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

impl Log {
    /// Opens (creating it if missing) the log in `dir` on the host's file
    /// system, recovering from any crash. The next segment is prepared in
    /// the background ([`NextSegment::Background`]).
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Log, Error> {
        Log::open_tuned(PosixVfs, dir, options, Tuning::default())
    }

    /// Opens the log in `dir` on any file system backend. The log starts no
    /// thread of its own, so that on a simulated disk a run depends on its
    /// seed alone: the next segment is prepared only when the caller calls
    /// [`Log::prepare_next_segment`] ([`NextSegment::OnCall`]), else the
    /// roll creates it.
    pub fn open_with_vfs(
        vfs: impl Vfs + 'static,
        dir: impl AsRef<Path>,
        options: Options,
    ) -> Result<Log, Error> {
        let tuning = Tuning {
            next_segment: NextSegment::OnCall,
            ..Tuning::default()
        };
        Log::open_arc(Arc::new(vfs), dir.as_ref(), options, tuning, false)
    }

    /// Opens the log in `dir` for reading only: nothing on disk changes (no
    /// directory is created, no torn tail truncated, nothing synced), and
    /// appends fail with `Error::ReadOnly`. Reads see the valid records.
    pub fn open_read_only(vfs: impl Vfs + 'static, dir: impl AsRef<Path>) -> Result<Log, Error> {
        Log::open_arc(
            Arc::new(vfs),
            dir.as_ref(),
            Options::default(),
            Tuning::default(),
            true,
        )
    }

    /// [`Log::open_with_vfs`] with [`Tuning`] knobs.
    pub fn open_tuned(
        vfs: impl Vfs + 'static,
        dir: impl AsRef<Path>,
        options: Options,
        tuning: Tuning,
    ) -> Result<Log, Error> {
        Log::open_arc(Arc::new(vfs), dir.as_ref(), options, tuning, false)
    }

    fn open_arc(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        options: Options,
        tuning: Tuning,
        read_only: bool,
    ) -> Result<Log, Error> {
        if !read_only {
            vfs.create_dir_all(dir)?;
        }
        let scanned = recovery::scan(vfs.as_ref(), dir, &mut |_| {})?;
        let mut report = scanned.report;
        let mut syncs = 0;
        let active = match scanned.segments.last() {
            None => None,
            Some(_) if read_only => None,
            Some(last) => {
                let file: Arc<dyn VfsFile> = Arc::from(vfs.open(&last.path, OpenMode::ReadWrite)?);
                // Truncate, never skip: garbage left in place would make the
                // next recovery drop the records written after it. A zero
                // tail is cut too, so every segment ends at its last record.
                if let Tail::Torn { offset, bytes, .. } | Tail::Zeros { offset, bytes, .. } =
                    &report.tail
                {
                    file.set_len(*offset)?;
                    report.bytes_truncated = *bytes;
                }
                if let Tail::Torn {
                    file,
                    offset,
                    bytes,
                    reason,
                } = &report.tail
                {
                    log::warn!(
                        "durlog: truncated a torn tail of {bytes} bytes at {}:{offset} ({reason}); last good seq {}",
                        file.display(),
                        report.last_seq
                    );
                }
                // Everything recovery believes must be durable before it is
                // built on: a killed predecessor may have left records (or
                // this truncation) only in the page cache.
                file.sync_data()?;
                syncs += 1;
                Some(file)
            }
        };
        // A next segment prepared by an earlier life goes: after a crash in
        // the middle of a roll it may even be a second name of the last
        // segment. The directory sync below makes the removal durable.
        if let Some(path) = &scanned.next_segment
            && !read_only
        {
            vfs.remove_file(path)?;
        }
        // Likewise a segment's directory entry.
        if !read_only {
            vfs.sync_dir(dir)?;
        }

        log::info!(
            "durlog: opened {}: {} segments, {} records, last seq {}, {:?}",
            dir.display(),
            report.segments,
            report.records,
            report.last_seq,
            report.tail
        );
        let size = scanned.segments.iter().map(|segment| segment.len).sum();
        let scanned_active_len = scanned.segments.last().map_or(0, |segment| segment.len);
        let stats = Stats {
            syncs,
            ..Stats::default()
        };
        let segment_bytes = match options.segment_bytes {
            0 => DEFAULT_SEGMENT_BYTES,
            bytes => bytes.min(SEGMENT_BYTES_MAX),
        };
        let writer = Writer {
            file: active,
            allocated: scanned_active_len,
            sealed: size - scanned_active_len,
            buf: Vec::new(),
            next: Next::Idle,
            cannot_rename: false,
            closing: false,
        };
        Ok(Log {
            writer: Arc::new(WriterSide {
                writer: Mutex::new(writer),
                wanted: Condvar::new(),
                vfs: Arc::clone(&vfs),
                next_path: dir.join(NEXT_SEGMENT_NAME),
                segment_bytes,
                max_bytes: options.max_bytes,
                tuning,
                prepared_rolls: AtomicU64::new(0),
            }),
            preparer: Mutex::new(None),
            vfs,
            dir: dir.to_path_buf(),
            segment_bytes,
            max_bytes: options.max_bytes,
            now: options.now,
            failpoint: options.failpoint,
            shared: Mutex::new(Shared {
                index: scanned.index,
                segments: scanned.segments,
                last_seq: report.last_seq,
                size,
                queue: VecDeque::new(),
                outcomes: BTreeMap::new(),
                waiters: BTreeMap::new(),
                to_wake: Vec::new(),
                spare_wake: Vec::new(),
                spare_members: Vec::new(),
                next_ticket: 0,
                committing: false,
                last_group_size: 0,
                poisoned: false,
                read_only,
                stats,
            }),
            recovery: report,
            handles: Mutex::new(Handles::default()),
            tuning,
            spare_payloads: Mutex::new(Vec::new()),
        })
    }

    /// Appends `events` to `stream` as one record, if the stream is at the
    /// `expected` version; returns the stream's new version once the record
    /// is durable.
    pub fn append(&self, stream: &str, expected: Expected, events: &[Event]) -> Result<u64, Error> {
        let ticket = self.submit(stream, expected, events)?;
        let mut shared = lock(&self.shared);
        loop {
            if let Some(outcome) = shared.outcomes.remove(&ticket) {
                return outcome;
            }
            if !shared.committing {
                shared = self.lead(shared);
                // A leader that panicked took this append with it.
                if shared.poisoned
                    && !shared.outcomes.contains_key(&ticket)
                    && !shared.queue.iter().any(|pending| pending.ticket == ticket)
                {
                    return Err(Error::Poisoned);
                }
                continue;
            }
            // Sleep until this append's group is published, or until this
            // thread is asked to lead the next group. Waking only those
            // threads (not every waiter) keeps 64 writers from thrashing
            // two cores with wake-ups that find nothing to do.
            shared.waiters.insert(ticket, thread::current());
            drop(shared);
            thread::park();
            shared = lock(&self.shared);
            shared.waiters.remove(&ticket);
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
        let payload_len = batch_encoded_len(stream, events);
        if payload_len > MAX_PAYLOAD_BYTES || u32::try_from(events.len()).is_err() {
            return Err(Error::RecordTooLarge {
                stream: stream.to_owned(),
                bytes: payload_len,
            });
        }
        let at = self.now.as_ref().map_or_else(system_now, |now| now());
        let mut payload = lock(&self.spare_payloads).pop().unwrap_or_default();
        payload.clear();
        payload.reserve(payload_len as usize);
        encode_batch_at(&mut payload, stream, 0, events, at);
        let mut shared = lock(&self.shared);
        if shared.read_only {
            return Err(Error::ReadOnly {
                dir: self.dir.clone(),
            });
        }
        if shared.poisoned {
            return Err(Error::Poisoned);
        }
        let ticket = Ticket(shared.next_ticket);
        shared.next_ticket += 1;
        shared.queue.push_back(Pending {
            ticket,
            expected,
            payload,
            count: events.len() as u32,
        });
        Ok(ticket)
    }

    /// Steps 2 to 4 for the next group of queued appends, on the calling
    /// thread. Returns how many appends got an outcome (0 if the queue is
    /// empty or another thread's group is in flight).
    pub fn commit_next_group(&self) -> usize {
        let shared = lock(&self.shared);
        if shared.committing {
            return 0;
        }
        let before = shared.outcomes.len();
        let shared = self.lead(shared);
        shared.outcomes.len() - before
    }

    /// The outcome of a submitted append, once its group was committed.
    pub fn take_outcome(&self, ticket: Ticket) -> Option<Result<u64, Error>> {
        lock(&self.shared).outcomes.remove(&ticket)
    }

    /// Appends queued and not yet in a group.
    pub fn queued(&self) -> usize {
        lock(&self.shared).queue.len()
    }

    /// Forms and commits one group; called with the lock, returns with it.
    fn lead<'a>(&'a self, mut shared: MutexGuard<'a, Shared>) -> MutexGuard<'a, Shared> {
        if shared.poisoned {
            while let Some(pending) = shared.queue.pop_front() {
                shared.finish(pending.ticket, Err(Error::Poisoned));
            }
            shared.wake_finished_and_next_leader();
            return shared;
        }
        shared = self.gather(shared);
        let group = self.form_group(&mut shared);
        if group.members.is_empty() {
            shared.committing = false;
            shared.spare_members = group.members;
            self.publish_refusals(&mut shared, group.refused);
            shared.wake_finished_and_next_leader();
            return shared;
        }
        shared.committing = true;
        drop(shared);

        let mut reset = ResetOnUnwind {
            log: self,
            armed: true,
        };
        let started = Instant::now();
        let result = self.write_group(&group);
        let sync_ns = started.elapsed().as_nanos() as u64;
        reset.armed = false;

        let mut shared = lock(&self.shared);
        shared.committing = false;
        let mut members = self.publish(&mut shared, group, result, sync_ns);
        // Wake outside the lock: the next leader, woken first, can form its
        // group while this thread is still waking the rest.
        let mut threads = shared.threads_to_wake();
        drop(shared);
        for thread in threads.drain(..) {
            thread.unpark();
        }
        self.recycle_payloads(&mut members);
        let mut shared = lock(&self.shared);
        shared.spare_wake = threads;
        shared.spare_members = members;
        shared
    }

    /// Claims the lead and, if the last group had company, yields a few
    /// times so that its threads, woken a moment ago, can queue their next
    /// appends in time to share this group's sync. Never a sleep, and never
    /// for a lone writer.
    fn gather<'a>(&'a self, mut shared: MutexGuard<'a, Shared>) -> MutexGuard<'a, Shared> {
        shared.committing = true;
        let company = shared.last_group_size;
        let mut yields = 0;
        while company > 1 && shared.queue.len() < company && yields < self.tuning.gather_yields {
            drop(shared);
            thread::yield_now();
            shared = lock(&self.shared);
            yields += 1;
        }
        shared
    }

    /// Takes appends off the queue, in order, into one group.
    fn form_group(&self, shared: &mut Shared) -> Group {
        let last = shared.segments.last();
        let mut group = Group {
            roll_to: None,
            segment: shared.segments.len().saturating_sub(1) as u32,
            offset: last.map_or(0, |segment| segment.len),
            previous_len: last.map_or(0, |segment| segment.len),
            sealed_bytes: shared.size - last.map_or(0, |segment| segment.len),
            members: std::mem::take(&mut shared.spare_members),
            refused: Vec::new(),
            bytes: 0,
        };
        let mut size = shared.size;
        while let Some(pending) = shared.queue.front() {
            // The version the group's earlier members leave the stream at
            // (groups are small: a scan beats a map of cloned names).
            let current = group
                .members
                .iter()
                .rev()
                .find(|member| member.pending.stream_bytes() == pending.stream_bytes())
                .map(|member| member.first_version + u64::from(member.pending.count) - 1)
                .unwrap_or_else(|| shared.index.version(pending.stream()));
            let record_len = pending.record_len();
            let refusal = if !pending.expected.matches(current) {
                Some(Error::VersionConflict {
                    stream: pending.stream().to_owned(),
                    expected: pending.expected,
                    actual: current,
                })
            } else if self.max_bytes > 0 && size + record_len > self.max_bytes {
                Some(Error::Quota {
                    limit: self.max_bytes,
                    needed: size + record_len,
                })
            } else {
                None
            };
            if let Some(error) = refusal {
                let pending = shared.queue.pop_front().expect("front exists");
                group.refused.push((pending, error));
                continue;
            }
            let must_roll = group.roll_to.is_none() && shared.segments.is_empty();
            let segment_used = group.offset + group.bytes;
            let fits = !must_roll
                && (segment_used == 0 || segment_used + record_len <= self.segment_bytes);
            if !fits {
                if !group.members.is_empty() {
                    break; // the next group starts with the roll
                }
                group.roll_to = Some(shared.last_seq + 1);
                group.segment = shared.segments.len() as u32;
                group.offset = 0;
                group.sealed_bytes = shared.size;
            }
            if !group.members.is_empty() && group.bytes + record_len > GROUP_BYTES_MAX {
                break;
            }
            let mut pending = shared.queue.pop_front().expect("front exists");
            let at = first_version_offset(pending.stream_bytes().len());
            pending.payload[at..at + 8].copy_from_slice(&(current + 1).to_le_bytes());
            let seq = shared.last_seq + 1 + group.members.len() as u64;
            size += record_len;
            group.bytes += record_len;
            group.members.push(Member {
                pending,
                seq,
                first_version: current + 1,
            });
        }
        group
    }

    /// Rolls if needed, writes the group with one write and syncs it with
    /// one `fdatasync`; on failure cuts the file back. Runs without the
    /// shared lock: only the leader gets here.
    fn write_group(&self, group: &Group) -> Result<(), GroupFailure> {
        let mut writer = self.writer.lock();
        if let Some(first_seq) = group.roll_to {
            // A file being prepared holds quota room that only this roll
            // may use: wait for it rather than create another file. It
            // began half a segment ago, so it is rarely still running.
            while matches!(writer.next, Next::Preparing(_)) {
                writer = self
                    .writer
                    .wanted
                    .wait(writer)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            self.roll(&mut writer, first_seq, group.previous_len)?;
        }
        writer.sealed = group.sealed_bytes;
        let rolled = group.roll_to.is_some();
        let reserved = writer.next.reserved();
        let Writer {
            file,
            allocated,
            buf,
            ..
        } = &mut *writer;
        let file = Arc::clone(file.as_ref().expect("a segment exists after a roll"));
        buf.clear();
        for member in &group.members {
            append_record(buf, member.seq, &member.pending.payload);
        }
        debug_assert_eq!(buf.len() as u64, group.bytes);
        // Preallocation rides on the group's own write and sync: zeros
        // after the records, so the next appends overwrite in place.
        let end = group.offset + group.bytes;
        let extended = if end > *allocated {
            self.preallocation_end(group, end, reserved)
        } else {
            0
        };
        if extended > end {
            buf.resize((extended - group.offset) as usize, 0);
        }
        let result = file
            .write_at(buf, group.offset)
            .and_then(|()| {
                self.failpoint
                    .as_ref()
                    .map_or(Ok(()), |hook| hook(FAILPOINT_AFTER_WRITE))
            })
            .and_then(|()| file.sync_data());
        let Err(error) = result else {
            *allocated = (*allocated).max(extended).max(end);
            self.want_next_segment(&mut writer, end);
            return Ok(());
        };
        // Never retry the sync and trust it: the kernel may have dropped
        // the dirty pages. Cut the record off instead, durably, so it can
        // never reappear after a restart.
        *allocated = group.offset;
        let cut_back = file.set_len(group.offset).and_then(|()| file.sync_data());
        Err(GroupFailure {
            error: Error::Io(error),
            poisoned: cut_back.is_err(),
            rolled,
        })
    }

    /// How far the group's write should extend the segment with zeros: 0
    /// while preallocation is off or the segment small, else a chunk past
    /// `end`, never past `segment_bytes` nor the quota (which the prepared
    /// next segment, `reserved` bytes, shares).
    fn preallocation_end(&self, group: &Group, end: u64, reserved: u64) -> u64 {
        if end < self.tuning.preallocate_after_bytes
            || group.bytes > self.tuning.preallocate_group_bytes_max
        {
            return 0;
        }
        let mut limit = self
            .segment_bytes
            .min(end.saturating_add(self.tuning.preallocate_chunk_bytes));
        if self.max_bytes > 0 {
            limit = limit.min(
                self.max_bytes
                    .saturating_sub(group.sealed_bytes)
                    .saturating_sub(reserved),
            );
        }
        limit
    }

    /// Once the active segment is half full, asks for the next one.
    fn want_next_segment(&self, writer: &mut Writer, end: u64) {
        if writer.next != Next::Idle || writer.cannot_rename || end < self.segment_bytes / 2 {
            return;
        }
        match self.tuning.next_segment {
            NextSegment::CreateAtRoll => {}
            NextSegment::OnCall => writer.next = Next::Wanted,
            NextSegment::Background => {
                writer.next = Next::Wanted;
                self.writer.wanted.notify_one();
                self.start_preparer();
            }
        }
    }

    fn start_preparer(&self) {
        let mut preparer = lock(&self.preparer);
        if preparer.is_some() {
            return;
        }
        let side = Arc::clone(&self.writer);
        match thread::Builder::new()
            .name("durlog-next-segment".into())
            .spawn(move || side.run())
        {
            Ok(handle) => *preparer = Some(handle),
            // The rolls create their files, as with `CreateAtRoll`.
            Err(error) => {
                log::warn!("durlog: cannot start the thread that prepares segments: {error}")
            }
        }
    }

    /// Prepares the next segment file now if the log wants one (its active
    /// segment is half full and no file is prepared): `Ok(true)` if this
    /// call wrote one. For [`NextSegment::OnCall`]. A failure changes
    /// nothing the log relies on: the roll then creates its file.
    pub fn prepare_next_segment(&self) -> Result<bool, Error> {
        if self.is_poisoned() {
            return Ok(false);
        }
        self.writer.prepare().map_err(Error::Io)
    }

    /// Makes the segment for `first_seq` the active one: the current one is
    /// cut to its last record, then the new file is created (or the
    /// prepared one renamed) and the directory synced, all before any
    /// record in it is acknowledged.
    ///
    /// A failed sync here poisons the log rather than being retried: a
    /// retried sync may report success for a cut or an entry the kernel
    /// dropped, and recovery (which a reopen runs) does both right.
    fn roll(
        &self,
        writer: &mut Writer,
        first_seq: u64,
        previous_len: u64,
    ) -> Result<(), GroupFailure> {
        if let Some(previous) = &writer.file
            && writer.allocated > previous_len
        {
            previous
                .set_len(previous_len)
                .and_then(|()| previous.sync_data())
                .map_err(GroupFailure::poisoning)?;
            writer.allocated = previous_len;
        }
        let path = self.dir.join(segment_name(first_seq));
        let (file, allocated) = match self.take_next_segment(writer, &path)? {
            Some(taken) => taken,
            None => (self.create_segment(&path)?, 0),
        };
        // From here the file exists: a failure leaves it for recovery.
        self.vfs
            .sync_dir(&self.dir)
            .map_err(GroupFailure::poisoning)?;
        writer.file = Some(Arc::from(file));
        writer.allocated = allocated;
        if matches!(writer.next, Next::Wanted | Next::Failed) {
            writer.next = Next::Idle;
        }
        Ok(())
    }

    /// Renames the prepared next segment to `path`, if one is ready: its
    /// handle and its length of zeros. A file found at `path` instead
    /// (left by an earlier life) goes the way of [`Log::create_segment`],
    /// which checks it holds nothing; the prepared one is then removed, so
    /// it never counts against the quota unused.
    fn take_next_segment(
        &self,
        writer: &mut Writer,
        path: &Path,
    ) -> Result<Option<PreparedFile>, GroupFailure> {
        let Next::Ready(len) = writer.next else {
            return Ok(None);
        };
        writer.next = Next::Idle;
        let next_path = &self.writer.next_path;
        let target_free = matches!(
            self.vfs.open(path, OpenMode::ReadOnly),
            Err(error) if error.kind() == io::ErrorKind::NotFound
        );
        if target_free {
            match self.vfs.rename(next_path, path) {
                Ok(()) => {
                    // Opened by its new name, so that its errors name it.
                    let file = self
                        .vfs
                        .open(path, OpenMode::ReadWrite)
                        .map_err(GroupFailure::poisoning)?;
                    self.writer.prepared_rolls.fetch_add(1, Ordering::Relaxed);
                    return Ok(Some((file, len)));
                }
                Err(error) if error.kind() == io::ErrorKind::Unsupported => {
                    writer.cannot_rename = true;
                }
                // Either name may now exist, or both: a reopen's recovery
                // sorts them out, so the log stops here.
                Err(error) => return Err(GroupFailure::poisoning(error)),
            }
        }
        self.vfs
            .remove_file(next_path)
            .map_err(GroupFailure::poisoning)?;
        Ok(None)
    }

    /// Creates the segment file at `path`.
    fn create_segment(&self, path: &Path) -> Result<Box<dyn VfsFile>, GroupFailure> {
        let file = match self.vfs.open(path, OpenMode::CreateNew) {
            Ok(file) => file,
            // Left by an earlier life of the log that crashed before it wrote
            // a record there: reuse it if it holds nothing.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                let reused = self
                    .vfs
                    .open(path, OpenMode::ReadWrite)
                    .and_then(|file| Ok((file.is_empty()?, file)));
                match reused {
                    Ok((true, file)) => file,
                    Ok((false, _)) => {
                        return Err(GroupFailure {
                            error: Error::Corrupt {
                                file: path.to_path_buf(),
                                offset: 0,
                                reason: "a segment the log is about to create already holds data"
                                    .into(),
                            },
                            poisoned: true,
                            rolled: false,
                        });
                    }
                    Err(error) => return Err(GroupFailure::poisoning(error)),
                }
            }
            // Nothing was created: the group fails, the log goes on.
            Err(error) => {
                return Err(GroupFailure {
                    error: Error::Io(error),
                    poisoned: false,
                    rolled: false,
                });
            }
        };
        Ok(file)
    }

    /// Publishes a group's outcome: on success the index, versions and size
    /// move and every member is acknowledged; on failure every member fails
    /// and the refused appends go back to the queue, to be checked again
    /// against the state the failed group did not change. Returns the
    /// members, for their buffers to be reused.
    fn publish(
        &self,
        shared: &mut Shared,
        group: Group,
        result: Result<(), GroupFailure>,
        sync_ns: u64,
    ) -> Vec<Member> {
        let rolled = match &result {
            Ok(()) => group.roll_to.is_some(),
            Err(failure) => failure.rolled,
        };
        if rolled {
            let first_seq = group.roll_to.expect("rolled implies a roll");
            shared.segments.push(SegmentMeta {
                first_seq,
                path: self.dir.join(segment_name(first_seq)),
                len: 0,
            });
            shared.stats.segments_created += 1;
        }
        match result {
            Ok(()) => {
                let mut offset = group.offset;
                for member in &group.members {
                    let location = Location {
                        first_version: member.first_version,
                        segment: group.segment,
                        offset: offset as u32,
                    };
                    shared
                        .index
                        .push(member.pending.stream(), member.pending.count, location);
                    offset += member.pending.record_len();
                    let version = member.first_version + u64::from(member.pending.count) - 1;
                    shared.finish(member.pending.ticket, Ok(version));
                    shared.stats.events += u64::from(member.pending.count);
                }
                shared.last_seq += group.members.len() as u64;
                shared.size += group.bytes;
                let segment = &mut shared.segments[group.segment as usize];
                segment.len = group.offset + group.bytes;
                let stats = &mut shared.stats;
                stats.appends += group.members.len() as u64;
                stats.bytes += group.bytes;
                stats.groups += 1;
                stats.syncs += 1;
                stats.sync_latency_ns.record(sync_ns);
                stats.appends_per_group.record(group.members.len() as u64);
                shared.last_group_size = group.members.len();
                self.publish_refusals(shared, group.refused);
            }
            Err(failure) => {
                shared.poisoned |= failure.poisoned;
                shared.stats.failed_appends += group.members.len() as u64;
                for member in &group.members {
                    shared.finish(member.pending.ticket, Err(failure.error.duplicate()));
                }
                for (pending, _) in group.refused.into_iter().rev() {
                    shared.queue.push_front(pending);
                }
            }
        }
        group.members
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

    fn publish_refusals(&self, shared: &mut Shared, refused: Vec<(Pending, Error)>) {
        for (pending, error) in refused {
            match error {
                Error::VersionConflict { .. } => shared.stats.conflicts += 1,
                Error::Quota { .. } => shared.stats.quota_rejections += 1,
                _ => {}
            }
            shared.finish(pending.ticket, Err(error));
        }
    }

    /// At most `limit` acknowledged events of `stream` with version >=
    /// `max(from, 1)`, in order. Every record read is checked (CRC, stream,
    /// versions); damage is an error, never wrong data.
    pub fn read(&self, stream: &str, from: u64, limit: usize) -> Result<Vec<Event>, Error> {
        let from = from.max(1);
        // With each record: its segment's first seq (its name) and the end
        // of that segment's acknowledged records, which bounds the record.
        let locations: Vec<(Location, u64, u64)> = {
            let shared = lock(&self.shared);
            let Some(index) = shared.index.streams.get(stream) else {
                return Ok(Vec::new());
            };
            if limit == 0 || from > index.version {
                return Ok(Vec::new());
            }
            let start = index.record_holding(from);
            // Each record holds at least one event.
            let end = start.saturating_add(limit).min(index.records.len());
            index.records[start..end]
                .iter()
                .map(|location| {
                    let segment = &shared.segments[location.segment as usize];
                    (*location, segment.first_seq, segment.len)
                })
                .collect()
        };
        let mut events = Vec::new();
        let mut buf = Vec::new();
        for (location, first_seq, segment_len) in locations {
            let batch = self.read_batch(stream, location, first_seq, segment_len, &mut buf)?;
            let wanted = batch.into_iter().filter(|event| event.version >= from);
            events.extend(wanted.take(limit - events.len()));
            if events.len() == limit {
                break;
            }
        }
        Ok(events)
    }

    /// Reads and checks one record. A failed check is read once more, so a
    /// flaky read is not reported as damage.
    fn read_batch(
        &self,
        stream: &str,
        location: Location,
        first_seq: u64,
        segment_len: u64,
        buf: &mut Vec<u8>,
    ) -> Result<Vec<Event>, Error> {
        // Names are built only to open a file or report damage: a read of
        // a cached segment formats nothing.
        let path = || self.dir.join(segment_name(first_seq));
        let file = lock(&self.handles).get(self.vfs.as_ref(), location.segment, path)?;
        let offset = u64::from(location.offset);
        let mut reason = String::new();
        for _ in 0..2 {
            // A damaged length field must not size an allocation: the
            // record ends within the segment's acknowledged bytes.
            let bytes = read_record_bytes(file.as_ref(), offset, segment_len - offset, buf)?;
            match check_read(bytes, stream, location.first_version) {
                Ok(events) => return Ok(events),
                Err(why) => reason = why,
            }
        }
        Err(Error::Corrupt {
            file: path(),
            offset,
            reason,
        })
    }

    /// The stream's version: its number of events (0 if unknown).
    pub fn version(&self, stream: &str) -> u64 {
        lock(&self.shared).index.version(stream)
    }

    /// Names of the streams that start with `prefix`, sorted.
    pub fn streams(&self, prefix: &str) -> Vec<String> {
        lock(&self.shared).index.names_with_prefix(prefix)
    }

    /// Seq of the last acknowledged record (0 for an empty log).
    pub fn last_seq(&self) -> u64 {
        lock(&self.shared).last_seq
    }

    /// Bytes of acknowledged records in all segments (never counts
    /// preallocated or torn bytes).
    pub fn size(&self) -> u64 {
        lock(&self.shared).size
    }

    /// What recovery found and did when this log was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Counters and histograms since open.
    pub fn stats(&self) -> Stats {
        let mut stats = lock(&self.shared).stats.clone();
        // Not under the writer's lock, which a leader holds through a sync.
        stats.segments_prepared = self.writer.prepared_rolls.load(Ordering::Relaxed);
        stats
    }

    /// True once a failed append could not be undone durably.
    pub fn is_poisoned(&self) -> bool {
        lock(&self.shared).poisoned
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes the log. Every acknowledged append is already durable, so
    /// this only releases the files.
    pub fn close(self) -> Result<(), Error> {
        drop(self);
        Ok(())
    }
}

fn check_read(buf: &[u8], stream: &str, first_version: u64) -> Result<Vec<Event>, String> {
    let record = parse_record(buf).map_err(|error| error.to_string())?;
    let batch = decode_batch(record.payload).map_err(|error| error.to_string())?;
    if batch.stream != stream || batch.first_version != first_version {
        return Err(format!(
            "record holds stream {:?} from version {}, the index expects {stream:?} from version {first_version}",
            batch.stream, batch.first_version
        ));
    }
    Ok(batch.events)
}

impl Drop for Log {
    fn drop(&mut self) {
        let preparer = self
            .preparer
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(preparer) = preparer {
            self.writer.lock().closing = true;
            self.writer.wanted.notify_all();
            // A panic there has been reported by the thread itself.
            let _ = preparer.join();
        }
    }
}

struct GroupFailure {
    error: Error,
    /// The cut-back failed too.
    poisoned: bool,
    /// The new segment exists although the group failed.
    rolled: bool,
}

impl GroupFailure {
    /// A failure in a roll, after which the log must not go on: the state
    /// on disk is for a reopen's recovery to sort out.
    fn poisoning(error: io::Error) -> GroupFailure {
        GroupFailure {
            error: Error::Io(error),
            poisoned: true,
            rolled: false,
        }
    }
}

/// If a leader panics (a failpoint hook may), waiting appenders must not
/// wait forever: the log is poisoned and they are woken.
struct ResetOnUnwind<'a> {
    log: &'a Log,
    armed: bool,
}

impl Drop for ResetOnUnwind<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut shared = lock(&self.log.shared);
            shared.committing = false;
            shared.poisoned = true;
            for waiter in std::mem::take(&mut shared.waiters).into_values() {
                waiter.unpark();
            }
        }
    }
}
