//! The log's state file, `durlog.state`: what the segments alone cannot
//! say once a log has been purged or is being truncated. It is replaced
//! whole and atomically (written under a temporary name, synced, renamed
//! over the old one, the directory synced), and checksummed, so a crash
//! leaves either the old file or the new one, never a mix (FORMAT.md,
//! "Retention and truncation").
//!
//! ```text
//! offset size  field
//! 0      8     magic "DURLOGST"
//! 8      4     format version (1)
//! 12     4     CRC-32C of every byte after this field
//! 16     8     first_seq: the first record kept; every record before it was purged
//! 24     8     truncate_after: records after this seq are being removed (u64::MAX: none)
//! 32     4     stream count
//! 36     ...   per stream: u16 name length, name (UTF-8), u64 version before first_seq
//! ```

use std::collections::BTreeMap;
use std::fmt;

use super::crc32c;

/// The file a log keeps its state in, once it has one.
pub const STATE_FILE_NAME: &str = "durlog.state";

/// The name a new state file is written under before it is renamed over
/// [`STATE_FILE_NAME`].
pub const STATE_TEMP_NAME: &str = "durlog.state.new";

const MAGIC: &[u8; 8] = b"DURLOGST";
const FORMAT_VERSION: u32 = 1;
const FIXED_BYTES: usize = 36;
const NO_TRUNCATION: u64 = u64::MAX;

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

impl LogState {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&self.first_seq.to_le_bytes());
        let truncate_after = self.truncate_after.unwrap_or(NO_TRUNCATION);
        body.extend_from_slice(&truncate_after.to_le_bytes());
        let count = u32::try_from(self.purged_versions.len()).expect("fewer than 2^32 streams");
        body.extend_from_slice(&count.to_le_bytes());
        for (name, version) in &self.purged_versions {
            let len = u16::try_from(name.len()).expect("a stream name fits a u16 length");
            body.extend_from_slice(&len.to_le_bytes());
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(&version.to_le_bytes());
        }
        let mut out = Vec::with_capacity(16 + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
        debug_assert_eq!(
            LogState::decode(&out).as_ref(),
            Ok(self),
            "the state reads back"
        );
        out
    }

    /// Reads a state file's bytes; never panics, whatever they are.
    pub fn decode(bytes: &[u8]) -> Result<LogState, StateError> {
        let fail = |why: &str| Err(StateError(why.to_owned()));
        if bytes.len() < FIXED_BYTES {
            return fail("shorter than a state file's fixed fields");
        }
        if &bytes[..8] != MAGIC {
            return fail("not a durlog state file (wrong magic)");
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return fail("an unknown state file version");
        }
        let crc = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
        let body = &bytes[16..];
        if crc32c(body) != crc {
            return fail("checksum mismatch");
        }
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let first_seq = u64_at(0);
        let truncate_after = Some(u64_at(8)).filter(|&seq| seq != NO_TRUNCATION);
        if first_seq == 0 || truncate_after.is_some_and(|seq| seq + 1 < first_seq) {
            return fail("its seqs contradict each other");
        }
        let count = u32::from_le_bytes(body[16..20].try_into().expect("4 bytes"));
        let mut at = 20;
        let mut purged_versions = BTreeMap::new();
        for _ in 0..count {
            let Some(len) = body.get(at..at + 2) else {
                return fail("a stream entry runs past the end");
            };
            let len = usize::from(u16::from_le_bytes(len.try_into().expect("2 bytes")));
            let Some(entry) = body.get(at + 2..at + 2 + len + 8) else {
                return fail("a stream entry runs past the end");
            };
            let Ok(name) = std::str::from_utf8(&entry[..len]) else {
                return fail("a stream name is not UTF-8");
            };
            let version = u64::from_le_bytes(entry[len..].try_into().expect("8 bytes"));
            if purged_versions.insert(name.to_owned(), version).is_some() || version == 0 {
                return fail("a stream is listed twice, or at version 0");
            }
            at += 2 + len + 8;
        }
        if at != body.len() {
            return fail("bytes follow the last stream entry");
        }
        Ok(LogState {
            first_seq,
            truncate_after,
            purged_versions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
