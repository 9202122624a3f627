//! An independent statement of the on-disk format (FORMAT.md), written
//! without the engine's code: the oracle encodes every acknowledged append
//! itself and checks that the segment files hold exactly those bytes, in
//! segments named by their first seq and no larger than the limit unless a
//! single record is. A log that computed its CRC differently, or named or
//! rolled its segments wrong, passes its own recovery but fails here.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use durlog_vfs::{SimVfs, Vfs};

pub(crate) mod encode;

use crate::model::{Model, Tables};
use encode::{consumers_file, state_file, streams_file};
pub use encode::{parse, record_bytes};

/// The files besides segments FORMAT.md allows: the next segment,
/// prepared ahead as zeros, the writer's lock file, empty, the state file
/// (once a purge or a truncation ran), and a new state file that a failed
/// write left before its rename (never read).
const NEXT_SEGMENT_NAME: &str = "next-segment.zeros";
const LOCK_FILE_NAME: &str = "durlog.lock";
const STATE_FILE_NAME: &str = "durlog.state";
const STATE_TEMP_NAME: &str = "durlog.state.new";
const STREAMS_FILE_NAME: &str = "durlog.streams";
const CONSUMERS_FILE_NAME: &str = "durlog.consumers";
const TABLE_TEMP_NAMES: [&str; 2] = ["durlog.streams.new", "durlog.consumers.new"];

/// The directory's entries (`SimVfs::with_dir_contents`), taken out by
/// name as each check claims one.
struct Files<'a> {
    dir: &'a Path,
    entries: Vec<(&'a str, Option<&'a [u8]>)>,
}

impl<'a> Files<'a> {
    /// The bytes of the file `name`, claimed (`None` if there is none).
    fn take(&mut self, name: &str) -> Result<Option<&'a [u8]>, String> {
        let Some(at) = self.entries.iter().position(|(found, _)| *found == name) else {
            return Ok(None);
        };
        match self.entries.remove(at) {
            (_, Some(bytes)) => Ok(Some(bytes)),
            (_, None) => Err(format!("{name} in {} is a directory", self.dir.display())),
        }
    }
}

/// The tables of streams and of consumers are one of `candidates`, as
/// FORMAT.md encodes them; no file holds none.
fn check_tables(files: &mut Files<'_>, candidates: &[Tables]) -> Result<(), String> {
    type Encode = fn(&Tables) -> Vec<u8>;
    type Empty = fn(&Tables) -> bool;
    let tables: [(&str, Encode, Empty); 2] = [
        (STREAMS_FILE_NAME, streams_file, |t| t.entries.is_empty()),
        (CONSUMERS_FILE_NAME, consumers_file, |t| {
            t.consumers.is_empty()
        }),
    ];
    for (name, encode, empty) in tables {
        match files.take(name)? {
            Some(bytes) if candidates.iter().any(|tables| encode(tables) == bytes) => {}
            Some(bytes) => {
                let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
                return Err(format!(
                    "{name} holds {hex}, not one of {candidates:?} as FORMAT.md encodes it"
                ));
            }
            None if !candidates.iter().any(empty) => {
                return Err(format!("no {name}, but the model has {candidates:?}"));
            }
            None => {}
        }
    }
    Ok(())
}

/// Checks the directory against the model (its tables one of `tables`),
/// as the module doc says. The
/// last segment may carry a zero tail (preallocation) up to the segment
/// limit, and a prepared next segment holds zeros up to that limit; all
/// files together never pass the quota. The files are read in place, in
/// one visit of the directory that the disk neither counts nor traces.
///
/// Each index file must be, byte for byte, the one FORMAT.md gives for
/// the sealed segment of its name, except those in `unsure` (a write or a
/// removal of theirs failed in this life: Open removes them).
#[allow(clippy::too_many_arguments)] // each names a different fact
pub fn check_layout(
    vfs: &SimVfs,
    dir: &Path,
    model: &Model,
    tables: &[Tables],
    segment_bytes: u64,
    max_bytes: u64,
    copies: &[Copied],
    unsure: &[PathBuf],
) -> Result<(), String> {
    vfs.with_dir_contents(dir, |entries| {
        let mut files = Files {
            dir,
            entries: entries.to_vec(),
        };
        let limits = (segment_bytes, max_bytes);
        let indexes = take_index_files(&mut files, unsure);
        let sealed = check_files(&mut files, model, tables, limits, copies)?;
        check_index_files(&indexes, &sealed, model)
    })
    .unwrap_or_else(|| Err(format!("no directory {}", dir.display())))
}

