//! The `recover` target's tables: the two files beside the records
//! (`durlog.streams`, `durlog.consumers`, FORMAT.md "Stream metadata and
//! consumer positions") and their temporary names, laid out from the
//! input next to the segments, as tables the engine encodes and then
//! damages, as raw bytes, or as a directory where a table belongs.
//!
//! What Open must make of them, against an independent model of what a
//! stream's entry shows ([`shows`]) and the same directory opened without
//! them (its records, the raw log):
//! - a raw log refused stays refused, touching nothing;
//! - a damaged table (one that does not decode, or a directory) is refused
//!   by Open, the read-only Open and verify alike, naming a damaged table,
//!   touching nothing;
//! - else Open keeps the tables byte for byte and removes the temporary
//!   names (nothing else changes beyond what it does without tables); each
//!   entry reads back (`stream_metadata`, `consumer_position`); `read`,
//!   `read_all` and `streams` show exactly what the entries let through of
//!   the raw log; a position recorded and a deletion then survive a power
//!   loss.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arbitrary::Arbitrary;
use durlog::format::{
    CONSUMERS_FILE_NAME, CONSUMERS_TEMP_NAME, Deleted, STREAMS_FILE_NAME, STREAMS_TEMP_NAME,
    StreamEntry, decode_consumers, decode_streams, encode_consumers, encode_streams,
};
use durlog::vfs::{SimVfs, Vfs};
use durlog::{Commit, Deletion, Error, Event, Filter, Log, Options, StreamMetadata, recovery};

/// Entries in one table, at most.
pub const TABLE_ENTRIES_MAX: usize = 6;
/// Bytes of raw content or of one appended piece, at most.
pub const TABLE_RAW_BYTES_MAX: usize = 256;
/// Damages of one table, at most.
pub const TABLE_DAMAGES_MAX: usize = 3;

/// The names stream entries take: the layout's streams and two more.
const STREAM_NAMES: [&str; 6] = ["a", "b", "orders-2024/eu", "flüsse", "fresh", "gone"];
/// The names consumer entries take.
const CONSUMER_NAMES: [&str; 3] = ["projector", "mailer", "p"];

