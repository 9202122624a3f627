//! The batch: the payload of every record, the events of one `append` to
//! one stream. Encoders, the decoder and a copy-free validator that agree
//! on every byte; FORMAT.md ("Batch") has the prose and the golden example.
//! Integers little-endian:
//!
//! | offset (in the payload) | size | field |
//! |---|---|---|
//! | 0 | 2 | `stream_len`, u16 |
//! | 2 | `stream_len` | `stream`, UTF-8 |
//! | 2 + `stream_len` | 8 | `first_version`, u64: the version of the first event, >= 1 |
//! | 10 + `stream_len` | 4 | `count`, u32: events in the batch, >= 1; its top bit (`EXTRAS_FLAG`) set: each event has extras |
//! | 14 + `stream_len` | ... | `count` events, each: |
//! | +0 | 2 | `type_len`, u16 |
//! | +2 | `type_len` | `type`, UTF-8 |
//! | +2 + `type_len` | 8 | `at`, i64: unix time in nanoseconds (negative before 1970) |
//! | +10 + `type_len` | 4 | `data_len`, u32 |
//! | +14 + `type_len` | `data_len` | `data`, opaque bytes |
//!
//! Where some event of the batch carries an id, metadata or a content type
//! ([`Event::with_id`], ...), `count`'s top bit is set and every event's
//! data is followed by its extras; a batch with none is encoded exactly as
//! before extras existed (the golden bytes stand):
//!
//! | extras field | size | present |
//! |---|---|---|
//! | `extras`, u8 | 1 | always: bit 0 id, bit 1 metadata, bit 2 content type; other bits 0 |
//! | `id` | 16 | bit 0 |
//! | `metadata_len`, u32, then `metadata` | 4 + `metadata_len` | bit 1; `metadata_len` >= 1 |
//! | `content_type_len`, u16, then `content_type`, UTF-8 | 2 + `content_type_len` | bit 2 |
//!
//! Only the encoder's own form decodes: the top bit set with no event's
//! extras, or empty metadata present, is refused, so that every batch
//! decodes and encodes back to its own bytes.
//!
//! A name (the stream, a type) moves every field after it, so those
//! fields' places are named from the name's end (`FIRST_VERSION_AFTER_STREAM`,
//! `TIME_AFTER_TYPE`, ...) and the layout functions below add the name's
//! length once.

use std::fmt;

mod decode;

use super::event::Extras;
pub use super::event::{EVENT_ID_BYTES, Event, EventRef};
use super::{put_field, u16_at};
#[cfg(test)]
use super::{u32_at, u64_at};
pub use decode::{BatchView, decode_batch, inspect_batch};
pub(crate) use decode::{event_ids, visit_batch_where};

/// Longest stream name or event type, in bytes (a `u16` length on disk).
pub const MAX_NAME_BYTES: usize = u16::MAX as usize;

/// Bytes of a name's length field (the stream's, a type's): a `u16`.
const NAME_LEN_BYTES: usize = size_of::<u16>();

// The fixed part, before the first event: the stream name's length and
// the name at fixed places, then, from the name's end, the first version
// and the count.
const STREAM_LEN_AT: usize = 0;
const STREAM_AT: usize = STREAM_LEN_AT + NAME_LEN_BYTES;
const FIRST_VERSION_AFTER_STREAM: usize = 0;
const COUNT_AFTER_STREAM: usize = FIRST_VERSION_AFTER_STREAM + size_of::<u64>();
const EVENTS_AFTER_STREAM: usize = COUNT_AFTER_STREAM + size_of::<u32>();

/// Bytes a batch needs before its first event besides the stream name:
/// stream length (2), first version (8), count (4).
pub(super) const BATCH_FIXED_BYTES: usize = STREAM_AT + EVENTS_AFTER_STREAM;
const _: () = assert!(STREAM_LEN_AT == 0 && STREAM_AT == 2);
const _: () = assert!(COUNT_AFTER_STREAM == 8 && EVENTS_AFTER_STREAM == 12);
const _: () = assert!(BATCH_FIXED_BYTES == 14);

// An event, from its start: the type's length and the type, then, from
// the type's end, the time (the field `at`), the data's length and the
// data.
const TYPE_LEN_AT: usize = 0;
const TYPE_AT: usize = TYPE_LEN_AT + NAME_LEN_BYTES;
const TIME_AFTER_TYPE: usize = 0;
const DATA_LEN_AFTER_TYPE: usize = TIME_AFTER_TYPE + size_of::<i64>();
const DATA_AFTER_TYPE: usize = DATA_LEN_AFTER_TYPE + size_of::<u32>();

