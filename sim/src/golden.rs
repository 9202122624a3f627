//! An independent statement of the on-disk format (FORMAT.md), written
//! without the engine's code: the oracle encodes every acknowledged append
//! itself and checks that the segment files hold exactly those bytes, in
//! segments named by their first seq and no larger than the limit unless a
//! single record is. A log that computed its CRC differently, or named or
//! rolled its segments wrong, passes its own recovery but fails here.

use std::ops::Range;
use std::path::{Path, PathBuf};

use durlog_vfs::{SimVfs, Vfs};

use crate::model::{Deleted, Extras, Model, ModelEvent, Tables};

/// CRC-32C's table for the reflected polynomial 0x82F63B78.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

fn crc32c(parts: &[&[u8]]) -> u32 {
    let mut crc = !0u32;
    for part in parts {
        for &byte in *part {
            crc = CRC_TABLE[((crc ^ u32::from(byte)) & 0xFF) as usize] ^ (crc >> 8);
        }
    }
    !crc
}

/// Where an encoding goes: into bytes, or only into a count of them, so
/// that a record's size and its bytes come from one encoder.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Counts the bytes an encoding would write.
struct Length(u64);

impl Sink for Length {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len() as u64;
    }
}

/// A record's header: payload length, CRC-32C over seq and payload, seq.
fn header(sink: &mut impl Sink, payload_bytes: u32, crc: u32, seq: u64) {
    sink.put(&payload_bytes.to_le_bytes());
    sink.put(&crc.to_le_bytes());
    sink.put(&seq.to_le_bytes());
}

/// A record's payload: the batch of one append's events, each followed by
/// its extras where any event of the batch has some (the count's top bit
/// says so).
fn payload(sink: &mut impl Sink, stream: &str, first_version: u64, events: &[ModelEvent]) {
    let with_extras = events.iter().any(|event| !event.extras.is_empty());
    sink.put(&(stream.len() as u16).to_le_bytes());
    sink.put(stream.as_bytes());
    sink.put(&first_version.to_le_bytes());
    let count = events.len() as u32 | if with_extras { 1 << 31 } else { 0 };
    sink.put(&count.to_le_bytes());
    for event in events {
        sink.put(&(event.event_type.len() as u16).to_le_bytes());
        sink.put(event.event_type.as_bytes());
        sink.put(&event.at.to_le_bytes());
        sink.put(&(event.data.len() as u32).to_le_bytes());
        sink.put(&event.data);
        if with_extras {
            extras(sink, &event.extras);
        }
    }
}

/// An event's extras: which of them it has (bit 0 id, bit 1 metadata,
/// bit 2 content type), then each that it has.
fn extras(sink: &mut impl Sink, extras: &Extras) {
    let has_metadata = !extras.metadata.is_empty();
    let flags = u8::from(extras.id.is_some())
        | u8::from(has_metadata) << 1
        | u8::from(extras.content_type.is_some()) << 2;
    sink.put(&[flags]);
    if let Some(id) = &extras.id {
        sink.put(id);
    }
    if has_metadata {
        sink.put(&(extras.metadata.len() as u32).to_le_bytes());
        sink.put(&extras.metadata);
    }
    if let Some(content_type) = &extras.content_type {
        sink.put(&(content_type.len() as u16).to_le_bytes());
        sink.put(content_type.as_bytes());
    }
}

/// The record bytes FORMAT.md gives for one append.
pub fn record(seq: u64, stream: &str, first_version: u64, events: &[ModelEvent]) -> Vec<u8> {
    let mut batch = Vec::new();
    payload(&mut batch, stream, first_version, events);
    let mut out = Vec::new();
    let crc = crc32c(&[&seq.to_le_bytes(), &batch]);
    header(&mut out, batch.len() as u32, crc, seq);
    out.extend_from_slice(&batch);
    out
}

/// The seq and length of the valid record (its length fits, its CRC over
/// seq and payload matches) at the front of `bytes`, by FORMAT.md.
pub fn parse(bytes: &[u8]) -> Option<(u64, usize)> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let seq = bytes.get(8..16)?;
    let payload = bytes.get(16..16usize.checked_add(len)?)?;
    (crc32c(&[seq, payload]) == crc).then(|| {
        (
            u64::from_le_bytes(seq.try_into().expect("8 bytes")),
            16 + len,
        )
    })
}

