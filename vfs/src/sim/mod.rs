//! [`SimVfs`]: an in-memory disk with a page cache, power failures and
//! injected faults, deterministic from one seed.
//!
//! # The model
//!
//! Each file has a *durable* content and size (the platter) and a *cached*
//! content and size (the page cache, which every read sees). Writes,
//! truncates and extensions change only the cache and mark the 4 KiB pages
//! they touch dirty. `sync_data` and `sync_all` (identical here) make the
//! file's whole cached content and size durable; they cost time in
//! proportion to the dirty pages, not to the file.
//!
//! Each directory has *durable* entries and *visible* entries. Creating
//! (`OpenMode::CreateNew`), removing or renaming a file changes only the
//! visible ones until `sync_dir` on that directory. A file whose entry is
//! not durable may vanish at a crash even though its data was synced: that
//! is why an engine fsyncs the directory after creating a file. A removal
//! not yet synced may be undone. A rename is a removal of the old name and
//! a create of the new one (in one directory or two), each decided on its
//! own at a crash: the file may come back under the old name, the new one,
//! both (one file, two names, like a hard link) or neither. Errors, the
//! trace and [`Damage`] name a file by its newest visible name (its last
//! name if it has none). Directories themselves are durable as soon as
//! `create_dir_all` returns (it syncs each parent it adds to, as `PosixVfs`
//! does, which also makes everything else pending there durable), and
//! nothing removes a directory.
//!
//! # Crashes
//!
//! [`SimVfs::crash`] is a power loss followed by a reboot; [`SimVfs::halt`]
//! is a power loss that leaves the disk down until [`SimVfs::reboot`];
//! [`SimVfs::crash_after_ops`] arms a power loss *during* the n-th counted
//! operation from now. Counted operations are the calls that mutate or
//! sync: `write_at`, `set_len`, `sync_data`, `sync_all`, `open` with
//! `CreateNew`, `remove_file`, `rename`, `sync_dir`, `create_dir_all`,
//! `lock_file`, each counted when it is called while the disk is up
//! through a live handle, whether or not it then succeeds. The interrupted
//! operation returns `Err`; what it did first: a `write_at` leaves nothing,
//! or with [`FaultKind::TornWrite`] a prefix; a `CreateNew`, `remove_file`,
//! `rename`, `set_len` or the create of a missing lock file takes effect
//! in the cache (so it survives only as the rules below allow an unsynced
//! change to); a sync or `create_dir_all` does nothing; a `lock_file`
//! takes no lock.
//!
//! At a power loss the cache is resolved, then discarded: the disk becomes
//! exactly its durable state, except where an enabled fault allows another
//! outcome. Each decision is drawn independently, in a fixed order:
//! - [`FaultKind::LostDirEntry`] (weight w): each unsynced create or remove
//!   takes effect with probability w, and so does each of the two names of
//!   an unsynced rename, independently. Off: creates vanish, removes and
//!   renames are undone. Per name the outcome is the durable entry or the
//!   visible one.
//! - [`FaultKind::UnsyncedSizeChange`] (w): a file whose cached size differs
//!   from its durable size keeps the cached size with probability w. Off:
//!   the durable size. (Sizes in between are not modelled; torn writes and
//!   lost pages give the partial states.)
//! - [`FaultKind::LostUnsyncedPages`] (w): each dirty page below the
//!   resulting size survives with probability w, so any subset survives, in
//!   any order. A page that does not survive holds what the platter held:
//!   the durable bytes, and zeros beyond the old durable size.
//!   Off: no unsynced page survives.
//!
//! A power loss also releases every lock taken by `lock_file`: the
//! processes that held them died. The rule is `flock`'s, inside one disk:
//! a file is locked by at most one guard (a second `lock_file` fails with
//! `WouldBlock`), locks belong to files, not names (a lock file removed
//! and created again is free), and dropping a guard releases its lock only
//! if that lock still holds, so a guard from before a crash never frees a
//! lock taken after it. A missing lock file is created like `CreateNew`'s
//! file: visible at once, durable only after `sync_dir`.
//!
//! After a power loss every handle opened before it is dead: each of its
//! operations returns `Err`, forever. While the disk is halted, every
//! operation through any handle or clone, `open` and `list_dir` included,
//! returns `Err`. [`injected_fault`] tells these errors (and every injected
//! failure) apart from ordinary ones.
//!
//! # Faults during operation
//!
//! - [`FaultKind::TornWrite`] (w): when a crash fires during a `write_at`,
//!   with probability w a prefix reaches the cache before the power goes:
//!   cut at a 512-byte sector boundary (absolute file offset) or at any
//!   byte, each half the time, and half the time followed by garbage up to
//!   the end of the sector being written. The prefix is then subject to the
//!   crash rules above, like any unsynced data.
//! - [`FaultKind::BitFlipOnRead`] (w): a `read_at` that returns bytes flips
//!   one bit in them with probability w; the disk is unchanged.
//! - [`FaultKind::FailedFsync`] (w): `sync_data`, `sync_all` or `sync_dir`
//!   returns EIO with probability w, making nothing durable. For a file,
//!   half the time the dirty pages are also dropped: marked clean without
//!   reaching the platter, so a later sync returns `Ok` without writing
//!   them and a crash loses them (the Linux "fsyncgate" behaviour) until
//!   they are written again. This is counted and traced, not listed in
//!   [`SimVfs::damage`]: it cannot change bytes that were durable before,
//!   only bytes that were never acknowledged, unless the caller trusts a
//!   later sync, which is exactly the bug the simulator must catch.
//! - [`FaultKind::ShortWrite`] (w): `write_at` writes a strict prefix
//!   (maybe empty) and returns EIO.
//! - [`FaultKind::NoSpace`] (w): `write_at` writes nothing (half the time)
//!   or a strict prefix and returns `StorageFull` (ENOSPC).
//! - [`FaultKind::MisdirectedWrite`] (w): at most once in a `SimVfs`'s
//!   lifetime, a whole `write_at` lands at another 512-aligned offset inside
//!   the file and returns `Ok`; the file's size grows as if it had landed
//!   right. Listed in [`SimVfs::damage`].
//! - [`FaultKind::ReadError`] (w, opt-in): a `read_at`, or an `open` of an
//!   existing file without `CreateNew`, fails with EIO before it reads or
//!   opens anything; nothing changes, and a retry may succeed. Logged with
//!   the read's range (or the path of the open); never listed in
//!   [`SimVfs::damage`]. Off in [`FaultConfig::all`] and
//!   [`FaultConfig::swarm`] (so that existing seeds draw what they drew);
//!   [`FaultConfig::swarm_opt_in`] and a configuration naming it turn it on.
//! - [`FaultKind::DuplicatedWrite`] (w, opt-in): at most once in a
//!   `SimVfs`'s lifetime, a `write_at` of n bytes lands a second time right
//!   after itself, at its end, if the file holds n zeros there (a
//!   preallocated tail), and returns `Ok`: a write the device ran twice.
//!   It overwrites only zeros, so it is not in [`SimVfs::damage`];
//!   [`SimVfs::duplicated_writes`] lists it. Off in [`FaultConfig::all`]
//!   and [`FaultConfig::swarm`], like `ReadError`.
//! - [`FaultKind::BitFlipAtRest`]: only through
//!   [`SimVfs::flip_bit_at_rest`] and [`SimVfs::flip_random_bit_at_rest`]
//!   (a simulator calls them between runs); flips durable bytes, and the
//!   cached ones where the cache mirrors the platter. Listed in
//!   [`SimVfs::damage`]. Its weight and that of [`FaultKind::Crash`] are
//!   advisory: for the simulator to read; `SimVfs` never fires them itself.
//!
//! [`SimVfs::fault_counts`] counts each time a fault changed an outcome:
//! for the crash-time kinds, each unsynced page, size change or directory
//! change that *survived*; for the others, each injection; for `Crash`,
//! each power loss.
//!
//! [`SimVfs::fault_log`] lists those same faults one [`FaultEvent`] each,
//! in order, with the file and the bytes each touched (the flipped byte
//! and bit and the read it struck, the bytes a failed write wrote, where a
//! misdirected write landed, the pages a failed fsync dropped, the page or
//! size range a crash decided), so that an oracle can excuse a failed
//! read, a lost record or a refusal only by a fault that touched those
//! bytes. It is always on and draws nothing, so it changes no outcome and
//! no digest; `fault_counts` is its tally and `damage` a view of it, so
//! they cannot disagree. [`SimVfs::fault_log_len`] marks a point to take
//! [`SimVfs::fault_log_since`] from.
//!
//! # Scripted outcomes
//!
//! [`SimVfs::set_crash_script`] hands the decisions above to a
//! [`CrashScript`] instead of the RNG: power fails during the counted
//! operations it names (by absolute number), one write or sync it names
//! fails, and every page, size, directory entry, torn write and dropped
//! page those leave open takes the script's next choice, each decision
//! recorded with how many options it had. An exhaustive checker
//! enumerates every outcome that way (`script.rs` states the options).
//! Without a script nothing changes: the same draws, the same digest.
//!
//! # Determinism and cost
//!
//! All randomness comes from one `ChaCha8Rng` seeded with the seed, and is
//! drawn only for enabled faults; every map that is iterated is ordered. No
//! clock, no threads. The same seed and the same operations give the same
//! states, the same trace and the same [`SimVfs::trace_digest`] on every
//! machine. One lock guards the disk; a file handle holds its file, so an
//! operation does no path lookup. A crash visits only the files and
//! directories with unsynced changes. Files live in memory (twice: cache
//! and platter) and are limited to [`FILE_BYTES_MAX`] bytes.
//!
//! Paths are lexical: `.` components are dropped, nothing else is
//! resolved, and `/` and the empty path (for relative paths) always exist.

