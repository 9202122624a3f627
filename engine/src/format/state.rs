//! The log's state file, `durlog.state`: what the segments alone cannot
//! say once a log has been purged or is being truncated. It is replaced
//! whole and atomically (written under a temporary name, synced, renamed
//! over the old one, the directory synced), and checksummed, so a crash
//! leaves either the old file or the new one, never a mix. FORMAT.md
//! ("Retention and truncation") has the prose and the worked example.
//! Integers little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `DURLOGST` |
//! | 8 | 4 | format version, 1 |
//! | 12 | 4 | CRC-32C of every byte after this field |
//! | 16 | 8 | `first_seq`: the first record kept; every record before it was purged |
//! | 24 | 8 | `truncate_after`: a truncation under way keeps seqs up to this one; `u64::MAX` when none is |
//! | 32 | 4 | stream count |
//! | 36 | ... | per stream, sorted by name: u16 name length, the name (UTF-8), u64 version before `first_seq` |
//!
//! A stream's entry, from its start: the name's length at 0, the name at
//! 2, and the version right after the name.

use std::collections::BTreeMap;
use std::fmt;

use super::{crc32c, field, put_field, u16_at, u32_at, u64_at};

/// The file a log keeps its state in, once it has one.
pub const STATE_FILE_NAME: &str = "durlog.state";

/// The name a new state file is written under before it is renamed over
/// [`STATE_FILE_NAME`].
pub const STATE_TEMP_NAME: &str = "durlog.state.new";

const MAGIC: &[u8; 8] = b"DURLOGST";
const FORMAT_VERSION: u32 = 1;
/// `truncate_after` when no truncation is under way.
const NO_TRUNCATION: u64 = u64::MAX;

// The fixed fields, each right after the one before (the table in the
// module doc). The CRC covers the body: every byte from `BODY_AT` to the
// end of the file.
const MAGIC_AT: usize = 0;
const FORMAT_VERSION_AT: usize = MAGIC_AT + MAGIC.len();
const CRC_AT: usize = FORMAT_VERSION_AT + size_of::<u32>();
const BODY_AT: usize = CRC_AT + size_of::<u32>();
const FIRST_SEQ_AT: usize = BODY_AT;
const TRUNCATE_AFTER_AT: usize = FIRST_SEQ_AT + size_of::<u64>();
const STREAM_COUNT_AT: usize = TRUNCATE_AFTER_AT + size_of::<u64>();
const STREAMS_AT: usize = STREAM_COUNT_AT + size_of::<u32>();
/// Bytes of the fixed fields: the smallest state file (no stream).
const FIXED_BYTES: usize = STREAMS_AT;
const _: () = assert!(FORMAT_VERSION_AT == 8 && CRC_AT == 12 && BODY_AT == 16);
const _: () = assert!(TRUNCATE_AFTER_AT == 24 && STREAM_COUNT_AT == 32);
const _: () = assert!(FIXED_BYTES == 36);

// A stream's entry, from its start; its version follows the name.
const NAME_LEN_AT: usize = 0;
const NAME_AT: usize = NAME_LEN_AT + size_of::<u16>();
const VERSION_AFTER_NAME: usize = 0;
/// Bytes of an entry besides its name: the name's length and the version.
const ENTRY_FIXED_BYTES: usize = NAME_AT + VERSION_AFTER_NAME + size_of::<u64>();
const _: () = assert!(NAME_AT == 2 && ENTRY_FIXED_BYTES == 10);

/// What the state file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogState {
    /// The seq of the first record kept (1 for a log never purged).
    pub first_seq: u64,
    /// A truncation under way: every record after this seq goes.
    pub truncate_after: Option<u64>,
    /// Each stream's version at `first_seq - 1`: the events a purge
    /// removed still count, so versions continue and never repeat.
    pub purged_versions: BTreeMap<String, u64>,
}

/// Why the bytes of a state file are not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateError(String);

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StateError {}

/// The fixed fields of a state file, as read (nothing checked yet).
struct Fixed<'a> {
    magic: [u8; MAGIC.len()],
    format_version: u32,
    crc: u32,
    /// Every byte after the CRC field, which it covers.
    body: &'a [u8],
    first_seq: u64,
    truncate_after: u64,
    stream_count: u32,
}

impl Fixed<'_> {
    /// The fixed fields of `bytes`; `None` if they are shorter than
    /// [`FIXED_BYTES`] (the last fixed field ends there).
    fn read(bytes: &[u8]) -> Option<Fixed<'_>> {
        Some(Fixed {
            magic: field(bytes, MAGIC_AT)?,
            format_version: u32_at(bytes, FORMAT_VERSION_AT)?,
            crc: u32_at(bytes, CRC_AT)?,
            body: bytes.get(BODY_AT..)?,
            first_seq: u64_at(bytes, FIRST_SEQ_AT)?,
            truncate_after: u64_at(bytes, TRUNCATE_AFTER_AT)?,
            stream_count: u32_at(bytes, STREAM_COUNT_AT)?,
        })
    }
}

