//! Writing sealed segments' index files (FORMAT.md, "Index files").
//!
//! An index file is derived from its segment's bytes as they are on disk,
//! read back once the roll has cut and synced them
//! (`SegmentIndex::of_segment`): it can say only what the segment says.
//! It is built with no lock held, then written under `Indexer::files`
//! once the segment is found still sealed at the length it was built
//! from, and still without one. A purge or a truncation takes the same
//! lock, under the lead, to remove segments and their index files, so no
//! index file is written for a segment that is gone or cut, and none
//! outlives its segment in this life. Written in place, then synced, then
//! its directory entry: a crash between leaves a file whose CRC fails, or
//! none; Open removes whatever does not agree with its segment.
//!
//! Who writes them: the caller (`IndexFiles::OnCall`, through
//! `Log::write_index_files`), or the log's own indexing thread
//! (`IndexFiles::Background`), woken after each roll and once at Open,
//! asleep between; the log's drop stops it, after the file under way.

use std::io;
use std::sync::Arc;

use durlog_vfs::{OpenMode, read_exact_at};

use crate::error::Error;
use crate::format::{IndexFileError, SegmentIndex};
use crate::segment::IndexFile;
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Condvar, Mutex, Rank};

use super::settings::{IndexFiles, Settings};
use super::{Log, Shared, lock};

/// A sealed segment without an index file: what building one needs.
struct Unindexed {
    id: u32,
    first_seq: u64,
    path: std::path::PathBuf,
    len: u64,
}

/// The writer of index files, shared by the log and its indexing thread.
pub(super) struct Indexer {
    settings: Arc<Settings>,
    shared: Arc<Mutex<Shared>>,
    /// Lock rank `Rank::IndexFiles`: held while an index file is written,
    /// and by a purge or a truncation while it removes segments.
    pub(super) files: Mutex<()>,
    /// A leaf lock: the rolls the indexing thread is told of, and whether
    /// the log is going.
    wake: Mutex<Wake>,
    woken: Condvar,
    /// A leaf lock: the indexing thread, once started.
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Wake {
    /// Wake-ups so far: the thread works until it has seen the last.
    calls: u64,
    closing: bool,
}

impl Log {
    /// Writes the index file of every sealed segment that has none, oldest
    /// first: returns how many it wrote. For [`IndexFiles::OnCall`] (with
    /// [`IndexFiles::Background`] the log's thread does it, and a call
    /// does what the thread has not done yet). Does nothing with
    /// [`IndexFiles::Off`], on a read-only or poisoned log.
    ///
    /// A segment whose bytes read back are not the records the log holds
    /// (damaged at rest) gets none, and the next Open decides what that
    /// damage means. A failed write leaves the log as it was: the segment
    /// is tried again at the next call.
    pub fn write_index_files(&self) -> Result<usize, Error> {
        if self.writer.is_none() || self.settings.tuning.index_files == IndexFiles::Off {
            return Ok(0);
        }
        self.indexer.write_missing()
    }

    /// The index files on disk of the segments at `segments` (places in
    /// the log's list), for a purge or a truncation to remove with them
    /// (with `Indexer::files` held).
    pub(super) fn index_files_of(
        &self,
        segments: std::ops::Range<usize>,
    ) -> Vec<std::path::PathBuf> {
        let shared = lock(&self.shared);
        shared.state.segments[segments]
            .iter()
            .filter(|segment| segment.index_file == IndexFile::Written)
            .map(|segment| self.settings.index_path(segment.first_seq))
            .collect()
    }
}

impl Indexer {
    pub(super) fn new(settings: Arc<Settings>, shared: Arc<Mutex<Shared>>) -> Indexer {
        Indexer {
            settings,
            shared,
            files: Mutex::new(Rank::IndexFiles, ()),
            wake: Mutex::new(Rank::Leaf, Wake::default()),
            woken: Condvar::new(),
            thread: Mutex::new(Rank::Leaf, None),
        }
    }

    /// With [`IndexFiles::Background`], has the indexing thread look for
    /// sealed segments without index files (started if it does not run
    /// yet); called with no lock held, after a roll and at Open.
    pub(super) fn wake(self: &Arc<Self>) {
        if self.settings.tuning.index_files != IndexFiles::Background {
            return;
        }
        {
            let mut wake = lock(&self.wake);
            if wake.closing {
                return;
            }
            wake.calls += 1;
        }
        self.woken.notify_all();
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return;
        }
        let indexer = Arc::clone(self);
        match thread::Builder::new()
            .name("durlog-index-files".into())
            .spawn(move || indexer.run())
        {
            Ok(handle) => *thread = Some(handle),
            // Sealed segments stay without index files: Open does not
            // need them, and the next Open starts the thread again.
            Err(error) => {
                log::warn!("durlog: cannot start the thread that writes index files: {error}")
            }
        }
    }

    /// The indexing thread: asleep until woken, then writes what is
    /// missing; a failure is the next wake-up's to try again.
    fn run(&self) {
        let mut seen = 0;
        loop {
            let mut wake = lock(&self.wake);
            while wake.calls == seen && !wake.closing {
                wake = self.woken.wait(wake);
            }
            if wake.closing {
                return;
            }
            seen = wake.calls;
            drop(wake);
            if let Err(error) = self.write_missing() {
                log::warn!(
                    "durlog: writing index files failed ({error}); tried again after the next roll"
                );
            }
        }
    }