mod disk;
mod fault;
mod fault_log;
mod file;
mod script;
mod trace;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::{PAGE_BYTES, SECTOR_BYTES};
pub use fault::{Damage, FaultConfig, FaultKind, ParseFaultError, injected_fault};
pub use fault_log::FaultEvent;
pub use file::FILE_BYTES_MAX;
pub use script::{CrashScript, Decision};
pub use trace::{TraceEvent, TraceKind};

use crate::{DirEntry, FileLock, OpenMode, Vfs, VfsFile};
use disk::{Disk, Handle, LockTicket};
use file::FileNode;

/// A simulated disk. Cloning gives another handle to the same disk.
#[derive(Clone)]
pub struct SimVfs {
    shared: Arc<Shared>,
}

struct Shared {
    seed: u64,
    disk: Mutex<Disk>,
}

impl SimVfs {
    /// An empty disk with every fault off.
    pub fn new(seed: u64) -> SimVfs {
        SimVfs::with_faults(seed, FaultConfig::none())
    }

    /// An empty disk with `faults`.
    pub fn with_faults(seed: u64, faults: FaultConfig) -> SimVfs {
        SimVfs {
            shared: Arc::new(Shared {
                seed,
                disk: Mutex::new(Disk::new(seed, faults)),
            }),
        }
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        self.shared
            .disk
            .lock()
            .expect("SimVfs disk lock poisoned by an earlier panic")
    }

