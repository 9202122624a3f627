//! The `recover` target: `Log::open` on a directory of one to four files
//! laid out from the input (see [`super::layout`]) on a `SimVfs` with every
//! fault off, so that anything odd is the engine's doing; and, when the
//! input has them, the same directory with the tables of stream metadata
//! and consumer positions beside the records (see [`super::tables`]).
//!
//! Open must return `Ok` or a clean `Corrupt` / `Io` error, agree with the
//! read-only scan (`durlog::recovery::verify`) and with `open_read_only`,
//! and, when it refuses, leave every byte as it was. When it accepts:
//! - it changed nothing but the end of the last segment (cut at the torn
//!   or zero tail, maybe followed by preallocated zeros);
//! - every stream reads back whole, versions dense from 1, and a scan now
//!   finds the directory clean;
//! - a valid directory lost nothing and reads back exactly as written, and
//!   otherwise every event read is one that some record stated;
//! - a second open changes nothing (same state, same bytes), a power loss
//!   then changes nothing either (the truncation was durable), and the next
//!   append gets the next seq and version and survives a power loss.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arbitrary::Arbitrary;
use durlog::recovery;
use durlog::vfs::{SimVfs, Vfs};
use durlog::{Commit, Error, Event, Expected, Follower, Log, Options, Tail};

use super::layout::{Built, DirSpec, Entry, ModelEvent};
use super::tables::{self, TablesSpec};

/// Where the directory is laid out on the simulated disk.
pub const LOG_DIR: &str = "/log";

/// The clock of every open: appends stamp this time.
const CLOCK_NS: i64 = 1_700_000_000_123_456_789;

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct RecoverInput {
    pub dir: DirSpec,
    /// `Options::segment_bytes`: 0 is the default (64 MiB), anything else
    /// maps to 64..=8255 bytes, so the append after recovery may roll.
    pub segment_bytes: u16,
    /// The tables beside the records, if any (see [`super::tables`]).
    /// Last, so that an input that ends before it has none: the seeds
    /// written before the tables existed mean what they meant.
    pub tables: TablesSpec,
}

impl RecoverInput {
    fn options(&self) -> Options {
        Options {
            segment_bytes: match self.segment_bytes {
                0 => 0,
                bytes => 64 + u64::from(bytes) % 8192,
            },
            now: Some(Arc::new(|| CLOCK_NS)),
            ..Options::default()
        }
    }
}

/// What a reader can see of an open log.
#[derive(Debug, PartialEq, Eq)]
struct State {
    last_seq: u64,
    size: u64,
    /// Every stream, its version and all its events.
    streams: Vec<(String, u64, Vec<Event>)>,
}

/// Reads the whole log, checking what every read promises.
fn state(log: &Log) -> State {
    let names = log.streams("");
    assert!(
        names.windows(2).all(|pair| pair[0] < pair[1]),
        "streams are not sorted and distinct: {names:?}"
    );
    let streams = names
        .into_iter()
        .map(|name| {
            let version = log.version(&name);
            let events = log
                .read(&name, 1, usize::MAX)
                .unwrap_or_else(|error| panic!("reading {name:?} of a recovered log: {error}"));
            assert_eq!(
                events.len() as u64,
                version,
                "{name:?} is at version {version} but reads back {} events",
                events.len()
            );
            for (index, event) in events.iter().enumerate() {
                assert_eq!(
                    event.stream, name,
                    "an event of {name:?} names another stream"
                );
                assert_eq!(
                    event.version,
                    index as u64 + 1,
                    "versions of {name:?} are not dense from 1"
                );
            }
            (name, version, events)
        })
        .collect();
    State {
        last_seq: log.last_seq(),
        size: log.size(),
        streams,
    }
}

/// Every file on the disk and its bytes.
/// Every file's bytes, but for the writer's lock file: Open creates it
/// (empty) before it reads anything, refused or not, and it holds no data.
fn snapshot(vfs: &SimVfs) -> BTreeMap<PathBuf, Vec<u8>> {
    vfs.files()
        .into_iter()
        .filter(|path| !path.ends_with(durlog::format::LOCK_FILE_NAME))
        .map(|path| {
            let bytes = vfs
                .file_contents(&path)
                .expect("a listed file has contents");
            (path, bytes)
        })
        .collect()
}

fn lay_out(vfs: &SimVfs, dir: &Path, built: &Built) {
    vfs.create_dir_all(dir).expect("creating the log directory");
    for (name, entry) in &built.entries {
        let path = dir.join(name);
        match entry {
            Entry::File(bytes) => vfs.put_durable_file(&path, bytes),
            Entry::Directory => vfs.create_dir_all(&path).expect("creating a directory"),
        }
    }
}

fn open(vfs: &SimVfs, options: &Options, which: &str) -> Log {
    Log::open_with_vfs(vfs.clone(), LOG_DIR, options.clone())
        .unwrap_or_else(|error| panic!("{which} open of a recovered log failed: {error}"))
}

