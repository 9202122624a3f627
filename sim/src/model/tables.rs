//! The model's side of stream metadata, deletions and consumer positions
//! (SPEC section 14), written from the contract, not from the engine: what
//! each stream's reads show, which streams are deleted, where each
//! consumer stands.

use std::collections::{BTreeMap, BTreeSet};

/// A stream's metadata and deletion, as the model keeps them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Entry {
    pub max_count: Option<u64>,
    pub truncate_before: Option<u64>,
    /// The maximum age, in nanoseconds of the log's clock.
    pub max_age: Option<u64>,
    pub deleted: Option<Deleted>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deleted {
    /// Soft, when the stream was at this version.
    Soft(u64),
    Hard,
}

/// What the model knows beside the records.
#[derive(Clone, Debug, Default, Hash)]
pub struct Tables {
    pub entries: BTreeMap<String, Entry>,
    pub consumers: BTreeMap<String, u64>,
    /// The streams that have had metadata or a deletion in this run.
    pub ever: BTreeSet<String>,
}

impl Tables {
    pub fn entry(&self, stream: &str) -> Entry {
        self.entries.get(stream).copied().unwrap_or_default()
    }

    /// Replaces `stream`'s entry; an entry with nothing in it goes.
    pub fn set(&mut self, stream: &str, entry: Entry) {
        self.ever.insert(stream.to_owned());
        if entry == Entry::default() {
            self.entries.remove(stream);
        } else {
            self.entries.insert(stream.to_owned(), entry);
        }
    }

    /// The first version `stream`'s reads show, at `version`.
    pub fn shown_from(&self, stream: &str, version: u64) -> u64 {
        let entry = self.entry(stream);
        let mut from = 1;
        if let Some(count) = entry.max_count {
            from = from.max((version + 1).saturating_sub(count));
        }
        if let Some(before) = entry.truncate_before {
            from = from.max(before);
        }
        match entry.deleted {
            Some(Deleted::Soft(at)) => from.max(at + 1),
            Some(Deleted::Hard) => u64::MAX,
            None => from,
        }
    }

    pub fn is_hard_deleted(&self, stream: &str) -> bool {
        self.entry(stream).deleted == Some(Deleted::Hard)
    }

    /// Whether `streams()` leaves `stream` out at `version`.
    pub fn is_deleted(&self, stream: &str, version: u64) -> bool {
        match self.entry(stream).deleted {
            Some(Deleted::Hard) => true,
            Some(Deleted::Soft(at)) => version <= at,
            None => false,
        }
    }

    /// A consumer recorded `seq`: never backwards.
    pub fn record(&mut self, name: &str, seq: u64) {
        let position = self.consumers.entry(name.to_owned()).or_insert(seq);
        *position = (*position).max(seq);
    }

    /// A truncation kept seqs up to `last_seq`: positions past it go back.
    pub fn take_back(&mut self, last_seq: u64) {
        for seq in self.consumers.values_mut() {
            *seq = (*seq).min(last_seq);
        }
    }
}
