//! A sealed segment's index file, `NNNNNNNNNNNNNNNNNNNN.idx` beside the
//! segment of the same number: what Open and reads need of the segment
//! without reading its records. Where each record starts (by seq), and
//! for each stream with records in the segment, the versions of those
//! records and the ids of their events. It is derived data: the segment
//! is the truth, and an index file that disagrees with it (its
//! `segment_len` or `last_record_crc` against the segment's bytes, or any
//! byte against its CRC) is damage to be detected, never believed.
//! FORMAT.md ("Index files") has the prose and the worked example.
//! Integers little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `DURLOGIX` |
//! | 8 | 4 | format version, 1 |
//! | 12 | 4 | CRC-32C of every byte after this field |
//! | 16 | 8 | `first_seq`: the segment's first record (its name) |
//! | 24 | 8 | `segment_len`: the sealed segment's length, its last record's end |
//! | 32 | 4 | `last_record_crc`: the CRC field of the segment's last record |
//! | 36 | 4 | record count N (at least 1) |
//! | 40 | 4 | stream count S (at least 1) |
//! | 44 | 4 N | each record's offset in the segment, in seq order: 0 first, rising |
//! | 44 + 4 N | ... | per stream, sorted by name: its entry |
//!
//! A stream's entry, from its start: u16 name length, the name (UTF-8),
//! then u64 `last_version` (the stream's version after its last record in
//! the segment), u32 record count R (at least 1), R times (u64
//! `first_version`, u32 ordinal: the record's place in the segment, seq
//! minus `first_seq`) in version order, u32 id count K, and K times (16
//! id bytes, u64 version) in id order. Every ordinal below N belongs to
//! exactly one stream's entry.

use std::collections::BTreeMap;
use std::fmt;

use super::batch::{EVENT_ID_BYTES, event_ids, inspect_batch};
use super::record::{HEADER_SIZE, Header, parse_record};
use super::{RECORD_BYTES_MIN, crc32c, field, put_field, u16_at, u32_at, u64_at};

/// The suffix of index files (their stem is their segment's).
pub const INDEX_FILE_SUFFIX: &str = ".idx";

/// The index file of the segment whose first record is `first_seq`.
pub fn index_file_name(first_seq: u64) -> String {
    super::file_names::file_name(first_seq, INDEX_FILE_SUFFIX)
}

/// The first seq of the segment an index file's name names, if `name` is
/// one (20 decimal digits and `.idx`).
pub fn parse_index_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(INDEX_FILE_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

const MAGIC: &[u8; 8] = b"DURLOGIX";
const FORMAT_VERSION: u32 = 1;

// The fixed fields, each right after the one before (the table above).
const MAGIC_AT: usize = 0;
const FORMAT_VERSION_AT: usize = MAGIC_AT + MAGIC.len();
const CRC_AT: usize = FORMAT_VERSION_AT + size_of::<u32>();
const BODY_AT: usize = CRC_AT + size_of::<u32>();
const FIRST_SEQ_AT: usize = BODY_AT;
const SEGMENT_LEN_AT: usize = FIRST_SEQ_AT + size_of::<u64>();
const LAST_RECORD_CRC_AT: usize = SEGMENT_LEN_AT + size_of::<u64>();
const RECORD_COUNT_AT: usize = LAST_RECORD_CRC_AT + size_of::<u32>();
const STREAM_COUNT_AT: usize = RECORD_COUNT_AT + size_of::<u32>();
const OFFSETS_AT: usize = STREAM_COUNT_AT + size_of::<u32>();
const _: () = assert!(CRC_AT == 12 && FIRST_SEQ_AT == 16 && SEGMENT_LEN_AT == 24);
const _: () = assert!(LAST_RECORD_CRC_AT == 32 && RECORD_COUNT_AT == 36);
const _: () = assert!(STREAM_COUNT_AT == 40 && OFFSETS_AT == 44);

const OFFSET_BYTES: usize = size_of::<u32>();
/// A record of a stream's entry: `first_version`, ordinal.
const RECORD_ENTRY_BYTES: usize = size_of::<u64>() + size_of::<u32>();
/// An id of a stream's entry: the id, its version.
const ID_ENTRY_BYTES: usize = EVENT_ID_BYTES + size_of::<u64>();
const _: () = assert!(RECORD_ENTRY_BYTES == 12 && ID_ENTRY_BYTES == 24);
/// The smallest stream entry: an empty name, one record, no id.
const STREAM_ENTRY_BYTES_MIN: usize =
    size_of::<u16>() + size_of::<u64>() + 2 * size_of::<u32>() + RECORD_ENTRY_BYTES;
const _: () = assert!(STREAM_ENTRY_BYTES_MIN == 30);

/// One record of a stream in a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexedRecord {
    /// The version of the record's first event.
    pub first_version: u64,
    /// Its place in the segment: its seq minus the segment's first.
    pub ordinal: u32,
}