/// The size of the record [`record`] gives for one append, without
/// encoding it (seq, version and times do not change a record's size).
pub fn record_bytes(stream: &str, events: &[ModelEvent]) -> u64 {
    let mut length = Length(0);
    header(&mut length, 0, 0, 0);
    payload(&mut length, stream, 0, events);
    length.0
}

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

/// The table of stream metadata FORMAT.md gives for `tables`, if it has
/// an entry (a log that never had one has no file).
pub fn streams_file(tables: &Tables) -> Vec<u8> {
    table(b"DURLOGSM", tables.entries.iter(), |out, entry| {
        let numbers = [
            entry.max_count,
            entry.max_age,
            entry.truncate_before,
            match entry.deleted {
                Some(Deleted::Soft(at)) => Some(at),
                _ => None,
            },
        ];
        let flags = numbers
            .iter()
            .enumerate()
            .map(|(bit, number)| u8::from(number.is_some()) << bit)
            .sum::<u8>()
            | u8::from(entry.deleted == Some(Deleted::Hard)) << 4;
        out.put(&[flags]);
        for number in numbers {
            out.put(&number.unwrap_or(0).to_le_bytes());
        }
    })
}

/// The table of consumer positions FORMAT.md gives for `tables`.
pub fn consumers_file(tables: &Tables) -> Vec<u8> {
    table(b"DURLOGCP", tables.consumers.iter(), |out, seq| {
        out.put(&seq.to_le_bytes())
    })
}

fn table<'a, V: 'a>(
    magic: &[u8; 8],
    entries: impl ExactSizeIterator<Item = (&'a String, &'a V)>,
    value: impl Fn(&mut Vec<u8>, &V),
) -> Vec<u8> {
    let mut body = Vec::new();
    body.put(&(entries.len() as u32).to_le_bytes());
    for (name, entry) in entries {
        body.put(&(name.len() as u16).to_le_bytes());
        body.put(name.as_bytes());
        value(&mut body, entry);
    }
    let mut out = magic.to_vec();
    out.put(&1u32.to_le_bytes());
    out.put(&crc32c(&[&body]).to_le_bytes());
    out.put(&body);
    out
}

/// The state file FORMAT.md gives for a log whose first kept record is
/// `first_seq`, with no truncation under way, whose streams stood at
/// `purged` (by name) before it.
pub fn state_file(first_seq: u64, purged: &std::collections::BTreeMap<String, u64>) -> Vec<u8> {
    let mut body = Vec::new();
    body.put(&first_seq.to_le_bytes());
    body.put(&u64::MAX.to_le_bytes());
    body.put(&(purged.len() as u32).to_le_bytes());
    for (name, version) in purged {
        body.put(&(name.len() as u16).to_le_bytes());
        body.put(name.as_bytes());
        body.put(&version.to_le_bytes());
    }
    let mut out = b"DURLOGST".to_vec();
    out.put(&1u32.to_le_bytes());
    out.put(&crc32c(&[&body]).to_le_bytes());
    out.put(&body);
    out
}

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
pub fn check_layout(
    vfs: &SimVfs,
    dir: &Path,
    model: &Model,
    tables: &[Tables],
    segment_bytes: u64,
    max_bytes: u64,
    copies: &[Copied],
) -> Result<(), String> {
    vfs.with_dir_contents(dir, |entries| {
        let mut files = Files {
            dir,
            entries: entries.to_vec(),
        };
        let limits = (segment_bytes, max_bytes);
        check_files(&mut files, model, tables, limits, copies)
    })
    .unwrap_or_else(|| Err(format!("no directory {}", dir.display())))
}

