//! A log directory described by a fuzz input: one to four files, each named
//! near the segment name the records in it call for (or not a segment name
//! at all), each holding either a run of valid records, then mutated, or
//! arbitrary bytes. The `recover` and `cli` targets lay it out, on a
//! `SimVfs` and on a real directory.
//!
//! The records continue one chain across the files: seq 1, 2, ... and dense
//! versions per stream. A record can be told to state a wrong seq or first
//! version; the chain goes on as if it had not, so what follows it is right
//! and a recovery that skipped it would be caught. Every mutation is bounded,
//! so one input stays a few KiB and an execution stays cheap.

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use durlog::{Event, append_record, encode_batch, segment_name};

/// Files in one directory, at most.
pub const FILES_MAX: usize = 4;
/// Records in one file, at most.
pub const RECORDS_MAX: usize = 8;
/// Events in one record, at most.
pub const EVENTS_MAX: usize = 4;
/// Mutations of one file, at most.
pub const MUTATIONS_MAX: usize = 4;
/// Bytes of arbitrary content (a garbage tail, an overwrite, a raw file).
pub const RAW_BYTES_MAX: usize = 512;
/// Zero bytes one mutation appends, at most.
pub const ZERO_TAIL_BYTES_MAX: usize = 8192;

/// The stream names records use: short, long, non-ASCII.
const STREAMS: [&str; 4] = ["a", "b", "orders-2024/eu", "flüsse"];
/// The event types records use.
const EVENT_TYPES: [&str; 3] = ["t", "created", "ünï"];
/// Names that are not segments (or only look like one), and one that is a
/// segment's name but a directory (`DIRECTORY_NAME`).
const STRAY_NAMES: [&str; 7] = [
    "junk",
    "00000000000000000001.log.tmp",
    "1.log",
    "0000000000000000000x.log",
    "00000000000000000001.LOG",
    "99999999999999999999.log",
    DIRECTORY_NAME,
];
/// A directory named like the first segment.
const DIRECTORY_NAME: &str = "00000000000000000001.log/";

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct DirSpec {
    pub first: FileSpec,
    /// Up to `FILES_MAX - 1` more files.
    pub more: Vec<FileSpec>,
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    pub name: NameSpec,
    pub content: ContentSpec,
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum NameSpec {
    /// The seq of the first record the chain puts in this file.
    Expected,
    /// That seq plus this (a wrong name unless 0).
    Off(i8),
    /// Any seq.
    Seq(u64),
    /// Not a segment: `STRAY_NAMES[index % len]`.
    Stray(u8),
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum ContentSpec {
    /// Records of the chain, then mutations of the file's bytes.
    Records {
        records: Vec<RecordSpec>,
        mutations: Vec<Mutation>,
    },
    /// Arbitrary bytes (up to `RAW_BYTES_MAX`).
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct RecordSpec {
    /// `STREAMS[stream % len]`.
    pub stream: u8,
    /// Up to `EVENTS_MAX`; none means one default event.
    pub events: Vec<EventSpec>,
    /// Added to the seq the chain calls for (0: right).
    pub seq_skew: i8,
    /// Added to the first version the chain calls for (0: right).
    pub version_skew: i8,
}

#[derive(Arbitrary, Clone, Debug, Default, PartialEq, Eq)]
pub struct EventSpec {
    /// `EVENT_TYPES[event_type % len]`.
    pub event_type: u8,
    /// Data length.
    pub len: u8,
    /// Data pattern: byte i is `fill + 31 * i`.
    pub fill: u8,
    pub at: i64,
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Cut the file at `at % (len + 1)`.
    Truncate(u16),
    /// Flip bit `bit % (8 * len)`.
    FlipBit(u16),
    /// Append these bytes.
    GarbageTail(Vec<u8>),
    /// Append `n % (ZERO_TAIL_BYTES_MAX + 1)` zero bytes.
    ZeroTail(u16),
    /// Append a copy of record `index % records` (as first written).
    DuplicateRecord(u8),
    /// Leave record `index % records` out (applied before the byte edits).
    DropRecord(u8),
    /// Swap two records (applied before the byte edits).
    SwapRecords(u8, u8),
    /// Overwrite bytes from `at % (len + 1)` on, extending the file.
    Overwrite { at: u16, bytes: Vec<u8> },
}

impl Mutation {
    fn is_record_edit(&self) -> bool {
        matches!(self, Mutation::DropRecord(_) | Mutation::SwapRecords(..))
    }

    /// True for the edits that can bring in bytes the chain never wrote.
    fn brings_foreign_bytes(&self) -> bool {
        matches!(self, Mutation::GarbageTail(_) | Mutation::Overwrite { .. })
    }
}

/// One event the chain wrote, as a read must return it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEvent {
    pub event_type: String,
    pub data: Vec<u8>,
    pub at: i64,
}

/// A file (or directory) of the laid-out log directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    File(Vec<u8>),
    Directory,
}

/// What a `DirSpec` lays out, and what is known about it.
#[derive(Clone, Debug, Default)]
pub struct Built {
    /// Entries by file name, in the order they are created (a later file of
    /// the same name replaces an earlier one; one is never both).
    pub entries: BTreeMap<String, Entry>,
    /// Every event any record of any file states, by (stream, version):
    /// what a recovered event may be, unless `foreign` is set.
    pub written: BTreeMap<(String, u64), Vec<ModelEvent>>,
    /// Some file holds bytes the chain did not write (raw content, garbage,
    /// overwrites, or more than 3 bit flips in one file, which CRC-32C no
    /// longer detects in every case): a valid record the chain never wrote
    /// may then appear, so `written` does not bound what Open finds.
    pub foreign: bool,
    /// Every file is a run of right records under its right name, the last
    /// file may be empty and may end in zeros: Open must keep it all, and
    /// this is what it must read back (stream to events, and the last seq).
    pub valid: Option<(BTreeMap<String, Vec<ModelEvent>>, u64)>,
}

impl DirSpec {
    /// The files, at most `FILES_MAX`.
    pub fn files(&self) -> impl Iterator<Item = &FileSpec> {
        std::iter::once(&self.first).chain(self.more.iter().take(FILES_MAX - 1))
    }

    /// Lays the directory out in memory.
    pub fn build(&self) -> Built {
        let mut chain = Chain {
            next_seq: 1,
            ..Chain::default()
        };
        let mut built = Built::default();
        let mut valid = true;
        let files: Vec<&FileSpec> = self.files().collect();
        for (position, file) in files.iter().enumerate() {
            let is_last = position + 1 == files.len();
            let expected_seq = chain.next_seq;
            let (bytes, file_valid) = match &file.content {
                ContentSpec::Records { records, mutations } => {
                    chain.file(records, mutations, is_last, &mut built)
                }
                ContentSpec::Raw(bytes) => {
                    built.foreign = true;
                    (bytes[..bytes.len().min(RAW_BYTES_MAX)].to_vec(), false)
                }
            };
            valid &= file_valid;
            let name = match file.name {
                NameSpec::Expected => segment_name(expected_seq),
                NameSpec::Off(delta) => {
                    segment_name(expected_seq.wrapping_add_signed(i64::from(delta)))
                }
                NameSpec::Seq(seq) => segment_name(seq),
                NameSpec::Stray(index) => {
                    STRAY_NAMES[usize::from(index) % STRAY_NAMES.len()].into()
                }
            };
            valid &= name == segment_name(expected_seq);
            // A file's name reused: the later content wins, as a rename
            // over it would leave; a directory stays a directory.
            let entry = match name.strip_suffix('/') {
                Some(directory) => (directory.to_owned(), Entry::Directory),
                None => (name, Entry::File(bytes)),
            };
            if built.entries.get(&entry.0) != Some(&Entry::Directory) {
                built.entries.insert(entry.0, entry.1);
            }
        }
        if valid {
            built.valid = Some((chain.model, chain.next_seq - 1));
        }
        built
    }
}

/// The chain of records the files continue.
#[derive(Default)]
struct Chain {
    next_seq: u64,
    versions: BTreeMap<&'static str, u64>,
    /// The events of the right records, by stream.
    model: BTreeMap<String, Vec<ModelEvent>>,
}

impl Chain {
    /// One file of records and its mutations; returns its bytes and whether
    /// it is a valid segment (right records, no damage).
    fn file(
        &mut self,
        records: &[RecordSpec],
        mutations: &[Mutation],
        is_last: bool,
        built: &mut Built,
    ) -> (Vec<u8>, bool) {
        let records = &records[..records.len().min(RECORDS_MAX)];
        let mutations = &mutations[..mutations.len().min(MUTATIONS_MAX)];
        let mut valid = records
            .iter()
            .all(|record| record.seq_skew == 0 && record.version_skew == 0)
            && !mutations.iter().any(Mutation::is_record_edit);
        let mut encoded: Vec<Vec<u8>> = records
            .iter()
            .map(|record| self.record(record, built))
            .collect();
        let originals = encoded.clone();
        for mutation in mutations
            .iter()
            .filter(|mutation| mutation.is_record_edit())
        {
            match *mutation {
                Mutation::DropRecord(index) if !encoded.is_empty() => {
                    encoded.remove(usize::from(index) % encoded.len());
                }
                Mutation::SwapRecords(a, b) if !encoded.is_empty() => {
                    let len = encoded.len();
                    encoded.swap(usize::from(a) % len, usize::from(b) % len);
                }
                _ => {}
            }
        }
        let mut bytes = encoded.concat();
        let mut flips = 0;
        for mutation in mutations
            .iter()
            .filter(|mutation| !mutation.is_record_edit())
        {
            built.foreign |= mutation.brings_foreign_bytes();
            match mutation {
                Mutation::Truncate(at) => bytes.truncate(usize::from(*at) % (bytes.len() + 1)),
                Mutation::FlipBit(bit) if !bytes.is_empty() => {
                    let bit = usize::from(*bit) % (8 * bytes.len());
                    bytes[bit / 8] ^= 1 << (bit % 8);
                    flips += 1;
                }
                Mutation::FlipBit(_) => {}
                Mutation::GarbageTail(garbage) => {
                    bytes.extend_from_slice(&garbage[..garbage.len().min(RAW_BYTES_MAX)]);
                }
                Mutation::ZeroTail(n) => {
                    let n = usize::from(*n) % (ZERO_TAIL_BYTES_MAX + 1);
                    bytes.resize(bytes.len() + n, 0);
                }
                Mutation::DuplicateRecord(index) if !originals.is_empty() => {
                    bytes.extend_from_slice(&originals[usize::from(*index) % originals.len()]);
                }
                Mutation::DuplicateRecord(_) => {}
                Mutation::Overwrite { at, bytes: with } => {
                    let at = usize::from(*at) % (bytes.len() + 1);
                    let with = &with[..with.len().min(RAW_BYTES_MAX)];
                    bytes.resize(bytes.len().max(at + with.len()), 0);
                    bytes[at..at + with.len()].copy_from_slice(with);
                }
                Mutation::DropRecord(_) | Mutation::SwapRecords(..) => {
                    unreachable!("applied above")
                }
            }
            // A zero tail on the last file is the end of the log, not damage.
            valid &= is_last && matches!(mutation, Mutation::ZeroTail(_));
        }
        // CRC-32C catches every error of up to 3 bits at these lengths.
        built.foreign |= flips > 3;
        // Only the active segment may be empty.
        valid &= is_last || !records.is_empty();
        (bytes, valid)
    }

    /// Encodes the next record of the chain (skewed as `spec` says), and
    /// moves the chain on as if it were right.
    fn record(&mut self, spec: &RecordSpec, built: &mut Built) -> Vec<u8> {
        let stream = STREAMS[usize::from(spec.stream) % STREAMS.len()];
        let version = self.versions.entry(stream).or_insert(0);
        let first_version = (*version + 1).wrapping_add_signed(i64::from(spec.version_skew));
        let default = [EventSpec::default()];
        let specs = match &spec.events[..] {
            [] => &default[..],
            events => &events[..events.len().min(EVENTS_MAX)],
        };
        let events: Vec<Event> = specs
            .iter()
            .map(|event| {
                let data: Vec<u8> = (0..event.len)
                    .map(|i| event.fill.wrapping_add(i.wrapping_mul(31)))
                    .collect();
                let mut event_out = Event::new(
                    EVENT_TYPES[usize::from(event.event_type) % EVENT_TYPES.len()],
                    data,
                );
                event_out.at = event.at;
                event_out
            })
            .collect();
        let models: Vec<ModelEvent> = events
            .iter()
            .map(|event| ModelEvent {
                event_type: event.event_type.clone(),
                data: event.data.clone(),
                at: event.at,
            })
            .collect();
        for (index, model) in models.iter().enumerate() {
            built
                .written
                .entry((stream.to_owned(), first_version.wrapping_add(index as u64)))
                .or_default()
                .push(model.clone());
        }
        let seq = self.next_seq.wrapping_add_signed(i64::from(spec.seq_skew));
        let mut bytes = Vec::new();
        append_record(
            &mut bytes,
            seq,
            &encode_batch(stream, first_version, &events),
        );
        *version += events.len() as u64;
        self.next_seq += 1;
        self.model
            .entry(stream.to_owned())
            .or_default()
            .extend(models);
        bytes
    }
}
