//! What a store shares with its readers: the durlog log and the view of
//! it that readers may see (the anchor, the last purged and the last
//! entry's ids), which the store replaces whole after each write (see
//! `store.rs`'s module doc).

use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use durlog::Log;
use openraft::LogId;

use crate::mapping::Anchor;

/// What readers may see; see `store.rs`'s module doc.
#[derive(Clone, Debug)]
pub(crate) struct View<NID: openraft::NodeId> {
    pub anchor: Anchor,
    pub last_purged: Option<LogId<NID>>,
    /// The last entry's id, or `last_purged` if no entry follows it.
    pub last_log_id: Option<LogId<NID>>,
}

impl<NID: openraft::NodeId> View<NID> {
    /// The first index not purged.
    pub fn after_purged(&self) -> u64 {
        self.last_purged
            .as_ref()
            .map_or(0, |purged| purged.index + 1)
    }

    /// The first index a record may hold: not purged, and not before the
    /// anchor (a log's first entry may come after index 0).
    pub fn first_index(&self) -> u64 {
        self.after_purged().max(self.anchor.index)
    }

    /// True if the log holds no entry that is not purged.
    pub fn is_empty(&self) -> bool {
        self.end_index() <= self.first_index()
    }

    /// The index after the last entry (where the next append goes).
    pub fn end_index(&self) -> u64 {
        self.last_log_id.as_ref().map_or(0, |last| last.index + 1)
    }
}

/// The log and the view, shared by the store and its readers.
pub(crate) struct Shared<NID: openraft::NodeId> {
    pub log: Log,
    pub view: RwLock<View<NID>>,
}

pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}
