//! [`PositionFile`]: a consumer's position kept by the consumer's own
//! process, in a file of its own, for a [`crate::Follower`] that shares no
//! memory with the writer (the writer's `record_consumer_position` is for
//! consumers in its process).
//!
//! One record costs one write of a slot and one `fdatasync`: no rename,
//! no directory sync (the directory is synced once, when the file is
//! created). The file holds two slots, each in a page of its own
//! (FORMAT.md, "Position files"), written in turn: a write torn or lost by
//! a power loss damages only the slot being written, and the other still
//! holds the position recorded before. A slot is trusted only whole and
//! valid (magic, CRC); of two, the one with the higher generation rules.
//! After a failed record the next one writes the same slot again, so the
//! last position known durable is never the one overwritten.
//!
//! The file is created whole (a first slot with no position, synced under
//! a temporary name, renamed into place, the directory synced), so a file
//! with no valid slot is damage, refused and named, never a fresh start.
//! It is locked (through a lock file beside it) for as long as it is
//! open: one consumer of a name at a time, as one writer of a log.

use std::io;
use std::path::{Path, PathBuf};

use durlog_vfs::{FileLock, OpenMode, Vfs, VfsFile, read_exact_at};

use crate::error::Error;
use crate::format::record::crc32c;

/// Bytes of a slot: a page, so that no write of one touches the other.
pub const POSITION_SLOT_BYTES: u64 = 4096;

/// What starts a valid slot.
const MAGIC: [u8; 8] = *b"DLPOS\x00\x00\x01";

/// Magic, generation, seq and the CRC-32C of the 24 bytes before it.
const SLOT_HEADER: usize = 28;

/// A slot as it was read: its generation and seq, if it is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    generation: u64,
    seq: u64,
}

/// The bytes of a slot holding `seq` at `generation` (zeros after the
/// header, to the page's end).
fn encode_slot(generation: u64, seq: u64) -> Vec<u8> {
    let mut bytes = vec![0; POSITION_SLOT_BYTES as usize];
    bytes[..8].copy_from_slice(&MAGIC);
    bytes[8..16].copy_from_slice(&generation.to_le_bytes());
    bytes[16..24].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c(&bytes[..24]);
    bytes[24..SLOT_HEADER].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The slot at the front of `bytes`, if it is whole and valid: magic,
/// CRC, and nothing but zeros after its header.
fn decode_slot(bytes: &[u8]) -> Option<Slot> {
    let bytes = bytes.get(..POSITION_SLOT_BYTES as usize)?;
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[24..SLOT_HEADER].try_into().expect("4 bytes"));
    let valid = bytes[..8] == MAGIC
        && crc == crc32c(&bytes[..24])
        && crate::format::all_zeros(&bytes[SLOT_HEADER..]);
    valid.then(|| Slot {
        generation: word(8),
        seq: word(16),
    })
}

/// A consumer's position, in a file of its own (see the module doc).
pub struct PositionFile {
    path: PathBuf,
    file: Box<dyn VfsFile>,
    _lock: Box<dyn FileLock>,
    /// The last position recorded, or read at open.
    seq: Option<u64>,
    /// The generation of the newest valid slot (0 if none).
    generation: u64,
    /// The slot the next record writes.
    next_slot: u64,
}

