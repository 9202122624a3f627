//! Recovery: reading a log directory back and deciding what it holds.
//!
//! [`scan`] reads every segment in name order and checks every record (the
//! header fits, the length fits, the CRC matches, the seq is the previous
//! plus one, the segment's name is its first record's seq, the batch
//! decodes, its first version is its stream's last plus one). The first
//! record that fails decides:
//!
//! - in an earlier segment, acknowledged bytes are damaged: `Corrupt`;
//! - in the last segment, it is a torn tail (an append that crashed before
//!   it was acknowledged), which `Log::open` truncates durably, unless the
//!   bytes prove it is not: see [`GROUP_BYTES_MAX`].
//!
//! Damage to the structure (a name that is not a segment, a missing segment,
//! a seq gap) is corruption wherever it is. The scan itself never writes:
//! `durlog verify` runs it alone.

use std::io;
use std::path::{Path, PathBuf};

use durlog_vfs::{OpenMode, Vfs, VfsFile};

use crate::error::Error;
use crate::format::{
    BatchView, HEADER_SIZE, NEXT_SEGMENT_NAME, inspect_batch, parse_record, parse_segment_name,
};
use crate::index::{Index, Location};
use crate::segment::{SegmentMeta, Window};

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

/// How many times a suspected damage is re-read before it is believed: a
/// flaky read must not make recovery truncate acknowledged data.
const REREADS_MAX: usize = 4;

/// What the end of the last segment looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tail {
    /// The last segment ends exactly at its last valid record.
    Clean,
    /// Only zero bytes follow the last valid record (preallocation, or a
    /// size change whose data never reached the disk): the end of the log,
    /// not damage. `Log::open` cuts them off like a torn tail, so that
    /// every segment ends at its last record; `durlog verify` calls it clean.
    Zeros {
        /// The last segment.
        file: PathBuf,
        /// Where the zeros start.
        offset: u64,
        /// How many zero bytes there are.
        bytes: u64,
    },
    /// A torn tail: an append that never completed. `Log::open` truncates
    /// the file at `offset` and makes the truncation durable.
    Torn {
        /// The last segment.
        file: PathBuf,
        /// Offset of the first record that fails.
        offset: u64,
        /// Bytes from there to the end of the file.
        bytes: u64,
        /// Why the record there fails.
        reason: String,
    },
}

/// What recovery found (and, from `Log::open`, what it did).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments: usize,
    /// Valid records read.
    pub records: u64,
    /// Bytes of valid records.
    pub record_bytes: u64,
    /// Seq of the last valid record (0 for an empty log).
    pub last_seq: u64,
    /// The state of the last segment's end.
    pub tail: Tail,
    /// Bytes `Log::open` cut off the last segment (0 from a read-only scan).
    pub bytes_truncated: u64,
}

/// One valid record, as a scan visits it.
pub struct RecordInfo<'a> {
    /// The segment file it is in.
    pub file: &'a Path,
    /// Its offset in that file.
    pub offset: u64,
    /// Its seq.
    pub seq: u64,
    /// Bytes it takes, header included.
    pub len: u64,
    /// Its payload (a batch that is known to decode).
    pub payload: &'a [u8],
    /// The batch's stream, first version and count.
    pub batch: BatchView<'a>,
}

/// What a scan hands to `Log::open`.
pub(crate) struct Scanned {
    pub segments: Vec<SegmentMeta>,
    pub index: Index,
    pub report: RecoveryReport,
    /// A next segment prepared by an earlier life, to remove.
    pub next_segment: Option<PathBuf>,
}

/// Scans `dir` read-only and reports what `Log::open` would find and do:
/// `Ok` with the tail state, or `Corrupt` naming the file and offset.
pub fn verify(vfs: &dyn Vfs, dir: &Path) -> Result<RecoveryReport, Error> {
    scan(vfs, dir, &mut |_| {}).map(|scanned| scanned.report)
}

