//! The log's two tables beside its records, each a file replaced whole and
//! atomically like the state file (written under a temporary name, synced,
//! renamed over the old one, the directory synced) and checksummed:
//!
//! - `durlog.streams`: each stream's metadata (a maximum count, a maximum
//!   age, a truncate-before version) and deletion (soft, at a version; or
//!   hard), for the streams that have any;
//! - `durlog.consumers`: each named consumer's position, the last seq it
//!   recorded as handled.
//!
//! FORMAT.md ("Stream metadata and consumer positions") has the prose and
//! a worked example. Integers little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic: `DURLOGSM` (streams) or `DURLOGCP` (consumers) |
//! | 8 | 4 | format version, 1 |
//! | 12 | 4 | CRC-32C of every byte after this field |
//! | 16 | 4 | entry count |
//! | 20 | ... | entries, sorted by name, no name twice: u16 name length, the name (UTF-8), the value |
//!
//! A stream's value (33 bytes): u8 flags (bit 0 a maximum count, bit 1 a
//! maximum age, bit 2 a truncate-before version, bit 3 soft-deleted, bit 4
//! hard-deleted; no other bit, not both deletions), then u64 maximum count,
//! u64 maximum age in nanoseconds, u64 truncate-before version and u64 the
//! version at a soft deletion, each 0 when its flag is clear. A
//! consumer's value: u64 the seq it recorded.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::{crc32c, field, put_field, u16_at, u32_at, u64_at};

/// The table of stream metadata and deletions, once a log has one.
pub const STREAMS_FILE_NAME: &str = "durlog.streams";
/// The name a new one is written under before its rename.
pub const STREAMS_TEMP_NAME: &str = "durlog.streams.new";
/// The table of consumer positions, once a log has one.
pub const CONSUMERS_FILE_NAME: &str = "durlog.consumers";
/// The name a new one is written under before its rename.
pub const CONSUMERS_TEMP_NAME: &str = "durlog.consumers.new";

const STREAMS_MAGIC: &[u8; 8] = b"DURLOGSM";
const CONSUMERS_MAGIC: &[u8; 8] = b"DURLOGCP";
const FORMAT_VERSION: u32 = 1;

// The fixed fields (the table in the module doc). The CRC covers every
// byte from `BODY_AT` to the end.
const MAGIC_AT: usize = 0;
const FORMAT_VERSION_AT: usize = MAGIC_AT + 8;
const CRC_AT: usize = FORMAT_VERSION_AT + size_of::<u32>();
const BODY_AT: usize = CRC_AT + size_of::<u32>();
const COUNT_AT: usize = BODY_AT;
const ENTRIES_AT: usize = COUNT_AT + size_of::<u32>();
const _: () = assert!(FORMAT_VERSION_AT == 8 && CRC_AT == 12 && COUNT_AT == 16);
const _: () = assert!(ENTRIES_AT == 20);

// An entry, from its start: the name's length, the name, then the value.
const NAME_LEN_AT: usize = 0;
const NAME_AT: usize = NAME_LEN_AT + size_of::<u16>();

// A stream's value, from its start.
const FLAGS_AT: usize = 0;
const MAX_COUNT_AT: usize = FLAGS_AT + 1;
const MAX_AGE_AT: usize = MAX_COUNT_AT + size_of::<u64>();
const TRUNCATE_BEFORE_AT: usize = MAX_AGE_AT + size_of::<u64>();
const SOFT_DELETED_AT: usize = TRUNCATE_BEFORE_AT + size_of::<u64>();
const STREAM_VALUE_BYTES: usize = SOFT_DELETED_AT + size_of::<u64>();
const _: () = assert!(STREAM_VALUE_BYTES == 33);
const CONSUMER_VALUE_BYTES: usize = size_of::<u64>();

const HAS_MAX_COUNT: u8 = 1 << 0;
const HAS_MAX_AGE: u8 = 1 << 1;
const HAS_TRUNCATE_BEFORE: u8 = 1 << 2;
const SOFT_DELETED: u8 = 1 << 3;
const HARD_DELETED: u8 = 1 << 4;
const KNOWN_FLAGS: u8 =
    HAS_MAX_COUNT | HAS_MAX_AGE | HAS_TRUNCATE_BEFORE | SOFT_DELETED | HARD_DELETED;

/// What a stream's reads honour (KurrentDB's `$maxCount`, `$maxAge` and
/// `$tb`). `#[non_exhaustive]`: build it from the default and set its
/// fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamMetadata {
    /// Only the newest `max_count` events are read.
    pub max_count: Option<u64>,
    /// Events older than the log's clock minus `max_age` are not read.
    pub max_age: Option<Duration>,
    /// Versions below this are not read.
    pub truncate_before: Option<u64>,
}

/// How a stream was deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// Soft, when the stream was at this version: it reads as empty until
    /// a later append, whose versions continue.
    Soft { at_version: u64 },
    /// Hard: it reads as empty and refuses every later append.
    Hard,
}