    /// The seed this disk was made with.
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// Replaces the fault configuration from now on.
    pub fn set_faults(&self, faults: FaultConfig) {
        self.disk().set_faults(faults);
    }

    /// The current fault configuration.
    pub fn faults(&self) -> FaultConfig {
        self.disk().faults()
    }

    /// Power loss and immediate reboot (see the module doc). If the disk is
    /// already halted, only reboots.
    pub fn crash(&self) {
        let mut disk = self.disk();
        disk.power_loss();
        disk.reboot();
    }

    /// Power loss; the disk stays down until [`SimVfs::reboot`]. No-op if
    /// already halted.
    pub fn halt(&self) {
        self.disk().power_loss();
    }

    /// Power back on after a halt; handles from before stay dead. No-op if
    /// the disk is up.
    pub fn reboot(&self) {
        self.disk().reboot();
    }

    /// True between a power loss (by `halt` or `crash_after_ops`) and
    /// `reboot`.
    pub fn is_halted(&self) -> bool {
        self.disk().is_halted()
    }

    /// Arms a power loss during the `n`-th (1-based) counted operation from
    /// now; 0 disarms. The disk stays down afterwards until `reboot`.
    pub fn crash_after_ops(&self, n: u64) {
        self.disk().crash_after_ops(n);
    }

    /// From now on, power losses, one failure and their outcomes come from
    /// `script` (see [`CrashScript`]); `None` goes back to the RNG.
    pub fn set_crash_script(&self, script: Option<CrashScript>) {
        self.disk().set_crash_script(script);
    }