/// A stream's records in one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRecords {
    pub name: String,
    /// The stream's version after its last record in the segment.
    pub last_version: u64,
    /// In version order.
    pub records: Vec<IndexedRecord>,
    /// The ids its events in the segment carry, with their versions, in
    /// id order.
    pub ids: Vec<([u8; EVENT_ID_BYTES], u64)>,
}

/// What an index file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentIndex {
    pub first_seq: u64,
    pub segment_len: u64,
    pub last_record_crc: u32,
    /// Each record's offset in the segment, in seq order.
    pub offsets: Vec<u32>,
    /// Sorted by name.
    pub streams: Vec<StreamRecords>,
}

/// Why bytes are not an index file, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexFileError {
    /// The offset in the file where the fault was found.
    pub offset: usize,
    pub reason: String,
}

impl fmt::Display for IndexFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at offset {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for IndexFileError {}

fn fault<T>(offset: usize, reason: impl Into<String>) -> Result<T, IndexFileError> {
    Err(IndexFileError {
        offset,
        reason: reason.into(),
    })
}

impl SegmentIndex {
    /// The seq of the segment's last record.
    pub fn last_seq(&self) -> u64 {
        self.first_seq + self.offsets.len() as u64 - 1
    }

    /// The file's bytes.
    ///
    /// # Panics
    /// If the index breaks a rule [`SegmentIndex::decode`] checks: the
    /// engine writes only what it can read back.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0; OFFSETS_AT];
        put_field(&mut out, MAGIC_AT, *MAGIC);
        put_field(&mut out, FORMAT_VERSION_AT, FORMAT_VERSION.to_le_bytes());
        put_field(&mut out, FIRST_SEQ_AT, self.first_seq.to_le_bytes());
        put_field(&mut out, SEGMENT_LEN_AT, self.segment_len.to_le_bytes());
        put_field(
            &mut out,
            LAST_RECORD_CRC_AT,
            self.last_record_crc.to_le_bytes(),
        );
        let count = |len: usize| u32::try_from(len).expect("counts fit a u32");
        put_field(
            &mut out,
            RECORD_COUNT_AT,
            count(self.offsets.len()).to_le_bytes(),
        );
        put_field(
            &mut out,
            STREAM_COUNT_AT,
            count(self.streams.len()).to_le_bytes(),
        );
        for offset in &self.offsets {
            out.extend_from_slice(&offset.to_le_bytes());
        }
        for stream in &self.streams {
            let len = u16::try_from(stream.name.len()).expect("a stream name fits a u16 length");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(stream.name.as_bytes());
            out.extend_from_slice(&stream.last_version.to_le_bytes());
            out.extend_from_slice(&count(stream.records.len()).to_le_bytes());
            for record in &stream.records {
                out.extend_from_slice(&record.first_version.to_le_bytes());
                out.extend_from_slice(&record.ordinal.to_le_bytes());
            }
            out.extend_from_slice(&count(stream.ids.len()).to_le_bytes());
            for (id, version) in &stream.ids {
                out.extend_from_slice(id);
                out.extend_from_slice(&version.to_le_bytes());
            }
        }
        let crc = crc32c(&out[BODY_AT..]);
        put_field(&mut out, CRC_AT, crc.to_le_bytes());
        debug_assert_eq!(
            SegmentIndex::decode(&out).as_ref(),
            Ok(self),
            "an index file the engine writes reads back as itself"
        );
        out
    }