pub fn check(input: &RecoverInput) {
    let built = input.dir.build();
    let dir = Path::new(LOG_DIR);
    if !input.tables.is_empty() {
        let lay_out_segments = |vfs: &SimVfs| lay_out(vfs, dir, &built);
        tables::check(
            &input.tables,
            &lay_out_segments,
            dir,
            &input.options(),
            CLOCK_NS,
        );
    }
    let vfs = SimVfs::new(0);
    lay_out(&vfs, dir, &built);
    let before = snapshot(&vfs);

    let scan = recovery::verify(&vfs, dir);
    let read_only = Log::open_read_only(vfs.clone(), dir);
    let followed = follow(&vfs, dir);
    assert_eq!(
        snapshot(&vfs),
        before,
        "verify, open_read_only or a follower changed the directory"
    );
    let options = input.options();
    let log = match Log::open_with_vfs(vfs.clone(), dir, options.clone()) {
        Ok(log) => log,
        Err(error) => return check_refusal(&vfs, &before, &built, error, scan, read_only.err()),
    };
    let report = scan.unwrap_or_else(|error| panic!("Open succeeded where verify says: {error}"));
    let recovered = log.recovery().clone();
    assert_eq!(
        (
            &recovered.tail,
            recovered.last_seq,
            recovered.records,
            recovered.record_bytes
        ),
        (
            &report.tail,
            report.last_seq,
            report.records,
            report.record_bytes
        ),
        "Open and verify disagree"
    );
    let state1 = state(&log);
    assert_eq!(
        (state1.last_seq, state1.size),
        (report.last_seq, report.record_bytes),
        "the log's last seq and size are not what recovery found"
    );
    let history = log
        .read_all(0, usize::MAX)
        .expect("reading a recovered log");
    assert!(
        history.starts_with(&followed),
        "a follower of the directory before Open handed over {} records that are not the \
         recovered log's first: {followed:?} against {history:?}, recovered {:?}",
        followed.len(),
        log.recovery()
    );
    let read_only = read_only
        .unwrap_or_else(|error| panic!("Open succeeded where open_read_only says: {error}"));
    assert_eq!(state(&read_only), state1, "open_read_only sees another log");
    drop(read_only);

    let after = snapshot(&vfs);
    check_changes(&before, &after, &recovered.tail);
    let rescan = recovery::verify(&vfs, dir)
        .unwrap_or_else(|error| panic!("after Open, verify refuses the directory: {error}"));
    assert!(
        matches!(rescan.tail, Tail::Clean | Tail::Zeros { .. })
            && (rescan.last_seq, rescan.record_bytes) == (state1.last_seq, state1.size),
        "after Open the directory is not clean: {rescan:?}, the log at seq {} size {}",
        state1.last_seq,
        state1.size
    );
    check_against_input(&built, &state1);
    drop(log);

    // Opened again, it finds exactly what the first open left.
    let log = open(&vfs, &options, "a second");
    assert_eq!(state(&log), state1, "a second open sees another log");
    assert_eq!(snapshot(&vfs), after, "a second open changed the directory");
    drop(log);

    // What the first open did was durable.
    vfs.crash();
    let log = open(&vfs, &options, "after a power loss, an");
    assert_eq!(
        state(&log),
        state1,
        "a power loss after Open changed the log"
    );
    check_append(&vfs, &options, log, &state1);
}

/// What a `Follower` of the directory hands over from its first record,
/// poll after poll, until a poll finds nothing or fails: cleanly, with a
/// `Corrupt` that names a file of the log or an `Io`. A log that starts
/// after seq 1 answers `Purged` with its first seq, once.
fn follow(vfs: &SimVfs, dir: &Path) -> Vec<Commit> {
    let mut follower = Follower::new(vfs.clone(), dir, 1);
    let mut handed = Vec::new();
    let mut restarted = false;
    // A poll reads 256 KiB at least; the layouts are far smaller.
    for _ in 0..64 {
        match follower.poll() {
            Ok(commits) if commits.is_empty() => break,
            Ok(commits) => handed.extend(commits),
            Err(Error::Purged { first_seq }) if !restarted && handed.is_empty() => {
                restarted = true;
                follower = Follower::new(vfs.clone(), dir, first_seq);
            }
            Err(Error::Corrupt { file, .. }) => {
                assert!(file.starts_with(dir), "a follower names {}", file.display());
                break;
            }
            Err(Error::Io(_)) => break,
            Err(error) => panic!("a follower of the directory failed with {error:?}"),
        }
    }
    for pair in handed.windows(2) {
        assert_eq!(
            pair[0].seq + 1,
            pair[1].seq,
            "a follower skipped or repeated a seq"
        );
    }
    handed
}