/// One stream's entry in `durlog.streams`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamEntry {
    pub metadata: StreamMetadata,
    pub deleted: Option<Deleted>,
}

/// Both tables, as a log holds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tables {
    /// The streams with metadata or a deletion.
    pub streams: BTreeMap<String, StreamEntry>,
    /// Each named consumer's position.
    pub consumers: BTreeMap<String, u64>,
}

/// Why the bytes of a table are not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableError(String);

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TableError {}

/// The bytes of `durlog.streams` for `entries`.
pub fn encode_streams(entries: &BTreeMap<String, StreamEntry>) -> Vec<u8> {
    let out = encode(STREAMS_MAGIC, entries, |out, entry| {
        let mut value = [0u8; STREAM_VALUE_BYTES];
        let metadata = &entry.metadata;
        let mut flags = 0;
        let mut put = |at: usize, flag: u8, number: Option<u64>| {
            if let Some(number) = number {
                flags |= flag;
                value[at..at + 8].copy_from_slice(&number.to_le_bytes());
            }
        };
        put(MAX_COUNT_AT, HAS_MAX_COUNT, metadata.max_count);
        let age = metadata
            .max_age
            .map(|age| u64::try_from(age.as_nanos()).unwrap_or(u64::MAX));
        put(MAX_AGE_AT, HAS_MAX_AGE, age);
        put(
            TRUNCATE_BEFORE_AT,
            HAS_TRUNCATE_BEFORE,
            metadata.truncate_before,
        );
        match entry.deleted {
            Some(Deleted::Soft { at_version }) => {
                put(SOFT_DELETED_AT, SOFT_DELETED, Some(at_version))
            }
            Some(Deleted::Hard) => flags |= HARD_DELETED,
            None => {}
        }
        value[FLAGS_AT] = flags;
        out.extend_from_slice(&value);
    });
    assert_eq!(
        decode_streams(&out).as_ref(),
        Ok(entries),
        "the table reads back"
    );
    out
}

/// Reads `durlog.streams`; never panics, whatever the bytes.
pub fn decode_streams(bytes: &[u8]) -> Result<BTreeMap<String, StreamEntry>, TableError> {
    decode(bytes, STREAMS_MAGIC, STREAM_VALUE_BYTES, |value| {
        let flags = value[FLAGS_AT];
        if flags & !KNOWN_FLAGS != 0
            || flags & (SOFT_DELETED | HARD_DELETED) == SOFT_DELETED | HARD_DELETED
        {
            return Err("a stream entry's flags are not a state it can be in");
        }
        let number = |at: usize, flag: u8| {
            let number = u64_at(value, at).expect("a whole value");
            match flags & flag {
                0 if number != 0 => Err("a stream entry holds a number its flags say it has not"),
                0 => Ok(None),
                _ => Ok(Some(number)),
            }
        };
        let metadata = StreamMetadata {
            max_count: number(MAX_COUNT_AT, HAS_MAX_COUNT)?,
            max_age: number(MAX_AGE_AT, HAS_MAX_AGE)?.map(Duration::from_nanos),
            truncate_before: number(TRUNCATE_BEFORE_AT, HAS_TRUNCATE_BEFORE)?,
        };
        let deleted = match (number(SOFT_DELETED_AT, SOFT_DELETED)?, flags & HARD_DELETED) {
            (Some(at_version), _) => Some(Deleted::Soft { at_version }),
            (None, 0) => None,
            (None, _) => Some(Deleted::Hard),
        };
        let entry = StreamEntry { metadata, deleted };
        if entry == StreamEntry::default() {
            return Err("a stream entry with nothing in it");
        }
        Ok(entry)
    })
}

/// The bytes of `durlog.consumers` for `positions`.
pub fn encode_consumers(positions: &BTreeMap<String, u64>) -> Vec<u8> {
    let out = encode(CONSUMERS_MAGIC, positions, |out, seq| {
        out.extend_from_slice(&seq.to_le_bytes());
    });
    assert_eq!(
        decode_consumers(&out).as_ref(),
        Ok(positions),
        "the table reads back"
    );
    out
}

/// Reads `durlog.consumers`; never panics, whatever the bytes.
pub fn decode_consumers(bytes: &[u8]) -> Result<BTreeMap<String, u64>, TableError> {
    decode(bytes, CONSUMERS_MAGIC, CONSUMER_VALUE_BYTES, |value| {
        Ok(u64_at(value, 0).expect("a whole value"))
    })
}

