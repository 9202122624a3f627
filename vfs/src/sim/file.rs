//! One simulated file: its page-cache content, its durable content, and
//! which 4 KiB pages differ between the two.
//!
//! Both contents are kept whole (`cached` and `durable`), so reads and
//! inspection are plain slice copies. What keeps syncs and crashes cheap is
//! the dirty page set: a sync copies only dirty pages into `durable`, and a
//! crash restores only the dirty pages that are lost, so both cost time in
//! proportion to the unsynced pages (plus any unsynced size change), never
//! to the file's size.
//!
//! Invariants, checked after every sync and crash in debug builds:
//! - a page that is neither dirty nor dropped holds the same bytes in
//!   `cached` as in `durable` where both have bytes, and zeros in `cached`
//!   beyond the durable size;
//! - a page is never both dirty and dropped.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::fault::FaultKind;
use super::trace::path_hash;

pub(crate) use crate::{PAGE_BYTES, SECTOR_BYTES};
/// The largest size a simulated file may reach: a bound on memory, since the
/// whole file lives in memory twice. Writes and `set_len` beyond it fail
/// with `FileTooLarge`.
pub const FILE_BYTES_MAX: u64 = 1 << 32;

/// A file (an inode): shared by its directory entries and open handles.
#[derive(Debug)]
pub(crate) struct FileNode {
    /// Creation order on this disk: the order crash outcomes are drawn in.
    pub(crate) id: u64,
    /// `path_hash` of the path in `names`, kept apart so that the trace
    /// digest, which every operation feeds, reads it without a lock. Written
    /// only together with `names.path`, under the disk lock.
    path_hash: AtomicU64,
    /// The path the file was created at, and whether it ever reported
    /// another (sticky): most files never do, so a recorded trace event
    /// takes their path from here without locking `names`.
    created_path: Arc<Path>,
    renamed: AtomicBool,
    names: Mutex<Names>,
    data: Mutex<FileData>,
}

/// The names a file is visible under, and the one it reports.
#[derive(Debug)]
struct Names {
    /// Every visible name (normalised), oldest first. One for a file that is
    /// created and renamed; two after a crash kept both names of an unsynced
    /// rename (like a hard link); none once removed.
    visible: Vec<Arc<Path>>,
    /// What errors, the trace and `Damage` name: the newest visible name, or
    /// the last one the file had if it has none.
    path: Arc<Path>,
}

impl FileNode {
    /// A file visible under `path` alone.
    pub(crate) fn new(id: u64, path: Arc<Path>, data: FileData) -> FileNode {
        FileNode {
            id,
            path_hash: AtomicU64::new(path_hash(&path)),
            created_path: Arc::clone(&path),
            renamed: AtomicBool::new(false),
            names: Mutex::new(Names {
                visible: vec![Arc::clone(&path)],
                path,
            }),
            data: Mutex::new(data),
        }
    }