/// Open refused: cleanly, in agreement with the scan, touching nothing.
fn check_refusal(
    vfs: &SimVfs,
    before: &BTreeMap<PathBuf, Vec<u8>>,
    built: &Built,
    error: Error,
    scan: Result<durlog::RecoveryReport, Error>,
    read_only: Option<Error>,
) {
    match (&error, &scan) {
        (
            Error::Corrupt { file, offset, .. },
            Err(Error::Corrupt {
                file: scanned,
                offset: scanned_offset,
                ..
            }),
        ) => {
            assert!(
                file.starts_with(LOG_DIR),
                "Corrupt names {} outside the log",
                file.display()
            );
            assert_eq!(
                (file, offset),
                (scanned, scanned_offset),
                "Open and verify refuse at different places"
            );
        }
        (Error::Io(_), Err(_)) => {}
        (Error::Corrupt { .. } | Error::Io(_), Ok(report)) => {
            panic!("Open refused ({error}) what verify accepts: {report:?}")
        }
        _ => panic!("Open failed with neither Corrupt nor Io: {error:?}"),
    }
    assert!(
        read_only.is_some(),
        "open_read_only accepts what Open refuses ({error})"
    );
    assert_eq!(
        &snapshot(vfs),
        before,
        "Open refused ({error}) but changed the directory"
    );
    assert!(
        built.valid.is_none(),
        "Open refused a directory of valid segments: {error}"
    );
}

/// Open may change only the last segment: cut at the tail it reports (or
/// remove it, if nothing valid is left), then maybe extend it with zeros.
fn check_changes(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
    tail: &Tail,
) {
    let created: Vec<&PathBuf> = after
        .keys()
        .filter(|path| !before.contains_key(*path))
        .collect();
    assert!(created.is_empty(), "Open created {created:?}");
    for (path, old) in before {
        let new = after.get(path);
        if new == Some(old) {
            continue;
        }
        let cut = match tail {
            Tail::Torn { file, offset, .. } | Tail::Zeros { file, offset, .. } if file == path => {
                *offset as usize
            }
            // Preallocation may extend the last segment with zeros.
            Tail::Clean => old.len(),
            _ => panic!(
                "Open changed {} but reports the tail {tail:?}",
                path.display()
            ),
        };
        let Some(new) = new else {
            assert_eq!(
                cut,
                0,
                "Open removed {}, which holds valid records",
                path.display()
            );
            continue;
        };
        assert!(
            new.len() >= cut && new[..cut] == old[..cut] && new[cut..].iter().all(|&b| b == 0),
            "Open changed {} ({} bytes to {}) other than cutting it at {cut} (tail {tail:?})",
            path.display(),
            old.len(),
            new.len()
        );
    }
}

/// A valid directory reads back exactly as written; any other reads back
/// only events that some record stated.
fn check_against_input(built: &Built, state: &State) {
    let as_model = |event: &Event| ModelEvent {
        event_type: event.event_type.clone(),
        data: event.data.clone(),
        at: event.at,
    };
    if let Some((model, last_seq)) = &built.valid {
        assert_eq!(
            state.last_seq, *last_seq,
            "Open lost records of a directory of valid segments"
        );
        let read: BTreeMap<String, Vec<ModelEvent>> = state
            .streams
            .iter()
            .map(|(name, _, events)| (name.clone(), events.iter().map(as_model).collect()))
            .collect();
        assert_eq!(&read, model, "a valid directory reads back other events");
    }
    if built.foreign {
        return;
    }
    for (name, _, events) in &state.streams {
        for event in events {
            let stated = built.written.get(&(name.clone(), event.version));
            assert!(
                stated.is_some_and(|stated| stated.contains(&as_model(event))),
                "Open believes {name:?} version {} ({:?}), which no record stated",
                event.version,
                as_model(event)
            );
        }
    }
}

/// The next append continues at the next seq and version, and survives a
/// power loss with everything recovered before it.
fn check_append(vfs: &SimVfs, options: &Options, log: Log, recovered: &State) {
    let (stream, version) = recovered
        .streams
        .first()
        .map_or(("fresh", 0), |(name, version, _)| (name.as_str(), *version));
    let event = Event::new("after-recovery", &b"next"[..]);
    let appended = log
        .append(
            stream,
            Expected::Exact(version),
            std::slice::from_ref(&event),
        )
        .unwrap_or_else(|error| panic!("the first append after recovery failed: {error}"));
    assert_eq!(
        appended,
        version + 1,
        "the append after recovery got a wrong version"
    );
    assert_eq!(
        log.last_seq(),
        recovered.last_seq + 1,
        "the append after recovery got a wrong seq"
    );
    drop(log);
    vfs.crash();
    let log = open(vfs, options, "after an append and a power loss, an");
    let mut state = state(&log);
    assert_eq!(
        state.last_seq,
        recovered.last_seq + 1,
        "the append was lost"
    );
    let (_, _, events) = state
        .streams
        .iter_mut()
        .find(|(name, _, _)| name == stream)
        .expect("the appended stream exists");
    let last = events.pop().expect("the appended event reads back");
    assert_eq!(
        (
            last.version,
            last.event_type.as_str(),
            &last.data[..],
            last.at
        ),
        (version + 1, "after-recovery", &b"next"[..], CLOCK_NS),
        "the appended event reads back wrong"
    );
    state.streams.retain(|(_, _, events)| !events.is_empty());
    for entry in &mut state.streams {
        entry.1 = entry.2.len() as u64;
    }
    let before_append: Vec<_> = recovered.streams.iter().collect();
    assert_eq!(
        state.streams.iter().collect::<Vec<_>>(),
        before_append,
        "the append changed what was recovered before it"
    );
}