/// Bytes an event needs besides its type and data: type length (2), at (8),
/// data length (4).
pub(super) const EVENT_FIXED_BYTES: usize = TYPE_AT + DATA_AFTER_TYPE;
const _: () = assert!(TYPE_LEN_AT == 0 && TYPE_AT == 2);
const _: () = assert!(DATA_LEN_AFTER_TYPE == 8 && DATA_AFTER_TYPE == 12);
const _: () = assert!(EVENT_FIXED_BYTES == 14);

/// `count`'s top bit: every event of the batch is followed by its extras.
const EXTRAS_FLAG: u32 = 1 << 31;
/// The bits of an event's `extras` byte, each naming a field that follows.
const HAS_ID: u8 = 1 << 0;
const HAS_METADATA: u8 = 1 << 1;
const HAS_CONTENT_TYPE: u8 = 1 << 2;
const EXTRAS_KNOWN: u8 = HAS_ID | HAS_METADATA | HAS_CONTENT_TYPE;

/// Where `first_version` sits in a batch whose stream name is `stream_len`
/// bytes.
pub(crate) const fn first_version_at(stream_len: usize) -> usize {
    STREAM_AT + stream_len + FIRST_VERSION_AFTER_STREAM
}

/// Where `count` sits in a batch whose stream name is `stream_len` bytes.
const fn count_at(stream_len: usize) -> usize {
    STREAM_AT + stream_len + COUNT_AFTER_STREAM
}

/// Where the first event starts in a batch whose stream name is
/// `stream_len` bytes.
const fn events_at(stream_len: usize) -> usize {
    STREAM_AT + stream_len + EVENTS_AFTER_STREAM
}

/// Where the fields of the event at `event_at` with a type of `type_len`
/// bytes sit: its time, its data's length, its data.
const fn event_fields_at(event_at: usize, type_len: usize) -> (usize, usize, usize) {
    let type_end = event_at + TYPE_AT + type_len;
    (
        type_end + TIME_AFTER_TYPE,
        type_end + DATA_LEN_AFTER_TYPE,
        type_end + DATA_AFTER_TYPE,
    )
}

/// The stream name's bytes at the start of an encoded batch: the log reads
/// them back from its queued payloads instead of keeping a copy.
///
/// # Panics
/// If `payload` is not a batch the log encoded (which always holds its
/// stream name).
pub(crate) fn batch_stream(payload: &[u8]) -> &[u8] {
    let len = u16_at(payload, STREAM_LEN_AT).expect("an encoded batch has a stream length");
    payload
        .get(STREAM_AT..STREAM_AT + usize::from(len))
        .expect("an encoded batch holds its stream name")
}

/// Writes `first_version` into a batch the log encoded before it knew the
/// version (it learns it when the batch joins a group).
pub(crate) fn set_first_version(payload: &mut [u8], first_version: u64) {
    let at = first_version_at(batch_stream(payload).len());
    put_field(payload, at, first_version.to_le_bytes());
}

/// A decoded record payload: the events of one append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The stream all events belong to.
    pub stream: String,
    /// The version of the first event; the rest follow densely.
    pub first_version: u64,
    /// The events, with `stream` and `version` filled in.
    pub events: Vec<Event>,
}

