//! durlog: a crash-safe, append-only, segmented event log.
//!
//! Events are appended to named streams with optimistic concurrency; each
//! `append` is one record in a segment file, acknowledged only after the
//! `fdatasync` that covers it, and concurrent appends share that sync
//! (group commit). The log runs on any [`durlog_vfs::Vfs`]: the host's file
//! system, or a simulated disk that injects crashes and faults.
//!
//! The bytes on disk are specified in `FORMAT.md` at the repository root,
//! the architecture in `ARCHITECTURE.md`. Modules: [`format`] (pure encode
//! and decode, no I/O), `segment` (segment files), `index` (where each
//! stream's records are), [`recovery`] (scan and torn-tail decisions), and
//! `log` (the [`Log`] facade and its group commit).

mod error;
pub mod format;
mod index;
mod log;
pub mod recovery;
mod segment;
mod stats;
mod sync;

pub use durlog_vfs as vfs;
pub use error::{Error, Expected};
pub use format::{
    Batch, BatchError, Event, HEADER_SIZE, LogState, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES, Record,
    RecordError, STATE_FILE_NAME, StateError, append_record, crc32c, decode_batch, encode_batch,
    parse_record, segment_name,
};
pub use log::{
    Clock, Commit, DEFAULT_SEGMENT_BYTES, FAILPOINT_AFTER_WRITE, Failpoint, Log, NextSegment,
    Options, Retention, SEGMENT_BYTES_MAX, Subscription, Ticket, Tuning,
};
pub use recovery::{GROUP_BYTES_MAX, RecoveryReport, Refusal, Rule, Tail};
pub use stats::{Histogram, Stats};
