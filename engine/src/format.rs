//! The bytes on disk: records, batches and segment names. Pure functions, no
//! I/O. The layout is documented once, with its golden example, in
//! `FORMAT.md` at the repository root.
//!
//! A record is a 16-byte header (payload length, CRC-32C over seq and
//! payload, seq) followed by the payload; the payload of every record is one
//! batch: the events of one `append` call to one stream.

use std::fmt;

/// Bytes in a record header: length (4), CRC (4), seq (8).
pub const HEADER_SIZE: usize = 16;

/// Longest stream name or event type, in bytes (a `u16` length on disk).
pub const MAX_NAME_BYTES: usize = u16::MAX as usize;

/// Largest record payload, in bytes (a `u32` length on disk).
pub const MAX_PAYLOAD_BYTES: u64 = u32::MAX as u64;

/// Offset of `first_version` in a batch whose stream name is `stream_len`
/// bytes: the log encodes a batch before it knows the version, then patches it.
pub(crate) const fn first_version_offset(stream_len: usize) -> usize {
    2 + stream_len
}

/// The stream name's bytes at the start of an encoded batch: the log reads
/// them back from its queued payloads instead of keeping a copy.
pub(crate) fn batch_stream(payload: &[u8]) -> &[u8] {
    let len = usize::from(u16::from_le_bytes([payload[0], payload[1]]));
    &payload[2..2 + len]
}

/// Bytes a batch needs before its first event: stream length (2),
/// first version (8), count (4), plus the stream name itself.
const BATCH_FIXED_BYTES: usize = 2 + 8 + 4;

/// Bytes an event needs besides its type and data: type length (2), at (8),
/// data length (4).
const EVENT_FIXED_BYTES: usize = 2 + 8 + 4;

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and xor-out
/// 0xFFFFFFFF), computed with the CPU's CRC instructions where present.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The CRC a record stores: over the 8 little-endian bytes of `seq`, then
/// the payload, so a valid record copied to another seq fails.
fn record_crc(seq: u64, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&seq.to_le_bytes()), payload)
}

/// Appends one record (header and payload) to `dst`. Allocates only if
/// `dst` lacks the capacity.
///
/// # Panics
/// If `payload` is longer than [`MAX_PAYLOAD_BYTES`]: callers check first
/// (the `Log` returns `Error::RecordTooLarge`).
pub fn append_record(dst: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("record payload longer than u32::MAX bytes");
    dst.reserve(HEADER_SIZE + payload.len());
    dst.extend_from_slice(&len.to_le_bytes());
    dst.extend_from_slice(&record_crc(seq, payload).to_le_bytes());
    dst.extend_from_slice(&seq.to_le_bytes());
    dst.extend_from_slice(payload);
}

/// One record parsed from the front of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The record's sequence number.
    pub seq: u64,
    /// The payload (a batch), borrowed from the buffer.
    pub payload: &'a [u8],
    /// Bytes the record takes: header plus payload.
    pub len: usize,
}

/// Why the front of a buffer is not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordError {
    /// Fewer bytes than the header, or than the length it claims.
    Short,
    /// All bytes present, but the CRC does not match seq and payload.
    Checksum,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecordError::Short => "record is short: fewer bytes than its header or length claims",
            RecordError::Checksum => "record checksum mismatch: seq or payload damaged",
        })
    }
}

impl std::error::Error for RecordError {}

/// Parses the record at the front of `buf`. Checks, in order: the header is
/// present, the length fits in what remains after it, the CRC matches.
/// Never panics, whatever the bytes.
pub fn parse_record(buf: &[u8]) -> Result<Record<'_>, RecordError> {
    let Some((header, rest)) = buf.split_first_chunk::<HEADER_SIZE>() else {
        return Err(RecordError::Short);
    };
    let [
        l0,
        l1,
        l2,
        l3,
        c0,
        c1,
        c2,
        c3,
        s0,
        s1,
        s2,
        s3,
        s4,
        s5,
        s6,
        s7,
    ] = *header;
    let len = u32::from_le_bytes([l0, l1, l2, l3]);
    let crc = u32::from_le_bytes([c0, c1, c2, c3]);
    let seq = u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]);
    // Compare against what remains; `HEADER_SIZE + len` could overflow a
    // 32-bit usize.
    if u64::from(len) > rest.len() as u64 {
        return Err(RecordError::Short);
    }
    let payload = &rest[..len as usize];
    if record_crc(seq, payload) != crc {
        return Err(RecordError::Checksum);
    }
    Ok(Record {
        seq,
        payload,
        len: HEADER_SIZE + payload.len(),
    })
}

/// The file name of the segment whose first record has seq `first_seq`:
/// 20 decimal digits and `.log`, so names sort as numbers.
pub fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.log")
}

/// The file a log prepares as its next segment before it needs it: zeros
/// only, renamed to the new segment's name at the roll. Not a segment name,
/// so recovery never reads it as one; `Log::open` removes it.
pub const NEXT_SEGMENT_NAME: &str = "next-segment.zeros";

/// The first seq named by a segment file name, if `name` is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn golden_record_of_the_spec() {
        let mut event = Event::new("T", "hi");
        event.at = 0;
        let payload = encode_batch("s", 1, &[event]);
        assert_eq!(payload.len(), 32);
        assert_eq!(record_crc(1, &payload), 0x0B72_1A5E);
        let mut record = Vec::new();
        append_record(&mut record, 1, &payload);
        assert_eq!(
            &record[..16],
            &[
                0x20, 0, 0, 0, 0x5e, 0x1a, 0x72, 0x0b, 1, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        let parsed = parse_record(&record).unwrap();
        assert_eq!(
            (parsed.seq, parsed.len, parsed.payload),
            (1, 48, &payload[..])
        );
    }

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(segment_name(1), "00000000000000000001.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("0000000000000000001.log"), None);
        assert_eq!(parse_segment_name("99999999999999999999.log"), None);
        assert_eq!(parse_segment_name("0000000000000000000a.log"), None);
    }
}