    /// Locks the file's content. Only ever taken while the disk lock is
    /// held, so it is never contended; the lock order is disk, then file.
    pub(crate) fn lock(&self) -> MutexGuard<'_, FileData> {
        self.data
            .lock()
            .expect("SimVfs file lock poisoned by an earlier panic")
    }

    /// The names lock: a leaf (nothing is locked while it is held), taken
    /// under the disk lock except by `Debug` of a handle.
    fn names(&self) -> MutexGuard<'_, Names> {
        self.names
            .lock()
            .expect("SimVfs file names lock poisoned by an earlier panic")
    }

    /// Whether any directory entry names the file.
    pub(crate) fn is_visible(&self) -> bool {
        !self.names().visible.is_empty()
    }

    /// The path the file reports (see `Names::path`).
    pub(crate) fn path(&self) -> Arc<Path> {
        self.with_path(Arc::clone)
    }

    /// `path_hash(&self.path())`, without a lock or a clone.
    pub(crate) fn path_hash(&self) -> u64 {
        // The disk lock orders every write before every read.
        self.path_hash.load(Ordering::Relaxed)
    }

    /// Calls `op` with the reported path, borrowed: for the trace, which
    /// clones it only when it records events.
    pub(crate) fn with_path<T>(&self, op: impl FnOnce(&Arc<Path>) -> T) -> T {
        // Relaxed: the disk lock orders `set_path` before this (`Debug` of a
        // handle, outside it, may see either path during a rename).
        if self.renamed.load(Ordering::Relaxed) {
            op(&self.names().path)
        } else {
            op(&self.created_path)
        }
    }

    /// The file becomes visible under `path` too: as its newest name (a
    /// rename), or as its oldest (a crash restoring a durable entry, which
    /// predates every unsynced change).
    pub(crate) fn link(&self, path: Arc<Path>, newest: bool) {
        let mut names = self.names();
        if newest || names.visible.is_empty() {
            names.visible.push(Arc::clone(&path));
            self.set_path(&mut names, path);
        } else {
            names.visible.insert(0, path);
        }
    }

    /// The file is no longer visible under `path` (removed, renamed away,
    /// replaced, or undone by a crash). It keeps reporting `path` if it has
    /// no other name.
    pub(crate) fn unlink(&self, path: &Path) {
        let mut names = self.names();
        let Some(index) = names.visible.iter().position(|name| **name == *path) else {
            return;
        };
        names.visible.remove(index);
        if index == names.visible.len()
            && let Some(newest) = names.visible.last().cloned()
        {
            self.set_path(&mut names, newest);
        }
    }

    fn set_path(&self, names: &mut Names, path: Arc<Path>) {
        self.path_hash.store(path_hash(&path), Ordering::Relaxed);
        self.renamed.store(true, Ordering::Relaxed);
        names.path = path;
    }
}

/// A set of page numbers with O(1) insert and membership, and iteration in
/// insertion order (sorted when the order matters).
#[derive(Debug, Default)]
struct PageSet {
    bits: Vec<u64>,
    list: Vec<u64>,
}

impl PageSet {
    fn insert(&mut self, page: u64) {
        let word = (page / 64) as usize;
        let mask = 1u64 << (page % 64);
        if word >= self.bits.len() {
            self.bits.resize(word + 1, 0);
        }
        if self.bits[word] & mask == 0 {
            self.bits[word] |= mask;
            self.list.push(page);
        }
    }

    fn contains(&self, page: u64) -> bool {
        let word = (page / 64) as usize;
        self.bits
            .get(word)
            .is_some_and(|bits| bits & (1u64 << (page % 64)) != 0)
    }

    /// Empties the set and returns its pages, sorted.
    fn take_sorted(&mut self) -> Vec<u64> {
        for &page in &self.list {
            self.bits[(page / 64) as usize] = 0;
        }
        let mut pages = std::mem::take(&mut self.list);
        pages.sort_unstable();
        pages
    }

    fn clear(&mut self) {
        for &page in &self.list {
            self.bits[(page / 64) as usize] = 0;
        }
        self.list.clear();
    }

    fn len(&self) -> usize {
        self.list.len()
    }
}

/// What the fault randomness decided for one file at a crash, for the trace.
pub(crate) struct CrashOutcome {
    pub(crate) fault: FaultKind,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// The content of one file.
#[derive(Debug, Default)]
pub(crate) struct FileData {
    /// What reads see: the page cache.
    cached: Vec<u8>,
    /// What is on the platter.
    durable: Vec<u8>,
    /// Pages whose cached bytes may differ from the durable ones and that a
    /// sync will write.
    dirty: PageSet,
    /// Pages a failed fsync marked clean without writing them: they differ
    /// from the durable bytes, no sync will write them, a crash loses them.
    dropped: BTreeSet<u64>,
    /// Whether the disk's set of files to visit at a crash holds this file.
    pub(crate) in_dirty_files: bool,
}

/// The bytes of `page` below `limit`, as indices (empty, at `limit`, if the
/// page starts at or past it).
fn page_range(page: u64, limit: u64) -> (usize, usize) {
    let start = (page * PAGE_BYTES).min(limit);
    let end = (page * PAGE_BYTES + PAGE_BYTES).min(limit);
    (start as usize, end as usize)
}

/// True with probability `p`, from 53 random bits (no float functions, so
/// the same on every machine).
pub(crate) fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    let unit = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    unit < p
}

