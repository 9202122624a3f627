//! The segment writer: a group's one write and one sync, the cut-back
//! when either fails, the roll to a new segment, preallocation, and the
//! poisoning that stops the log when a failure cannot be undone durably.
//!
//! Only the leader of a group commit writes, with the writer's lock held
//! through the write and the sync; the thread that prepares the next
//! segment (`preparer.rs`) takes the same lock only to change state.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use durlog_vfs::{OpenMode, VfsFile};

use crate::error::Error;
use crate::format::{append_record, inspect_batch, parse_record};

use super::group::{Group, GroupFailure};
use super::settings::{FAILPOINT_AFTER_WRITE, Settings};
use crate::sync::thread::JoinHandle;
use crate::sync::{AtomicU64, Condvar, Mutex, MutexGuard, Ordering, Rank, lock};

/// The writer's state and what preparing the next segment needs, shared
/// with the thread that prepares it.
pub(crate) struct WriterSide {
    pub settings: Arc<Settings>,
    /// Lock rank `Rank::Writer` (see `Log`): taken by a leader without the
    /// shared lock.
    pub writer: Mutex<Writer>,
    /// Signalled when the next segment is wanted, when a preparation ends,
    /// and when the log closes.
    pub wanted: Condvar,
    /// Rolls that renamed a prepared file instead of creating one.
    pub prepared_rolls: AtomicU64,
    /// The thread that prepares the next segment (`Background` only).
    pub preparer: Preparer,
    /// This side itself, for the preparing thread to hold.
    pub this: Weak<WriterSide>,
}

/// Where the next segment's preparation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Not wanted yet (the active segment is less than half full).
    Idle,
    /// Wanted: the active segment is half full.
    Wanted,
    /// Being written, this long: the length counts against the quota.
    Preparing(u64),
    /// Zeros of this length, synced, at `Settings::next_path`.
    Ready(u64),
    /// Preparing failed; not tried again before the next roll.
    Failed,
}

impl Next {
    /// Bytes the next segment's file takes on disk (or will, once written).
    pub fn reserved(self) -> u64 {
        match self {
            Next::Preparing(len) | Next::Ready(len) => len,
            Next::Idle | Next::Wanted | Next::Failed => 0,
        }
    }
}

/// The thread that prepares segments, once started.
pub(crate) struct Preparer {
    /// Lock rank `Rank::PreparerThread` (see `Log`): taken under the
    /// writer's lock when a segment first gets half full.
    pub thread: Mutex<Option<JoinHandle<()>>>,
}

impl Default for Preparer {
    fn default() -> Preparer {
        Preparer {
            thread: Mutex::new(Rank::PreparerThread, None),
        }
    }
}

/// A prepared next segment, renamed into place: its handle, and its
/// length of zeros.
type PreparedFile = (Box<dyn VfsFile>, u64);

pub(crate) struct Writer {
    /// Read-write handle of the last segment, if any exists.
    pub file: Option<Arc<dyn VfsFile>>,
    /// The last segment's length on disk: its records and the zeros
    /// preallocated after them.
    pub allocated: u64,
    /// Record bytes of the segments before the last (sealed: no zeros).
    pub sealed: u64,
    /// The group's bytes; reused so steady appends do not allocate here.
    buf: Vec<u8>,
    pub next: Next,
    /// The Vfs cannot rename: every roll creates its file.
    pub cannot_rename: bool,
    /// The log is being dropped: the preparing thread ends.
    pub closing: bool,
}

impl Writer {
    pub fn new(file: Option<Arc<dyn VfsFile>>, allocated: u64, sealed: u64) -> Writer {
        Writer {
            file,
            allocated,
            sealed,
            buf: Vec::new(),
            next: Next::Idle,
            cannot_rename: false,
            closing: false,
        }
    }
}