    /// The index in `bytes`, every rule of the module doc checked: an
    /// error naming the offset of the first fault, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<SegmentIndex, IndexFileError> {
        let Some(magic) = field::<8>(bytes, MAGIC_AT) else {
            return fault(
                0,
                format!("{} bytes: shorter than the fixed fields", bytes.len()),
            );
        };
        if &magic != MAGIC {
            return fault(MAGIC_AT, "not an index file (magic)");
        }
        let mut reader = Reader {
            bytes,
            at: FORMAT_VERSION_AT,
        };
        let version = reader.u32()?;
        if version != FORMAT_VERSION {
            return fault(
                FORMAT_VERSION_AT,
                format!("format version {version}, not 1"),
            );
        }
        let crc = reader.u32()?;
        let actual = crc32c(&bytes[BODY_AT.min(bytes.len())..]);
        if crc != actual {
            return fault(
                CRC_AT,
                format!("CRC {crc:#010x}, bytes give {actual:#010x}"),
            );
        }
        let first_seq = reader.u64()?;
        let segment_len = reader.u64()?;
        let last_record_crc = reader.u32()?;
        let record_count = reader.count(1, OFFSET_BYTES, "record")?;
        let stream_count = reader.count(1, STREAM_ENTRY_BYTES_MIN, "stream")?;
        if first_seq == 0 || first_seq.checked_add(record_count as u64 - 1).is_none() {
            return fault(
                FIRST_SEQ_AT,
                format!("first seq {first_seq} with {record_count} records"),
            );
        }
        let offsets = read_offsets(&mut reader, record_count, segment_len)?;
        let mut owned = vec![false; record_count];
        let mut streams: Vec<StreamRecords> = Vec::with_capacity(stream_count.min(1 << 16));
        for _ in 0..stream_count {
            let at = reader.at;
            let stream = read_stream(&mut reader, &mut owned)?;
            if let Some(before) = streams.last()
                && before.name >= stream.name
            {
                return fault(
                    at,
                    format!(
                        "stream {:?} after {:?}: not in name order",
                        stream.name, before.name
                    ),
                );
            }
            streams.push(stream);
        }
        if reader.at != bytes.len() {
            return fault(
                reader.at,
                format!("{} bytes after the last stream", bytes.len() - reader.at),
            );
        }
        if let Some(ordinal) = owned.iter().position(|&owned| !owned) {
            return fault(
                OFFSETS_AT + ordinal * OFFSET_BYTES,
                format!("record {ordinal} belongs to no stream"),
            );
        }
        Ok(SegmentIndex {
            first_seq,
            segment_len,
            last_record_crc,
            offsets,
            streams,
        })
    }
}

