//! [`LogReader`]: openraft's `RaftLogReader`, reading entries from the
//! durlog log by seq (`Log::read_all`), each record's CRC checked by durlog
//! and each entry's index checked against the mapping.
//!
//! A reader asks for a range of indexes; it gets the entries of that range
//! between the last purged one and the last one, in order. Entries that a
//! purge removes while a read runs are left out (openraft allows a reader
//! not to find an entry); a purge only ever removes a prefix, so what is
//! returned has no hole.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use durlog::Log;
use openraft::{AnyError, RaftLogReader, RaftTypeConfig, StorageError, StorageIOError};

use crate::mapping::Anchor;
use crate::store::{Shared, read};
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
        read_entries::<C>(&self.shared.log, view.anchor, first, end - first)
    }
}

/// `count` entries from index `first` on, through `anchor`; fewer if a
/// purge removed the first ones meanwhile.
pub(crate) fn read_entries<C: RaftTypeConfig>(
    log: &Log,
    anchor: Anchor,
    first: u64,
    count: u64,
) -> Result<Vec<C::Entry>, Error> {
    let mut seq = anchor.seq_of(first);
    let end_seq = seq + count;
    let mut entries = Vec::with_capacity(count.min(1024) as usize);
    while seq < end_seq {
        let limit = usize::try_from(end_seq - seq).unwrap_or(usize::MAX);
        let commits = match log.read_all(seq, limit) {
            Ok(commits) => commits,
            Err(durlog::Error::Purged { first_seq }) if entries.is_empty() && first_seq > seq => {
                seq = first_seq;
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        let Some(last) = commits.last() else { break };
        let next = last.seq + 1;
        for commit in commits {
            let index = anchor
                .index_of(commit.seq)
                .expect("records read are at or after the anchor");
            let [event] = commit.events.as_slice() else {
                return Err(Error::Inconsistent(format!(
                    "record {} holds {} events; a Raft entry is one",
                    commit.seq,
                    commit.events.len()
                )));
            };
            entries.push(codec::decode::<C>(commit.seq, &event.data, index)?);
        }
        seq = next;
    }
    Ok(entries)
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
}
