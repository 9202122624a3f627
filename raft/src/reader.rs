//! [`LogReader`]: openraft's `RaftLogReader`, reading entries from the
//! durlog log by seq (`Log::visit_all`), each record's CRC checked by durlog
//! and each entry's index checked against the mapping.
//!
//! A reader asks for a range of indexes; it gets the entries of that range
//! between the last purged one and the last one, in order. Entries that a
//! purge removes while a read runs are left out (openraft allows a reader
//! not to find an entry); a purge only ever removes a prefix, so what is
//! returned has no hole.
//!
//! Except for replication: openraft sends the entries
//! `limited_get_log_entries(start, end)` returns as the ones right after
//! `start - 1`, so entries from a later index would leave the follower a
//! hole it takes for committed (openraft then stops it at every start, a
//! defensive `LogIndexNotFound`: the cluster simulator's seed 17998, the
//! leader purging while its replication to a follower behind the purge was
//! under way). That call returns entries from `start` on or none; openraft
//! takes none for a heartbeat, then finds the follower behind the purge
//! and sends it a snapshot.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, ControlFlow, RangeBounds};
use std::sync::Arc;

use durlog::{CommitRef, Filter, Log};
use openraft::{AnyError, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError, StorageIOError};

use crate::mapping::Anchor;
use crate::shared::{Shared, read};
use crate::{Error, codec};

/// Reads entries of a [`LogStore`](crate::LogStore); cheap to clone.
pub struct LogReader<C: RaftTypeConfig> {
    shared: Arc<Shared<C::NodeId>>,
    _config: PhantomData<C>,
}

impl<C: RaftTypeConfig> Clone for LogReader<C> {
    fn clone(&self) -> Self {
        LogReader::new(Arc::clone(&self.shared))
    }
}

impl<C: RaftTypeConfig> fmt::Debug for LogReader<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogReader")
            .field("dir", &self.shared.log.dir())
            .finish()
    }
}

impl<C: RaftTypeConfig> LogReader<C> {
    pub(crate) fn new(shared: Arc<Shared<C::NodeId>>) -> LogReader<C> {
        LogReader {
            shared,
            _config: PhantomData,
        }
    }

    /// The entries with index in `[start, end)` that the log holds.
    fn entries_in(&self, start: u64, end: u64) -> Result<Vec<C::Entry>, Error> {
        // The view stays locked through the read: a truncation, which
        // replaces records, waits for it (appends and purges need not).
        let view = read(&self.shared.view);
        let first = start.max(view.first_index());
        let end = end.min(view.end_index());
        if first >= end {
            return Ok(Vec::new());
        }
        let entries = read_entries::<C>(&self.shared.log, view.anchor, first, end - first)?;
        // Every record the view counts is durable before the view counts
        // it: a log that ends short of it lost records under the store,
        // and must not pass for a short read (openraft takes the entries
        // it applies for all of the range it asked).
        let last = entries.last().map(|entry| entry.get_log_id().index);
        if last != Some(end - 1) {
            return Err(Error::Inconsistent(format!(
                "indexes {first}..{end} are in the log by raft.meta and the last record, \
                 but a read of them ends at index {last:?}"
            )));
        }
        Ok(entries)
    }
}

/// `count` entries from index `first` on, through `anchor`; fewer if a
/// purge removed the first ones meanwhile. Each entry is decoded from the
/// record's bytes as durlog lends them (`Log::visit_all`), not from a
/// copy.
pub(crate) fn read_entries<C: RaftTypeConfig>(
    log: &Log,
    anchor: Anchor,
    first: u64,
    count: u64,
) -> Result<Vec<C::Entry>, Error> {
    let mut seq = anchor.seq_of(first);
    let end_seq = seq + count;
    let mut entries = Vec::with_capacity(count.min(1024) as usize);
    let mut failed = None;
    while seq < end_seq && failed.is_none() {
        let limit = usize::try_from(end_seq - seq).unwrap_or(usize::MAX);
        let before = entries.len();
        let read = log.visit_all(seq, limit, &Filter::all(), |commit| {
            match entry::<C>(anchor, commit) {
                Ok(entry) => {
                    entries.push(entry);
                    seq = commit.seq + 1;
                    ControlFlow::Continue(())
                }
                Err(error) => {
                    failed = Some(error);
                    ControlFlow::Break(())
                }
            }
        });
        match read {
            Ok(()) if entries.len() == before => break,
            Ok(()) => {}
            Err(durlog::Error::Purged { first_seq }) if entries.is_empty() && first_seq > seq => {
                seq = first_seq;
            }
            Err(error) => return Err(error.into()),
        }
    }
    match failed {
        Some(error) => Err(error),
        None => Ok(entries),
    }
}

/// The entry a record holds: one event, whose data decodes to the entry
/// of the index the mapping gives its seq.
fn entry<C: RaftTypeConfig>(anchor: Anchor, commit: &CommitRef<'_>) -> Result<C::Entry, Error> {
    let index = anchor
        .index_of(commit.seq)
        .expect("records read are at or after the anchor");
    let [event] = commit.events else {
        return Err(Error::Inconsistent(format!(
            "record {} holds {} events; a Raft entry is one",
            commit.seq,
            commit.events.len()
        )));
    };
    codec::decode::<C>(commit.seq, event.data, index)
}

/// `[start, end)` of any range of indexes.
fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&start) => start,
        Bound::Excluded(&start) => start.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&end) => end.saturating_add(1),
        Bound::Excluded(&end) => end,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogReader<C> {
    async fn try_get_log_entries<RB>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>>
    where
        RB: RangeBounds<u64> + Clone + fmt::Debug + openraft::OptionalSend,
    {
        let (start, end) = bounds(&range);
        // Read on the calling task, not on the blocking pool: openraft reads
        // the entries it has just written (to apply them, to replicate
        // them), which the page cache holds, and a thread hop per read cost
        // more than the read (BENCHMARKS.md, "openraft on durlog").
        self.entries_in(start, end)
            .map_err(|error| StorageIOError::read_logs(AnyError::new(&error)).into())
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        let entries = self.try_get_log_entries(start..end).await?;
        // From `start` on, or none (see the module doc).
        if entries
            .first()
            .is_some_and(|entry| entry.get_log_id().index != start)
        {
            return Ok(Vec::new());
        }
        Ok(entries)
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for crate::LogStore<C> {
    async fn try_get_log_entries<RB>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>>
    where
        RB: RangeBounds<u64> + Clone + fmt::Debug + openraft::OptionalSend,
    {
        use openraft::storage::RaftLogStorage;
        self.get_log_reader().await.try_get_log_entries(range).await
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        use openraft::storage::RaftLogStorage;
        let mut reader = self.get_log_reader().await;
        reader.limited_get_log_entries(start, end).await
    }
}