impl SegmentIndex {
    /// The index of a sealed segment from its bytes: `bytes` is the whole
    /// file, ending at its last record, whose first record is `first_seq`.
    /// What a tool checks an index file against, and the definition the
    /// engine's own index of a segment must agree with. Every record is
    /// checked as recovery checks it (CRC, seq, batch); the first fault is
    /// an error naming its offset in the segment.
    pub fn of_segment(first_seq: u64, bytes: &[u8]) -> Result<SegmentIndex, IndexFileError> {
        let mut offsets = Vec::new();
        let mut streams: BTreeMap<&str, StreamRecords> = BTreeMap::new();
        let mut at = 0usize;
        let mut last_record_crc = 0;
        while at < bytes.len() {
            let Ok(offset) = u32::try_from(at) else {
                return fault(at, "a record starts past 4 GiB");
            };
            let record = match parse_record(&bytes[at..]) {
                Ok(record) => record,
                Err(error) => return fault(at, format!("record: {error}")),
            };
            let expected = first_seq + offsets.len() as u64;
            if record.seq != expected {
                return fault(at, format!("seq {} where {expected} is next", record.seq));
            }
            let batch = match inspect_batch(record.payload) {
                Ok(batch) => batch,
                Err(error) => return fault(at, format!("batch: {error}")),
            };
            let ids = event_ids(record.payload).map_err(|error| IndexFileError {
                offset: at,
                reason: format!("event ids: {error}"),
            })?;
            let ordinal = u32::try_from(offsets.len()).expect("fewer records than bytes");
            let stream = streams
                .entry(batch.stream)
                .or_insert_with(|| StreamRecords {
                    name: batch.stream.to_owned(),
                    last_version: batch.first_version - 1,
                    records: Vec::new(),
                    ids: Vec::new(),
                });
            if batch.first_version != stream.last_version + 1 {
                return fault(
                    at,
                    format!(
                        "{:?} at version {} after {}",
                        batch.stream, batch.first_version, stream.last_version
                    ),
                );
            }
            stream.last_version += u64::from(batch.count);
            stream.records.push(IndexedRecord {
                first_version: batch.first_version,
                ordinal,
            });
            stream
                .ids
                .extend(ids.into_iter().map(|(version, id)| (id, version)));
            let header: &[u8; HEADER_SIZE] = bytes[at..]
                .first_chunk()
                .expect("a record parsed here has its header");
            last_record_crc = Header::from_bytes(header).crc;
            offsets.push(offset);
            at += record.len;
        }
        if offsets.is_empty() {
            return fault(0, "a sealed segment holds a record at least");
        }
        let mut streams: Vec<StreamRecords> = streams.into_values().collect();
        for stream in &mut streams {
            stream.ids.sort_unstable();
            if let Some(pair) = stream.ids.windows(2).find(|pair| pair[0].0 == pair[1].0) {
                return fault(
                    0,
                    format!(
                        "{:?}: an event id at versions {} and {}",
                        stream.name, pair[0].1, pair[1].1
                    ),
                );
            }
        }
        Ok(SegmentIndex {
            first_seq,
            segment_len: at as u64,
            last_record_crc,
            offsets,
            streams,
        })
    }
}

fn read_offsets(
    reader: &mut Reader<'_>,
    count: usize,
    segment_len: u64,
) -> Result<Vec<u32>, IndexFileError> {
    let mut offsets = Vec::with_capacity(count);
    for ordinal in 0..count {
        let at = reader.at;
        let offset = reader.u32()?;
        let rising = match offsets.last() {
            None => offset == 0,
            Some(&before) => u64::from(offset) >= u64::from(before) + RECORD_BYTES_MIN,
        };
        if !rising {
            return fault(
                at,
                format!(
                    "record {ordinal} at {offset}: offsets start at 0 and rise by a record at least"
                ),
            );
        }
        offsets.push(offset);
    }
    let last = u64::from(*offsets.last().expect("count >= 1"));
    if segment_len < last + RECORD_BYTES_MIN {
        return fault(
            SEGMENT_LEN_AT,
            format!("segment length {segment_len} ends before the last record at {last}"),
        );
    }
    Ok(offsets)
}

fn read_stream(
    reader: &mut Reader<'_>,
    owned: &mut [bool],
) -> Result<StreamRecords, IndexFileError> {
    let start = reader.at;
    let name_len = usize::from(reader.u16()?);
    let name_bytes = reader.take(name_len)?;
    let Ok(name) = std::str::from_utf8(name_bytes) else {
        return fault(start, "stream name not UTF-8");
    };
    let name = name.to_owned();
    let last_version = reader.u64()?;
    let record_count = reader.count(1, RECORD_ENTRY_BYTES, "stream record")?;
    let mut records: Vec<IndexedRecord> = Vec::with_capacity(record_count);
    for _ in 0..record_count {
        let at = reader.at;
        let record = IndexedRecord {
            first_version: reader.u64()?,
            ordinal: reader.u32()?,
        };
        let Some(slot) = owned.get_mut(record.ordinal as usize) else {
            return fault(at, format!("ordinal {} past the records", record.ordinal));
        };
        if *slot {
            return fault(at, format!("record {} in two entries", record.ordinal));
        }
        if record.first_version == 0 {
            return fault(at, format!("{name:?}: version 0"));
        }
        if let Some(before) = records.last()
            && (before.first_version >= record.first_version || before.ordinal >= record.ordinal)
        {
            return fault(at, format!("{name:?}: versions and ordinals must rise"));
        }
        *slot = true;
        records.push(record);
    }
    let last_first = records.last().expect("count >= 1").first_version;
    if last_version < last_first {
        return fault(
            start,
            format!("{name:?}: last version {last_version} before its last record's {last_first}"),
        );
    }
    let id_count = reader.count(0, ID_ENTRY_BYTES, "id")?;
    let mut ids: Vec<([u8; EVENT_ID_BYTES], u64)> = Vec::with_capacity(id_count);
    for _ in 0..id_count {
        let at = reader.at;
        let id: [u8; EVENT_ID_BYTES] = reader
            .take(EVENT_ID_BYTES)?
            .try_into()
            .expect("taken whole");
        let version = reader.u64()?;
        if ids.last().is_some_and(|(before, _)| before >= &id) {
            return fault(at, format!("{name:?}: ids not in order"));
        }
        if !(records[0].first_version..=last_version).contains(&version) {
            return fault(
                at,
                format!("{name:?}: id of version {version}, outside the segment's"),
            );
        }
        ids.push((id, version));
    }
    Ok(StreamRecords {
        name,
        last_version,
        records,
        ids,
    })
}

