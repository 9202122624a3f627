//! The batch: the payload of every record, the events of one `append` to
//! one stream. Encoders, the decoder and a copy-free validator that agree
//! on every byte (FORMAT.md, "Batch").

use std::fmt;

use super::MAX_NAME_BYTES;

/// Bytes a batch needs before its first event: stream length (2),
/// first version (8), count (4), plus the stream name itself.
pub(super) const BATCH_FIXED_BYTES: usize = 2 + 8 + 4;

/// Bytes an event needs besides its type and data: type length (2), at (8),
/// data length (4).
pub(super) const EVENT_FIXED_BYTES: usize = 2 + 8 + 4;

/// Where `first_version` sits in a batch whose stream name is `stream_len`
/// bytes: after the name's length and the name.
const fn first_version_offset(stream_len: usize) -> usize {
    2 + stream_len
}

/// The stream name's bytes at the start of an encoded batch: the log reads
/// them back from its queued payloads instead of keeping a copy.
pub(crate) fn batch_stream(payload: &[u8]) -> &[u8] {
    let len = usize::from(u16::from_le_bytes([payload[0], payload[1]]));
    &payload[2..2 + len]
}

/// Writes `first_version` into a batch the log encoded before it knew the
/// version (it learns it when the batch joins a group).
pub(crate) fn set_first_version(payload: &mut [u8], first_version: u64) {
    let at = first_version_offset(batch_stream(payload).len());
    payload[at..at + 8].copy_from_slice(&first_version.to_le_bytes());
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
    put_name(out, stream, "stream name");
    out.extend_from_slice(&first_version.to_le_bytes());
    let count = u32::try_from(events.len()).expect("more than u32::MAX events in one batch");
    out.extend_from_slice(&count.to_le_bytes());
    for event in events {
        put_name(out, &event.event_type, "event type");
        out.extend_from_slice(&at(event).to_le_bytes());
        let data_len =
            u32::try_from(event.data.len()).expect("event data longer than u32::MAX bytes");
        out.extend_from_slice(&data_len.to_le_bytes());
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
    let mut reader = Reader {
        bytes: payload,
        offset: 0,
    };
    let stream = reader.name("stream name")?;
    let first_version = reader.u64("first_version")?;
    let count = reader.u32("count")?;
    check_versions(first_version, count)?;
    check_count_fits(&reader, count)?;
    let mut events = Vec::with_capacity(count as usize);
    for index in 0..u64::from(count) {
        let event_type = reader.name("event type")?;
        let at = reader.u64("at")? as i64;
        let data_len = reader.u32("data length")? as usize;
        let data = reader.take(data_len, "data")?.to_vec();
        events.push(Event {
            stream: stream.clone(),
            version: first_version + index,
            event_type,
            data,
            at,
        });
    }
    if reader.remaining() != 0 {
        return Err(BatchError::TrailingBytes {
            offset: reader.offset,
            extra: reader.remaining(),
        });
    }
    Ok(Batch {
        stream,
        first_version,
        events,
    })
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
    let mut reader = Reader {
        bytes: payload,
        offset: 0,
    };
    let stream = reader.name_ref("stream name")?;
    let first_version = reader.u64("first_version")?;
    let count = reader.u32("count")?;
    check_versions(first_version, count)?;
    check_count_fits(&reader, count)?;
    for _ in 0..count {
        reader.name_ref("event type")?;
        reader.u64("at")?;
        let data_len = reader.u32("data length")? as usize;
        reader.take(data_len, "data")?;
    }
    if reader.remaining() != 0 {
        return Err(BatchError::TrailingBytes {
            offset: reader.offset,
            extra: reader.remaining(),
        });
    }
    Ok(BatchView {
        stream,
        first_version,
        count,
    })
}

/// Every event takes at least EVENT_FIXED_BYTES, so a count the bytes
/// cannot hold is rejected before it sizes an allocation (and with the same
/// error from `decode_batch` and `inspect_batch`).
fn check_count_fits(reader: &Reader<'_>, count: u32) -> Result<(), BatchError> {
    if u64::from(count) > (reader.remaining() / EVENT_FIXED_BYTES) as u64 {
        return Err(BatchError::Truncated {
            field: "events",
            offset: reader.offset,
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

/// A cursor over a payload whose every read is bounds-checked against what
/// remains.
struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }

    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], BatchError> {
        if len > self.remaining() {
            return Err(BatchError::Truncated {
                field,
                offset: self.offset,
            });
        }
        let taken = &self.bytes[self.offset..self.offset + len];
        self.offset += len;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], BatchError> {
        let bytes = self.take(N, field)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, BatchError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, BatchError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn name(&mut self, field: &'static str) -> Result<String, BatchError> {
        self.name_ref(field).map(str::to_owned)
    }

    fn name_ref(&mut self, field: &'static str) -> Result<&'a str, BatchError> {
        let len_offset = self.offset;
        let len = u16::from_le_bytes(self.array(field)?) as usize;
        let start = self.offset;
        let bytes = self.take(len, field).map_err(|_| BatchError::Truncated {
            field,
            offset: len_offset,
        })?;
        std::str::from_utf8(bytes).map_err(|_| BatchError::InvalidUtf8 {
            field,
            offset: start,
        })
    }
}
