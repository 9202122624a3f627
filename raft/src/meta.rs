//! The store's own small state, beside the log: the vote, the last purged
//! log id and the [`Anchor`], in one checksummed file replaced atomically
//! through the log's [`Vfs`].
//!
//! Why a file and not records in a reserved stream of the log itself: the
//! log's records are Raft's entries one to one (the seq ↔ index mapping
//! depends on it), `truncate` removes every record after a seq, and a purge
//! removes whole old segments. A vote kept as a record would sit between
//! entries, be removed by a truncation of the entries before it, and leave
//! with the segment a purge removes. A separate file has none of these
//! problems, and a vote or a purge is rare (an election, a snapshot), so a
//! rename and three syncs per change cost nothing that matters.
//!
//! Layout of `raft.meta` (integers little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `DURLOGRF` |
//! | 8 | 4 | format version, 2 |
//! | 12 | 4 | body length `L` (u32) |
//! | 16 | 4 | CRC-32C over the body |
//! | 20 | `L` | body: postcard of `MetaBody` (vote, last purged log id, anchor, repair) |
//!
//! Version 2 added `repair` (see [`crate::repair`]): how far the log
//! reached before damage was moved aside, while the node catches up. A
//! version 1 file (no such field) is read as one with no repair under way.
//!
//! Saving: write `raft.meta.new` (created new), `fdatasync` it, rename it
//! over `raft.meta`, sync the directory; only then return. A crash leaves
//! the old file or the new one under `raft.meta`, never a mix: the old file
//! is never written in place. A missing `raft.meta` is a store that never
//! saved anything; a damaged one is refused, never taken for a fresh store
//! (forgetting a vote could let this node vote twice in one term).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use durlog::vfs::{OpenMode, Vfs, read_exact_at};
use openraft::{LogId, NodeId, Vote};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::mapping::Anchor;

/// How far a log reached: an upper bound of its last entry's id, as
/// `(term, index)`, ordered as Raft compares logs (term first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Reach {
    /// The term of the entry (or of the vote, an upper bound of it).
    pub term: u64,
    /// Its index.
    pub index: u64,
}

impl Reach {
    /// The reach of a log whose last entry is `log_id`.
    pub fn of<NID: NodeId>(log_id: &LogId<NID>) -> Reach {
        Reach {
            term: log_id.leader_id.term,
            index: log_id.index,
        }
    }

    /// True if a log whose last entry is `last` is at least this far.
    pub fn is_covered_by<NID: NodeId>(self, last: Option<&LogId<NID>>) -> bool {
        last.is_some_and(|last| Reach::of(last) >= self)
    }
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "T{}-{}", self.term, self.index)
    }
}

/// The file's name in the store's directory.
pub const META_FILE_NAME: &str = "raft.meta";
/// The temporary name a new version is written under.
pub const META_TEMP_NAME: &str = "raft.meta.new";

const MAGIC: &[u8; 8] = b"DURLOGRF";
const FORMAT_VERSION: u32 = 2;
/// The version before `repair` was added: still read.
const FORMAT_VERSION_V1: u32 = 1;

// The header's fields, each right after the one before (the table in the
// module doc), then the body.
const MAGIC_AT: usize = 0;
const FORMAT_VERSION_AT: usize = MAGIC_AT + MAGIC.len();
const BODY_LEN_AT: usize = FORMAT_VERSION_AT + size_of::<u32>();
const CRC_AT: usize = BODY_LEN_AT + size_of::<u32>();
const BODY_AT: usize = CRC_AT + size_of::<u32>();
const HEADER_BYTES: usize = BODY_AT;
const _: () = assert!(FORMAT_VERSION_AT == 8 && BODY_LEN_AT == 12 && CRC_AT == 16);
const _: () = assert!(HEADER_BYTES == 20);
/// A body is a vote, a log id and two integers: far below this. A length
/// above it is damage, and is refused before anything is allocated.
const BODY_BYTES_MAX: u32 = 64 << 10;

/// What the file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct MetaBody<NID: NodeId> {
    /// The last vote saved (`save_vote`).
    pub vote: Option<Vote<NID>>,
    /// The last log id purged (`purge`): entries up to it are gone.
    pub last_purged: Option<LogId<NID>>,
    /// Where seqs and indexes meet (see `mapping`).
    pub anchor: Anchor,
    /// While a repair is under way: how far the log reached before its
    /// damaged part was moved aside. The node takes no part in elections
    /// until its log reaches it again (see [`crate::repair`]).
    pub repair: Option<Reach>,
}

/// A version 1 body: no `repair`.
#[derive(Deserialize)]
#[serde(bound = "")]
struct MetaBodyV1<NID: NodeId> {
    vote: Option<Vote<NID>>,
    last_purged: Option<LogId<NID>>,
    anchor: Anchor,
}