    /// Ends the indexing thread, if one runs, once the file under way is
    /// written: called as the log goes.
    pub(super) fn stop(&self) {
        lock(&self.wake).closing = true;
        self.woken.notify_all();
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            // A panic there has been reported by the thread itself.
            let _ = thread.join();
        }
    }

    /// [`Log::write_index_files`], for a writable log.
    fn write_missing(&self) -> Result<usize, Error> {
        if lock(&self.shared).commit.is_poisoned() {
            return Ok(0);
        }
        let mut written = 0;
        let mut from_id = 0;
        while let Some(segment) = self.next_unindexed(from_id) {
            from_id = segment.id + 1;
            if self.write_index_file(&segment)? {
                written += 1;
            }
        }
        Ok(written)
    }

    /// The oldest sealed segment from id `from_id` on without an index
    /// file.
    fn next_unindexed(&self, from_id: u32) -> Option<Unindexed> {
        let shared = lock(&self.shared);
        let segments = &shared.state.segments;
        let sealed = &segments[..segments.len().saturating_sub(1)];
        sealed
            .iter()
            .find(|segment| segment.id >= from_id && segment.index_file == IndexFile::Missing)
            .map(|segment| Unindexed {
                id: segment.id,
                first_seq: segment.first_seq,
                path: segment.path.clone(),
                len: segment.len,
            })
    }

    /// Builds and writes `segment`'s index file: `Ok(false)` if the
    /// segment went (purged, truncated) or its bytes were refused.
    fn write_index_file(&self, segment: &Unindexed) -> Result<bool, Error> {
        let vfs = self.settings.vfs.as_ref();
        let bytes = match read_segment(vfs, segment) {
            Ok(bytes) => bytes,
            // Purged or cut meanwhile: nothing to index.
            Err(_) if !self.still_sealed(segment) => return Ok(false),
            Err(error) => return Err(Error::Io(error)),
        };
        // Bytes that check out but are not the records the log holds (a
        // fault put other valid records there) are refused alike.
        let index = match SegmentIndex::of_segment(segment.first_seq, &bytes)
            .and_then(|index| self.acknowledged(segment, index))
        {
            Ok(index) => index,
            Err(error) => {
                durlog_vfs::mark!("index files: a sealed segment read back is refused");
                log::warn!(
                    "durlog: no index file for {}: its bytes are not the records the log holds ({error}); the next open decides",
                    segment.path.display()
                );
                self.set_index_file(segment.id, IndexFile::Refused);
                return Ok(false);
            }
        };
        let _files = lock(&self.files);
        // A purge or a truncation on another thread may have come first
        // (shuttle's scenario reaches this; the simulator runs no threads),
        // or the other writer of index files (a call beside the thread).
        if !self.still_sealed(segment) || self.indexed(segment) {
            return Ok(false);
        }
        let encoded = index.encode();
        debug_assert_eq!(SegmentIndex::decode(&encoded).as_ref(), Ok(&index));
        let path = self.settings.index_path(segment.first_seq);
        write_synced(vfs, &path, &encoded)
            .and_then(|()| vfs.sync_dir(&self.settings.dir))
            .inspect_err(|_| {
                // Best effort: a file left behind fails Open's check, or
                // is written again over at the next call.
                let _ = vfs.remove_file(&path);
            })?;
        self.set_index_file(segment.id, IndexFile::Written);
        lock(&self.shared).stats.index_files_written += 1;
        Ok(true)
    }

    /// `index` if its records start where the log's acknowledged records
    /// of `segment` do.
    fn acknowledged(
        &self,
        segment: &Unindexed,
        index: SegmentIndex,
    ) -> Result<SegmentIndex, IndexFileError> {
        let shared = lock(&self.shared);
        match shared.state.find_segment(segment.id) {
            Some(kept) if kept.offsets != index.offsets => Err(IndexFileError {
                offset: 0,
                reason: "its records are not where the log's acknowledged ones start".into(),
            }),
            _ => Ok(index),
        }
    }

    /// True if the log still holds `segment` sealed, at the length its
    /// index was built from.
    fn still_sealed(&self, segment: &Unindexed) -> bool {
        let shared = lock(&self.shared);
        let segments = &shared.state.segments;
        let sealed = &segments[..segments.len().saturating_sub(1)];
        sealed
            .iter()
            .any(|kept| kept.id == segment.id && kept.len == segment.len)
    }

    /// True if `segment` got its index file meanwhile.
    fn indexed(&self, segment: &Unindexed) -> bool {
        let shared = lock(&self.shared);
        (shared.state.find_segment(segment.id))
            .is_some_and(|kept| kept.index_file == IndexFile::Written)
    }

    fn set_index_file(&self, id: u32, state: IndexFile) {
        let mut shared = lock(&self.shared);
        if let Some(segment) = shared.state.find_segment_mut(id) {
            segment.index_file = state;
        }
        shared.state.seal_indexed();
    }
}

/// The whole of a sealed segment, as it is on disk.
fn read_segment(vfs: &dyn durlog_vfs::Vfs, segment: &Unindexed) -> io::Result<Vec<u8>> {
    let file = vfs.open(&segment.path, OpenMode::ReadOnly)?;
    let len = usize::try_from(segment.len).map_err(io::Error::other)?;
    let mut bytes = vec![0; len];
    read_exact_at(file.as_ref(), &mut bytes, 0)?;
    Ok(bytes)
}

/// Writes `bytes` as the new file `path` and syncs them; a file left there
/// by an attempt that failed is replaced.
fn write_synced(vfs: &dyn durlog_vfs::Vfs, path: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    let file = match vfs.open(path, OpenMode::CreateNew) {
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            vfs.remove_file(path)?;
            vfs.open(path, OpenMode::CreateNew)?
        }
        opened => opened?,
    };
    file.write_at(bytes, 0)?;
    file.sync_data()
}