#[derive(Arbitrary, Clone, Debug, Default, PartialEq, Eq)]
pub struct TablesSpec {
    pub streams: Option<TableSpec<StreamEntrySpec>>,
    pub consumers: Option<TableSpec<u64>>,
    /// `durlog.streams.new`, left by a crash before its rename.
    pub streams_temp: Option<Vec<u8>>,
    /// `durlog.consumers.new`, likewise.
    pub consumers_temp: Option<Vec<u8>>,
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum TableSpec<V> {
    /// Entries (names by index) encoded by the engine, then damaged.
    Entries {
        entries: Vec<(u8, V)>,
        damages: Vec<TableDamage>,
    },
    /// Arbitrary bytes (up to `TABLE_RAW_BYTES_MAX`).
    Raw(Vec<u8>),
    /// A directory under the table's name.
    Directory,
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum TableDamage {
    /// Flip bit `bit % (8 * len)`.
    FlipBit(u16),
    /// Cut the file at `at % (len + 1)`.
    Truncate(u16),
    /// Append these bytes.
    Append(Vec<u8>),
}

/// A stream's entry, with values small enough to meet the layout's
/// versions (a few dozen at most).
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct StreamEntrySpec {
    pub max_count: Option<u8>,
    /// In seconds before the log's clock (`recover`'s `CLOCK_NS`); the
    /// layout's events are stamped at any time.
    pub max_age_seconds: Option<u32>,
    pub truncate_before: Option<u8>,
    /// 0: none; 1: soft at `soft_at`; 2: hard; any other: none.
    pub deleted: u8,
    pub soft_at: u8,
}

impl StreamEntrySpec {
    fn entry(&self) -> StreamEntry {
        let mut metadata = StreamMetadata::default();
        metadata.max_count = self.max_count.map(u64::from);
        metadata.max_age = self
            .max_age_seconds
            .map(|seconds| Duration::from_secs(u64::from(seconds)));
        metadata.truncate_before = self.truncate_before.map(u64::from);
        let deleted = match self.deleted {
            1 => Some(Deleted::Soft {
                at_version: u64::from(self.soft_at),
            }),
            2 => Some(Deleted::Hard),
            _ => None,
        };
        StreamEntry { metadata, deleted }
    }
}

/// One table file as laid out: its bytes, or a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
enum TableFile {
    Bytes(Vec<u8>),
    Directory,
}

impl<V> TableSpec<V> {
    /// The file, from the entries `encode` makes of the valid ones.
    fn file(&self, encode: impl Fn(&[(u8, V)]) -> Vec<u8>) -> TableFile {
        match self {
            TableSpec::Directory => TableFile::Directory,
            TableSpec::Raw(bytes) => {
                TableFile::Bytes(bytes[..bytes.len().min(TABLE_RAW_BYTES_MAX)].to_vec())
            }
            TableSpec::Entries { entries, damages } => {
                let mut bytes = encode(&entries[..entries.len().min(TABLE_ENTRIES_MAX)]);
                for damage in &damages[..damages.len().min(TABLE_DAMAGES_MAX)] {
                    match damage {
                        TableDamage::FlipBit(bit) if !bytes.is_empty() => {
                            let bit = usize::from(*bit) % (8 * bytes.len());
                            bytes[bit / 8] ^= 1 << (bit % 8);
                        }
                        TableDamage::FlipBit(_) => {}
                        TableDamage::Truncate(at) => {
                            bytes.truncate(usize::from(*at) % (bytes.len() + 1))
                        }
                        TableDamage::Append(more) => {
                            bytes.extend_from_slice(&more[..more.len().min(TABLE_RAW_BYTES_MAX)])
                        }
                    }
                }
                TableFile::Bytes(bytes)
            }
        }
    }
}

/// What the spec lays out, by file name, and what the tables hold when
/// both decode.
struct Laid {
    files: Vec<(&'static str, TableFile)>,
    /// Both tables (empty when absent), or `None` if one is damaged.
    tables: Option<(BTreeMap<String, StreamEntry>, BTreeMap<String, u64>)>,
    /// The tables' own names (not the temporary ones) that are damaged.
    damaged: Vec<&'static str>,
}

impl TablesSpec {
    pub fn is_empty(&self) -> bool {
        *self == TablesSpec::default()
    }

    /// Whether a table laid out from this does not decode (or is a
    /// directory): Open must refuse the log.
    pub fn is_damaged(&self) -> bool {
        self.lay().tables.is_none()
    }

    fn lay(&self) -> Laid {
        let mut files = Vec::new();
        let streams = self.streams.as_ref().map(|spec| {
            spec.file(|entries| {
                let table: BTreeMap<String, StreamEntry> = entries
                    .iter()
                    .map(|(name, spec)| {
                        let name = STREAM_NAMES[usize::from(*name) % STREAM_NAMES.len()];
                        (name.to_owned(), spec.entry())
                    })
                    // An empty entry is no entry: the engine never writes one.
                    .filter(|(_, entry)| *entry != StreamEntry::default())
                    .collect();
                encode_streams(&table)
            })
        });
        let consumers = self.consumers.as_ref().map(|spec| {
            spec.file(|entries| {
                let table: BTreeMap<String, u64> = entries
                    .iter()
                    .map(|(name, seq)| {
                        let name = CONSUMER_NAMES[usize::from(*name) % CONSUMER_NAMES.len()];
                        (name.to_owned(), *seq)
                    })
                    .collect();
                encode_consumers(&table)
            })
        });
        let mut damaged = Vec::new();
        let decoded_streams = match &streams {
            None => Some(BTreeMap::new()),
            Some(TableFile::Directory) => None,
            Some(TableFile::Bytes(bytes)) => decode_streams(bytes).ok(),
        };
        if decoded_streams.is_none() {
            damaged.push(STREAMS_FILE_NAME);
        }
        let decoded_consumers = match &consumers {
            None => Some(BTreeMap::new()),
            Some(TableFile::Directory) => None,
            Some(TableFile::Bytes(bytes)) => decode_consumers(bytes).ok(),
        };
        if decoded_consumers.is_none() {
            damaged.push(CONSUMERS_FILE_NAME);
        }
        files.extend(streams.map(|file| (STREAMS_FILE_NAME, file)));
        files.extend(consumers.map(|file| (CONSUMERS_FILE_NAME, file)));
        let temps = [
            (STREAMS_TEMP_NAME, &self.streams_temp),
            (CONSUMERS_TEMP_NAME, &self.consumers_temp),
        ];
        for (name, bytes) in temps {
            if let Some(bytes) = bytes {
                let bytes = bytes[..bytes.len().min(TABLE_RAW_BYTES_MAX)].to_vec();
                files.push((name, TableFile::Bytes(bytes)));
            }
        }
        Laid {
            files,
            tables: decoded_streams.zip(decoded_consumers),
            damaged,
        }
    }
}

/// Whether reads show the event at `version` stamped `at` of a stream at
/// `stream_version` with `entry`, the clock at `now`: SPEC section 14's
/// rules, written again here, apart from the engine's `Shown`.
pub fn shows(entry: &StreamEntry, stream_version: u64, version: u64, at: i64, now: i64) -> bool {
    let metadata = &entry.metadata;
    let mut first = 1u64;
    if let Some(count) = metadata.max_count {
        // Only the newest `count`: versions above stream_version - count.
        first = first.max(stream_version.saturating_sub(count).saturating_add(1));
    }
    if let Some(before) = metadata.truncate_before {
        first = first.max(before);
    }
    match entry.deleted {
        Some(Deleted::Soft { at_version }) => first = first.max(at_version.saturating_add(1)),
        Some(Deleted::Hard) => return false,
        None => {}
    }
    let old_enough_to_hide = metadata.max_age.is_some_and(|age| {
        let age = i64::try_from(age.as_nanos()).unwrap_or(i64::MAX);
        at < now.saturating_sub(age)
    });
    version >= first && !old_enough_to_hide
}

/// Whether `streams()` leaves the stream out: hard-deleted, or
/// soft-deleted with nothing appended since.
fn left_out(entry: Option<&StreamEntry>, version: u64) -> bool {
    match entry.and_then(|entry| entry.deleted) {
        Some(Deleted::Hard) => true,
        Some(Deleted::Soft { at_version }) => version <= at_version,
        None => false,
    }
}

fn put(vfs: &SimVfs, dir: &Path, files: &[(&str, TableFile)]) {
    for (name, file) in files {
        let path = dir.join(name);
        match file {
            TableFile::Bytes(bytes) => vfs.put_durable_file(&path, bytes),
            TableFile::Directory => vfs.create_dir_all(&path).expect("creating a directory"),
        }
    }
}

/// Every file's bytes, but for the lock file (as `recover`'s snapshot).
fn snapshot(vfs: &SimVfs) -> BTreeMap<PathBuf, Vec<u8>> {
    vfs.files()
        .into_iter()
        .filter(|path| !path.ends_with(durlog::format::LOCK_FILE_NAME))
        .map(|path| {
            let bytes = vfs.file_contents(&path).expect("a listed file");
            (path, bytes)
        })
        .collect()
}

/// The whole log, every stream's events and the streams listed.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    streams: Vec<String>,
    events: BTreeMap<String, Vec<Event>>,
    /// `read_all`: history, every event whatever the tables say.
    history: Vec<Commit>,
    /// `read_all_filtered` with the metadata applied.
    commits: Vec<Commit>,
}

fn seen(log: &Log, names: &[String]) -> Seen {
    let events = names
        .iter()
        .map(|name| {
            let read = log
                .read(name, 1, usize::MAX)
                .unwrap_or_else(|error| panic!("reading {name:?}: {error}"));
            (name.clone(), read)
        })
        .collect();
    let history = log
        .read_all(1, usize::MAX)
        .unwrap_or_else(|error| panic!("read_all: {error}"));
    let commits = log
        .read_all_filtered(1, usize::MAX, &Filter::all().applying_metadata())
        .unwrap_or_else(|error| panic!("read_all applying metadata: {error}"));
    Seen {
        streams: log.streams(""),
        events,
        history,
        commits,
    }
}

/// `raw` (the log without tables) as `streams` shows it.
fn expected(raw: &Seen, raw_log: &Log, streams: &BTreeMap<String, StreamEntry>, now: i64) -> Seen {
    let keep = |event: &Event| match streams.get(&event.stream) {
        None => true,
        Some(entry) => shows(
            entry,
            raw_log.version(&event.stream),
            event.version,
            event.at,
            now,
        ),
    };
    Seen {
        streams: raw
            .streams
            .iter()
            .filter(|name| !left_out(streams.get(*name), raw_log.version(name)))
            .cloned()
            .collect(),
        events: raw
            .events
            .iter()
            .map(|(name, events)| {
                (
                    name.clone(),
                    events.iter().filter(|e| keep(e)).cloned().collect(),
                )
            })
            .collect(),
        history: raw.history.clone(),
        commits: raw
            .history
            .iter()
            .filter_map(|commit| {
                let mut commit = commit.clone();
                commit.events.retain(|event| keep(event));
                (!commit.events.is_empty()).then_some(commit)
            })
            .collect(),
    }
}

/// The tables' part of the `recover` target: `lay_out` puts the
/// directory's segments on a disk; `options` is what every open uses.
pub fn check(
    spec: &TablesSpec,
    lay_out: &dyn Fn(&SimVfs),
    dir: &Path,
    options: &Options,
    now: i64,
) {
    let laid = spec.lay();
    let raw = SimVfs::new(0);
    lay_out(&raw);
    let raw_log = Log::open_with_vfs(raw.clone(), dir, options.clone());
    let vfs = SimVfs::new(0);
    lay_out(&vfs);
    put(&vfs, dir, &laid.files);
    let before = snapshot(&vfs);
    let scan = recovery::verify(&vfs, dir);
    let read_only = Log::open_read_only(vfs.clone(), dir);
    let opened = Log::open_with_vfs(vfs.clone(), dir, options.clone());
    let (raw_log, (streams, consumers)) = match (raw_log, laid.tables) {
        (Err(_), _) => {
            // Tables only add reasons to refuse.
            assert!(
                scan.is_err() && read_only.is_err() && opened.is_err(),
                "a directory refused without tables is accepted with them"
            );
            assert_eq!(snapshot(&vfs), before, "a refusal changed the directory");
            return;
        }
        (Ok(_), None) => {
            for (which, outcome) in [
                ("verify", scan.err()),
                ("open_read_only", read_only.err()),
                ("Open", opened.err()),
            ] {
                match outcome {
                    Some(Error::Corrupt { file, .. })
                        if laid.damaged.iter().any(|name| file == dir.join(name)) => {}
                    other => panic!(
                        "{which} of a log with a damaged table ({:?}) gives {other:?}",
                        laid.damaged
                    ),
                }
            }
            assert_eq!(
                snapshot(&vfs),
                before,
                "a refused table changed the directory"
            );
            return;
        }
        (Ok(raw_log), Some(tables)) => (raw_log, tables),
    };
    // A writer's Open takes every position past the last seq it recovered
    // back to it (their seqs will be given again), and rewrites the table
    // only then (FORMAT.md, "So does recovery").
    let last_seq = raw_log.last_seq();
    let taken_back = consumers.values().any(|&seq| seq > last_seq);
    let consumers: BTreeMap<String, u64> = consumers
        .into_iter()
        .map(|(name, seq)| (name, seq.min(last_seq)))
        .collect();
    let log = opened.unwrap_or_else(|error| panic!("Open refused good tables: {error}"));
    let read_only =
        read_only.unwrap_or_else(|error| panic!("open_read_only refused good tables: {error}"));
    scan.unwrap_or_else(|error| panic!("verify refused good tables: {error}"));

    // The tables stay as they were, their temporary names go, the rest is
    // what Open does without them.
    let after = snapshot(&vfs);
    let mut without_tables = after.clone();
    for (name, file) in &laid.files {
        let path = dir.join(name);
        let now_there = without_tables.remove(&path);
        match (*name, file) {
            (STREAMS_TEMP_NAME | CONSUMERS_TEMP_NAME, _) => {
                assert_eq!(now_there, None, "Open left {name}");
            }
            (CONSUMERS_FILE_NAME, TableFile::Bytes(_)) if taken_back => {
                let want = encode_consumers(&consumers);
                assert_eq!(
                    now_there,
                    Some(want),
                    "positions past seq {last_seq} taken back"
                );
            }
            (_, TableFile::Bytes(bytes)) => {
                assert_eq!(now_there.as_ref(), Some(bytes), "Open changed {name}")
            }
            (_, TableFile::Directory) => unreachable!("a directory is damage"),
        }
    }
    assert_eq!(
        without_tables,
        snapshot(&raw),
        "with tables, Open changed the segments otherwise"
    );

    for (name, entry) in &streams {
        assert_eq!(
            &log.stream_metadata(name),
            &entry.metadata,
            "{name:?}'s metadata"
        );
    }
    for name in STREAM_NAMES
        .iter()
        .filter(|name| !streams.contains_key(**name))
    {
        assert_eq!(log.stream_metadata(name), StreamMetadata::default());
    }
    for name in CONSUMER_NAMES {
        assert_eq!(
            log.consumer_position(name),
            consumers.get(name).copied(),
            "consumer {name:?}"
        );
    }
    let names = raw_log.streams("");
    let raw_seen = seen(&raw_log, &names);
    let want = expected(&raw_seen, &raw_log, &streams, now);
    assert_eq!(seen(&log, &names), want, "what the tables let through");
    // A read-only open reads the host's clock, which no input may depend
    // on: compared only where no maximum age asks the clock.
    if streams
        .values()
        .all(|entry| entry.metadata.max_age.is_none())
    {
        assert_eq!(seen(&read_only, &names), want, "read-only, the same");
    }
    drop(read_only);

    // A change to each table, then a power loss: both there.
    let last = log.last_seq();
    log.record_consumer_position("p", last)
        .unwrap_or_else(|error| panic!("recording a position: {error}"));
    let hard = streams
        .get("gone")
        .is_some_and(|entry| entry.deleted == Some(Deleted::Hard));
    let deleted = log.delete_stream("gone", Deletion::Soft);
    assert_eq!(
        hard,
        matches!(deleted, Err(Error::StreamDeleted { .. })),
        "a soft deletion of \"gone\": {deleted:?}"
    );
    let version = log.version("gone");
    drop(log);
    vfs.crash();
    let log = Log::open_with_vfs(vfs.clone(), dir, options.clone())
        .unwrap_or_else(|error| panic!("Open after a power loss: {error}"));
    let position = consumers.get("p").copied().unwrap_or(0).max(last);
    assert_eq!(log.consumer_position("p"), Some(position), "the position");
    assert!(
        !log.streams("").contains(&"gone".to_owned()),
        "\"gone\" is deleted"
    );
    if !hard {
        assert!(log.read("gone", 1, usize::MAX).expect("read").is_empty());
        assert_eq!(log.version("gone"), version);
    }
}