impl<NID: NodeId> Default for MetaBody<NID> {
    fn default() -> Self {
        MetaBody {
            vote: None,
            last_purged: None,
            anchor: Anchor::default(),
            repair: None,
        }
    }
}

/// The file, and the last body saved (or loaded).
#[derive(Debug)]
pub struct MetaFile<NID: NodeId> {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    body: MetaBody<NID>,
}

impl<NID: NodeId> MetaFile<NID> {
    /// Loads `dir/raft.meta` (a default body if it is missing) and removes a
    /// temporary file a crashed save left.
    pub fn load(vfs: Arc<dyn Vfs>, dir: &Path) -> Result<MetaFile<NID>, Error> {
        let path = dir.join(META_FILE_NAME);
        let body = match vfs.open(&path, OpenMode::ReadOnly) {
            Ok(file) => {
                let mut bytes = vec![0; file.len()? as usize];
                read_exact_at(file.as_ref(), &mut bytes, 0)?;
                let body = decode(&bytes).map_err(|reason| Error::Meta {
                    path: path.clone(),
                    reason,
                })?;
                // What this process reads may be only in the page cache: a
                // save whose directory sync failed (or whose process died
                // before it) left its rename there. Believing it and acting
                // on it (answering as a voter) before it is durable lets a
                // power loss take the vote back: the node could then vote
                // twice in a term. The cluster simulation found this (seed
                // 346 of durlog-raft-sim, a vote that went back).
                file.sync_data()?;
                vfs.sync_dir(dir)?;
                body
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => MetaBody::default(),
            Err(error) => return Err(error.into()),
        };
        remove_if_present(vfs.as_ref(), &dir.join(META_TEMP_NAME))?;
        Ok(MetaFile {
            vfs,
            dir: dir.to_owned(),
            body,
        })
    }

    /// The body last saved or loaded.
    pub fn body(&self) -> &MetaBody<NID> {
        &self.body
    }

    /// Makes `body` durable (see the module doc for the steps); on an error
    /// the file holds the old body or the new one, and the body in memory
    /// stays the old one.
    pub fn save(&mut self, body: MetaBody<NID>) -> Result<(), Error> {
        let bytes = encode(&body)?;
        let temp = self.dir.join(META_TEMP_NAME);
        remove_if_present(self.vfs.as_ref(), &temp)?;
        let file = self.vfs.open(&temp, OpenMode::CreateNew)?;
        file.write_at(&bytes, 0)?;
        file.sync_data()?;
        drop(file);
        self.vfs.rename(&temp, &self.dir.join(META_FILE_NAME))?;
        self.vfs.sync_dir(&self.dir)?;
        self.body = body;
        Ok(())
    }
}

fn remove_if_present(vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
    match vfs.remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// The file's bytes for `body`.
pub fn encode<NID: NodeId>(body: &MetaBody<NID>) -> Result<Vec<u8>, Error> {
    let encoded = postcard::to_allocvec(body).map_err(Error::Codec)?;
    let len = u32::try_from(encoded.len())
        .ok()
        .filter(|len| *len <= BODY_BYTES_MAX)
        .expect("a meta body is a few dozen bytes");
    let mut bytes = vec![0; HEADER_BYTES];
    put_field(&mut bytes, MAGIC_AT, *MAGIC);
    put_field(&mut bytes, FORMAT_VERSION_AT, FORMAT_VERSION.to_le_bytes());
    put_field(&mut bytes, BODY_LEN_AT, len.to_le_bytes());
    put_field(&mut bytes, CRC_AT, durlog::crc32c(&encoded).to_le_bytes());
    bytes.extend_from_slice(&encoded);
    debug_assert_eq!(bytes.len() - BODY_AT, encoded.len());
    Ok(bytes)
}

/// The body in `bytes`, or why they are not a meta file. Never panics.
pub fn decode<NID: NodeId>(bytes: &[u8]) -> Result<MetaBody<NID>, String> {
    let Some(header) = Header::read(bytes) else {
        return Err(format!(
            "{} bytes, shorter than the {HEADER_BYTES}-byte header",
            bytes.len()
        ));
    };
    if header.magic != *MAGIC {
        return Err("wrong magic".to_owned());
    }
    if header.format_version != FORMAT_VERSION && header.format_version != FORMAT_VERSION_V1 {
        return Err(format!(
            "format version {}, expected {FORMAT_VERSION}",
            header.format_version
        ));
    }
    let (len, body) = (header.body_len, header.body);
    if len > BODY_BYTES_MAX || len as usize != body.len() {
        return Err(format!(
            "body length {len}, but {} bytes follow the header",
            body.len()
        ));
    }
    if durlog::crc32c(body) != header.crc {
        return Err("checksum mismatch".to_owned());
    }
    let undecodable = |error: postcard::Error| format!("body does not decode: {error}");
    if header.format_version == FORMAT_VERSION_V1 {
        let old: MetaBodyV1<NID> = postcard::from_bytes(body).map_err(undecodable)?;
        return Ok(MetaBody {
            vote: old.vote,
            last_purged: old.last_purged,
            anchor: old.anchor,
            repair: None,
        });
    }
    postcard::from_bytes(body).map_err(undecodable)
}

/// The header's fields as read, nothing checked yet.
struct Header<'a> {
    magic: [u8; MAGIC.len()],
    format_version: u32,
    body_len: u32,
    crc: u32,
    /// Every byte after the header.
    body: &'a [u8],
}

impl Header<'_> {
    /// The header of `bytes`; `None` if they are shorter than
    /// `HEADER_BYTES` (the last header field ends there).
    fn read(bytes: &[u8]) -> Option<Header<'_>> {
        Some(Header {
            magic: field(bytes, MAGIC_AT)?,
            format_version: u32::from_le_bytes(field(bytes, FORMAT_VERSION_AT)?),
            body_len: u32::from_le_bytes(field(bytes, BODY_LEN_AT)?),
            crc: u32::from_le_bytes(field(bytes, CRC_AT)?),
            body: bytes.get(BODY_AT..)?,
        })
    }
}

