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
//! | 10 + `stream_len` | 4 | `count`, u32: events in the batch, >= 1 |
//! | 14 + `stream_len` | ... | `count` events, each: |
//! | +0 | 2 | `type_len`, u16 |
//! | +2 | `type_len` | `type`, UTF-8 |
//! | +2 + `type_len` | 8 | `at`, i64: unix time in nanoseconds (negative before 1970) |
//! | +10 + `type_len` | 4 | `data_len`, u32 |
//! | +14 + `type_len` | `data_len` | `data`, opaque bytes |
//!
//! A name (the stream, a type) moves every field after it, so those
//! fields' places are named from the name's end (`FIRST_VERSION_AFTER_STREAM`,
//! `TIME_AFTER_TYPE`, ...) and the layout functions below add the name's
//! length once.

use std::fmt;

use super::{put_field, u16_at, u32_at, u64_at};

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

/// Where `first_version` sits in a batch whose stream name is `stream_len`
/// bytes.
const fn first_version_at(stream_len: usize) -> usize {
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

/// One event of a stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Event {
    /// The stream it belongs to; set by `append`.
    pub stream: String,
    /// 1-based, dense per stream; set by `append`.
    pub version: u64,
    /// What kind of event this is (at most 65535 bytes of UTF-8).
    pub event_type: String,
    /// The event's bytes, opaque to the log.
    pub data: Vec<u8>,
    /// Unix time in nanoseconds; set by `append` from `Options::now`.
    pub at: i64,
}

impl Event {
    /// An event to append: stream, version and time are set by `append`.
    pub fn new(event_type: impl Into<String>, data: impl Into<Vec<u8>>) -> Event {
        Event {
            stream: String::new(),
            version: 0,
            event_type: event_type.into(),
            data: data.into(),
            at: 0,
        }
    }
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
        }
    }
}

impl std::error::Error for BatchError {}

/// The payload bytes `encode_batch` produces for these names and events,
/// computed without encoding. Saturates instead of overflowing.
pub fn batch_encoded_len(stream: &str, events: &[Event]) -> u64 {
    events
        .iter()
        .fold((BATCH_FIXED_BYTES + stream.len()) as u64, |total, event| {
            total.saturating_add(
                (EVENT_FIXED_BYTES + event.event_type.len()) as u64 + event.data.len() as u64,
            )
        })
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
    let count = u32::try_from(events.len()).expect("more than u32::MAX events in one batch");
    out.extend_from_slice(&count.to_le_bytes());
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

/// Decodes a record payload into a batch. Rejects, never panics on: a field
/// or length that runs past the end, invalid UTF-8, a count of 0, a first
/// version of 0, versions that overflow, and bytes after the last event.
pub fn decode_batch(payload: &[u8]) -> Result<Batch, BatchError> {
    let (head, mut event_at) = read_head(payload)?;
    let mut events = Vec::with_capacity(head.count as usize);
    for index in 0..u64::from(head.count) {
        let (event, next_at) = read_event(payload, event_at)?;
        events.push(Event {
            stream: head.stream.to_owned(),
            version: head.first_version + index,
            event_type: event.event_type.to_owned(),
            data: event.data.to_vec(),
            at: event.at,
        });
        event_at = next_at;
    }
    check_end(payload, event_at)?;
    Ok(Batch {
        stream: head.stream.to_owned(),
        first_version: head.first_version,
        events,
    })
}

/// A record's batch with only the events `keep` accepts (given each one's
/// version, type and time) copied out, or `None` if `keep_stream` refuses
/// its stream: a reader that filters pays for the data it returns, not for
/// the data it skips. The payload is a CRC-checked record's, whose batch
/// was checked before it was written and at recovery; every field read is
/// still bounds-checked.
pub(crate) fn decode_batch_where(
    payload: &[u8],
    keep_stream: impl FnOnce(&str) -> bool,
    keep: impl Fn(u64, &str, i64) -> bool,
) -> Result<Option<Batch>, BatchError> {
    let (head, mut event_at) = read_head(payload)?;
    if !keep_stream(head.stream) {
        return Ok(None);
    }
    let mut events = Vec::new();
    for index in 0..u64::from(head.count) {
        let (event, next_at) = read_event(payload, event_at)?;
        let version = head.first_version + index;
        if keep(version, event.event_type, event.at) {
            events.push(Event {
                stream: head.stream.to_owned(),
                version,
                event_type: event.event_type.to_owned(),
                data: event.data.to_vec(),
                at: event.at,
            });
        }
        event_at = next_at;
    }
    check_end(payload, event_at)?;
    Ok(Some(Batch {
        stream: head.stream.to_owned(),
        first_version: head.first_version,
        events,
    }))
}

/// What recovery needs of a batch, borrowed from the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchView<'a> {
    /// The stream all events belong to.
    pub stream: &'a str,
    /// The version of the first event.
    pub first_version: u64,
    /// How many events the batch holds (at least 1).
    pub count: u32,
}