    /// The script in use, with the decisions taken so far.
    pub fn crash_script(&self) -> Option<CrashScript> {
        self.disk().crash_script()
    }

    /// The code under test says it is recovering (opening its store after
    /// a power loss), or no longer. A script in use notes it for each
    /// counted operation ([`CrashScript::recovering`]): an explorer that
    /// crashes a recovery at each of its operations then stops at the
    /// last one without a run past it.
    pub fn set_recovering(&self, recovering: bool) {
        self.disk().set_recovering(recovering);
    }

    /// A hash of the durable state of the whole disk (directories, names,
    /// which names share a file, file bytes): after a power loss, two disks
    /// with the same digest are the same to the next Open.
    pub fn image_digest(&self) -> u128 {
        self.disk().image_digest()
    }

    /// Counted operations so far (see the module doc).
    pub fn op_count(&self) -> u64 {
        self.disk().op_count()
    }

    /// Flips bit `bit` (of the durable content, bit 0 = least significant
    /// bit of byte 0) of the file at `path`, and records the damage.
    /// Allowed while halted: disks rot powered off too.
    pub fn flip_bit_at_rest(&self, path: &Path, bit: u64) -> io::Result<()> {
        self.disk().flip_bit_at_rest(path, bit).map(|_| ())
    }

    /// Flips a random durable bit of a random file that has durable bytes;
    /// `None` if there is none.
    pub fn flip_random_bit_at_rest(&self) -> Option<Damage> {
        self.disk().flip_random_bit_at_rest()
    }

    /// Every injected fault that can have damaged data that was already
    /// durable or acknowledged, in order, each naming its file as the file
    /// is named now (after any rename; see [`Damage::path`]).
    pub fn damage(&self) -> Vec<Damage> {
        self.disk().damage()
    }

    /// Every duplicated write so far (see [`FaultKind::DuplicatedWrite`]),
    /// each naming its file as it is named now: where a copy of a write
    /// stands, over what were zeros. Not damage; a checker that compares
    /// a file's bytes past its expected end with zeros asks this.
    pub fn duplicated_writes(&self) -> Vec<FaultEvent> {
        self.disk().duplicated_writes()
    }

    /// How many times each fault changed an outcome (see the module doc):
    /// the events of [`SimVfs::fault_log`], counted by kind.
    pub fn fault_counts(&self) -> BTreeMap<FaultKind, u64> {
        self.disk().fault_counts()
    }

    /// How many events the fault log holds: a mark for
    /// [`SimVfs::fault_log_since`].
    pub fn fault_log_len(&self) -> usize {
        self.disk().fault_log_len()
    }

    /// The faults injected since `mark` (a [`SimVfs::fault_log_len`]), in
    /// order, each naming its file as it is named now.
    ///
    /// # Panics
    /// If `mark` is past the end of the log.
    pub fn fault_log_since(&self, mark: usize) -> Vec<FaultEvent> {
        self.disk().fault_log_since(mark)
    }

    /// Every fault injected on this disk, in order (see [`FaultEvent`]).
    pub fn fault_log(&self) -> Vec<FaultEvent> {
        self.fault_log_since(0)
    }

    /// The events recorded since the last `clear_trace` (none while
    /// recording is off).
    pub fn trace(&self) -> Vec<TraceEvent> {
        self.disk().trace()
    }

    /// Forgets the recorded events; the digest goes on.
    pub fn clear_trace(&self) {
        self.disk().clear_trace();
    }

    /// A hash of every event ever traced on this disk, recorded or not.
    pub fn trace_digest(&self) -> u64 {
        self.disk().trace_digest()
    }

    /// Turns recording of events on or off (on by default); the digest is
    /// kept either way, so long runs can stay in bounded memory.
    pub fn set_trace_recording(&self, on: bool) {
        self.disk().set_trace_recording(on);
    }

    /// What reads of the visible file at `path` return now.
    pub fn file_contents(&self, path: &Path) -> Option<Vec<u8>> {
        self.with_file_contents(path, <[u8]>::to_vec)
    }

    /// `f` of what reads of the visible file at `path` return now, without
    /// a copy (`None` if there is no such file). The disk is locked while
    /// `f` runs: `f` must not call into it.
    pub fn with_file_contents<R>(&self, path: &Path, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.disk().with_file_contents(path, f)
    }

