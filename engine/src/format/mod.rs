//! The bytes on disk: records, batches, the state file and file names.
//! Pure functions, no I/O. `FORMAT.md` at the repository root has the
//! prose, the diagrams and the worked examples; each format's table of
//! fields sits in the module doc of the file that owns it, and that file
//! is the only code that knows where one of its fields sits:
//!
//! - `record.rs`: the record header ([`Header`]), `crc32c`,
//!   `append_record`, `parse_record`.
//! - `event.rs`: [`Event`], with its id, metadata and content type.
//! - `batch/mod.rs`: the batch, every record's payload: `encode_batch`,
//!   `decode_batch`, and [`inspect_batch`], the copy-free validator
//!   recovery uses.
//! - `state.rs`: the state file a purge or a truncation writes (`LogState`).
//! - `segment_index.rs`: a sealed segment's index file (`SegmentIndex`).
//! - `tables.rs`: the tables of stream metadata and consumer positions.
//! - `file_names.rs`: segment names and the bookkeeping files' names.
//! - `repair.rs`: single-bit repair, the CRC algebra recovery uses.
//!
//! Each decoder reads a fixed-size field through `field` and its typed
//! forms, which answer `None` for bytes too short to hold it: untrusted
//! input is never sliced by hand, so it cannot make a decoder panic.
//!
//! This module exposes only what tools need beyond the crate root: the
//! items of SPEC section 4 (`durlog::parse_record`, `durlog::Event`, ...)
//! are reached at the root alone, one path each.

pub(crate) mod batch;
mod event;
pub(crate) mod file_names;
pub(crate) mod record;
mod repair;
pub(crate) mod segment_index;
pub(crate) mod state;
pub(crate) mod tables;

pub use batch::{BatchView, batch_encoded_len, encode_batch_into, inspect_batch};
pub use file_names::{LOCK_FILE_NAME, NEXT_SEGMENT_NAME, looks_like_a_segment, parse_segment_name};
pub use record::Header;
pub use segment_index::{
    INDEX_FILE_SUFFIX, IndexFileError, IndexedRecord, SegmentIndex, StreamRecords, index_file_name,
    parse_index_file_name,
};
pub use state::STATE_TEMP_NAME;
pub use tables::{
    CONSUMERS_FILE_NAME, CONSUMERS_TEMP_NAME, Deleted, STREAMS_FILE_NAME, STREAMS_TEMP_NAME,
    StreamEntry, TableError, decode_consumers, decode_streams, encode_consumers, encode_streams,
};

// The items the crate root exports, reachable inside the crate at
// `crate::format::X` as well, so the engine names every format item one
// way: all of them, used inside the crate today or not (hence the allow).
#[allow(unused_imports)]
pub(crate) use self::{
    batch::{
        Batch, BatchError, EVENT_ID_BYTES, Event, EventRef, MAX_NAME_BYTES, decode_batch,
        encode_batch,
    },
    file_names::segment_name,
    record::{
        HEADER_SIZE, MAX_PAYLOAD_BYTES, Record, RecordError, append_record, crc32c, parse_record,
    },
    state::{LogState, STATE_FILE_NAME, StateError},
    tables::{StreamMetadata, Tables},
};
pub(crate) use batch::{
    batch_stream, encode_batch_at, event_ids, first_version_at, set_first_version,
    visit_batch_where,
};
pub(crate) use record::HEADER_SEQ_FIELD;
pub(crate) use repair::single_bit_repair;

/// The smallest record there can be: a header and a batch of one event
/// with an empty stream name, type and data. Recovery bounds how many
/// records fit in a span of bytes with it.
pub const RECORD_BYTES_MIN: u64 =
    (HEADER_SIZE + batch::BATCH_FIXED_BYTES + batch::EVENT_FIXED_BYTES) as u64;
const _: () = assert!(RECORD_BYTES_MIN == 44);

/// Whether `bytes` are all zeros, 64 at a time or-ed together where the
/// compiler can do it in vector registers: zero tails run to megabytes
/// (recovery's scan of a preallocated segment, the check of each group's
/// padding), and a byte-at-a-time loop over them showed in profiles.
pub(crate) fn all_zeros(bytes: &[u8]) -> bool {
    let (chunks, rest) = bytes.as_chunks::<64>();
    chunks
        .iter()
        .all(|chunk| chunk.iter().fold(0, |acc, &byte| acc | byte) == 0)
        && rest.iter().all(|&byte| byte == 0)
}

/// The `N` bytes of the field at `at`, if `bytes` holds all of them.
pub(crate) fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..)?.first_chunk::<N>().copied()
}

/// The little-endian `u16` at `at`, if `bytes` holds it.
pub(crate) fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    field(bytes, at).map(u16::from_le_bytes)
}

/// The little-endian `u32` at `at`, if `bytes` holds it.
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    field(bytes, at).map(u32::from_le_bytes)
}

/// The little-endian `u64` at `at`, if `bytes` holds it.
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    field(bytes, at).map(u64::from_le_bytes)
}

/// Writes `value` as the field at `at` of a buffer its encoder sized.
///
/// # Panics
/// If the field runs past the buffer: the encoder sized it wrong.
pub(crate) fn put_field<const N: usize>(bytes: &mut [u8], at: usize, value: [u8; N]) {
    bytes
        .get_mut(at..)
        .and_then(|rest| rest.first_chunk_mut::<N>())
        .expect("the encoder sized the buffer for the field")
        .copy_from_slice(&value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One byte set anywhere, in a whole chunk of 64 or in the rest, is
    /// seen; zeros of any length pass.
    #[test]
    fn all_zeros_sees_every_byte() {
        for len in [0, 1, 63, 64, 65, 130] {
            let zeros = vec![0u8; len];
            assert!(all_zeros(&zeros), "{len} zeros");
            for at in 0..len {
                let mut bytes = zeros.clone();
                bytes[at] = 0x80;
                assert!(!all_zeros(&bytes), "{len} bytes, one set at {at}");
            }
        }
    }

    #[test]
    fn fields_past_the_end_are_none() {
        let bytes = [1, 2, 3, 4, 5];
        assert_eq!(u16_at(&bytes, 3), Some(0x0504));
        assert_eq!(u16_at(&bytes, 4), None);
        assert_eq!(u32_at(&bytes, 1), Some(0x0504_0302));
        assert_eq!(u32_at(&bytes, 2), None);
        assert_eq!(u64_at(&bytes, 0), None);
        assert_eq!(field::<0>(&bytes, 5), Some([]));
        assert_eq!(field::<0>(&bytes, 6), None);
        assert_eq!(u16_at(&bytes, usize::MAX), None);
    }

    /// The leading columns of a row of a layout table: offset, size, and
    /// the start of the field's description.
    pub(crate) fn row(at: usize, size: usize, field: &str) -> String {
        format!("| {at} | {size} | {field}")
    }

    /// A table of fields in a module doc and in FORMAT.md: each row given
    /// is a row of both (its leading columns: offset, size, field), so
    /// neither drifts from the constants the rows are built from.
    pub(crate) fn documented(module_doc: &str, rows: &[String]) {
        let format_md = include_str!("../../../FORMAT.md");
        for row in rows {
            assert!(
                module_doc.contains(row.as_str()),
                "the module doc lacks {row:?}"
            );
            assert!(format_md.contains(row.as_str()), "FORMAT.md lacks {row:?}");
        }
    }
}