fn encode<V>(
    magic: &[u8; 8],
    entries: &BTreeMap<String, V>,
    put_value: impl Fn(&mut Vec<u8>, &V),
) -> Vec<u8> {
    let mut out = vec![0; ENTRIES_AT];
    put_field(&mut out, MAGIC_AT, *magic);
    put_field(&mut out, FORMAT_VERSION_AT, FORMAT_VERSION.to_le_bytes());
    let count = u32::try_from(entries.len()).expect("fewer than 2^32 entries");
    put_field(&mut out, COUNT_AT, count.to_le_bytes());
    for (name, value) in entries {
        let len = u16::try_from(name.len()).expect("a name fits a u16 length");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        put_value(&mut out, value);
    }
    let crc = crc32c(&out[BODY_AT..]);
    put_field(&mut out, CRC_AT, crc.to_le_bytes());
    out
}

fn decode<V>(
    bytes: &[u8],
    magic: &[u8; 8],
    value_bytes: usize,
    value: impl Fn(&[u8]) -> Result<V, &'static str>,
) -> Result<BTreeMap<String, V>, TableError> {
    let fail = |why: &str| Err(TableError(why.to_owned()));
    let (Some(found), Some(version), Some(crc), Some(count)) = (
        field::<8>(bytes, MAGIC_AT),
        u32_at(bytes, FORMAT_VERSION_AT),
        u32_at(bytes, CRC_AT),
        u32_at(bytes, COUNT_AT),
    ) else {
        return fail("shorter than a table's fixed fields");
    };
    if found != *magic {
        return fail("not this table (wrong magic)");
    }
    if version != FORMAT_VERSION {
        return fail("an unknown table version");
    }
    if crc32c(&bytes[BODY_AT..]) != crc {
        return fail("checksum mismatch");
    }
    let mut entries = BTreeMap::new();
    let mut at = ENTRIES_AT;
    for _ in 0..count {
        let Some(len) = u16_at(bytes, at + NAME_LEN_AT) else {
            return fail("an entry runs past the end");
        };
        let name_at = at + NAME_AT;
        let value_at = name_at + usize::from(len);
        let (Some(name), Some(raw)) = (
            bytes.get(name_at..value_at),
            bytes.get(value_at..value_at + value_bytes),
        ) else {
            return fail("an entry runs past the end");
        };
        let Ok(name) = std::str::from_utf8(name) else {
            return fail("a name is not UTF-8");
        };
        if entries
            .last_key_value()
            .is_some_and(|(last, _): (&String, _)| last.as_str() >= name)
        {
            return fail("the names are not sorted, or one is there twice");
        }
        match value(raw) {
            Ok(value) => entries.insert(name.to_owned(), value),
            Err(why) => return fail(why),
        };
        at = value_at + value_bytes;
    }
    if at != bytes.len() {
        return fail("bytes follow the last entry");
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams() -> BTreeMap<String, StreamEntry> {
        let metadata = StreamMetadata {
            max_count: Some(100),
            max_age: Some(Duration::from_secs(3600)),
            truncate_before: None,
        };
        let tb = StreamMetadata {
            truncate_before: Some(40),
            ..StreamMetadata::default()
        };
        [
            (
                "a".to_owned(),
                StreamEntry {
                    metadata,
                    deleted: None,
                },
            ),
            (
                "b".to_owned(),
                StreamEntry {
                    metadata: tb,
                    deleted: Some(Deleted::Soft { at_version: 7 }),
                },
            ),
            (
                "c".to_owned(),
                StreamEntry {
                    metadata: StreamMetadata::default(),
                    deleted: Some(Deleted::Hard),
                },
            ),
        ]
        .into()
    }

    /// Every flipped bit and every cut is refused, never read as another
    /// table.
    #[test]
    fn tables_read_back_and_any_damage_is_refused() {
        let positions: BTreeMap<String, u64> =
            [("projector".to_owned(), 42), ("mailer".to_owned(), 7)].into();
        for bytes in [encode_streams(&streams()), encode_consumers(&positions)] {
            for bit in 0..bytes.len() * 8 {
                let mut damaged = bytes.clone();
                damaged[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    decode_streams(&damaged).is_err() && decode_consumers(&damaged).is_err(),
                    "bit {bit}"
                );
            }
            for cut in 0..bytes.len() {
                assert!(
                    decode_streams(&bytes[..cut]).is_err()
                        && decode_consumers(&bytes[..cut]).is_err(),
                    "cut {cut}"
                );
            }
        }
        assert_eq!(decode_streams(&encode_streams(&streams())), Ok(streams()));
        assert_eq!(
            decode_consumers(&encode_consumers(&positions)),
            Ok(positions)
        );
        assert!(
            decode_consumers(&encode_streams(&streams())).is_err(),
            "one table is not the other"
        );
    }

    /// FORMAT.md's worked example, byte for byte: consumer `p` at seq 3.
    #[test]
    fn the_worked_example() {
        let hex: String = encode_consumers(&[("p".to_owned(), 3)].into())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, EXAMPLE);
    }

    // Magic, version 1, the CRC (checked against an independent CRC-32C in
    // FORMAT.md), 1 entry: name length 1, "p", seq 3.
    const EXAMPLE: &str = "4455524c4f4743500100000055d46b36010000000100700300000000000000";
}
