//! durlog: a crash-safe, append-only, segmented event log.
//!
//! Events are appended to named streams with optimistic concurrency; each
//! `append` is one record in a segment file, acknowledged only after the
//! `fdatasync` that covers it, and concurrent appends share that sync
//! (group commit). The log runs on any [`durlog_vfs::Vfs`]: the host's file
//! system, or a simulated disk that injects crashes and faults.
//!
//! The bytes on disk are specified in `FORMAT.md` at the repository root,
//! the architecture in `ARCHITECTURE.md`. Modules: [`format`](mod@format) (pure encode
//! and decode, no I/O), `segment` (segment files), `index` (where each
//! stream's records are), [`recovery`] (scan and torn-tail decisions), and
//! `log` (the [`Log`] facade and its group commit).
//!
//! Each public item has one path. SPEC section 4's items (the format's
//! functions, [`Log`], [`Options`], [`Error`], ...) and the rest of the API
//! ([`Rule`], [`Tail`], [`LogState`], ...) are at the root; [`format`](mod@format) and
//! [`recovery`] hold only what tools need beyond them ([`format::Header`],
//! [`recovery::verify`], ...). So neither of these compiles:
//!
//! ```compile_fail
//! let _ = durlog::format::parse_record; // it is `durlog::parse_record`
//! ```
//!
//! ```compile_fail
//! let _ = durlog::recovery::Tail::Clean; // it is `durlog::Tail::Clean`
//! ```

mod error;
pub mod format;
mod index;
mod log;
mod position;
pub mod recovery;
mod segment;
mod stats;
mod sync;

// The public surface, one path to each item: SPEC section 4's items and
// the rest of the API at the root, defined in private submodules and
// exported once here; `format` and `recovery` expose only what tools need
// beyond them (`format::Header`, `recovery::verify`, ...).
pub use durlog_vfs as vfs;
pub use error::{Error, Expected};
pub use format::batch::{
    Batch, BatchError, EVENT_ID_BYTES, Event, EventRef, MAX_NAME_BYTES, decode_batch, encode_batch,
};
pub use format::file_names::segment_name;
pub use format::record::{
    HEADER_SIZE, MAX_PAYLOAD_BYTES, Record, RecordError, append_record, crc32c, parse_record,
};
pub use format::state::{LogState, STATE_FILE_NAME, StateError};
pub use format::tables::StreamMetadata;
pub use log::{
    Clock, Commit, CommitRef, DEFAULT_SEGMENT_BYTES, Deletion, FAILPOINT_AFTER_WRITE, Failpoint,
    Filter, Follower, IndexFiles, Log, NextSegment, Options, READ_RUN_BYTES_DEFAULT, Retention,
    SEGMENT_BYTES_MAX, Subscription, Ticket, Tuning,
};
pub use position::{POSITION_SLOT_BYTES, PositionFile};
pub use recovery::decide::{GROUP_BYTES_MAX, Rule};
pub use recovery::report::{RecoveryReport, Refusal, Tail};
pub use stats::{Histogram, Stats};