impl LogState {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let entries: usize = self
            .purged_versions
            .keys()
            .map(|name| ENTRY_FIXED_BYTES + name.len())
            .sum();
        let mut out = Vec::with_capacity(FIXED_BYTES + entries);
        out.resize(FIXED_BYTES, 0);
        put_field(&mut out, MAGIC_AT, *MAGIC);
        put_field(&mut out, FORMAT_VERSION_AT, FORMAT_VERSION.to_le_bytes());
        put_field(&mut out, FIRST_SEQ_AT, self.first_seq.to_le_bytes());
        let truncate_after = self.truncate_after.unwrap_or(NO_TRUNCATION);
        put_field(&mut out, TRUNCATE_AFTER_AT, truncate_after.to_le_bytes());
        let count = u32::try_from(self.purged_versions.len()).expect("fewer than 2^32 streams");
        put_field(&mut out, STREAM_COUNT_AT, count.to_le_bytes());
        for (name, version) in &self.purged_versions {
            let len = u16::try_from(name.len()).expect("a stream name fits a u16 length");
            // Appended in the entry's order: length, name, version.
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&version.to_le_bytes());
        }
        let crc = crc32c(&out[BODY_AT..]);
        put_field(&mut out, CRC_AT, crc.to_le_bytes());
        // On in release builds: a purge or a truncation is decided by these
        // bytes, and they are written once per change, so reading them back
        // before they go to the disk costs nothing that shows.
        assert_eq!(out.len(), FIXED_BYTES + entries);
        assert_eq!(
            LogState::decode(&out).as_ref(),
            Ok(self),
            "the state reads back"
        );
        out
    }

    /// Reads a state file's bytes; never panics, whatever they are.
    pub fn decode(bytes: &[u8]) -> Result<LogState, StateError> {
        let fail = |why: &str| Err(StateError(why.to_owned()));
        let Some(fixed) = Fixed::read(bytes) else {
            return fail("shorter than a state file's fixed fields");
        };
        if fixed.magic != *MAGIC {
            return fail("not a durlog state file (wrong magic)");
        }
        if fixed.format_version != FORMAT_VERSION {
            return fail("an unknown state file version");
        }
        if crc32c(fixed.body) != fixed.crc {
            return fail("checksum mismatch");
        }
        let first_seq = fixed.first_seq;
        let truncate_after = Some(fixed.truncate_after).filter(|&seq| seq != NO_TRUNCATION);
        if first_seq == 0 || truncate_after.is_some_and(|seq| seq + 1 < first_seq) {
            return fail("its seqs contradict each other");
        }
        let mut entry_at = STREAMS_AT;
        let mut purged_versions = BTreeMap::new();
        for _ in 0..fixed.stream_count {
            let Some((name, version, next_at)) = read_entry(bytes, entry_at) else {
                return fail("a stream entry runs past the end");
            };
            let Ok(name) = std::str::from_utf8(name) else {
                return fail("a stream name is not UTF-8");
            };
            if purged_versions.insert(name.to_owned(), version).is_some() || version == 0 {
                return fail("a stream is listed twice, or at version 0");
            }
            entry_at = next_at;
        }
        if entry_at != bytes.len() {
            return fail("bytes follow the last stream entry");
        }
        Ok(LogState {
            first_seq,
            truncate_after,
            purged_versions,
        })
    }
}

/// The stream entry at `entry_at`: its name's bytes, its version and where
/// the next entry starts; `None` if any of it runs past the end.
fn read_entry(bytes: &[u8], entry_at: usize) -> Option<(&[u8], u64, usize)> {
    let name_len = usize::from(u16_at(bytes, entry_at + NAME_LEN_AT)?);
    let entry = bytes.get(entry_at..)?.get(..ENTRY_FIXED_BYTES + name_len)?;
    let name = entry.get(NAME_AT..NAME_AT + name_len)?;
    let version = u64_at(entry, NAME_AT + name_len + VERSION_AFTER_NAME)?;
    Some((name, version, entry_at + entry.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tests::row;

    /// FORMAT.md's worked example, byte for byte.
    #[test]
    fn the_worked_example() {
        let state = LogState {
            first_seq: 3,
            truncate_after: None,
            purged_versions: [("s".to_owned(), 2)].into(),
        };
        let hex: String = state.encode().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "4455524c4f475354010000002f7a5c500300000000000000ffffffffffffffff01000000010073\
             0200000000000000"
        );
    }

    #[test]
    fn a_state_reads_back_and_any_damage_is_refused() {
        let state = LogState {
            first_seq: 42,
            truncate_after: Some(100),
            purged_versions: [("orders".to_owned(), 7), ("b".to_owned(), 1)].into(),
        };
        let bytes = state.encode();
        assert_eq!(LogState::decode(&bytes), Ok(state.clone()));
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(LogState::decode(&damaged).is_err(), "bit {bit}");
        }
        for cut in 0..bytes.len() {
            assert!(LogState::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let plain = LogState {
            first_seq: 1,
            ..LogState::default()
        };
        assert_eq!(LogState::decode(&plain.encode()), Ok(plain));
    }

    #[test]
    fn the_layout_tables_agree_with_the_constants() {
        let rows = [
            row(MAGIC_AT, MAGIC.len(), "magic `DURLOGST` |"),
            row(FORMAT_VERSION_AT, size_of::<u32>(), "format version, 1 |"),
            row(
                CRC_AT,
                size_of::<u32>(),
                "CRC-32C of every byte after this field |",
            ),
            row(FIRST_SEQ_AT, size_of::<u64>(), "`first_seq`:"),
            row(TRUNCATE_AFTER_AT, size_of::<u64>(), "`truncate_after`:"),
            row(STREAM_COUNT_AT, size_of::<u32>(), "stream count |"),
            format!(
                "| {STREAMS_AT} | ... | per stream, sorted by name: u16 name length, the name (UTF-8), u64 version before `first_seq` |"
            ),
        ];
        crate::format::tests::documented(include_str!("state.rs"), &rows);
    }
}
