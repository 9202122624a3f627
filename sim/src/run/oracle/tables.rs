//! The tables beside the records, as the oracle judges them (SPEC section
//! 14): a change to stream metadata, a deletion or a consumer position
//! changes the model when its call returns `Ok`; one that failed on a
//! fault after its file's rename (or at a power loss) is in the model too,
//! since the log shows it, but in doubt: the next write of that table
//! makes it durable, and until then a reopen may find it undone, the last
//! first. Each reopen must find the log and its files at one of those
//! states, no other, and the model follows what it found.

use std::borrow::Cow;
use std::time::Duration;

use durlog::{Deletion, Error, Log, StreamMetadata};

use crate::golden;
use crate::model::{Deleted, Entry, Tables};
use crate::plan::CONSUMERS;
use crate::report::Excuse;

use super::excuse::Evidence;
use super::{Check, Oracle};

/// A change to the tables: what it was before and would be after.
#[derive(Clone, Debug, Hash)]
pub(crate) enum TableChange {
    Stream {
        stream: String,
        before: Entry,
        after: Entry,
    },
    Consumer {
        name: String,
        before: Option<u64>,
        after: u64,
    },
}

pub(crate) fn consumer_name(index: u32) -> String {
    format!("c{index}")
}

impl TableChange {
    fn is_consumer(&self) -> bool {
        matches!(self, TableChange::Consumer { .. })
    }

    pub(crate) fn apply_to(&self, tables: &mut Tables) {
        match self {
            TableChange::Stream { stream, after, .. } => tables.set(stream, *after),
            TableChange::Consumer { name, after, .. } => tables.record(name, *after),
        }
    }

    fn undo_on(&self, tables: &mut Tables) {
        match self {
            TableChange::Stream { stream, before, .. } => tables.set(stream, *before),
            TableChange::Consumer {
                name,
                before: Some(before),
                ..
            } => {
                tables.consumers.insert(name.clone(), *before);
            }
            TableChange::Consumer {
                name, before: None, ..
            } => {
                tables.consumers.remove(name);
            }
        }
    }

    fn take_back(&mut self, last_seq: u64) {
        if let TableChange::Consumer { before, after, .. } = self {
            *before = before.map(|seq| seq.min(last_seq));
            *after = (*after).min(last_seq);
        }
    }
}
/// The engine's metadata for a model entry.
pub(crate) fn metadata_of(entry: &Entry) -> StreamMetadata {
    let mut metadata = StreamMetadata::default();
    metadata.max_count = entry.max_count;
    metadata.truncate_before = entry.truncate_before;
    metadata.max_age = entry.max_age.map(Duration::from_nanos);
    metadata
}
impl Oracle {
    /// A change to the tables returned `outcome` (with `faulted` if a fault
    /// was injected during it); `memory` is whether the log shows it now
    /// (`None` once the power is lost). Whether the model changed.
    pub(crate) fn check_table_change(
        &mut self,
        change: TableChange,
        (outcome, faulted): (Result<(), Error>, bool),
        memory: Option<bool>,
    ) -> Result<bool, String> {
        let hard_deleted = match &change {
            TableChange::Stream { before, .. } => before.deleted == Some(Deleted::Hard),
            TableChange::Consumer { .. } => false,
        };
        let unchanged = match &change {
            TableChange::Stream { before, after, .. } => before == after,
            TableChange::Consumer { .. } => false,
        };
        match outcome {
            // A hard deletion is final: only a change that changes nothing
            // (deleting it hard again) is not refused.
            Ok(()) if hard_deleted && !unchanged => Err(format!(
                "a change to a hard-deleted stream returned Ok: {change:?}"
            )),
            Ok(()) => {
                // Its table written whole, with whatever was in doubt in it.
                self.apply(&change);
                let kind = change.is_consumer();
                self.table_in_doubt
                    .retain(|doubt| doubt.is_consumer() != kind);
                Ok(true)
            }
            Err(Error::StreamDeleted { .. }) if hard_deleted && !unchanged => Ok(false),
            Err(Error::Io(_)) if faulted => {
                self.excuse(Excuse::ChangeFailedOnFault, 1);
                // Failed before its rename, the disk is as it was; after
                // it (or at a power loss), the disk may hold either, and
                // the log shows it until it reopens.
                if memory != Some(false) {
                    self.apply(&change);
                    self.table_in_doubt.push(change);
                }
                Ok(false)
            }
            Err(error) => Err(format!(
                "{change:?} failed with no fault to explain it: {error}"
            )),
        }
    }

    fn apply(&mut self, change: &TableChange) {
        change.apply_to(&mut self.model.tables);
    }

