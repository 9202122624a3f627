//! The record: a 16-byte header followed by the payload, one batch; the
//! only code that knows where a header field sits. Integers little-endian
//! (FORMAT.md, "Record", has the diagram and the golden example):
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 4 | `L` | payload length in bytes (u32) |
//! | 4 | 4 | `c` | CRC-32C over the 8 bytes of `s`, then `P` (u32) |
//! | 8 | 8 | `s` | sequence number (u64) |
//! | 16 | `L` | `P` | payload: one batch |

use std::fmt;
use std::ops::Range;

use super::{put_field, u32_at, u64_at};

/// Bytes in a record header: length (4), CRC (4), seq (8).
pub const HEADER_SIZE: usize = 16;

/// Largest record payload, in bytes (a `u32` length on disk).
pub const MAX_PAYLOAD_BYTES: u64 = u32::MAX as u64;

// The header's fields, each placed right after the one before (the table
// in the module doc).
pub(super) const LEN_AT: usize = 0;
pub(super) const CRC_AT: usize = LEN_AT + size_of::<u32>();
const SEQ_AT: usize = CRC_AT + size_of::<u32>();
const PAYLOAD_AT: usize = SEQ_AT + size_of::<u64>();
const _: () = assert!(LEN_AT == 0 && CRC_AT == 4 && SEQ_AT == 8);
const _: () = assert!(PAYLOAD_AT == HEADER_SIZE);
const _: () = assert!(MAX_PAYLOAD_BYTES == u32::MAX as u64);

/// The bytes of a header that hold its seq: recovery asks whether a tear
/// can have cut them (`recovery/decide.rs`).
pub(crate) const HEADER_SEQ_FIELD: Range<usize> = SEQ_AT..PAYLOAD_AT;

/// The CRC-covered part of a record starts at the seq: the seq's 8 bytes,
/// then the payload. Single-bit repair counts message bits from here.
pub(super) const CRC_COVERS_FROM: usize = SEQ_AT;
/// The header bytes the CRC covers: the seq's.
pub(super) const CRC_COVERED_HEADER_BYTES: usize = PAYLOAD_AT - CRC_COVERS_FROM;

/// A record's header, decoded; it says what the record claims, and nothing
/// in it is checked until [`parse_record`] checks the CRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// `L`: the payload's length in bytes.
    pub len: u32,
    /// `c`: the CRC-32C the writer computed over seq and payload.
    pub crc: u32,
    /// `s`: the record's sequence number.
    pub seq: u64,
}

impl Header {
    /// The header for `payload` written at `seq`.
    pub fn for_payload(seq: u64, payload: &[u8]) -> Header {
        let len = u32::try_from(payload.len()).expect("record payload longer than u32::MAX bytes");
        Header {
            len,
            crc: record_crc(seq, payload),
            seq,
        }
    }

    /// Decodes the 16 header bytes.
    pub fn from_bytes(bytes: &[u8; HEADER_SIZE]) -> Header {
        Header::read(bytes).expect("the layout's assertions keep every field inside the header")
    }

    /// Encodes the header.
    pub fn to_bytes(self) -> [u8; HEADER_SIZE] {
        let mut bytes = [0; HEADER_SIZE];
        put_field(&mut bytes, LEN_AT, self.len.to_le_bytes());
        put_field(&mut bytes, CRC_AT, self.crc.to_le_bytes());
        put_field(&mut bytes, SEQ_AT, self.seq.to_le_bytes());
        bytes
    }

    /// The header at the front of `bytes`, if all 16 bytes are there.
    pub fn peek(bytes: &[u8]) -> Option<Header> {
        bytes.first_chunk::<HEADER_SIZE>().map(Header::from_bytes)
    }

    /// The payload length claimed at the front of `bytes`, if the length
    /// field is there: enough to size a read, trusting nothing else.
    pub fn peek_len(bytes: &[u8]) -> Option<u32> {
        u32_at(bytes, LEN_AT)
    }

    /// Bytes the record claims to take, header included.
    pub fn record_len(self) -> u64 {
        HEADER_SIZE as u64 + u64::from(self.len)
    }

    fn read(bytes: &[u8]) -> Option<Header> {
        Some(Header {
            len: u32_at(bytes, LEN_AT)?,
            crc: u32_at(bytes, CRC_AT)?,
            seq: u64_at(bytes, SEQ_AT)?,
        })
    }
}

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
    dst.reserve(HEADER_SIZE + payload.len());
    dst.extend_from_slice(&Header::for_payload(seq, payload).to_bytes());
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
    let header = Header::from_bytes(header);
    // Compare against what remains; `HEADER_SIZE + len` could overflow a
    // 32-bit usize.
    if u64::from(header.len) > rest.len() as u64 {
        return Err(RecordError::Short);
    }
    let payload = &rest[..header.len as usize];
    if record_crc(header.seq, payload) != header.crc {
        return Err(RecordError::Checksum);
    }
    Ok(Record {
        seq: header.seq,
        payload,
        len: HEADER_SIZE + payload.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Event, encode_batch};

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
        let header = Header::peek(&record).unwrap();
        assert_eq!(
            header,
            Header {
                len: 32,
                crc: 0x0B72_1A5E,
                seq: 1
            }
        );
        assert_eq!(header.to_bytes(), record[..16]);
        assert_eq!(Header::peek_len(&record[..4]), Some(32));
        assert_eq!(Header::peek_len(&record[..3]), None);
        assert_eq!(Header::peek(&record[..15]), None);
    }

    #[test]
    fn the_layout_tables_agree_with_the_constants() {
        let row = |at: usize, size: usize, field: &str| format!("| {at} | {size} | `{field}` |");
        let rows = [
            row(LEN_AT, size_of::<u32>(), "L"),
            row(CRC_AT, size_of::<u32>(), "c"),
            row(SEQ_AT, size_of::<u64>(), "s"),
            format!("| {PAYLOAD_AT} | `L` | `P` |"),
        ];
        crate::format::tests::documented(include_str!("record.rs"), &rows);
    }
}