/// The index files among `files`, taken out, by the first seq their names
/// name, with their names and bytes; those in `unsure` are dropped.
fn take_index_files<'a>(
    files: &mut Files<'a>,
    unsure: &[PathBuf],
) -> Vec<(u64, &'a str, &'a [u8])> {
    let mut indexes = Vec::new();
    files.entries.retain(|&(name, bytes)| {
        let (Some(seq), Some(bytes)) = (index_first_seq(name), bytes) else {
            return true;
        };
        if !unsure.iter().any(|path| path.ends_with(name)) {
            indexes.push((seq, name, bytes));
        }
        false
    });
    indexes
}

/// Each index file is the one FORMAT.md gives for its sealed segment
/// (`sealed`: first seq and the range of the model's records in it).
fn check_index_files(
    indexes: &[(u64, &str, &[u8])],
    sealed: &[(u64, Range<usize>)],
    model: &Model,
) -> Result<(), String> {
    if indexes.is_empty() {
        return Ok(());
    }
    let records: Vec<(u64, &[u8])> = model.encoded_records().collect();
    for &(seq, name, bytes) in indexes {
        let Some((_, range)) = sealed.iter().find(|(first, _)| *first == seq) else {
            return Err(format!("index file {name} names no sealed segment"));
        };
        let records = &records[range.clone()];
        let Some(&(last, _)) = records.last() else {
            return Err(format!("index file {name} names a segment with no record"));
        };
        let encode = || {
            let indexed: Vec<encode::IndexedRecord<'_>> = (records.iter())
                .map(|&(seq, bytes)| {
                    let (stream, first_version, events) =
                        model.record(seq).expect("the model holds its records");
                    encode::IndexedRecord {
                        bytes,
                        stream,
                        first_version,
                        events,
                    }
                })
                .collect();
            encode::index_file(seq, &indexed)
        };
        if !model.is_index_file((seq, last), bytes, encode) {
            return Err(format!(
                "index file {name} is not its segment's index as FORMAT.md encodes it"
            ));
        }
    }
    Ok(())
}

/// `check_layout` of the files of one directory but index files: the
/// sealed segments, each with the range of the model's records it holds.
fn check_files(
    files: &mut Files<'_>,
    model: &Model,
    tables: &[Tables],
    (segment_bytes, max_bytes): (u64, u64),
    copies: &[Copied],
) -> Result<Vec<(u64, Range<usize>)>, String> {
    let mut disk_bytes = 0;
    if files
        .take(LOCK_FILE_NAME)?
        .is_some_and(|bytes| !bytes.is_empty())
    {
        return Err(format!("the lock file {LOCK_FILE_NAME} holds bytes"));
    }
    (files.entries)
        .retain(|(name, _)| *name != STATE_TEMP_NAME && !TABLE_TEMP_NAMES.contains(name));
    check_tables(files, tables)?;
    match files.take(STATE_FILE_NAME)? {
        Some(bytes) => {
            let want = state_file(model.first_seq(), model.purged_versions());
            if bytes != want {
                return Err(format!(
                    "the state file {STATE_FILE_NAME} does not say first seq {} and purged versions {:?} as FORMAT.md encodes them",
                    model.first_seq(),
                    model.purged_versions()
                ));
            }
        }
        None if model.first_seq() > 1 || !model.purged_versions().is_empty() => {
            return Err(format!(
                "no state file, but records before seq {} were purged",
                model.first_seq()
            ));
        }
        None => {}
    }
    if let Some(bytes) = files.take(NEXT_SEGMENT_NAME)? {
        if !all_zeros(bytes) {
            return Err(format!(
                "the prepared next segment {NEXT_SEGMENT_NAME} holds data"
            ));
        }
        let len = bytes.len() as u64;
        check_zero_tail(NEXT_SEGMENT_NAME, len, 0, segment_bytes)?;
        disk_bytes += len;
    }
    let mut segments = Segments {
        expected: model.encoded_records().collect(),
        next: 0,
        last_seq: model.last_seq(),
        segment_bytes,
        copies: Vec::new(),
    };
    let count = files.entries.len();
    let mut sealed = Vec::new();
    for (position, (name, bytes)) in files.entries.iter().enumerate() {
        let Some(bytes) = bytes else {
            return Err(format!("{name} in {} is a directory", files.dir.display()));
        };
        let is_last = position + 1 == count;
        segments.copies = (copies.iter())
            .filter(|copy| copy.file.parent() == Some(files.dir) && copy.file.ends_with(name))
            .map(|copy| copy.bytes.clone())
            .collect();
        disk_bytes += bytes.len() as u64;
        let first = segments.next;
        segments.check(name, bytes, is_last)?;
        if let (false, Some(seq)) = (is_last, segment_first_seq(name)) {
            sealed.push((seq, first..segments.next));
        }
    }
    if max_bytes > 0 && disk_bytes > max_bytes {
        return Err(format!(
            "the segments take {disk_bytes} bytes on disk, past the quota {max_bytes}"
        ));
    }
    if segments.next != segments.expected.len() {
        return Err(format!(
            "{} acknowledged records are missing from the segments",
            segments.expected.len() - segments.next
        ));
    }
    Ok(sealed)
}