    /// The tables as the disk may hold them, for as long as changes are in
    /// doubt: the model's, then with the last one undone, and so on. With
    /// none in doubt (nearly always), the model's, lent: cloning them for
    /// every check of the layout was 1.5% of a run's instructions.
    pub(crate) fn table_candidates(&self) -> Cow<'_, [Tables]> {
        if self.table_in_doubt.is_empty() {
            return Cow::Borrowed(std::slice::from_ref(&self.model.tables));
        }
        let mut tables = self.model.tables.clone();
        let mut candidates = vec![tables.clone()];
        for change in self.table_in_doubt.iter().rev() {
            change.undo_on(&mut tables);
            candidates.push(tables.clone());
        }
        Cow::Owned(candidates)
    }

    /// A truncation kept seqs up to `last_seq`: positions past it go back,
    /// in the model and in the changes in doubt. `written` if the log took
    /// them back itself, durably: its table then holds what was in doubt.
    pub(crate) fn take_back_positions(&mut self, last_seq: u64, written: bool) {
        let moved = self
            .model
            .tables
            .consumers
            .values()
            .any(|&seq| seq > last_seq);
        self.model.tables.take_back(last_seq);
        for change in &mut self.table_in_doubt {
            change.take_back(last_seq);
        }
        if written && moved {
            self.table_in_doubt.retain(|doubt| !doubt.is_consumer());
        }
    }

    /// After a reopen: each table is the model's with the last few of its
    /// changes in doubt undone (none, one, ...), as the log shows it and
    /// as its file holds it (two candidates may show alike: a soft
    /// deletion at version 0 or 1 of an empty stream); the model follows.
    pub(crate) fn check_tables(&mut self, log: &Log, evidence: &Evidence<'_>) -> Check {
        let doubts = std::mem::take(&mut self.table_in_doubt);
        for consumers in [false, true] {
            let mut tables = self.model.tables.clone();
            let mut undone = doubts
                .iter()
                .rev()
                .filter(|doubt| doubt.is_consumer() == consumers);
            let mut first_error = None;
            loop {
                let shown = self
                    .shows_table(log, &tables, consumers)
                    .and_then(|()| file_holds(evidence, &tables, consumers));
                match (shown, undone.next()) {
                    (Ok(flipped_back), _) => {
                        if flipped_back {
                            self.excuse(Excuse::FlippedBackOnOpen, 1);
                        }
                        break;
                    }
                    (Err(error), Some(change)) => {
                        first_error.get_or_insert(error);
                        change.undo_on(&mut tables);
                    }
                    (Err(error), None) => {
                        return Err(format!(
                            "{} (nor with any of {} changes in doubt undone)",
                            first_error.unwrap_or(error),
                            doubts.len()
                        ));
                    }
                }
            }
            match consumers {
                true => self.model.tables.consumers = tables.consumers,
                false => {
                    self.model.tables.entries = tables.entries;
                    self.model.tables.ever = tables.ever;
                }
            }
        }
        Ok(())
    }

    /// Whether the log shows `tables`' streams (or consumers).
    fn shows_table(&self, log: &Log, tables: &Tables, consumers: bool) -> Check {
        if !consumers {
            for stream in &tables.ever {
                let want = tables.entry(stream);
                if !self.shows(log, stream, &want) {
                    return Err(format!(
                        "{stream}: the log has metadata {:?} and deletion {:?}, the model {want:?}",
                        log.stream_metadata(stream),
                        log.stream_deletion(stream)
                    ));
                }
            }
            return Ok(());
        }
        for index in 0..CONSUMERS {
            let name = consumer_name(index);
            let want = tables.consumers.get(&name).copied();
            if log.consumer_position(&name) != want {
                return Err(format!(
                    "consumer {name} at {:?}, the model at {want:?}",
                    log.consumer_position(&name)
                ));
            }
        }
        Ok(())
    }

    /// Whether the log shows `entry` for `stream`: its metadata, and its
    /// deletion as `stream_deletion` tells it.
    pub(crate) fn shows(&self, log: &Log, stream: &str, entry: &Entry) -> bool {
        let deletion = match entry.deleted {
            Some(Deleted::Hard) => Some(Deletion::Hard),
            Some(Deleted::Soft(at)) if self.model.version(stream) <= at => Some(Deletion::Soft),
            _ => None,
        };
        log.stream_metadata(stream) == metadata_of(entry) && log.stream_deletion(stream) == deletion
    }
}

/// Whether the file of the table of streams (or of `consumers`) holds
/// `tables`: `Ok(false)` as it is, `Ok(true)` once the bits flipped at rest
/// that the Open read back flipped are put back (the log read the table
/// as written; the file is damaged, and the next Open that reads it so
/// refuses it).
fn file_holds(evidence: &Evidence<'_>, tables: &Tables, consumers: bool) -> Result<bool, String> {
    let (vfs, dir) = (evidence.vfs, evidence.dir);
    if golden::holds_table(vfs, dir, tables, consumers, |_, _| {}) {
        return Ok(false);
    }
    let mut undone = 0;
    let undo = |path: &std::path::Path, bytes: &mut Vec<u8>| {
        undone = evidence.undo_flips_read_back(path, bytes);
    };
    match golden::holds_table(vfs, dir, tables, consumers, undo) {
        true if undone > 0 => Ok(true),
        _ => Err(format!("its file does not hold {tables:?}")),
    }
}
