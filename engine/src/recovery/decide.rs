//! What the first damaged record means: FORMAT.md's decision list, in code.
//!
//! | rule | the bytes at and after the damage | decision |
//! |---|---|---|
//! | sealed | the damage is in a segment a later one follows | `Corrupt` |
//! | zero tail | zeros only, to the end of the file | end of the log |
//! | higher seq | a CRC-valid record with a seq above the one expected | `Corrupt` (misplaced) |
//! | single bit | one flipped bit makes the record valid, and the next follows | `Corrupt` (flip at rest) |
//! | beyond group | a valid later record ends past [`GROUP_BYTES_MAX`] | `Corrupt` (synced damage) |
//! | torn | none of the above | torn tail: truncate |
//!
//! The rules are tried in this order, each on one stable copy of the bytes
//! (read until two reads agree), and the first that applies decides.

use std::convert::Infallible;
use std::path::Path;

use crate::error::Error;
use crate::format::{HEADER_SIZE, Header, inspect_batch, parse_record, single_bit_repair};
use crate::segment::Window;

use super::{Damage, Scanner, Tail, corrupt, read_until_two_agree};

/// The most bytes one group commit writes in a single write-and-sync,
/// unless a single record is larger (it is then a group of its own).
///
/// This bounds what a torn write can damage. Only the last group can be
/// unsynced at a crash, and every earlier byte was synced. So damage at
/// offset `X` of the last segment, followed by a valid record (with a later
/// seq) that ends more than `GROUP_BYTES_MAX` past `X`, cannot be a torn
/// write: `X` and that record cannot both belong to the last group, so `X`
/// was synced, and Open refuses with `Corrupt`.
///
/// Two more rules need no window: a CRC-valid record whose seq is higher
/// than the one expected at the damage is a misplaced write, and a record
/// that one flipped bit makes valid, followed by a valid record with the
/// next seq, is a bit flip at rest (a torn write cuts a prefix or loses
/// whole pages; it does not flip one bit and leave the next record whole).
///
/// What stays ambiguous, and is truncated as a torn tail: a single bit flip
/// in the last record of the log (no record follows to prove it was
/// synced), and damage of more than one bit within the last
/// `GROUP_BYTES_MAX` bytes of the last segment. The single-bit rule could
/// misjudge a torn group whose lost page held nearly all zero bytes where
/// it should have held one set bit; that needs a crash, a lost page in the
/// middle of a group and such data together.
pub const GROUP_BYTES_MAX: u64 = 1 << 20;

impl Scanner {
    /// Decides what damage at `offset` means, as the module doc's table
    /// says: the tail's state, or `Corrupt`.
    pub(super) fn decide(
        &self,
        window: &mut Window<'_>,
        path: &Path,
        offset: u64,
        is_last: bool,
        damage: Damage,
    ) -> Result<Tail, Error> {
        if !is_last {
            return Err(corrupt(
                path,
                offset,
                format!(
                    "{damage} (in a sealed segment: acknowledged data is damaged; restore the file from a replica or backup)"
                ),
            ));
        }
        let bytes = window.file_len() - offset;
        // Every rule below reads the evidence from one stable copy: a
        // flaky read must not hide the record that proves damage.
        let rest = stable_bytes(window, path, offset, bytes)?;
        if rest.iter().all(|&byte| byte == 0) {
            return Ok(Tail::Zeros {
                file: path.to_path_buf(),
                offset,
                bytes,
            });
        }
        let expected = self.next_seq;
        if let Ok(record) = parse_record(&rest)
            && record.seq > expected
        {
            return Err(corrupt(
                path,
                offset,
                format!(
                    "a valid record with seq {} stands where seq {expected} belongs: a misplaced or misdirected write, not a torn one",
                    record.seq
                ),
            ));
        }
        if let Some(flipped_bit) = self.single_bit_flip_before_valid_record(&rest) {
            return Err(corrupt(
                path,
                offset,
                format!(
                    "{damage}; flipping bit {flipped_bit} of this record makes it valid and a valid record follows it, so it was synced: a bit flipped at rest in acknowledged data"
                ),
            ));
        }
        if let Some((later, later_seq)) = later_record_beyond_group(&rest, expected - 1) {
            let later_offset = offset + later as u64;
            return Err(corrupt(
                path,
                offset,
                format!(
                    "{damage}, yet a valid record (seq {later_seq}) lies at offset {later_offset}, beyond what one torn write can reach: acknowledged data is damaged"
                ),
            ));
        }
        Ok(Tail::Torn {
            file: path.to_path_buf(),
            offset,
            bytes,
            reason: damage.to_string(),
        })
    }

    /// If `bytes` (a damaged record and what follows it) become a valid
    /// record by flipping one bit, and that record is the one the chain
    /// expects, and a valid record with the next seq follows it: the bit
    /// (counted from the record's start) that flipped. A torn write leaves
    /// a prefix, or loses whole pages; it does not flip one bit of a record
    /// and leave the next record intact.
    fn single_bit_flip_before_valid_record(&self, bytes: &[u8]) -> Option<u64> {
        let (repaired, bit) = single_bit_repair(bytes)?;
        let record = parse_record(&repaired).ok()?;
        let batch = inspect_batch(record.payload).ok()?;
        if record.seq != self.next_seq
            || batch.first_version != self.index.version(batch.stream) + 1
        {
            return None;
        }
        let next = parse_record(bytes.get(record.len..)?).ok()?;
        (next.seq == self.next_seq + 1 && inspect_batch(next.payload).is_ok()).then_some(bit)
    }
}

/// `len` bytes at `offset`, read until two reads in a row agree.
fn stable_bytes(
    window: &mut Window<'_>,
    path: &Path,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Error> {
    let agreed = read_until_two_agree(window, path, offset, |window| {
        Ok(Err::<Infallible, _>(window.bytes(offset, len)?.to_vec()))
    })?;
    let Err(bytes) = agreed;
    Ok(bytes)
}

/// A valid record in `rest` (what follows damage at `rest[0]`), with a seq
/// above `last_good`, that ends more than [`GROUP_BYTES_MAX`] past the
/// damage: proof that the damage is not a torn write. Returns its offset
/// in `rest` and its seq.
fn later_record_beyond_group(rest: &[u8], last_good: u64) -> Option<(usize, u64)> {
    if rest.len() as u64 <= GROUP_BYTES_MAX {
        return None;
    }
    for start in 1..rest.len().saturating_sub(HEADER_SIZE - 1) {
        let header = Header::peek(&rest[start..]).expect("a whole header from here");
        // Every record between the damage and here takes at least a header,
        // which bounds the seqs that can plausibly start here.
        let seq_max = last_good + 1 + (start / HEADER_SIZE) as u64;
        if header.seq <= last_good || header.seq > seq_max {
            continue;
        }
        let end = (start as u64).saturating_add(header.record_len());
        if end > GROUP_BYTES_MAX
            && let Ok(record) = parse_record(&rest[start..])
            && inspect_batch(record.payload).is_ok()
        {
            return Some((start, header.seq));
        }
    }
    None
}