/// Reads fields in turn; past the end is a fault at the offset reached.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn short<T>(&self, what: &str) -> Result<T, IndexFileError> {
        fault(
            self.at,
            format!("{what} past the end ({} bytes)", self.bytes.len()),
        )
    }

    fn u16(&mut self) -> Result<u16, IndexFileError> {
        let Some(value) = u16_at(self.bytes, self.at) else {
            return self.short("u16");
        };
        self.at += 2;
        Ok(value)
    }

    fn u32(&mut self) -> Result<u32, IndexFileError> {
        let Some(value) = u32_at(self.bytes, self.at) else {
            return self.short("u32");
        };
        self.at += 4;
        Ok(value)
    }

    fn u64(&mut self) -> Result<u64, IndexFileError> {
        let Some(value) = u64_at(self.bytes, self.at) else {
            return self.short("u64");
        };
        self.at += 8;
        Ok(value)
    }

    fn take(&mut self, len: usize) -> Result<&[u8], IndexFileError> {
        let rest = &self.bytes[self.at.min(self.bytes.len())..];
        let Some(taken) = rest.get(..len) else {
            return self.short("bytes");
        };
        self.at += len;
        Ok(taken)
    }

    /// A u32 count of items of `item_bytes` each, at least `min`, that
    /// the bytes left can hold (checked against what remains, so a huge
    /// count allocates nothing).
    fn count(
        &mut self,
        min: usize,
        item_bytes: usize,
        what: &str,
    ) -> Result<usize, IndexFileError> {
        let at = self.at;
        let count = self.u32()? as usize;
        let left = self.bytes.len() - self.at.min(self.bytes.len());
        if count < min || count > left / item_bytes {
            return fault(at, format!("{count} {what}s where {} bytes are left", left));
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tests::row;

    #[test]
    fn the_layout_tables_agree_with_the_constants() {
        let rows = [
            row(MAGIC_AT, MAGIC.len(), "magic `DURLOGIX` |"),
            row(FORMAT_VERSION_AT, size_of::<u32>(), "format version, 1 |"),
            row(
                CRC_AT,
                size_of::<u32>(),
                "CRC-32C of every byte after this field |",
            ),
            row(FIRST_SEQ_AT, size_of::<u64>(), "`first_seq`:"),
            row(SEGMENT_LEN_AT, size_of::<u64>(), "`segment_len`:"),
            row(LAST_RECORD_CRC_AT, size_of::<u32>(), "`last_record_crc`:"),
            row(RECORD_COUNT_AT, size_of::<u32>(), "record count N"),
            row(STREAM_COUNT_AT, size_of::<u32>(), "stream count S"),
            format!("| {OFFSETS_AT} | {OFFSET_BYTES} N | each record's offset"),
            format!(
                "| {OFFSETS_AT} + {OFFSET_BYTES} N | ... | per stream, sorted by name: its entry |"
            ),
        ];
        crate::format::tests::documented(include_str!("segment_index.rs"), &rows);
    }
}
