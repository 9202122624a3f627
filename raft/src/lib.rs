//! durlog-raft: openraft's log storage on a durlog [`Log`](durlog::Log).
//!
//! [`LogStore`] implements openraft 0.9's `RaftLogStorage` (with the
//! `storage-v2` feature) and [`LogReader`] its `RaftLogReader`. A store is a
//! directory holding the durlog log (`log/`, one record per Raft entry, in
//! the stream `raft`) and the store's own small state (`raft.meta`: the
//! vote, the last purged log id and where seqs and indexes meet).
//!
//! - **Entries** are durable (written and `fdatasync`ed by durlog, several
//!   entries of one `append` sharing one group commit) before openraft's
//!   flush callback is called, and readable when `append` returns.
//! - **Log ids ↔ seqs**, one to one: see [`mapping`].
//! - **`truncate`** is `Log::truncate_after`; **`purge`** first makes the
//!   purged log id durable in `raft.meta`, then calls `Log::purge_before`,
//!   which removes only whole sealed segments: records it keeps below the
//!   purged id are never read again (reads start after it). A state
//!   machine that keeps its state only in snapshots caps it at its last
//!   durable snapshot ([`purge_limit`]: openraft purges before a snapshot
//!   it received is installed), the purge waiting for it.
//! - **The vote** is durable in `raft.meta` before `save_vote` returns
//!   ([`meta`] says why a file and not records of the log). The committed
//!   log id is not kept: openraft's default, since saving it would cost a
//!   file replacement at every commit, and a restarted node learns it from
//!   the leader.
//!
//! - **Damage** (acknowledged entries unreadable) is refused by
//!   [`LogStore::open_with`], and repaired by [`LogStore::open_for_repair`]:
//!   the damaged part moved aside, the node out of elections until the
//!   leader has sent it back. [`repair`] has the design and the argument.
//!
//! [`events`] is a ready-made type configuration (events appended to
//! streams) with an in-memory state machine, used by the tests, the
//! three-node example and the benchmark.

mod append;
mod codec;
pub mod events;
pub mod mapping;
pub mod meta;
pub mod purge_limit;
mod reader;
pub mod repair;
mod shared;
pub mod snapshot_file;
mod store;

use std::path::PathBuf;

pub use codec::STREAM;
pub use purge_limit::PurgeLimit;
pub use reader::LogReader;
pub use store::{DiskWork, LOG_DIR_NAME, LogStore};

/// What can go wrong in the store, beside openraft's own errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The durlog log refused or failed.
    #[error(transparent)]
    Log(#[from] durlog::Error),

    /// An operating-system error (the message names the path).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// `raft.meta` is damaged: the vote and the purge boundary are unknown,
    /// so the store refuses to open rather than forget a vote.
    #[error("damaged store state {path}: {reason}; restore it from a replica or a backup")]
    Meta {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// An entry could not be encoded or decoded.
    #[error("entry codec: {0}")]
    Codec(postcard::Error),

    /// A record holds another entry than the mapping says.
    #[error(
        "record {seq} holds the entry of index {found_index}, but the store maps it to index {expected_index}"
    )]
    Mismatch {
        /// The record's seq.
        seq: u64,
        /// The index the mapping gives it.
        expected_index: u64,
        /// The index of the entry it holds.
        found_index: u64,
    },

    /// The log and the store's state disagree (records missing, or purged
    /// by something other than the store).
    #[error("store and log disagree: {0}")]
    Inconsistent(String),

    /// A purge waited for the state machine's snapshot, and the state
    /// machine could not make it durable ([`purge_limit`]).
    #[error("the state machine could not make the snapshot this purge waits for durable: {0}")]
    SnapshotFailed(String),

    /// openraft asked for something its contract rules out (an append that
    /// leaves a hole, a truncation of purged entries).
    #[error("openraft contract: {0}")]
    Contract(String),
}
