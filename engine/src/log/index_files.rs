//! Writing sealed segments' index files (FORMAT.md, "Index files").
//!
//! An index file is derived from its segment's bytes as they are on disk,
//! read back once the roll has cut and synced them
//! (`SegmentIndex::of_segment`): it can say only what the segment says.
//! It is built with no lock held, then written under `Log::index_files`
//! once the segment is found still sealed at the length it was built
//! from. A purge or a truncation takes the same lock, under the lead, to
//! remove segments and their index files, so no index file is written for
//! a segment that is gone or cut, and none outlives its segment in this
//! life. Written in place, then synced, then its directory entry: a crash
//! between leaves a file whose CRC fails, or none; Open removes whatever
//! does not agree with its segment.

use std::io;

use durlog_vfs::{OpenMode, read_exact_at};

use crate::error::Error;
use crate::format::{IndexFileError, SegmentIndex};
use crate::segment::IndexFile;

use super::settings::IndexFiles;
use super::{Log, lock};

/// A sealed segment without an index file: what building one needs.
struct Unindexed {
    id: u32,
    first_seq: u64,
    path: std::path::PathBuf,
    len: u64,
}

impl Log {
    /// Writes the index file of every sealed segment that has none, oldest
    /// first, for [`IndexFiles::OnCall`]: returns how many it wrote. Does
    /// nothing with [`IndexFiles::Off`], on a read-only or poisoned log.
    ///
    /// A segment whose bytes read back are not the records the log holds
    /// (damaged at rest) gets none, and the next Open decides what that
    /// damage means. A failed write leaves the log as it was: the segment
    /// is tried again at the next call.
    pub fn write_index_files(&self) -> Result<usize, Error> {
        if self.writer.is_none()
            || self.settings.tuning.index_files == IndexFiles::Off
            || self.is_poisoned()
        {
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
        let _files = lock(&self.index_files);
        // A purge or a truncation on another thread may have come first
        // (shuttle's scenario reaches this; the simulator runs no threads).
        if !self.still_sealed(segment) {
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

    fn set_index_file(&self, id: u32, state: IndexFile) {
        let mut shared = lock(&self.shared);
        if let Some(segment) = shared.state.find_segment_mut(id) {
            segment.index_file = state;
        }
    }

    /// The index files on disk of the segments at `segments` (places in
    /// the log's list), for a purge or a truncation to remove with them
    /// (with `index_files` held).
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