/// Whether `dir`'s table of streams (or of `consumers`) holds `tables` as
/// FORMAT.md encodes it; no file holds none. `undo` first puts back what
/// faults changed in the file's bytes (none: as they are).
pub fn holds_table(
    vfs: &SimVfs,
    dir: &Path,
    tables: &Tables,
    consumers: bool,
    undo: impl FnOnce(&Path, &mut Vec<u8>),
) -> bool {
    let (name, want, empty) = match consumers {
        true => (
            CONSUMERS_FILE_NAME,
            consumers_file(tables),
            tables.consumers.is_empty(),
        ),
        false => (
            STREAMS_FILE_NAME,
            streams_file(tables),
            tables.entries.is_empty(),
        ),
    };
    let path = dir.join(name);
    match vfs.file_contents(&path) {
        Some(mut found) => {
            undo(&path, &mut found);
            found == want
        }
        None => empty,
    }
}

/// The acknowledged records, matched against the segments in name order.
struct Segments<'m> {
    /// Seq and bytes of every acknowledged record, in seq order.
    expected: Vec<(u64, &'m [u8])>,
    /// The first record no segment has matched yet.
    next: usize,
    last_seq: u64,
    segment_bytes: u64,
    /// In the segment being checked: where a duplicated write copied a
    /// write over zeros (`SimVfs::duplicated_writes`).
    copies: Vec<Range<u64>>,
}