    /// `f` of the entries of the directory `dir` now, in name order, each
    /// with what reads of it return (`None` for a directory), without a
    /// copy and without a counted or traced operation (`None` if there is
    /// no such directory). The disk is locked while `f` runs: `f` must not
    /// call into it.
    pub fn with_dir_contents<R>(
        &self,
        dir: &Path,
        f: impl FnOnce(&[(&str, Option<&[u8]>)]) -> R,
    ) -> Option<R> {
        self.disk().with_dir_contents(dir, f)
    }

    /// What a crash with every fault off would leave at `path` (`None` if
    /// the entry is not durable).
    pub fn durable_contents(&self, path: &Path) -> Option<Vec<u8>> {
        self.disk().durable_contents(path)
    }

    /// Creates (or replaces) a fully durable file at `path`, with durable
    /// parent directories and entry. Not counted, not traced, no faults.
    ///
    /// # Panics
    /// If `path` names no file or a directory.
    pub fn put_durable_file(&self, path: &Path, bytes: &[u8]) {
        self.disk().put_durable_file(path, bytes);
    }

    /// Every visible regular file, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        self.disk().files()
    }

    /// How many dirty pages all files hold (what the next crash decides).
    pub fn dirty_page_count(&self) -> u64 {
        self.disk().dirty_page_count()
    }
}

impl fmt::Debug for SimVfs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimVfs")
            .field("seed", &self.shared.seed)
            .finish_non_exhaustive()
    }
}

impl Vfs for SimVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn VfsFile>> {
        let mut disk = self.disk();
        let node = disk.open(path, mode)?;
        Ok(Box::new(SimFile {
            shared: Arc::clone(&self.shared),
            node,
            generation: disk.generation(),
            writable: mode != OpenMode::ReadOnly,
        }))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.disk().list_dir(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.disk().create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.disk().sync_dir(dir)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.disk().remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.disk().rename(from, to)
    }

    fn lock_file(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let ticket = self.disk().lock_file(path)?;
        Ok(Box::new(SimLock {
            shared: Arc::clone(&self.shared),
            path: path.to_path_buf(),
            ticket,
        }))
    }
}

/// A lock held on a [`SimVfs`] file; dropping it releases the lock unless
/// a power loss has already done so.
struct SimLock {
    shared: Arc<Shared>,
    path: PathBuf,
    ticket: LockTicket,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        // A poisoned disk is left alone: this may run while a panic
        // unwinds, and panicking again would abort the test that could
        // have reported the first one.
        if let Ok(mut disk) = self.shared.disk.lock() {
            disk.unlock(self.ticket);
        }
    }
}

impl fmt::Debug for SimLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLock")
            .field("path", &self.path)
            .field("lock_id", &self.ticket.lock_id)
            .finish_non_exhaustive()
    }
}

impl FileLock for SimLock {}

/// An open file of a [`SimVfs`].
struct SimFile {
    shared: Arc<Shared>,
    node: Arc<FileNode>,
    /// The disk's power generation when opened: the handle is dead once the
    /// disk's differs.
    generation: u64,
    writable: bool,
}

impl SimFile {
    fn with_disk<T>(&self, op: impl FnOnce(&mut Disk, &Handle<'_>) -> T) -> T {
        let mut disk = self
            .shared
            .disk
            .lock()
            .expect("SimVfs disk lock poisoned by an earlier panic");
        let handle = Handle {
            node: &self.node,
            generation: self.generation,
            writable: self.writable,
        };
        op(&mut disk, &handle)
    }
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.node.path())
            .field("writable", &self.writable)
            .finish_non_exhaustive()
    }
}

impl VfsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.with_disk(|disk, handle| disk.read(handle, buf, offset))
    }

    fn read_at_onto(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<usize> {
        self.with_disk(|disk, handle| disk.read_onto(handle, buf, len, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with_disk(|disk, handle| disk.write(handle, buf, offset))
    }

    fn len(&self) -> io::Result<u64> {
        self.with_disk(|disk, handle| disk.len(handle))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with_disk(|disk, handle| disk.set_len(handle, len))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.with_disk(|disk, handle| disk.sync(handle, TraceKind::SyncData))
    }

    fn sync_all(&self) -> io::Result<()> {
        self.with_disk(|disk, handle| disk.sync(handle, TraceKind::SyncAll))
    }
}
