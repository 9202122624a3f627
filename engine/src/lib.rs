//! durlog: a crash-safe, append-only, segmented event log.
//!
//! Events are appended to named streams with optimistic concurrency; each
//! `append` is one record in a segment file, acknowledged only after the
//! `fdatasync` that covers it. The bytes on disk are specified in
//! `FORMAT.md` at the repository root; the architecture in
//! `ARCHITECTURE.md`.
//!
//! Modules: [`format`] (pure encode and decode, no I/O).

pub mod format;

pub use format::{
    Batch, BatchError, Event, HEADER_SIZE, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES, Record, RecordError,
    append_record, crc32c, decode_batch, encode_batch, parse_record, segment_name,
};