/// Why a payload is not a valid batch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchError {
    /// A field, or the bytes a length field announces, runs past the end.
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Offset of that field in the payload.
        offset: usize,
    },
    /// A stream name or event type is not UTF-8.
    InvalidUtf8 {
        /// The field being read.
        field: &'static str,
        /// Offset of that field in the payload.
        offset: usize,
    },
    /// The batch holds no events.
    EmptyBatch,
    /// The first version is 0; versions start at 1.
    ZeroVersion,
    /// `first_version + count - 1` does not fit in a u64.
    VersionOverflow,
    /// Bytes remain after the last event.
    TrailingBytes {
        /// Where the last event ended.
        offset: usize,
        /// How many bytes follow it.
        extra: usize,
    },
    /// An event's `extras` byte names fields this version does not know.
    UnknownExtras {
        /// Offset of that byte in the payload.
        offset: usize,
        /// Its value.
        flags: u8,
    },
    /// A field is encoded other than the encoder writes it (extras flagged
    /// on a batch none of whose events has any, empty metadata present).
    NotCanonical {
        /// The field.
        field: &'static str,
        /// Offset of that field in the payload.
        offset: usize,
    },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Truncated { field, offset } => {
                write!(
                    f,
                    "batch truncated: {field} at payload offset {offset} runs past the end"
                )
            }
            BatchError::InvalidUtf8 { field, offset } => {
                write!(
                    f,
                    "batch has invalid UTF-8 in {field} at payload offset {offset}"
                )
            }
            BatchError::EmptyBatch => f.write_str("batch holds no events"),
            BatchError::ZeroVersion => f.write_str("batch first_version is 0; versions start at 1"),
            BatchError::VersionOverflow => f.write_str("batch versions overflow u64"),
            BatchError::TrailingBytes { offset, extra } => {
                write!(
                    f,
                    "batch has {extra} trailing bytes after its last event at payload offset {offset}"
                )
            }
            BatchError::UnknownExtras { offset, flags } => write!(
                f,
                "batch has an event's extras {flags:#04x} at payload offset {offset}, naming fields this version does not know"
            ),
            BatchError::NotCanonical { field, offset } => write!(
                f,
                "batch has {field} at payload offset {offset} encoded other than its encoder writes it"
            ),
        }
    }
}

impl std::error::Error for BatchError {}

/// The payload bytes `encode_batch` produces for these names and events,
/// computed without encoding. Saturates instead of overflowing.
pub fn batch_encoded_len(stream: &str, events: &[Event]) -> u64 {
    let extended = has_extras(events);
    events
        .iter()
        .fold((BATCH_FIXED_BYTES + stream.len()) as u64, |total, event| {
            let extras = if extended {
                extras_len(event.extras())
            } else {
                0
            };
            total.saturating_add(
                (EVENT_FIXED_BYTES + event.event_type.len()) as u64
                    + event.data.len() as u64
                    + extras,
            )
        })
}

/// Whether the batch of `events` carries extras (every event then has an
/// `extras` byte).
fn has_extras(events: &[Event]) -> bool {
    events.iter().any(|event| !event.extras().is_empty())
}

/// The bytes an event's extras take in a batch that has them.
fn extras_len(extras: &Extras) -> u64 {
    let id = extras.id.map_or(0, |id| id.len());
    let metadata = match extras.metadata.len() {
        0 => 0,
        len => size_of::<u32>() as u64 + len as u64,
    };
    let content_type = extras
        .content_type
        .as_ref()
        .map_or(0, |content_type| NAME_LEN_BYTES + content_type.len());
    (1 + id + content_type) as u64 + metadata
}

/// Encodes the events of one append to `stream`, the first at version
/// `first_version`. Only each event's type, time and data are stored; the
/// stream and versions come from the batch.
///
/// # Panics
/// If `stream` or an event type is longer than [`MAX_NAME_BYTES`] or a data
/// field longer than `u32::MAX`: the `Log` checks these first and returns an
/// error.
pub fn encode_batch(stream: &str, first_version: u64, events: &[Event]) -> Vec<u8> {
    let len = batch_encoded_len(stream, events);
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    encode_batch_into(&mut out, stream, first_version, events);
    out
}

/// [`encode_batch`] appending to a caller's buffer.
pub fn encode_batch_into(out: &mut Vec<u8>, stream: &str, first_version: u64, events: &[Event]) {
    encode_events(out, stream, first_version, events, |event| event.at);
}

/// Encodes a batch whose events all carry the time `at`, the way `append`
/// stamps them.
pub(crate) fn encode_batch_at(
    out: &mut Vec<u8>,
    stream: &str,
    first_version: u64,
    events: &[Event],
    at: i64,
) {
    encode_events(out, stream, first_version, events, |_| at);
}

