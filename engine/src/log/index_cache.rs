//! Sealed segments' indexes read back, for the reads that find a stream's
//! records through them (`index.rs`: a stream holds a sealed segment with
//! an index file as one `Part`) and for a truncation that cuts such a
//! segment. A few are kept, the least recently used dropped first, each
//! checked against its segment's length on every use.
//!
//! An index file is derived data (FORMAT.md, "Index files"): one that
//! cannot be read as its segment's (gone, damaged, another length) is
//! derived again from the segment's own bytes (`SegmentIndex::of_segment`,
//! which checks every record), and a segment that cannot be walked either
//! is damage, reported naming it and the offset. A read of the file that
//! fails (EIO) fails the read, as a failed read of a segment does.

use std::collections::BTreeMap;
use std::sync::Arc;

use durlog_vfs::{OpenMode, read_exact_at};

use crate::error::Error;
use crate::format::SegmentIndex;
use crate::recovery::read_index_file;

use super::{Log, lock};

/// Segments' indexes held at once: each is about 16 bytes a record.
const CACHED_INDEXES_MAX: usize = 4;

/// The sealed segment whose index is wanted.
pub(super) struct Sealed {
    pub id: u32,
    pub first_seq: u64,
    /// Its length: an index of another length is not its.
    pub len: u64,
}

/// Indexes read back, by segment id, with when each was last used.
#[derive(Default)]
pub(super) struct IndexCache {
    held: BTreeMap<u32, (Arc<SegmentIndex>, u64)>,
    clock: u64,
}

impl IndexCache {
    fn get(&mut self, segment: &Sealed) -> Option<Arc<SegmentIndex>> {
        self.clock += 1;
        let (index, used) = self.held.get_mut(&segment.id)?;
        if index.first_seq != segment.first_seq || index.segment_len != segment.len {
            // A truncation cut the segment since: read it again.
            self.held.remove(&segment.id);
            return None;
        }
        *used = self.clock;
        Some(Arc::clone(index))
    }

    fn put(&mut self, id: u32, index: Arc<SegmentIndex>) {
        if self.held.len() >= CACHED_INDEXES_MAX && !self.held.contains_key(&id) {
            let oldest = (self.held.iter())
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| *id);
            oldest.map(|id| self.held.remove(&id));
        }
        self.held.insert(id, (index, self.clock));
    }

    /// Forgets every index (a purge or a truncation moved the segments).
    pub(super) fn clear(&mut self) {
        self.held.clear();
    }
}

impl Log {
    /// The index of the sealed segment `segment`, from the cache, its
    /// index file or, where that file cannot serve, its own bytes.
    pub(super) fn segment_index(&self, segment: &Sealed) -> Result<Arc<SegmentIndex>, Error> {
        if let Some(index) = lock(&self.index_cache).get(segment) {
            return Ok(index);
        }
        // Read with no lock held: another reader may read it too, and the
        // second to finish replaces the first's copy with an equal one.
        let index = Arc::new(self.read_segment_index(segment)?);
        lock(&self.index_cache).put(segment.id, Arc::clone(&index));
        Ok(index)
    }

    fn read_segment_index(&self, segment: &Sealed) -> Result<SegmentIndex, Error> {
        let vfs = self.settings.vfs.as_ref();
        let index_path = self.settings.index_path(segment.first_seq);
        // A failed read of it fails the read, as any failed read does; a
        // file that is gone (removed by hand, say) is walked around.
        let bytes = match read_index_file(vfs, &index_path, segment.len) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => return Err(Error::Io(error)),
        };
        let from_file =
            (bytes.and_then(|bytes| SegmentIndex::decode(&bytes).ok())).filter(|index| {
                index.first_seq == segment.first_seq && index.segment_len == segment.len
            });
        if let Some(index) = from_file {
            return Ok(index);
        }
        durlog_vfs::mark!(
            "index files: a read finds a sealed segment's records through its own bytes"
        );
        lock(&self.shared).stats.index_files_bypassed += 1;
        let path = self.settings.segment_path(segment.first_seq);
        let file = vfs.open(&path, OpenMode::ReadOnly)?;
        let len = usize::try_from(segment.len).map_err(std::io::Error::other)?;
        let mut bytes = vec![0; len];
        let mut fault = None;
        // Read twice before damage is reported, as every read of a record
        // is: a bit flipped on the way is not damage.
        for _ in 0..2 {
            read_exact_at(file.as_ref(), &mut bytes, 0)?;
            match SegmentIndex::of_segment(segment.first_seq, &bytes) {
                Ok(index) => return Ok(index),
                Err(error) => fault = Some(error),
            }
        }
        let fault = fault.expect("two reads failed");
        Err(Error::Corrupt {
            file: path,
            offset: fault.offset as u64,
            reason: format!(
                "its index file {} cannot be read as its index, and its records cannot be walked past this: {}",
                index_path.display(),
                fault.reason
            ),
        })
    }
}