impl PositionFile {
    /// Opens the position file at `path`, creating it (with no position)
    /// if there is none, and locks it (through `path` + `.lock`):
    /// `Error::Locked` while another process, or another `PositionFile`
    /// here, has it open. A file with no valid slot is refused as
    /// `Error::Corrupt`, naming it: the file is made whole (a valid slot,
    /// synced) before its name appears, so only damage leaves none.
    pub fn open<V: Vfs + ?Sized>(vfs: &V, path: impl AsRef<Path>) -> Result<PositionFile, Error> {
        let path = path.as_ref().to_path_buf();
        let lock = match vfs.lock_file(&with_suffix(&path, ".lock")) {
            Ok(lock) => lock,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                return Err(Error::Locked { dir: path });
            }
            Err(error) => return Err(error.into()),
        };
        let file = match vfs.open(&path, OpenMode::ReadWrite) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => create(vfs, &path)?,
            Err(error) => return Err(error.into()),
        };
        // Every time: an open that failed after the rename left a name
        // that a power loss may still take, with every position recorded
        // under it (the simulated disk's seed 232 of this crate's test).
        vfs.sync_dir(parent(&path))?;
        let slots = read_slots(file.as_ref(), &path)?;
        let newest = slots
            .iter()
            .flatten()
            .max_by_key(|slot| slot.generation)
            .copied()
            .expect("read_slots refuses a file with no valid slot");
        // The slot that does not hold the newest position is written next.
        let next_slot = match slots {
            [Some(a), Some(b)] => u64::from(a.generation > b.generation),
            [Some(_), None] => 1,
            _ => 0,
        };
        Ok(PositionFile {
            path,
            file,
            _lock: lock,
            seq: (newest.generation > 0).then_some(newest.seq),
            generation: newest.generation,
            next_slot,
        })
    }

    /// The last position recorded (`None` if none ever was).
    pub fn position(&self) -> Option<u64> {
        self.seq
    }

    /// Records `seq`, durable before it returns. On an error the position
    /// may be the old one or `seq` (as a crash in the middle would leave
    /// it); the next record writes the same slot again, so the position
    /// before stays readable until a record succeeds.
    pub fn record(&mut self, seq: u64) -> Result<(), Error> {
        // 2^64 records cannot have been made: only damage puts a slot there.
        let Some(generation) = self.generation.checked_add(1) else {
            return Err(Error::Corrupt {
                file: self.path.clone(),
                offset: 0,
                reason: "a slot's generation is u64::MAX, which no record reaches".into(),
            });
        };
        let bytes = encode_slot(generation, seq);
        debug_assert_eq!(
            decode_slot(&bytes),
            Some(Slot { generation, seq }),
            "a slot reads back as written"
        );
        self.file
            .write_at(&bytes, self.next_slot * POSITION_SLOT_BYTES)?;
        self.file.sync_data()?;
        self.generation = generation;
        self.seq = Some(seq);
        self.next_slot = 1 - self.next_slot;
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `path` with `suffix` after its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Creates the position file at `path` whole: a first slot with no
/// position and a second of zeros, written and synced under a temporary
/// name, renamed into place; then opens it. The caller syncs the
/// directory.
fn create<V: Vfs + ?Sized>(vfs: &V, path: &Path) -> Result<Box<dyn VfsFile>, Error> {
    let temp = with_suffix(path, ".new");
    // One a crash left was never renamed: nobody read it.
    match vfs.remove_file(&temp) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error.into()),
        _ => {}
    }
    let file = vfs.open(&temp, OpenMode::CreateNew)?;
    // Both slots from the start, the second all zeros: a record never
    // grows the file, so a slot a write cut short cannot turn valid
    // later, when a longer file would bring it into view.
    let mut bytes = encode_slot(0, 0);
    bytes.resize(2 * POSITION_SLOT_BYTES as usize, 0);
    file.write_at(&bytes, 0)?;
    file.sync_data()?;
    drop(file);
    vfs.rename(&temp, path)?;
    Ok(vfs.open(path, OpenMode::ReadWrite)?)
}

/// The directory holding `path` (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Both slots of the file, each `None` if it is not there or not valid;
/// `Corrupt` if the file holds bytes but no valid slot.
fn read_slots(file: &dyn VfsFile, path: &Path) -> Result<[Option<Slot>; 2], Error> {
    let len = file.len()?;
    let mut slots = [None, None];
    let mut bytes = vec![0; POSITION_SLOT_BYTES as usize];
    for (index, slot) in slots.iter_mut().enumerate() {
        let at = index as u64 * POSITION_SLOT_BYTES;
        if at + POSITION_SLOT_BYTES <= len {
            read_exact_at(file, &mut bytes, at)?;
            *slot = decode_slot(&bytes);
            // A slot that fails its check is read again, once: a flaky
            // read is not damage, and would hand back an older position.
            if slot.is_none() {
                read_exact_at(file, &mut bytes, at)?;
                *slot = decode_slot(&bytes);
            }
        }
    }
    if slots.iter().all(Option::is_none) {
        return Err(Error::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            reason: format!(
                "a position file of {len} bytes with no valid slot (two slots of \
                 {POSITION_SLOT_BYTES} bytes, each with its magic and CRC)"
            ),
        });
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_reads_back_and_any_flipped_bit_is_refused() {
        let bytes = encode_slot(7, 42);
        assert_eq!(
            decode_slot(&bytes),
            Some(Slot {
                generation: 7,
                seq: 42
            })
        );
        for bit in 0..SLOT_HEADER * 8 + 64 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(decode_slot(&flipped), None, "bit {bit}");
        }
        assert_eq!(decode_slot(&bytes[..100]), None, "a short slot");
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// FORMAT.md, "Position files": the slot of generation 1 holding
    /// seq 42, its 28 bytes of header (zeros follow to 4096).
    #[test]
    fn the_golden_slot() {
        let bytes = encode_slot(1, 42);
        let hex: Vec<String> = bytes[..SLOT_HEADER]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        assert_eq!(
            hex.join(" "),
            "44 4c 50 4f 53 00 00 01 01 00 00 00 00 00 00 00 2a 00 00 00 00 00 00 00 0a dd 37 36"
        );
    }
}