fn encode_events(
    out: &mut Vec<u8>,
    stream: &str,
    first_version: u64,
    events: &[Event],
    at: impl Fn(&Event) -> i64,
) {
    // Each field is appended where the layout places it, which the debug
    // assertions check against the layout's functions.
    let start = out.len();
    put_name(out, stream, "stream name");
    debug_assert_eq!(out.len() - start, first_version_at(stream.len()));
    out.extend_from_slice(&first_version.to_le_bytes());
    debug_assert_eq!(out.len() - start, count_at(stream.len()));
    let count = u32::try_from(events.len())
        .ok()
        .filter(|&count| count < EXTRAS_FLAG)
        .expect("2^31 events or more in one batch");
    let extended = has_extras(events);
    let flagged = if extended { count | EXTRAS_FLAG } else { count };
    out.extend_from_slice(&flagged.to_le_bytes());
    debug_assert_eq!(out.len() - start, events_at(stream.len()));
    for event in events {
        let event_at = out.len() - start;
        put_name(out, &event.event_type, "event type");
        let (time_at, _, data_at) = event_fields_at(event_at, event.event_type.len());
        debug_assert_eq!(out.len() - start, time_at);
        out.extend_from_slice(&at(event).to_le_bytes());
        let data_len =
            u32::try_from(event.data.len()).expect("event data longer than u32::MAX bytes");
        out.extend_from_slice(&data_len.to_le_bytes());
        debug_assert_eq!(out.len() - start, data_at);
        out.extend_from_slice(&event.data);
        if extended {
            put_extras(out, event.extras());
        }
    }
}

fn put_extras(out: &mut Vec<u8>, extras: &Extras) {
    let flags = extras.id.map_or(0, |_| HAS_ID)
        | if extras.metadata.is_empty() {
            0
        } else {
            HAS_METADATA
        }
        | extras.content_type.as_ref().map_or(0, |_| HAS_CONTENT_TYPE);
    out.push(flags);
    if let Some(id) = extras.id {
        out.extend_from_slice(&id);
    }
    if !extras.metadata.is_empty() {
        let len =
            u32::try_from(extras.metadata.len()).expect("metadata longer than u32::MAX bytes");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&extras.metadata);
    }
    if let Some(content_type) = &extras.content_type {
        put_name(out, content_type, "content type");
    }
}

fn put_name(out: &mut Vec<u8>, name: &str, what: &str) {
    let Ok(len) = u16::try_from(name.len()) else {
        panic!(
            "{what} is {} bytes, over the limit of {MAX_NAME_BYTES}",
            name.len()
        );
    };
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(name.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_tables_agree_with_the_constants() {
        let (u32_bytes, u64_bytes) = (size_of::<u32>(), size_of::<u64>());
        let (time_at, data_len_at, data_at) = event_fields_at(0, 0);
        let rows = [
            format!("| {STREAM_LEN_AT} | {NAME_LEN_BYTES} | `stream_len`, u16 |"),
            format!("| {STREAM_AT} | `stream_len` | `stream`, UTF-8 |"),
            format!(
                "| {} + `stream_len` | {u64_bytes} | `first_version`, u64",
                first_version_at(0)
            ),
            format!(
                "| {} + `stream_len` | {u32_bytes} | `count`, u32",
                count_at(0)
            ),
            format!("| {} + `stream_len` | ... | `count` events", events_at(0)),
            format!("| +{TYPE_LEN_AT} | {NAME_LEN_BYTES} | `type_len`, u16 |"),
            format!("| +{TYPE_AT} | `type_len` | `type`, UTF-8 |"),
            format!("| +{time_at} + `type_len` | {u64_bytes} | `at`, i64"),
            format!("| +{data_len_at} + `type_len` | {u32_bytes} | `data_len`, u32 |"),
            format!("| +{data_at} + `type_len` | `data_len` | `data`, opaque bytes |"),
        ];
        crate::format::tests::documented(include_str!("mod.rs"), &rows);
    }

    /// The layout's functions place FORMAT.md's golden batch field by field.
    #[test]
    fn the_golden_batch_has_its_fields_where_the_layout_says() {
        let mut event = Event::new("T", "hi");
        event.at = -2;
        let payload = encode_batch("s", 7, &[event]);
        assert_eq!(batch_stream(&payload), b"s");
        assert_eq!(u64_at(&payload, first_version_at(1)), Some(7));
        assert_eq!(u32_at(&payload, count_at(1)), Some(1));
        let event_at = events_at(1);
        assert_eq!(u16_at(&payload, event_at + TYPE_LEN_AT), Some(1));
        assert_eq!(payload[event_at + TYPE_AT], b'T');
        let (time_at, data_len_at, data_at) = event_fields_at(event_at, 1);
        assert_eq!(u64_at(&payload, time_at), Some(-2_i64 as u64));
        assert_eq!(u32_at(&payload, data_len_at), Some(2));
        assert_eq!(&payload[data_at..], b"hi");
        let mut moved = payload.clone();
        set_first_version(&mut moved, 9);
        assert_eq!(decode_batch(&moved).map(|batch| batch.first_version), Ok(9));
    }
}