impl Segments<'_> {
    /// The segment `name` holds the next records, exactly, and nothing
    /// else but (in the last segment) a zero tail.
    fn check(&mut self, name: &str, bytes: &[u8], is_last: bool) -> Result<(), String> {
        if all_zeros(bytes) {
            return self.check_empty(name, bytes, is_last);
        }
        let Some((first_seq, _)) = self.expected.get(self.next) else {
            return Err(format!(
                "{name} holds bytes past the last acknowledged record"
            ));
        };
        if segment_first_seq(name) != Some(*first_seq) {
            return Err(format!("segment {name} starts with seq {first_seq}"));
        }
        let mut offset = 0;
        let mut records = 0;
        while offset < bytes.len() {
            let next = self.expected.get(self.next);
            // The next record first: a copy a duplicated write left may
            // have been overwritten by it, and then reads as a zero tail.
            let found =
                next.filter(|(_, want)| bytes.get(offset..offset + want.len()) == Some(*want));
            if found.is_none() && is_last && self.is_zero_tail(bytes, offset) {
                let (len, end) = (bytes.len() as u64, offset as u64);
                check_zero_tail(name, len, end, self.segment_bytes)?;
                break;
            }
            let Some((seq, want)) = next else {
                return Err(format!(
                    "{name} at offset {offset}: bytes past the last acknowledged record"
                ));
            };
            if found.is_none() {
                return Err(format!(
                    "{name} at offset {offset}: seq {seq} is not encoded as FORMAT.md says"
                ));
            }
            offset += want.len();
            self.next += 1;
            records += 1;
        }
        if offset as u64 > self.segment_bytes && records > 1 {
            return Err(format!(
                "{name} holds {offset} bytes in {records} records, over the segment limit {}",
                self.segment_bytes
            ));
        }
        Ok(())
    }

    /// Whether `bytes` from `offset` on are a zero tail: zeros, but where
    /// a duplicated write put its copy over zeros (those bytes are the
    /// disk's garbage; any other byte is the log's).
    fn is_zero_tail(&self, bytes: &[u8], offset: usize) -> bool {
        if self.copies.is_empty() {
            // The common case, a preallocated tail, compared as a slice.
            return all_zeros(&bytes[offset..]);
        }
        let copied = |at: usize| (self.copies.iter()).any(|copy| copy.contains(&(at as u64)));
        (bytes[offset..].iter().enumerate())
            .all(|(index, &byte)| byte == 0 || copied(offset + index))
    }

    /// A segment of zeros only: the last one, freshly rolled, named by the
    /// seq its first record will have.
    fn check_empty(&self, name: &str, bytes: &[u8], is_last: bool) -> Result<(), String> {
        if !is_last {
            return Err(format!("sealed segment {name} holds no record"));
        }
        let seq = self
            .expected
            .get(self.next)
            .map_or(self.last_seq + 1, |(seq, _)| *seq);
        if segment_first_seq(name) != Some(seq) {
            return Err(format!(
                "the empty last segment is {name}, the next seq is {seq}"
            ));
        }
        check_zero_tail(name, bytes.len() as u64, 0, self.segment_bytes)
    }
}

/// Whether `bytes` are all zeros: 64 at a time, or-ed together where the
/// compiler can do it in vector registers (byte by byte, the zero tails of
/// preallocated segments took 2% of a run).
fn all_zeros(bytes: &[u8]) -> bool {
    let (chunks, rest) = bytes.as_chunks::<64>();
    chunks
        .iter()
        .all(|chunk| chunk.iter().fold(0, |acc, &byte| acc | byte) == 0)
        && rest.iter().all(|&byte| byte == 0)
}

/// A preallocated zero tail never takes a segment past its limit (a
/// segment holding one oversized record gets none).
fn check_zero_tail(
    name: &str,
    file_len: u64,
    records_end: u64,
    segment_bytes: u64,
) -> Result<(), String> {
    if file_len > segment_bytes.max(records_end) {
        return Err(format!(
            "{name}: a zero tail takes it to {file_len} bytes, past the segment limit {segment_bytes}"
        ));
    }
    Ok(())
}

/// A duplicated write's copy (`SimVfs::duplicated_writes`): where it
/// stands in `file`, and where the bytes it copies start.
pub struct Copied {
    pub file: PathBuf,
    pub bytes: Range<u64>,
    pub from: u64,
}

/// One acknowledged record, where FORMAT.md puts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub seq: u64,
    /// Shared by the records of one segment: a placement is made for every
    /// read the oracle excuses, and a path per record was most of its cost.
    pub file: Arc<Path>,
    pub offset: u64,
    pub len: u64,
}

impl Placed {
    /// The record's bytes in its file.
    pub fn bytes(&self) -> Range<u64> {
        self.offset..self.offset + self.len
    }
}

/// Where each acknowledged record lies: in the segment named by the
/// largest first seq at or below its own, right after the record before
/// it there. Computed from the model's sizes and the segment names in the
/// directory, never from the engine.
pub struct Placement {
    records: Vec<Placed>,
}