/// [`verify`], calling `visit` for every valid record in log order.
pub fn visit_records(
    vfs: &dyn Vfs,
    dir: &Path,
    visit: &mut dyn FnMut(&RecordInfo<'_>),
) -> Result<RecoveryReport, Error> {
    scan(vfs, dir, visit).map(|scanned| scanned.report)
}

pub(crate) fn scan(
    vfs: &dyn Vfs,
    dir: &Path,
    visit: &mut dyn FnMut(&RecordInfo<'_>),
) -> Result<Scanned, Error> {
    let (names, next_segment) = segment_names(vfs, dir)?;
    let mut scanner = Scanner {
        index: Index::default(),
        next_seq: 1,
        records: 0,
        record_bytes: 0,
        buf: Vec::new(),
    };
    let mut segments = Vec::with_capacity(names.len());
    let mut tail = Tail::Clean;
    for (position, (first_seq, path)) in names.iter().enumerate() {
        let is_last = position + 1 == names.len();
        if *first_seq != scanner.next_seq {
            return Err(corrupt(
                path,
                0,
                seq_gap_reason(position, *first_seq, scanner.next_seq),
            ));
        }
        let file = vfs.open(path, OpenMode::ReadOnly)?;
        let (len, segment_tail) =
            scanner.scan_segment(file.as_ref(), path, position as u32, is_last, visit)?;
        if len == 0 && !is_last {
            return Err(corrupt(path, 0, "a sealed segment holds no record".into()));
        }
        segments.push(SegmentMeta {
            first_seq: *first_seq,
            path: path.clone(),
            len,
        });
        tail = segment_tail;
    }
    let report = RecoveryReport {
        segments: segments.len(),
        records: scanner.records,
        record_bytes: scanner.record_bytes,
        last_seq: scanner.next_seq - 1,
        tail,
        bytes_truncated: 0,
    };
    Ok(Scanned {
        segments,
        index: scanner.index,
        report,
        next_segment,
    })
}

fn seq_gap_reason(position: usize, named: u64, expected: u64) -> String {
    if position == 0 {
        format!(
            "the first segment is named for seq {named}, but a log starts at seq 1: a segment is missing"
        )
    } else {
        format!(
            "segment named for seq {named}, but the previous segment ends at seq {}: a segment is missing or misnamed",
            expected - 1
        )
    }
}

fn corrupt(file: &Path, offset: u64, reason: String) -> Error {
    Error::Corrupt {
        file: file.to_path_buf(),
        offset,
        reason,
    }
}

/// Segment files by first seq, and the prepared next segment.
type Names = (Vec<(u64, PathBuf)>, Option<PathBuf>);

/// The segment files of `dir` in seq order, and the prepared next segment
/// if there is one. Anything else in the directory is an error: a log
/// directory holds segments only.
fn segment_names(vfs: &dyn Vfs, dir: &Path) -> Result<Names, Error> {
    let mut names = Vec::new();
    let mut next_segment = None;
    for entry in vfs.list_dir(dir)? {
        let path = dir.join(&entry.name);
        if entry.name == NEXT_SEGMENT_NAME && !entry.is_dir {
            // Zeros, or (after a crash mid-roll) a second name of the new
            // last segment: never read as part of the log.
            next_segment = Some(path);
            continue;
        }
        match parse_segment_name(&entry.name) {
            Some(first_seq) if !entry.is_dir => names.push((first_seq, path)),
            Some(_) => {
                return Err(corrupt(
                    &path,
                    0,
                    "a directory where a segment file belongs".into(),
                ));
            }
            None => {
                return Err(corrupt(
                    &path,
                    0,
                    "not a durlog segment (segments are named by 20 decimal digits and .log); a log directory holds only segments: move the file elsewhere".into(),
                ));
            }
        }
    }
    names.sort();
    Ok((names, next_segment))
}

struct Scanner {
    index: Index,
    next_seq: u64,
    records: u64,
    record_bytes: u64,
    buf: Vec<u8>,
}

impl Scanner {
    /// Scans one segment; returns the end of its last valid record and the
    /// state of its tail.
    fn scan_segment(
        &mut self,
        file: &dyn VfsFile,
        path: &Path,
        segment: u32,
        is_last: bool,
        visit: &mut dyn FnMut(&RecordInfo<'_>),
    ) -> Result<(u64, Tail), Error> {
        let file_len = file.len()?;
        let mut window = Window::new(file, file_len, std::mem::take(&mut self.buf));
        let mut offset = 0;
        let mut tail = Tail::Clean;
        let mut failure = None;
        while offset < file_len {
            match self.check_record(&mut window, path, offset, segment, visit) {
                Ok(len) => offset += len,
                Err(Failure::Io(error)) => {
                    failure = Some(error);
                    break;
                }
                Err(Failure::Damaged(reason)) => {
                    match self.classify_damage(&mut window, path, offset, is_last, reason) {
                        Ok(found) => tail = found,
                        Err(error) => failure = Some(error),
                    }
                    break;
                }
            }
        }
        self.buf = window.into_buf();
        match failure {
            Some(error) => Err(error),
            None => Ok((offset, tail)),
        }
    }

    /// Checks the record at `offset` and, if valid, indexes it and returns
    /// its length. Suspected damage is re-read until two reads agree.
    fn check_record(
        &mut self,
        window: &mut Window<'_>,
        path: &Path,
        offset: u64,
        segment: u32,
        visit: &mut dyn FnMut(&RecordInfo<'_>),
    ) -> Result<u64, Failure> {
        let mut previous: Option<Vec<u8>> = None;
        for _ in 0..REREADS_MAX {
            let reason = match self.try_record(window, path, offset, segment, visit)? {
                Ok(len) => return Ok(len),
                Err(reason) => reason,
            };
            let bytes = record_bytes(window, offset)?.to_vec();
            if previous.as_ref() == Some(&bytes) {
                return Err(Failure::Damaged(reason));
            }
            previous = Some(bytes);
            window.invalidate();
        }
        Err(Failure::Io(Error::Io(io::Error::other(format!(
            "{}: {REREADS_MAX} reads at offset {offset} returned different bytes; the device is unstable, not retrying recovery",
            path.display()
        )))))
    }

    fn try_record(
        &mut self,
        window: &mut Window<'_>,
        path: &Path,
        offset: u64,
        segment: u32,
        visit: &mut dyn FnMut(&RecordInfo<'_>),
    ) -> Result<Result<u64, String>, Failure> {
        let bytes = record_bytes(window, offset)?;
        let record = match parse_record(bytes) {
            Ok(record) => record,
            Err(error) => return Ok(Err(error.to_string())),
        };
        if record.seq != self.next_seq {
            return Ok(Err(format!(
                "record has seq {}, expected {}",
                record.seq, self.next_seq
            )));
        }
        let batch = match inspect_batch(record.payload) {
            Ok(batch) => batch,
            Err(error) => return Ok(Err(error.to_string())),
        };
        let expected_version = self.index.version(batch.stream) + 1;
        if batch.first_version != expected_version {
            return Ok(Err(format!(
                "batch of stream {:?} starts at version {}, expected {expected_version}",
                batch.stream, batch.first_version
            )));
        }
        let Ok(offset32) = u32::try_from(offset) else {
            return Ok(Err(
                "record starts beyond 4 GiB, where no segment reaches".into()
            ));
        };
        let len = record.len as u64;
        visit(&RecordInfo {
            file: path,
            offset,
            seq: record.seq,
            len,
            payload: record.payload,
            batch,
        });
        self.index.push(
            batch.stream,
            batch.count,
            Location {
                first_version: batch.first_version,
                segment,
                offset: offset32,
            },
        );
        self.next_seq += 1;
        self.records += 1;
        self.record_bytes += len;
        Ok(Ok(len))
    }

    /// Decides what damage at `offset` means, as the module doc says.
    fn classify_damage(
        &mut self,
        window: &mut Window<'_>,
        path: &Path,
        offset: u64,
        is_last: bool,
        reason: String,
    ) -> Result<Tail, Error> {
        if !is_last {
            return Err(corrupt(
                path,
                offset,
                format!(
                    "{reason} (in a sealed segment: acknowledged data is damaged; restore the file from a replica or backup)"
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
                    "{reason}; flipping bit {flipped_bit} of this record makes it valid and a valid record follows it, so it was synced: a bit flipped at rest in acknowledged data"
                ),
            ));
        }
        if let Some((later, later_seq)) = later_record_beyond_group(&rest, expected - 1) {
            let later_offset = offset + later as u64;
            return Err(corrupt(
                path,
                offset,
                format!(
                    "{reason}, yet a valid record (seq {later_seq}) lies at offset {later_offset}, beyond what one torn write can reach: acknowledged data is damaged"
                ),
            ));
        }
        Ok(Tail::Torn {
            file: path.to_path_buf(),
            offset,
            bytes,
            reason,
        })
    }
}

impl Scanner {
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

/// The reflected CRC-32C polynomial.
const CRC32C_POLY: u32 = 0x82F6_3B78;

/// The record at the front of `bytes` with one bit flipped so that its CRC
/// matches, and which bit (from the record's start), if one flip does it.
///
/// A flip in the length field is found by trying the 32 candidates; a flip
/// in the CRC field by the stored and computed CRCs differing in one bit; a
/// flip in seq or payload by the CRC syndrome: the CRC is linear, so
/// `stored ^ computed` is the CRC (without init and xor-out) of a message
/// that is zero but for the flipped bit, which running the CRC register
/// backwards locates.
fn single_bit_repair(bytes: &[u8]) -> Option<(Vec<u8>, u64)> {
    let header: &[u8; HEADER_SIZE] = bytes.get(..HEADER_SIZE)?.try_into().ok()?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?);
    let stored = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let body = &bytes[8..];
    let crc_of = |payload_len: usize| crate::format::crc32c(&body[..8 + payload_len]);
    let available = bytes.len() - HEADER_SIZE;
    for bit in 0..32 {
        let candidate = (len ^ (1 << bit)) as usize;
        if candidate <= available && crc_of(candidate) == stored {
            let mut repaired = bytes[..HEADER_SIZE + candidate].to_vec();
            repaired[bit / 8] ^= 1 << (bit % 8);
            return Some((repaired, bit as u64));
        }
    }
    let len = len as usize;
    if len > available {
        return None;
    }
    let mut repaired = bytes[..HEADER_SIZE + len].to_vec();
    let syndrome = stored ^ crc_of(len);
    if syndrome.count_ones() == 1 {
        let bit = 32 + syndrome.trailing_zeros() as usize;
        repaired[bit / 8] ^= 1 << (bit % 8);
        return Some((repaired, bit as u64));
    }
    // The message is seq and payload: m bytes, starting at record byte 8.
    let message_len = 8 + len;
    let mut register = syndrome;
    for step in 1..=8 * message_len {
        // The inverse of one CRC shift step: the polynomial's top bit tells
        // whether the step xored it in.
        register = if register & 0x8000_0000 != 0 {
            ((register ^ CRC32C_POLY) << 1) | 1
        } else {
            register << 1
        };
        if step % 8 == 0 && register < 0x100 && register.is_power_of_two() {
            let byte = 8 + message_len - step / 8;
            let bit = 8 * byte + register.trailing_zeros() as usize;
            repaired[byte] ^= register as u8;
            return Some((repaired, bit as u64));
        }
    }
    None
}

enum Failure {
    Io(Error),
    Damaged(String),
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Failure {
        Failure::Io(Error::Io(error))
    }
}

/// The bytes the record at `offset` claims by its length field, bounded by
/// the end of the file (a damaged length never reads past it).
fn record_bytes<'w>(window: &'w mut Window<'_>, offset: u64) -> io::Result<&'w [u8]> {
    let header = window.bytes(offset, HEADER_SIZE as u64)?;
    let claimed = match header {
        [l0, l1, l2, l3, ..] if header.len() == HEADER_SIZE => {
            u64::from(u32::from_le_bytes([*l0, *l1, *l2, *l3]))
        }
        _ => 0,
    };
    window.bytes(offset, HEADER_SIZE as u64 + claimed)
}

/// `len` bytes at `offset`, read until two reads in a row agree: what
/// recovery acts on must not be the product of one flaky read.
fn stable_bytes(
    window: &mut Window<'_>,
    path: &Path,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Error> {
    let mut previous = window.bytes(offset, len)?.to_vec();
    for _ in 0..REREADS_MAX {
        window.invalidate();
        let again = window.bytes(offset, len)?;
        if again == previous.as_slice() {
            return Ok(previous);
        }
        previous = again.to_vec();
    }
    Err(Error::Io(io::Error::other(format!(
        "{}: {REREADS_MAX} reads of {len} bytes at offset {offset} returned different bytes; the device is unstable, not retrying recovery",
        path.display()
    ))))
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
        let header = &rest[start..start + HEADER_SIZE];
        let seq = u64::from_le_bytes(header[8..16].try_into().expect("16-byte header"));
        // Every record between the damage and here takes at least a header,
        // which bounds the seqs that can plausibly start here.
        let seq_max = last_good + 1 + (start / HEADER_SIZE) as u64;
        if seq <= last_good || seq > seq_max {
            continue;
        }
        let claimed = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let end = start.saturating_add(HEADER_SIZE).saturating_add(claimed);
        if end as u64 > GROUP_BYTES_MAX
            && let Ok(record) = parse_record(&rest[start..])
            && inspect_batch(record.payload).is_ok()
        {
            return Some((start, seq));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Event, append_record, encode_batch};

    fn record(seq: u64, data_len: usize) -> Vec<u8> {
        let data: Vec<u8> = (0..data_len).map(|i| (i * 7 + 3) as u8).collect();
        let mut out = Vec::new();
        append_record(
            &mut out,
            seq,
            &encode_batch("stream", seq, &[Event::new("t", data)]),
        );
        out
    }

    /// Every single-bit flip of a record is located and undone exactly.
    #[test]
    fn single_bit_repair_finds_every_flip() {
        for data_len in [0, 1, 13, 200] {
            let clean = record(5, data_len);
            for bit in 0..clean.len() * 8 {
                let mut damaged = clean.clone();
                damaged[bit / 8] ^= 1 << (bit % 8);
                let (repaired, found) = single_bit_repair(&damaged)
                    .unwrap_or_else(|| panic!("bit {bit} of {data_len}"));
                assert_eq!(
                    (repaired, found),
                    (clean.clone(), bit as u64),
                    "data {data_len}, bit {bit}"
                );
            }
        }
    }

    /// Damage of more than one bit is not mistaken for a single flip (the
    /// chance is about 2^-29 per byte; these fixed cases must all say no).
    #[test]
    fn single_bit_repair_rejects_wider_damage() {
        let clean = record(9, 100);
        for first in (0..clean.len() * 8).step_by(7) {
            let mut damaged = clean.clone();
            damaged[first / 8] ^= 1 << (first % 8);
            let second = (first + 61) % (clean.len() * 8);
            damaged[second / 8] ^= 1 << (second % 8);
            if second != first {
                assert!(
                    single_bit_repair(&damaged).is_none(),
                    "bits {first} and {second}"
                );
            }
        }
        let mut torn = clean.clone();
        torn[60..].iter_mut().for_each(|byte| *byte = 0);
        assert!(single_bit_repair(&torn).is_none());
    }
}
