//! The fault log: every fault a disk injected, with the bytes it touched,
//! in the order it happened.
//!
//! A simulator's oracle may excuse a failed read, a lost record or a
//! refusal only by pointing at a fault that really touched those bytes, so
//! the log must be complete and exact. That is why it is also the only
//! place faults are counted: `fault_counts` is the log's tally by kind, so
//! the two cannot disagree, and the damage list is an index into it, so a
//! damage record and its event cannot disagree either.
//!
//! Recording is always on and costs one entry per fault, never a draw from
//! the fault RNG nor a trace event, so it changes neither outcomes nor the
//! trace digest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use super::fault::{Damage, FaultKind};
use super::file::FileNode;

/// One fault SimVfs injected: what, where, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    /// Position in the disk's fault log (0, 1, 2, ...).
    pub index: u64,
    /// Counted operations performed before it (`op_count()` at the time):
    /// a fault during a counted operation counts that operation too.
    pub op: u64,
    /// What happened.
    pub kind: FaultKind,
    /// The file, by its newest visible name when the log is read (so it
    /// follows renames, as [`Damage::path`] does); the directory of a
    /// failed `sync_dir`; the entry (directory and name) of a
    /// `LostDirEntry`; empty for a power loss (`Crash`).
    pub path: PathBuf,
    /// The first byte it touched: the flipped byte; the start of what a
    /// torn, short or ENOSPC write wrote; where a misdirected write
    /// landed; the first page a failed fsync dropped; the surviving page,
    /// or the lower of the two sizes of a size change, a crash decided. 0
    /// where no bytes are involved (a power loss, a failed fsync that
    /// dropped nothing, a directory fault).
    pub offset: u64,
    /// How many bytes from `offset`: 1 for a flip; the bytes written; the
    /// span up to the end of the last dropped page; the surviving page's
    /// bytes below the new size, or the bytes between the two sizes. For a
    /// `LostDirEntry`, 1 if a create survived and 0 if a removal did.
    pub len: u64,
    /// For a bit flip (on read or at rest): which bit of the byte at
    /// `offset` (0 = least significant).
    pub bit: Option<u8>,
    /// For a misdirected write: where it was meant to go. For a
    /// duplicated write: where the write it copies went.
    pub intended_offset: Option<u64>,
    /// For a read flip: the read call's own offset and the bytes it
    /// returned, which hold the flipped byte.
    pub read: Option<(u64, u64)>,
}

impl FaultEvent {
    /// An event of `kind` touching `len` bytes at `offset`; the log fills
    /// in `index`, `op` and `path` when it records it.
    pub(crate) fn touching(kind: FaultKind, offset: u64, len: u64) -> FaultEvent {
        FaultEvent {
            index: 0,
            op: 0,
            kind,
            path: PathBuf::new(),
            offset,
            len,
            bit: None,
            intended_offset: None,
            read: None,
        }
    }

    pub(crate) fn damage(&self) -> Damage {
        Damage {
            path: self.path.clone(),
            offset: self.offset,
            len: self.len,
            intended_offset: self.intended_offset,
            bit: self.bit,
            kind: self.kind,
        }
    }
}

#[derive(Debug)]
struct Entry {
    event: FaultEvent,
    /// The file it struck, to name it as it is named when the log is read.
    /// Weak, so a removed file's content is not kept alive for this.
    file: Option<Weak<FileNode>>,
}

impl Entry {
    fn resolved(&self) -> FaultEvent {
        match self.file.as_ref().and_then(Weak::upgrade) {
            Some(node) => FaultEvent {
                path: node.path().to_path_buf(),
                ..self.event.clone()
            },
            None => self.event.clone(),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct FaultLog {
    entries: Vec<Entry>,
    /// Positions of the faults that can have damaged durable data (see
    /// `FaultKind::damages_durable_data`): what `SimVfs::damage` lists.
    damage: Vec<usize>,
    /// Positions of the duplicated writes: what `SimVfs::duplicated_writes`
    /// lists.
    copies: Vec<usize>,
    counts: BTreeMap<FaultKind, u64>,
}

impl FaultLog {
    /// Appends `event` as the fault that struck `file` (or, without a file,
    /// `path`) after `op` counted operations, counts it, and returns its
    /// position.
    pub(crate) fn record(
        &mut self,
        mut event: FaultEvent,
        op: u64,
        path: &Path,
        file: Option<&Arc<FileNode>>,
    ) -> usize {
        let position = self.entries.len();
        event.index = position as u64;
        event.op = op;
        event.path = path.to_path_buf();
        *self.counts.entry(event.kind).or_insert(0) += 1;
        if event.kind.damages_durable_data() {
            self.damage.push(position);
        }
        if event.kind == FaultKind::DuplicatedWrite {
            self.copies.push(position);
        }
        let file = file.map(Arc::downgrade);
        self.entries.push(Entry { event, file });
        position
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The events from position `mark` on, each naming its file as it is
    /// named now.
    ///
    /// # Panics
    /// If `mark` is past the end: a mark comes from `len`, and the log only
    /// grows.
    pub(crate) fn since(&self, mark: usize) -> Vec<FaultEvent> {
        assert!(
            mark <= self.entries.len(),
            "fault log mark {mark} is past the end of the log ({} events): \
             take marks from SimVfs::fault_log_len",
            self.entries.len()
        );
        self.entries[mark..].iter().map(Entry::resolved).collect()
    }

    /// The event at `position`, as `since` would give it.
    pub(crate) fn event(&self, position: usize) -> FaultEvent {
        self.entries[position].resolved()
    }

    pub(crate) fn damage(&self) -> Vec<Damage> {
        self.damage
            .iter()
            .map(|&position| self.event(position).damage())
            .collect()
    }

    pub(crate) fn copies(&self) -> Vec<FaultEvent> {
        self.copies
            .iter()
            .map(|&position| self.event(position))
            .collect()
    }

    pub(crate) fn counts(&self) -> BTreeMap<FaultKind, u64> {
        self.counts.clone()
    }
}
