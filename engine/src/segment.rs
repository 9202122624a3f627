//! Segment files: their metadata, a windowed reader for scanning them, and
//! a small cache of open read handles (segments open on demand, so a log of
//! thousands of segments does not hold thousands of descriptors).

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use durlog_vfs::{OpenMode, Vfs, VfsFile, read_exact_at_onto, read_up_to_onto};

use crate::format::{HEADER_SIZE, Header};

/// Bytes a scan reads per call: large enough to amortise the system call,
/// small enough to stay in cache.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// Bytes a point read fetches first: most records fit, so one read serves.
const POINT_READ_BYTES: usize = 4096;

/// Read handles kept open for sealed segments.
const OPEN_HANDLES_MAX: usize = 16;

/// One segment file of the log.
#[derive(Clone, Debug)]
pub(crate) struct SegmentMeta {
    /// Its number in the index, in groups and in handle caches: given in
    /// creation order and never reused, not even after a truncation
    /// removed the segment (a cached handle must never meet another file).
    pub id: u32,
    /// Seq of its first record, which is also its name.
    pub first_seq: u64,
    pub path: PathBuf,
    /// Bytes of acknowledged records in it (never counts a zero tail).
    pub len: u64,
    /// The offset of each of its records, by seq from `first_seq`: 4 bytes
    /// a record, for reads of the whole log and subscriptions by position.
    pub offsets: Vec<u32>,
    /// Whether its index file is on disk (sealed segments only).
    pub index_file: IndexFile,
    /// Whether the index holds its streams' records as parts, found
    /// through its index file (`index.rs`), not one by one.
    pub parts: bool,
}

/// Where a segment's index file stands (FORMAT.md, "Index files").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IndexFile {
    /// None known: the active segment's, or a sealed one's not yet written.
    Missing,
    /// Written and synced, its directory entry too, or checked by Open.
    Written,
    /// The segment's bytes, read back to build it, were not the records
    /// the log holds (damaged at rest): not tried again in this life.
    Refused,
}

impl SegmentMeta {
    /// The byte range of the record with seq `seq`, if it is in here.
    pub fn record(&self, seq: u64) -> Option<(u64, u64)> {
        let at = usize::try_from(seq.checked_sub(self.first_seq)?).ok()?;
        let start = u64::from(*self.offsets.get(at)?);
        let end = self
            .offsets
            .get(at + 1)
            .map_or(self.len, |next| u64::from(*next));
        debug_assert!(
            start < end && end <= self.len,
            "a record lies inside its segment"
        );
        Some((start, end))
    }
}

/// Sequential reads of one file through a reusable buffer.
pub(crate) struct Window<'a> {
    file: &'a dyn VfsFile,
    file_len: u64,
    /// Only `buf[..loaded]` holds file bytes (a failed load leaves none).
    /// Loads read onto the emptied buffer, so its allocation is reused and
    /// nothing is zeroed first.
    buf: Vec<u8>,
    loaded: usize,
    /// File offset of `buf[0]`.
    start: u64,
}

impl<'a> Window<'a> {
    /// A window over `file`, reusing `buf`'s allocation.
    pub fn new(file: &'a dyn VfsFile, file_len: u64, buf: Vec<u8>) -> Window<'a> {
        Window {
            file,
            file_len,
            buf,
            loaded: 0,
            start: 0,
        }
    }

    /// Gives the buffer back for reuse.
    pub fn into_buf(self) -> Vec<u8> {
        self.buf
    }

    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Up to `want` bytes at `offset`; fewer only where the file ends.
    pub fn bytes(&mut self, offset: u64, want: u64) -> io::Result<&[u8]> {
        let want = want.min(self.file_len.saturating_sub(offset));
        let loaded_end = self.start + self.loaded as u64;
        if offset < self.start || offset + want > loaded_end {
            self.load(offset, want)?;
        }
        let from = (offset - self.start) as usize;
        Ok(&self.buf[from..from + want as usize])
    }

    /// Forgets what was loaded, so the next `bytes` reads the file again
    /// (recovery re-reads suspected damage to tell it from a flaky read).
    pub fn invalidate(&mut self) {
        self.loaded = 0;
        self.start = 0;
    }

    fn load(&mut self, offset: u64, want: u64) -> io::Result<()> {
        let len = want
            .max(SCAN_CHUNK_BYTES as u64)
            .min(self.file_len.saturating_sub(offset));
        let len = len as usize;
        self.loaded = 0;
        self.buf.clear();
        read_exact_at_onto(self.file, &mut self.buf, len, offset)?;
        debug_assert_eq!(self.buf.len(), len, "a load holds what it asked for");
        self.loaded = len;
        self.start = offset;
        Ok(())
    }
}

/// Reads the record at `offset` of `file` into `buf` (header included),
/// fetching only as many bytes as its header claims but never more than
/// `max_len`, and returns them (or fewer, where the file ends). The caller
/// parses them. `buf` keeps its allocation: the bytes are read onto it
/// emptied, never zeroed first.
pub(crate) fn read_record_bytes<'b>(
    file: &dyn VfsFile,
    offset: u64,
    max_len: u64,
    buf: &'b mut Vec<u8>,
) -> io::Result<&'b [u8]> {
    let first = (POINT_READ_BYTES as u64).min(max_len) as usize;
    buf.clear();
    let got = read_up_to_onto(file, buf, first, offset)?;
    if got < HEADER_SIZE {
        return Ok(&buf[..got]);
    }
    let payload_len = u64::from(Header::peek_len(&buf[..got]).expect("a whole header"));
    let needed = (HEADER_SIZE as u64 + payload_len).min(max_len) as usize;
    if needed <= got {
        return Ok(&buf[..needed]);
    }
    read_up_to_onto(file, buf, needed - got, offset + got as u64)?;
    Ok(&buf[..])
}

/// Open read handles of segments, least recently used evicted first.
#[derive(Default)]
pub(crate) struct Handles {
    open: BTreeMap<u32, (Arc<dyn VfsFile>, u64)>,
    clock: u64,
}

impl Handles {
    /// Drops the handles of segments a purge removed.
    pub fn forget_before(&mut self, id: u32) {
        self.open.retain(|&segment, _| segment >= id);
    }

    /// Drops the handles of segments a truncation removed.
    pub fn forget_after(&mut self, id: u32) {
        self.open.retain(|&segment, _| segment <= id);
    }

    /// The handle of segment number `segment`, opening it if needed.
    pub fn get(
        &mut self,
        vfs: &dyn Vfs,
        segment: u32,
        path: impl FnOnce() -> std::path::PathBuf,
    ) -> io::Result<Arc<dyn VfsFile>> {
        self.clock += 1;
        if let Some((file, used)) = self.open.get_mut(&segment) {
            *used = self.clock;
            return Ok(Arc::clone(file));
        }
        let file: Arc<dyn VfsFile> = Arc::from(vfs.open(&path(), OpenMode::ReadOnly)?);
        if self.open.len() >= OPEN_HANDLES_MAX {
            let oldest = self
                .open
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| *key);
            if let Some(oldest) = oldest {
                self.open.remove(&oldest);
            }
        }
        self.open.insert(segment, (Arc::clone(&file), self.clock));
        Ok(file)
    }
}