impl WriterSide {
    pub fn new(settings: Arc<Settings>, writer: Writer) -> Arc<WriterSide> {
        Arc::new_cyclic(|this| WriterSide {
            settings,
            writer: Mutex::new(Rank::Writer, writer),
            wanted: Condvar::new(),
            prepared_rolls: AtomicU64::new(0),
            preparer: Preparer::default(),
            this: this.clone(),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Writer> {
        lock(&self.writer)
    }

    /// Waits on [`WriterSide::wanted`].
    pub fn wait<'a>(&self, writer: MutexGuard<'a, Writer>) -> MutexGuard<'a, Writer> {
        self.wanted.wait(writer)
    }

    /// Rolls if needed, writes the group with one write and syncs it with
    /// one `fdatasync`; on failure cuts the file back. Runs without the
    /// shared lock: only the leader gets here.
    pub fn write_group(&self, group: &Group) -> Result<(), GroupFailure> {
        let settings = &*self.settings;
        let mut writer = self.lock();
        if let Some(first_seq) = group.roll_to {
            // A file being prepared holds quota room that only this roll
            // may use: wait for it rather than create another file. It
            // began half a segment ago, so it is rarely still running.
            while matches!(writer.next, Next::Preparing(_)) {
                writer = self.wait(writer);
            }
            self.roll(&mut writer, first_seq, group.previous_len)?;
        }
        writer.sealed = group.sealed_bytes;
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
        // Preallocation rides on the group's own write and sync: zeros
        // after the records, so the next appends overwrite in place.
        let end = group.offset + group.bytes;
        let mut extended = if end > *allocated {
            settings.preallocation_end(group.bytes, end, group.sealed_bytes, reserved)
        } else {
            0
        };
        if extended > end {
            durlog_vfs::mark!("writer: zeros preallocated with a group");
            buf.resize((extended - group.offset) as usize, 0);
        }
        check_group_bytes(group, buf, settings.segment_bytes);
        let mut result = file.write_at(buf, group.offset);
        // The zeros are a bet on room, not a need: a disk with room for the
        // records but not for the zeros (or a file-size limit between the
        // two) must not refuse the append. Write the records alone, once,
        // after cutting off what the failed write left. No sync failed, so
        // this retries no sync; the one below covers the records and the
        // cut. (Without this, a full disk refused appends while up to a
        // preallocation chunk, 1 MiB by default, was still free.)
        if extended > end && result.as_ref().is_err_and(is_out_of_room) {
            durlog_vfs::mark!("writer: records written again without zeros for want of room");
            extended = 0;
            let records = &buf[..group.bytes as usize];
            result = file
                .set_len(group.offset)
                .and_then(|()| file.write_at(records, group.offset));
        }
        let result = result
            .and_then(|()| settings.failpoint(FAILPOINT_AFTER_WRITE))
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
        durlog_vfs::mark!("writer: a failed group cut back");
        let cut_back = file.set_len(group.offset).and_then(|()| file.sync_data());
        if cut_back.is_err() {
            durlog_vfs::mark!("writer: a cut-back that fails poisons the log");
        }
        Err(GroupFailure {
            error: Error::Io(error),
            poisoned: cut_back.is_err(),
            rolled: group.roll_to.is_some(),
        })
    }

    /// A truncation's part: the segment at `keep` becomes the active one,
    /// cut to `len`, and every later segment (`removed`, oldest first)
    /// goes, all durably before this returns. Called with the lead held,
    /// so no group writes meanwhile.
    ///
    /// A next segment wanted or prepared goes too: it was sized for an
    /// active segment that fills up to `segment_bytes`, and the emptied
    /// one may now take a record larger than a segment, whose zeros could
    /// then carry the files past the quota (SPEC 2.4). The writer asks for
    /// one again once the active segment is half full.
    pub fn cut_to(&self, keep: &Path, len: u64, removed: &[PathBuf]) -> io::Result<()> {
        let settings = &*self.settings;
        let writer = self.lock();
        let mut writer = self.drop_next_segment(writer)?;
        for path in removed.iter().rev() {
            settings.vfs.remove_file(path)?;
        }
        let file: Arc<dyn VfsFile> = match &writer.file {
            Some(file) if removed.is_empty() => Arc::clone(file),
            _ => Arc::from(settings.vfs.open(keep, OpenMode::ReadWrite)?),
        };
        file.set_len(len)?;
        file.sync_data()?;
        settings.vfs.sync_dir(&settings.dir)?;
        writer.file = Some(file);
        writer.allocated = len;
        Ok(())
    }

    /// Forgets the next segment: waits out a preparation under way, and
    /// removes a prepared file.
    fn drop_next_segment<'a>(
        &self,
        mut writer: MutexGuard<'a, Writer>,
    ) -> io::Result<MutexGuard<'a, Writer>> {
        while matches!(writer.next, Next::Preparing(_)) {
            writer = self.wait(writer);
        }
        let prepared = matches!(writer.next, Next::Ready(_));
        writer.next = Next::Idle;
        if prepared {
            self.settings.vfs.remove_file(&self.settings.next_path)?;
        }
        Ok(writer)
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
        let settings = &*self.settings;
        if let Some(previous) = &writer.file
            && writer.allocated > previous_len
        {
            previous
                .set_len(previous_len)
                .and_then(|()| previous.sync_data())
                .map_err(GroupFailure::poisoning)?;
            writer.allocated = previous_len;
        }
        let path = settings.segment_path(first_seq);
        let (file, allocated) = match self.take_next_segment(writer, &path)? {
            Some(taken) => taken,
            None => (self.create_segment(&path)?, 0),
        };
        // From here the file exists: a failure leaves it for recovery.
        settings
            .vfs
            .sync_dir(&settings.dir)
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
    /// (left by an earlier life) goes the way of
    /// [`WriterSide::create_segment`], which checks it holds nothing; the
    /// prepared one is then removed, so it never counts against the quota
    /// unused.
    fn take_next_segment(
        &self,
        writer: &mut Writer,
        path: &Path,
    ) -> Result<Option<PreparedFile>, GroupFailure> {
        let Next::Ready(len) = writer.next else {
            return Ok(None);
        };
        writer.next = Next::Idle;
        let vfs = &self.settings.vfs;
        let next_path = &self.settings.next_path;
        let target_free = matches!(
            vfs.open(path, OpenMode::ReadOnly),
            Err(error) if error.kind() == io::ErrorKind::NotFound
        );
        if target_free {
            match vfs.rename(next_path, path) {
                Ok(()) => {
                    // Opened by its new name, so that its errors name it.
                    let file = vfs
                        .open(path, OpenMode::ReadWrite)
                        .map_err(GroupFailure::poisoning)?;
                    self.prepared_rolls.fetch_add(1, Ordering::Relaxed);
                    durlog_vfs::mark!("writer: a roll renames the prepared segment");
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
        vfs.remove_file(next_path)
            .map_err(GroupFailure::poisoning)?;
        Ok(None)
    }

    /// Creates the segment file at `path`.
    fn create_segment(&self, path: &Path) -> Result<Box<dyn VfsFile>, GroupFailure> {
        let vfs = &self.settings.vfs;
        match vfs.open(path, OpenMode::CreateNew) {
            Ok(file) => Ok(file),
            // Left by an earlier life of the log that crashed before it wrote
            // a record there: reuse it if it holds nothing.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                let reused = vfs
                    .open(path, OpenMode::ReadWrite)
                    .and_then(|file| Ok((file.is_empty()?, file)));
                match reused {
                    Ok((true, file)) => Ok(file),
                    Ok((false, _)) => Err(GroupFailure {
                        error: Error::Corrupt {
                            file: path.to_path_buf(),
                            offset: 0,
                            reason: "a segment the log is about to create already holds data"
                                .into(),
                        },
                        poisoned: true,
                        rolled: false,
                    }),
                    Err(error) => Err(GroupFailure::poisoning(error)),
                }
            }
            // Nothing was created: the group fails, the log goes on.
            Err(error) => Err(GroupFailure {
                error: Error::Io(error),
                poisoned: false,
                rolled: false,
            }),
        }
    }
}

/// A write that failed for want of room: the disk is full (ENOSPC) or the
/// file would pass its size limit (EFBIG).
fn is_out_of_room(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::FileTooLarge
    )
}

/// Before a group's bytes go to the Vfs: they parse back to exactly its
/// members, with dense seqs and the versions the group gave them, followed
/// by zeros only; and they stay inside the segment unless one record alone
/// is larger. On in release builds too, as TigerBeetle keeps its checks at
/// the I/O boundary: a bug caught here panics before a byte is written
/// (the lead's drop then poisons the log), where one let through would be
/// acknowledged and found by the next recovery, or never. It costs a CRC
/// pass over bytes a sync is about to cover (BENCHMARKS.md, "Checks at
/// the I/O boundary").
fn check_group_bytes(group: &Group, buf: &[u8], segment_bytes: u64) {
    let records_end = group.bytes as usize;
    assert!(buf.len() >= records_end, "the buffer holds the group");
    assert!(
        group.offset + group.bytes <= segment_bytes || group.members.len() == 1,
        "a group of {} bytes at offset {} passes the segment limit {segment_bytes}",
        group.bytes,
        group.offset
    );
    let mut at = 0;
    for member in &group.members {
        let record = parse_record(&buf[at..records_end]).expect("a group's record parses back");
        let batch = inspect_batch(record.payload).expect("a group's batch parses back");
        assert_eq!(
            (record.seq, batch.first_version, batch.count),
            (member.seq, member.first_version, member.pending.count),
            "a group's record holds its member's seq and versions"
        );
        at += record.len;
    }
    assert_eq!(
        at, records_end,
        "the group's records fill its bytes exactly"
    );
    assert!(
        crate::format::all_zeros(&buf[records_end..]),
        "only zeros follow a group's records"
    );
}