/// Checks a payload exactly as [`decode_batch`] does, without copying any
/// event: recovery validates every record this way at scan speed.
pub fn inspect_batch(payload: &[u8]) -> Result<BatchView<'_>, BatchError> {
    let (head, mut event_at) = read_head(payload)?;
    for _ in 0..head.count {
        event_at = read_event(payload, event_at)?.1;
    }
    check_end(payload, event_at)?;
    Ok(head)
}

/// The fixed part of the batch in `payload`, checked: its stream, first
/// version and count, and where its first event starts.
fn read_head(payload: &[u8]) -> Result<(BatchView<'_>, usize), BatchError> {
    let stream = read_name(payload, STREAM_LEN_AT, "stream name")?;
    let first_version = read_u64(payload, first_version_at(stream.len()), "first_version")?;
    let count = read_u32(payload, count_at(stream.len()), "count")?;
    check_versions(first_version, count)?;
    let event_at = events_at(stream.len());
    check_count_fits(payload, event_at, count)?;
    let head = BatchView {
        stream,
        first_version,
        count,
    };
    Ok((head, event_at))
}

/// One event of a batch, borrowed from the payload.
struct EventView<'a> {
    event_type: &'a str,
    at: i64,
    data: &'a [u8],
}

/// The event at `event_at` of `payload`, and where the next one starts.
fn read_event(payload: &[u8], event_at: usize) -> Result<(EventView<'_>, usize), BatchError> {
    let event_type = read_name(payload, event_at + TYPE_LEN_AT, "event type")?;
    let (time_at, data_len_at, data_at) = event_fields_at(event_at, event_type.len());
    let at = read_u64(payload, time_at, "at")? as i64;
    let data_len = read_u32(payload, data_len_at, "data length")? as usize;
    let data = read_bytes(payload, data_at, data_len, "data")?;
    let event = EventView {
        event_type,
        at,
        data,
    };
    Ok((event, data_at + data_len))
}

/// The last event ends at `end`: the payload must too.
fn check_end(payload: &[u8], end: usize) -> Result<(), BatchError> {
    match payload.len() - end {
        0 => Ok(()),
        extra => Err(BatchError::TrailingBytes { offset: end, extra }),
    }
}

/// Every event takes at least EVENT_FIXED_BYTES, so a count the bytes
/// from `event_at` cannot hold is rejected before it sizes an allocation
/// (and with the same error from `decode_batch` and `inspect_batch`).
fn check_count_fits(payload: &[u8], event_at: usize, count: u32) -> Result<(), BatchError> {
    let remaining = payload.len() - event_at;
    if u64::from(count) > (remaining / EVENT_FIXED_BYTES) as u64 {
        return Err(BatchError::Truncated {
            field: "events",
            offset: event_at,
        });
    }
    Ok(())
}

fn check_versions(first_version: u64, count: u32) -> Result<(), BatchError> {
    if count == 0 {
        return Err(BatchError::EmptyBatch);
    }
    if first_version == 0 {
        return Err(BatchError::ZeroVersion);
    }
    if first_version.checked_add(u64::from(count) - 1).is_none() {
        return Err(BatchError::VersionOverflow);
    }
    Ok(())
}

// The batch's readers: each reads one field at its offset, bounds-checked
// against what the payload holds, and names the field when it runs past
// the end.

fn read_u32(payload: &[u8], at: usize, field: &'static str) -> Result<u32, BatchError> {
    u32_at(payload, at).ok_or(BatchError::Truncated { field, offset: at })
}

fn read_u64(payload: &[u8], at: usize, field: &'static str) -> Result<u64, BatchError> {
    u64_at(payload, at).ok_or(BatchError::Truncated { field, offset: at })
}

/// The `len` bytes at `at`, compared against what remains (never by adding
/// `at + len`, which a damaged length could overflow).
fn read_bytes<'a>(
    payload: &'a [u8],
    at: usize,
    len: usize,
    field: &'static str,
) -> Result<&'a [u8], BatchError> {
    payload
        .get(at..)
        .and_then(|rest| rest.get(..len))
        .ok_or(BatchError::Truncated { field, offset: at })
}

/// A name (the stream, a type) whose length field is at `len_at`: a name
/// that runs past the end is reported at its length field, invalid UTF-8
/// at its first byte.
fn read_name<'a>(
    payload: &'a [u8],
    len_at: usize,
    field: &'static str,
) -> Result<&'a str, BatchError> {
    let truncated = || BatchError::Truncated {
        field,
        offset: len_at,
    };
    let len = u16_at(payload, len_at).ok_or_else(truncated)?;
    let name_at = len_at + NAME_LEN_BYTES;
    let bytes = read_bytes(payload, name_at, usize::from(len), field).map_err(|_| truncated())?;
    std::str::from_utf8(bytes).map_err(|_| BatchError::InvalidUtf8 {
        field,
        offset: name_at,
    })
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
        crate::format::tests::documented(include_str!("batch.rs"), &rows);
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