/// `check_layout` of the files of one directory.
fn check_files(
    files: &mut Files<'_>,
    model: &Model,
    tables: &[Tables],
    (segment_bytes, max_bytes): (u64, u64),
    copies: &[Copied],
) -> Result<(), String> {
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
        segments.check(name, bytes, is_last)?;
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
    Ok(())
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
    pub file: PathBuf,
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
        let mut current = None;
        for (seq, bytes) in model.encoded_records() {
            let Some(&first) = firsts.iter().rev().find(|&&first| first <= seq) else {
                continue;
            };
            if current != Some(first) {
                current = Some(first);
                offset = 0;
            }
            let len = bytes.len() as u64;
            records.push(Placed {
                seq,
                file: dir.join(format!("{first:020}.log")),
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
            .find(|placed| placed.file == file && placed.offset == offset)
    }

    /// The record with seq `seq`.
    pub fn of(&self, seq: u64) -> Option<&Placed> {
        self.records.iter().find(|placed| placed.seq == seq)
    }

    /// Where the acknowledged records of `file` end (0 if it holds none).
    pub fn end_in(&self, file: &Path) -> u64 {
        self.records
            .iter()
            .filter(|placed| placed.file == file)
            .map(|placed| placed.offset + placed.len)
            .max()
            .unwrap_or(0)
    }
}

/// The first seq a segment file name gives, by FORMAT.md: 20 decimal
/// digits and `.log`.
fn segment_first_seq(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    (digits.len() == 20 && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use crate::model::{Extras, ModelEvent};

    fn event(event_type: &str, data: &[u8]) -> ModelEvent {
        ModelEvent {
            event_type: event_type.to_owned(),
            data: data.to_vec(),
            at: 0,
            extras: Extras::default(),
        }
    }

    /// The worked example of FORMAT.md, computed independently of the engine.
    #[test]
    fn golden_example() {
        let bytes = super::record(1, "s", 1, &[event("T", b"hi")]);
        assert_eq!(bytes.len(), 48);
        assert_eq!(super::record_bytes("s", &[event("T", b"hi")]), 48);
        assert_eq!(
            &bytes[..16],
            &[
                0x20, 0, 0, 0, 0x5e, 0x1a, 0x72, 0x0b, 1, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        assert_eq!(super::crc32c(&[b"123456789"]), 0xE306_9283);
        // The state file's worked example (FORMAT.md), and the engine's
        // encoder agreeing with this one.
        let purged = [("s".to_owned(), 2)].into();
        let state = super::state_file(3, &purged);
        assert_eq!(state.len(), 36 + 2 + 1 + 8);
        assert_eq!(&state[..12], b"DURLOGST\x01\0\0\0");
        let engine = durlog::LogState {
            first_seq: 3,
            truncate_after: None,
            purged_versions: purged,
        };
        assert_eq!(state, engine.encode());
        for data in ["one", "two", "three"] {
            let events = [event("t", data.as_bytes())];
            assert_eq!(super::record(1, "s", 1, &events).len(), 46 + data.len());
            assert_eq!(super::record_bytes("s", &events), 46 + data.len() as u64);
        }
    }

    /// Events with extras (an id, metadata, a content type, each alone and
    /// all three) are encoded as the engine encodes them, and a batch
    /// with none of them as before extras existed.
    #[test]
    fn extras_as_the_engine_encodes_them() {
        let plain = durlog::Event::new("T", "hi");
        let engine_events = [
            plain.clone().with_id([7; 16]),
            plain.clone().with_metadata("m"),
            plain.clone().with_content_type("text/plain"),
            plain
                .clone()
                .with_id([9; 16])
                .with_metadata("meta")
                .with_content_type("a/b"),
            plain.clone(),
        ];
        let model: Vec<ModelEvent> = (engine_events.iter())
            .map(|event| {
                let mut event = event.clone();
                event.at = 5;
                super::ModelEvent::acknowledged(event, 5)
            })
            .collect();
        let mut engine = Vec::new();
        let at_five: Vec<durlog::Event> = (engine_events.iter())
            .map(|event| {
                let mut event = event.clone();
                event.at = 5;
                event
            })
            .collect();
        durlog::append_record(&mut engine, 3, &durlog::encode_batch("s", 2, &at_five));
        assert_eq!(super::record(3, "s", 2, &model), engine);
        assert_eq!(super::record_bytes("s", &model), engine.len() as u64);
        let none = [event("T", b"hi")];
        assert_eq!(
            super::record(1, "s", 1, &none).len(),
            48,
            "no extras, as before"
        );
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