impl FileData {
    /// A file whose content is all durable.
    pub(crate) fn durable(bytes: &[u8]) -> FileData {
        FileData {
            cached: bytes.to_vec(),
            durable: bytes.to_vec(),
            ..FileData::default()
        }
    }

    pub(crate) fn cached(&self) -> &[u8] {
        &self.cached
    }

    pub(crate) fn durable_bytes(&self) -> &[u8] {
        &self.durable
    }

    pub(crate) fn len(&self) -> u64 {
        self.cached.len() as u64
    }

    /// True when a crash would change nothing: no dirty or dropped page and
    /// the size is durable.
    pub(crate) fn is_clean(&self) -> bool {
        self.dirty.len() == 0 && self.dropped.is_empty() && self.cached.len() == self.durable.len()
    }

    pub(crate) fn dirty_page_count(&self) -> usize {
        self.dirty.len()
    }

    /// Up to `want` bytes of the cache at `offset` (fewer where the file
    /// ends).
    pub(crate) fn cached_at(&self, offset: u64, want: usize) -> &[u8] {
        let len = self.len();
        if offset >= len {
            return &[];
        }
        let count = (len - offset).min(want as u64) as usize;
        let start = offset as usize;
        &self.cached[start..start + count]
    }

    /// Writes `buf` at `offset` into the cache. The caller has checked that
    /// the end stays within [`FILE_BYTES_MAX`].
    pub(crate) fn write(&mut self, buf: &[u8], offset: u64) {
        if buf.is_empty() {
            return;
        }
        let end = offset + buf.len() as u64;
        if offset == self.len() {
            // An append: no zero-fill first. The pages it covers turn dirty
            // below, which covers what `extend_to` would mark.
            self.cached.extend_from_slice(buf);
        } else {
            self.extend_to(end);
            self.cached[offset as usize..end as usize].copy_from_slice(buf);
        }
        self.mark_dirty(offset, end);
    }

    /// Truncates the cache to `len`, or extends it with zeros.
    pub(crate) fn set_len(&mut self, len: u64) {
        if len < self.len() {
            self.cached.truncate(len as usize);
        } else {
            self.extend_to(len);
        }
    }

    /// Extends the cache with zeros to `len` (no-op if not longer). Zeros
    /// that replace durable bytes (after an unsynced truncate) are a change
    /// a sync must write, so those pages turn dirty.
    fn extend_to(&mut self, len: u64) {
        let old_len = self.len();
        if len <= old_len {
            return;
        }
        let durable_len = self.durable.len() as u64;
        if old_len < durable_len {
            self.mark_dirty(old_len, len.min(durable_len));
        }
        self.cached.resize(len as usize, 0);
    }

    fn mark_dirty(&mut self, start: u64, end: u64) {
        debug_assert!(start < end);
        for page in start / PAGE_BYTES..=(end - 1) / PAGE_BYTES {
            self.dirty.insert(page);
            if !self.dropped.is_empty() {
                self.dropped.remove(&page);
            }
        }
    }

    /// fsync succeeded: the cached content and size become durable. Dropped
    /// pages stay as they are on the platter: the sync does not know them.
    pub(crate) fn sync(&mut self) {
        let len = self.len();
        self.durable.resize(len as usize, 0);
        for &page in &self.dirty.list {
            let (start, end) = page_range(page, len);
            self.durable[start..end].copy_from_slice(&self.cached[start..end]);
        }
        self.dirty.clear();
        if !self.dropped.is_empty() {
            self.dropped.retain(|&page| page * PAGE_BYTES < len);
        }
        self.check_invariants();
    }

    /// fsync failed and the kernel gave up on the dirty pages: they turn
    /// clean without reaching the platter. Returns how many were dropped,
    /// and the bytes from the first to the end of the last (empty if none).
    pub(crate) fn drop_dirty_pages(&mut self) -> (u64, Range<u64>) {
        let pages = self.dirty.take_sorted();
        let span = match (pages.first(), pages.last()) {
            (Some(&first), Some(&last)) => first * PAGE_BYTES..(last + 1) * PAGE_BYTES,
            _ => 0..0,
        };
        let count = pages.len() as u64;
        self.dropped.extend(pages);
        (count, span)
    }

