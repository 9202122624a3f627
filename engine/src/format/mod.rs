//! The bytes on disk: records, batches and segment names. Pure functions, no
//! I/O. The layout is documented once, with its golden example, in
//! `FORMAT.md` at the repository root.
//!
//! A record is a 16-byte header (payload length, CRC-32C over seq and
//! payload, seq) followed by the payload; the payload of every record is one
//! batch: the events of one `append` call to one stream. This module is the
//! only place that knows where a field sits: everything else reads a
//! record's bytes through [`Header`], [`parse_record`] and the batch
//! functions.

use std::fmt;

mod batch;
mod repair;
mod state;

pub use batch::{
    Batch, BatchError, BatchView, Event, batch_encoded_len, decode_batch, encode_batch,
    encode_batch_into, inspect_batch,
};
pub(crate) use batch::{batch_stream, encode_batch_at, set_first_version};
pub(crate) use repair::single_bit_repair;
pub use state::{LogState, STATE_FILE_NAME, STATE_TEMP_NAME, StateError};

/// Bytes in a record header: length (4), CRC (4), seq (8).
pub const HEADER_SIZE: usize = 16;

/// Longest stream name or event type, in bytes (a `u16` length on disk).
pub const MAX_NAME_BYTES: usize = u16::MAX as usize;

/// Largest record payload, in bytes (a `u32` length on disk).
pub const MAX_PAYLOAD_BYTES: u64 = u32::MAX as u64;

/// The smallest record there can be: a header and a batch of one event
/// with an empty stream name, type and data. Recovery bounds how many
/// records fit in a span of bytes with it.
pub const RECORD_BYTES_MIN: u64 =
    (HEADER_SIZE + batch::BATCH_FIXED_BYTES + batch::EVENT_FIXED_BYTES) as u64;
const _: () = assert!(RECORD_BYTES_MIN == 44);

// The header's fields, each placed right after the one before:
//
//   offset size field
//   0      4    L  payload length (u32)
//   4      4    c  CRC-32C over s then the payload (u32)
//   8      8    s  sequence number (u64)
const LEN_AT: usize = 0;
const CRC_AT: usize = LEN_AT + 4;
const SEQ_AT: usize = CRC_AT + 4;
const _: () = assert!(SEQ_AT + 8 == HEADER_SIZE);
const _: () = assert!(MAX_PAYLOAD_BYTES == u32::MAX as u64);

/// The CRC-covered part of a record starts at the seq: the seq's 8 bytes,
/// then the payload. Single-bit repair counts message bits from here.
pub(crate) const CRC_COVERS_FROM: usize = SEQ_AT;

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
        Header {
            len: u32::from_le_bytes(field(bytes, LEN_AT)),
            crc: u32::from_le_bytes(field(bytes, CRC_AT)),
            seq: u64::from_le_bytes(field(bytes, SEQ_AT)),
        }
    }

    /// Encodes the header.
    pub fn to_bytes(self) -> [u8; HEADER_SIZE] {
        let mut bytes = [0; HEADER_SIZE];
        bytes[LEN_AT..CRC_AT].copy_from_slice(&self.len.to_le_bytes());
        bytes[CRC_AT..SEQ_AT].copy_from_slice(&self.crc.to_le_bytes());
        bytes[SEQ_AT..HEADER_SIZE].copy_from_slice(&self.seq.to_le_bytes());
        bytes
    }

    /// The header at the front of `bytes`, if all 16 bytes are there.
    pub fn peek(bytes: &[u8]) -> Option<Header> {
        bytes.first_chunk::<HEADER_SIZE>().map(Header::from_bytes)
    }

    /// The payload length claimed at the front of `bytes`, if the length
    /// field is there: enough to size a read, trusting nothing else.
    pub fn peek_len(bytes: &[u8]) -> Option<u32> {
        bytes
            .get(LEN_AT..CRC_AT)
            .map(|len| u32::from_le_bytes(len.try_into().expect("4 bytes")))
    }

    /// Bytes the record claims to take, header included.
    pub fn record_len(self) -> u64 {
        HEADER_SIZE as u64 + u64::from(self.len)
    }
}

fn field<const N: usize>(bytes: &[u8; HEADER_SIZE], at: usize) -> [u8; N] {
    bytes[at..at + N]
        .try_into()
        .expect("a field inside the header")
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

/// The file name of the segment whose first record has seq `first_seq`:
/// 20 decimal digits and `.log`, so names sort as numbers.
pub fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.log")
}

/// The file a log prepares as its next segment before it needs it: zeros
/// only, renamed to the new segment's name at the roll. Not a segment name,
/// so recovery never reads it as one; `Log::open` removes it.
pub const NEXT_SEGMENT_NAME: &str = "next-segment.zeros";

/// The lock file a writer holds for as long as its log is open: one
/// process (and one `Log`) writes a directory at a time. Its bytes mean
/// nothing; recovery passes it over.
pub const LOCK_FILE_NAME: &str = "durlog.lock";

/// True for the names a log owns besides its segments and bookkeeping
/// files: anything ending in `.log`. Such a file that is not a segment is
/// damage; any other name in the directory is not the log's business.
pub fn looks_like_a_segment(name: &str) -> bool {
    name.ends_with(".log")
}

/// The first seq named by a segment file name, if `name` is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
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
    fn segment_names_round_trip() {
        assert_eq!(segment_name(1), "00000000000000000001.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("0000000000000000001.log"), None);
        assert_eq!(parse_segment_name("99999999999999999999.log"), None);
        assert_eq!(parse_segment_name("0000000000000000000a.log"), None);
    }
}