/// The `N` bytes of the field at `at`, if `bytes` holds all of them: the
/// decoder reads untrusted bytes only through this, so it cannot panic.
fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..)?.first_chunk::<N>().copied()
}

/// Writes `value` as the field at `at` of a buffer sized for the header.
fn put_field<const N: usize>(bytes: &mut [u8], at: usize, value: [u8; N]) {
    bytes[at..at + N].copy_from_slice(&value);
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::{
        BODY_AT, BODY_LEN_AT, CRC_AT, FORMAT_VERSION, FORMAT_VERSION_AT, MAGIC, MAGIC_AT, MetaBody,
        decode, encode,
    };
    use crate::mapping::Anchor;

    fn body() -> MetaBody<u64> {
        MetaBody {
            vote: Some(Vote::new_committed(7, 2)),
            last_purged: Some(LogId::new(CommittedLeaderId::new(6, 1), 41)),
            anchor: Anchor { seq: 30, index: 42 },
            repair: Some(super::Reach { term: 7, index: 50 }),
        }
    }

    #[test]
    fn a_version_1_file_reads_as_no_repair() {
        let mut old = body();
        old.repair = None;
        let v1_body = postcard::to_allocvec(&(old.vote, old.last_purged, old.anchor)).unwrap();
        let mut bytes = encode(&old).unwrap()[..BODY_AT].to_vec();
        bytes[FORMAT_VERSION_AT..FORMAT_VERSION_AT + 4].copy_from_slice(&1u32.to_le_bytes());
        bytes[BODY_LEN_AT..BODY_LEN_AT + 4].copy_from_slice(&(v1_body.len() as u32).to_le_bytes());
        bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&durlog::crc32c(&v1_body).to_le_bytes());
        bytes.extend_from_slice(&v1_body);
        assert_eq!(decode::<u64>(&bytes), Ok(old));
    }

    #[test]
    fn a_body_round_trips() {
        let bytes = encode(&body()).unwrap();
        assert_eq!(decode::<u64>(&bytes), Ok(body()));
        let empty = MetaBody::<u64>::default();
        assert_eq!(decode::<u64>(&encode(&empty).unwrap()), Ok(empty));
    }

    /// The module doc's table, row by row, from the constants.
    #[test]
    fn the_layout_table_agrees_with_the_constants() {
        let rows = [
            format!("| {MAGIC_AT} | {} | magic `DURLOGRF` |", MAGIC.len()),
            format!("| {FORMAT_VERSION_AT} | 4 | format version, {FORMAT_VERSION} |"),
            format!("| {BODY_LEN_AT} | 4 | body length `L` (u32) |"),
            format!("| {CRC_AT} | 4 | CRC-32C over the body |"),
            format!("| {BODY_AT} | `L` | body:"),
        ];
        for row in rows {
            assert!(include_str!("meta.rs").contains(&row), "{row:?}");
        }
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        let bytes = encode(&body()).unwrap();
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode::<u64>(&flipped).is_err(),
                "bit {bit} flipped was believed"
            );
        }
        for len in 0..bytes.len() {
            assert!(
                decode::<u64>(&bytes[..len]).is_err(),
                "cut at {len} was believed"
            );
        }
    }
}