    /// Power loss: decides what of the cache reached the platter, per the
    /// fault model, and leaves `cached == durable` = the post-crash content.
    /// `keeps(kind)` decides each unsynced change: the size
    /// (`UnsyncedSizeChange`), if it differs, then each dirty page that
    /// matters (`LostUnsyncedPages`), in page order.
    pub(crate) fn resolve_crash(
        &mut self,
        keeps: &mut dyn FnMut(FaultKind) -> bool,
        outcomes: &mut Vec<CrashOutcome>,
    ) {
        let cached_len = self.len();
        let durable_len = self.durable.len() as u64;
        let size_survives = cached_len != durable_len && keeps(FaultKind::UnsyncedSizeChange);
        let size = if size_survives {
            outcomes.push(CrashOutcome {
                fault: FaultKind::UnsyncedSizeChange,
                offset: durable_len,
                len: cached_len,
            });
            cached_len
        } else {
            durable_len
        };
        // Only pages that hold cached bytes below the surviving size matter:
        // the rest is cut off, or (after an undone truncate) comes back from
        // the platter.
        let relevant_end = cached_len.min(size);
        let mut survivors = Vec::new();
        for page in self.dirty.take_sorted() {
            if page * PAGE_BYTES >= relevant_end {
                continue;
            }
            if keeps(FaultKind::LostUnsyncedPages) {
                let (start, end) = page_range(page, relevant_end);
                outcomes.push(CrashOutcome {
                    fault: FaultKind::LostUnsyncedPages,
                    offset: start as u64,
                    len: (end - start) as u64,
                });
                survivors.push(page);
            } else {
                self.restore_page(page);
            }
        }
        for page in std::mem::take(&mut self.dropped) {
            self.restore_page(page);
        }
        if size < cached_len {
            self.cached.truncate(size as usize);
        } else if size > cached_len {
            // An undone truncate: the old tail is still on the platter.
            let tail = &self.durable[cached_len as usize..size as usize];
            self.cached.extend_from_slice(tail);
        }
        self.durable.resize(size as usize, 0);
        for page in survivors {
            let (start, end) = page_range(page, size);
            self.durable[start..end].copy_from_slice(&self.cached[start..end]);
        }
        debug_assert!(self.cached == self.durable, "crash left cache != platter");
        self.check_invariants();
    }

    /// Puts back into the cache what the platter holds for `page` (zeros
    /// beyond the durable size).
    fn restore_page(&mut self, page: u64) {
        let (start, end) = page_range(page, self.len());
        let durable_end = end.min(self.durable.len());
        if start < durable_end {
            self.cached[start..durable_end].copy_from_slice(&self.durable[start..durable_end]);
        }
        self.cached[durable_end.max(start)..end].fill(0);
    }

    /// Flips bit `bit` of the durable content, and of the cache where the
    /// cache mirrors the platter. The caller checked `bit` is in range.
    pub(crate) fn flip_durable_bit(&mut self, bit: u64) {
        let byte = (bit / 8) as usize;
        let mask = 1u8 << (bit % 8);
        self.durable[byte] ^= mask;
        let page = bit / 8 / PAGE_BYTES;
        if byte < self.cached.len() && !self.dirty.contains(page) && !self.dropped.contains(&page) {
            self.cached[byte] ^= mask;
        }
    }

    /// The invariants in the module doc; a full scan, so debug builds only.
    fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let cached_len = self.len();
        let durable_len = self.durable.len() as u64;
        for page in 0..cached_len.div_ceil(PAGE_BYTES) {
            let dirty = self.dirty.contains(page);
            assert!(
                !(dirty && self.dropped.contains(&page)),
                "page {page} is both dirty and dropped"
            );
            if dirty || self.dropped.contains(&page) {
                continue;
            }
            let (start, end) = page_range(page, cached_len);
            let shared_end = end.min(durable_len as usize).max(start);
            assert!(
                shared_end == start
                    || self.cached[start..shared_end] == self.durable[start..shared_end],
                "clean page {page} differs from the platter"
            );
            assert!(
                self.cached[shared_end..end].iter().all(|&byte| byte == 0),
                "clean page {page} beyond the durable size is not zero"
            );
        }
    }
}