impl Placement {
    pub fn new(vfs: &SimVfs, dir: &Path, model: &Model) -> Placement {
        let mut firsts: Vec<u64> = vfs
            .list_dir(dir)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|entry| segment_first_seq(&entry.name))
            .collect();
        firsts.sort_unstable();
        let mut records = Vec::new();
        let mut offset = 0;
        let mut current: Option<(u64, Arc<Path>)> = None;
        for (seq, bytes) in model.encoded_records() {
            let Some(&first) = firsts.iter().rev().find(|&&first| first <= seq) else {
                continue;
            };
            let file = match &current {
                Some((current_first, file)) if *current_first == first => Arc::clone(file),
                _ => {
                    let file: Arc<Path> = Arc::from(segment_file(dir, first));
                    current = Some((first, Arc::clone(&file)));
                    offset = 0;
                    file
                }
            };
            let len = bytes.len() as u64;
            records.push(Placed {
                seq,
                file,
                offset,
                len,
            });
            offset += len;
        }
        Placement { records }
    }

    /// The record that starts at `offset` of `file`.
    pub fn at(&self, file: &Path, offset: u64) -> Option<&Placed> {
        self.records
            .iter()
            .find(|placed| *placed.file == *file && placed.offset == offset)
    }

    /// The record with seq `seq`.
    pub fn of(&self, seq: u64) -> Option<&Placed> {
        self.records.iter().find(|placed| placed.seq == seq)
    }

    /// Where the acknowledged records of `file` end (0 if it holds none).
    pub fn end_in(&self, file: &Path) -> u64 {
        self.records
            .iter()
            .filter(|placed| *placed.file == *file)
            .map(|placed| placed.offset + placed.len)
            .max()
            .unwrap_or(0)
    }
}

/// The segment file in `dir` whose first seq is `first`, by FORMAT.md:
/// 20 decimal digits and `.log` (written out by hand: `format!` took more
/// than half the cost of a placement).
fn segment_file(dir: &Path, first: u64) -> PathBuf {
    let mut name = *b"00000000000000000000.log";
    let mut rest = first;
    for digit in name[..20].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    dir.join(std::str::from_utf8(&name).expect("digits and .log are ASCII"))
}

/// The first seq a segment file name gives, by FORMAT.md: 20 decimal
/// digits and `.log`.
fn segment_first_seq(name: &str) -> Option<u64> {
    first_seq_named(name, ".log")
}

fn index_first_seq(name: &str) -> Option<u64> {
    first_seq_named(name, ".idx")
}

/// The seq of 20 decimal digits followed by `suffix`.
fn first_seq_named(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?.as_bytes();
    if digits.len() != 20 {
        return None;
    }
    // One pass, digit by digit (checked: 20 digits can pass u64::MAX).
    digits.iter().try_fold(0u64, |seq, &digit| {
        let digit = digit.is_ascii_digit().then(|| u64::from(digit - b'0'))?;
        seq.checked_mul(10)?.checked_add(digit)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_seqs_are_read_as_parse_reads_them() {
        let cases = [
            "00000000000000000001.log",
            "18446744073709551615.log",
            "18446744073709551616.log",
            "99999999999999999999.log",
            "0000000000000000001.log",
            "000000000000000000012.log",
            "0000000000000000000a.log",
            "+0000000000000000001.log",
            "00000000000000000001.idx",
        ];
        for name in cases {
            let want = name
                .strip_suffix(".log")
                .filter(|digits| digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|digits| digits.parse::<u64>().ok());
            assert_eq!(super::segment_first_seq(name), want, "{name}");
        }
    }

    #[test]
    fn segment_files_are_named_by_twenty_digits() {
        let dir = std::path::Path::new("/d");
        for first in [0, 1, 9, 10, 1234567890, u64::MAX] {
            assert_eq!(
                super::segment_file(dir, first),
                dir.join(format!("{first:020}.log"))
            );
        }
    }

    /// A non-zero byte anywhere (in a whole chunk of 64 or in the rest)
    /// is seen, and zeros of every length pass.
    #[test]
    fn all_zeros_sees_every_byte() {
        for len in [0, 1, 63, 64, 65, 200] {
            let zeros = vec![0u8; len];
            assert!(super::all_zeros(&zeros), "{len} zeros");
            for at in 0..len {
                let mut bytes = zeros.clone();
                bytes[at] = 0x10;
                assert!(!super::all_zeros(&bytes), "{len} bytes, one set at {at}");
            }
        }
    }
}
