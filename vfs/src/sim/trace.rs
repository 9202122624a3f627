//! The trace of a simulated disk: one [`TraceEvent`] per operation, crash,
//! reboot and injected fault, and a running digest over all of them.
//!
//! The digest is a word-at-a-time multiplicative hash (FxHash's step) over
//! fixed-width integers, with paths hashed by FNV-1a over their bytes: no
//! random keys and no dependence on endianness or pointer width, so the same
//! operations give the same digest on every machine. It covers every event
//! ever traced, whether or not events are being recorded.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use super::fault::FaultKind;

/// What a [`TraceEvent`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// `Vfs::open` of an existing file (read-only or read-write).
    Open,
    /// `Vfs::open` with `OpenMode::CreateNew`.
    Create,
    /// `VfsFile::read_at`: `offset`, and `len` = bytes returned.
    Read,
    /// `VfsFile::write_at`: `offset`, `len` = bytes asked to write.
    Write,
    /// `VfsFile::set_len`: `len` = the new size.
    SetLen,
    /// `VfsFile::sync_data`.
    SyncData,
    /// `VfsFile::sync_all`.
    SyncAll,
    /// `Vfs::sync_dir`.
    SyncDir,
    /// `Vfs::create_dir_all`.
    CreateDir,
    /// `Vfs::remove_file`.
    Remove,
    /// `Vfs::rename`: `path` = the target, `len` = 1 if a file there was
    /// replaced (0 otherwise, or on an error). The source is not in the
    /// event but is in the digest.
    Rename,
    /// `Vfs::list_dir`: `len` = entries returned.
    ListDir,
    /// `Vfs::lock_file`; not `ok` if it failed (the file was locked
    /// already, or its directory is missing). Dropping the guard is not
    /// traced.
    Lock,
    /// Power lost (`crash`, `halt`, or `crash_after_ops` firing).
    Crash,
    /// Power back on.
    Reboot,
    /// A fault changed an outcome; `path`, `offset` and `len` say where:
    /// the bytes written (torn, short, ENOSPC: `len` = the prefix kept), the
    /// byte flipped, where a misdirected write landed, the unsynced page
    /// that survived a crash, the durable and surviving sizes (`offset` and
    /// `len`) of a size change that survived, `len` = bytes dropped by a
    /// failed fsync, `len` = 1 for a surviving create (0 for a remove).
    Fault(FaultKind),
}

impl TraceKind {
    /// A short lowercase name for printing.
    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Open => "open",
            TraceKind::Create => "create",
            TraceKind::Read => "read",
            TraceKind::Write => "write",
            TraceKind::SetLen => "set_len",
            TraceKind::SyncData => "sync_data",
            TraceKind::SyncAll => "sync_all",
            TraceKind::SyncDir => "sync_dir",
            TraceKind::CreateDir => "create_dir",
            TraceKind::Remove => "remove",
            TraceKind::Rename => "rename",
            TraceKind::ListDir => "list_dir",
            TraceKind::Lock => "lock",
            TraceKind::Crash => "crash",
            TraceKind::Reboot => "reboot",
            TraceKind::Fault(_) => "fault",
        }
    }

    /// A stable number per kind for the digest.
    fn code(self) -> u64 {
        match self {
            TraceKind::Open => 1,
            TraceKind::Create => 2,
            TraceKind::Read => 3,
            TraceKind::Write => 4,
            TraceKind::SetLen => 5,
            TraceKind::SyncData => 6,
            TraceKind::SyncAll => 7,
            TraceKind::SyncDir => 8,
            TraceKind::CreateDir => 9,
            TraceKind::Remove => 10,
            TraceKind::ListDir => 11,
            TraceKind::Crash => 12,
            TraceKind::Reboot => 13,
            TraceKind::Rename => 14,
            TraceKind::Lock => 15,
            TraceKind::Fault(fault) => 0x100 + fault.index() as u64,
        }
    }

    /// Whether `offset` is meaningful for this kind.
    fn has_offset(self) -> bool {
        matches!(
            self,
            TraceKind::Read | TraceKind::Write | TraceKind::Fault(_)
        )
    }

    /// Whether `len` is meaningful for this kind as a count (a rename's
    /// flag is printed in words instead).
    fn has_len(self) -> bool {
        self.has_offset() || matches!(self, TraceKind::SetLen | TraceKind::ListDir)
    }
}

/// One traced event. `offset` and `len` are 0 where the kind gives them no
/// meaning; `path` is empty for `Crash` and `Reboot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// What happened.
    pub kind: TraceKind,
    /// The file or directory, normalised (see the `sim` module doc).
    pub path: Arc<Path>,
    /// Where in the file (see [`TraceKind`] for what it means per kind).
    pub offset: u64,
    /// How much (see [`TraceKind`] for what it means per kind).
    pub len: u64,
    /// False if the operation returned an error.
    pub ok: bool,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if let TraceKind::Fault(fault) = self.kind {
            write!(f, " {fault}")?;
        }
        if !self.path.as_os_str().is_empty() {
            write!(f, " {}", self.path.display())?;
        }
        if self.kind.has_offset() {
            write!(f, " @{}", self.offset)?;
        }
        if self.kind.has_len() {
            write!(f, " +{}", self.len)?;
        }
        if self.kind == TraceKind::Rename && self.len == 1 {
            f.write_str(" (replaced a file)")?;
        }
        if !self.ok {
            f.write_str(" ERR")?;
        }
        Ok(())
    }
}

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
const MIX_MULTIPLIER: u64 = 0x517c_c1b7_2722_0a95;

/// FNV-1a over the bytes of `path`: how a path enters the digest.
pub(crate) fn path_hash(path: &Path) -> u64 {
    path.as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(FNV_OFFSET_BASIS, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
        })
}

fn mix(hash: u64, word: u64) -> u64 {
    (hash.rotate_left(5) ^ word).wrapping_mul(MIX_MULTIPLIER)
}

/// The recorded events and the digest.
#[derive(Debug)]
pub(crate) struct Trace {
    pub(crate) events: Vec<TraceEvent>,
    pub(crate) recording: bool,
    pub(crate) digest: u64,
}

impl Trace {
    pub(crate) fn new() -> Trace {
        Trace {
            events: Vec::new(),
            recording: true,
            digest: FNV_OFFSET_BASIS,
        }
    }

    /// Mixes into the digest a word that no event field holds (the source
    /// path of a rename, which precedes its event).
    pub(crate) fn mix_in(&mut self, word: u64) {
        self.digest = mix(self.digest, word);
    }

    /// Adds one event. `path_hash` must be `path_hash(path)`; callers on the
    /// hot path compute it once per file handle.
    pub(crate) fn record(
        &mut self,
        kind: TraceKind,
        path: &Arc<Path>,
        path_hash: u64,
        offset: u64,
        len: u64,
        ok: bool,
    ) {
        let mut digest = mix(self.digest, kind.code() | (u64::from(ok) << 32));
        digest = mix(digest, path_hash);
        digest = mix(digest, offset);
        self.digest = mix(digest, len);
        if self.recording {
            self.events.push(TraceEvent {
                kind,
                path: Arc::clone(path),
                offset,
                len,
                ok,
            });
        }
    }
}
