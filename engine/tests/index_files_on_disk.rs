//! Index files as the engine writes and keeps them (FORMAT.md, "Index
//! files"): every sealed segment gets exactly the index its bytes define
//! (`SegmentIndex::of_segment`); Open removes every index file that does
//! not agree with its segment, naming why; a purge or a truncation takes
//! its segments' index files with them; and a power loss at any step of
//! writing them leaves the log whole and only agreeing index files after
//! the next Open. Seeded: each failure names its seed.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{TEST_LIMIT, clock, crash_only_disk, event, within};
use durlog::format::{SegmentIndex, parse_index_file_name, parse_segment_name};
use durlog::vfs::SimVfs;
use durlog::{Commit, Event, Expected, IndexFiles, Log, NextSegment, Tuning};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIR: &str = "/log";
const SEGMENT_BYTES: u64 = 500;

fn tuning(index_files: IndexFiles) -> Tuning {
    Tuning::default().with(|tuning| {
        tuning.next_segment = NextSegment::OnCall;
        tuning.index_files = index_files;
    })
}

fn open(vfs: &SimVfs) -> Log {
    open_with(vfs, IndexFiles::OnCall)
}

fn open_with(vfs: &SimVfs, index_files: IndexFiles) -> Log {
    let options = durlog::Options {
        segment_bytes: SEGMENT_BYTES,
        ..clock(7)
    };
    Log::open_tuned(vfs.clone(), DIR, options, tuning(index_files)).expect("open")
}

/// Appends `count` batches to four streams, a third of the events with
/// ids.
fn append_random(log: &Log, rng: &mut ChaCha8Rng, count: usize) {
    for _ in 0..count {
        let stream = format!("s{}", rng.random_range(0..4));
        let events: Vec<Event> = (0..rng.random_range(1..3))
            .map(|_| {
                let data = vec![rng.random_range(1..=255u8); rng.random_range(0..90)];
                let plain = event("t", &data);
                match rng.random_range(0..3) {
                    0 => plain.with_id(rng.random()),
                    _ => plain,
                }
            })
            .collect();
        log.append(&stream, Expected::Any, &events).expect("append");
    }
}

/// The log's files by kind: segments and index files, by first seq.
fn files(vfs: &SimVfs) -> (BTreeMap<u64, PathBuf>, BTreeMap<u64, PathBuf>) {
    let (mut segments, mut indexes) = (BTreeMap::new(), BTreeMap::new());
    for path in vfs.files() {
        let name = path.file_name().unwrap().to_str().unwrap();
        if let Some(seq) = parse_segment_name(name) {
            segments.insert(seq, path.clone());
        } else if let Some(seq) = parse_index_file_name(name) {
            indexes.insert(seq, path.clone());
        }
    }
    (segments, indexes)
}

/// Checks that every index file present is, byte for byte, the index its
/// segment's bytes define, and that the last segment has none. Returns
/// how many there are.
fn check_index_files_agree(vfs: &SimVfs, context: &str) -> usize {
    let (segments, indexes) = files(vfs);
    let last = segments.keys().next_back().copied();
    for (seq, path) in &indexes {
        assert_ne!(
            Some(*seq),
            last,
            "{context}: the last segment has an index file"
        );
        let segment = segments
            .get(seq)
            .unwrap_or_else(|| panic!("{context}: {} has no segment", path.display()));
        let bytes = vfs.file_contents(segment).unwrap();
        let expected = SegmentIndex::of_segment(*seq, &bytes)
            .unwrap_or_else(|error| panic!("{context}: segment {seq}: {error}"))
            .encode();
        assert_eq!(
            vfs.file_contents(path).unwrap(),
            expected,
            "{context}: {} is not its segment's index",
            path.display()
        );
    }
    indexes.len()
}

fn everything(log: &Log) -> Vec<Commit> {
    log.read_all(log.first_seq(), usize::MAX).expect("read_all")
}

#[test]
fn every_sealed_segment_gets_the_index_its_bytes_define() {
    for seed in 0..8u64 {
        let context = format!("seed {seed}");
        let vfs = SimVfs::new(seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let log = open(&vfs);
        append_random(&log, &mut rng, 30);
        let sealed = files(&vfs).0.len() - 1;
        assert!(sealed >= 3, "{context}: only {sealed} sealed segments");
        assert_eq!(log.write_index_files().unwrap(), sealed, "{context}");
        assert_eq!(check_index_files_agree(&vfs, &context), sealed);
        assert_eq!(log.write_index_files().unwrap(), 0, "{context}: again");
        assert_eq!(log.stats().index_files_written, sealed as u64);
        // More segments sealed: only theirs are written.
        append_random(&log, &mut rng, 20);
        let more = files(&vfs).0.len() - 1 - sealed;
        assert_eq!(log.write_index_files().unwrap(), more, "{context}: more");
        let written = check_index_files_agree(&vfs, &context);
        let before = everything(&log);
        drop(log);
        let log = open(&vfs);
        assert_eq!(log.recovery().index_files, written, "{context}");
        assert_eq!(log.recovery().stale_index_files, Vec::new(), "{context}");
        assert_eq!(everything(&log), before, "{context}");
        assert_eq!(log.write_index_files().unwrap(), 0, "{context}: after Open");
    }
}

#[test]
fn with_index_files_off_none_is_written() {
    let vfs = SimVfs::new(1);
    let log = open_with(&vfs, IndexFiles::Off);
    append_random(&log, &mut ChaCha8Rng::seed_from_u64(1), 30);
    assert_eq!(log.write_index_files().unwrap(), 0);
    assert!(files(&vfs).1.is_empty());
}

/// With `IndexFiles::Background` the log's own thread writes the index
/// file of every sealed segment after its roll, and at Open those an
/// earlier life left without, each its segment's, byte for byte; the next
/// Open finds them all agreeing.
#[test]
fn the_indexing_thread_writes_every_sealed_segments_index_file() {
    for seed in 0..4u64 {
        let context = format!("seed {seed}");
        let vfs = SimVfs::new(seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let log = open_with(&vfs, IndexFiles::Off);
        append_random(&log, &mut rng, 30);
        drop(log);
        let left = files(&vfs).0.len() - 1;
        assert!(left >= 3, "{context}: only {left} sealed segments");
        let log = open_with(&vfs, IndexFiles::Background);
        let log = written_within(log, left);
        assert_eq!(check_index_files_agree(&vfs, &context), left, "{context}");
        append_random(&log, &mut rng, 20);
        let sealed = files(&vfs).0.len() - 1;
        assert!(sealed > left, "{context}: no roll in this life");
        let log = written_within(log, sealed);
        assert_eq!(log.stats().index_files_written, sealed as u64, "{context}");
        assert_eq!(check_index_files_agree(&vfs, &context), sealed);
        assert_eq!(log.write_index_files().unwrap(), 0, "{context}: none left");
        let before = everything(&log);
        drop(log);
        let log = open_with(&vfs, IndexFiles::Off);
        assert_eq!(log.recovery().index_files, sealed, "{context}");
        assert_eq!(log.recovery().stale_index_files, Vec::new(), "{context}");
        assert_eq!(everything(&log), before, "{context}");
    }
}

/// `log` once its thread has written `count` index files, or the test
/// fails.
fn written_within(log: Log, count: usize) -> Log {
    within("indexing thread", TEST_LIMIT, move || {
        while log.stats().index_files_written < count as u64 {
            std::thread::sleep(Duration::from_millis(1));
        }
        log
    })
}

/// A log of several sealed segments, each with its index file, closed.
fn indexed_log(seed: u64) -> (SimVfs, Vec<Commit>) {
    let vfs = SimVfs::new(seed);
    let log = open(&vfs);
    append_random(&log, &mut ChaCha8Rng::seed_from_u64(seed), 40);
    log.write_index_files().unwrap();
    let records = everything(&log);
    (vfs, records)
}

/// How each planted fault changes an index file, and the words Open's
/// reason must hold.
type Plant = fn(&SimVfs, &[PathBuf], &[PathBuf]) -> PathBuf;

fn plants() -> Vec<(&'static str, Plant, &'static str)> {
    vec![
        (
            "a flipped bit",
            |vfs, _, indexes| {
                let path = indexes[1].clone();
                vfs.flip_bit_at_rest(&path, 8 * 50 + 3).unwrap();
                path
            },
            "damaged",
        ),
        (
            "a torn end",
            |vfs, _, indexes| {
                let path = indexes[0].clone();
                let bytes = vfs.file_contents(&path).unwrap();
                vfs.put_durable_file(&path, &bytes[..bytes.len() - 5]);
                path
            },
            "damaged",
        ),
        (
            "a copy under another segment's name",
            |vfs, _, indexes| {
                let bytes = vfs.file_contents(&indexes[0]).unwrap();
                vfs.put_durable_file(&indexes[1], &bytes);
                indexes[1].clone()
            },
            "wrong place",
        ),
        (
            "one of a segment that is gone",
            |vfs, _, indexes| {
                let bytes = vfs.file_contents(&indexes[0]).unwrap();
                let path = Path::new(DIR).join("00000000000099999999.idx");
                vfs.put_durable_file(&path, &bytes);
                path
            },
            "no segment",
        ),
        (
            "one of the last segment",
            |vfs, segments, indexes| {
                let last = segments.last().unwrap();
                let name = last
                    .file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .replace(".log", ".idx");
                let path = Path::new(DIR).join(name);
                let bytes = vfs.file_contents(&indexes[0]).unwrap();
                vfs.put_durable_file(&path, &bytes);
                path
            },
            "last",
        ),
        (
            "one naming another length",
            |vfs, _, indexes| {
                let path = indexes[2].clone();
                let mut index = SegmentIndex::decode(&vfs.file_contents(&path).unwrap()).unwrap();
                index.segment_len += 1;
                vfs.put_durable_file(&path, &index.encode());
                path
            },
            "bytes",
        ),
        (
            "one naming another last record",
            |vfs, _, indexes| {
                let path = indexes[2].clone();
                let mut index = SegmentIndex::decode(&vfs.file_contents(&path).unwrap()).unwrap();
                index.last_record_crc ^= 1;
                vfs.put_durable_file(&path, &index.encode());
                path
            },
            "CRC",
        ),
    ]
}

#[test]
fn open_removes_every_index_file_that_disagrees_and_says_why() {
    for seed in 0..4u64 {
        for (what, plant, reason) in plants() {
            let context = format!("seed {seed}, {what}");
            let (vfs, records) = indexed_log(seed);
            let (segments, indexes) = files(&vfs);
            let segments: Vec<PathBuf> = segments.into_values().collect();
            let indexes: Vec<PathBuf> = indexes.into_values().collect();
            assert!(indexes.len() >= 3, "{context}");
            let planted = plant(&vfs, &segments, &indexes);
            // A read-only Open reports it and removes nothing.
            let reader = Log::open_read_only(vfs.clone(), DIR).unwrap();
            let stale = reader.recovery().stale_index_files.clone();
            assert_eq!(stale.len(), 1, "{context}: {stale:?}");
            assert!(vfs.file_contents(&planted).is_some(), "{context}");
            drop(reader);
            let log = open(&vfs);
            let stale = &log.recovery().stale_index_files;
            assert_eq!(stale.len(), 1, "{context}: {stale:?}");
            assert_eq!(stale[0].0, planted, "{context}");
            assert!(stale[0].1.contains(reason), "{context}: {:?}", stale[0].1);
            assert!(
                vfs.file_contents(&planted).is_none(),
                "{context}: not removed"
            );
            assert_eq!(everything(&log), records, "{context}: the records");
            // Written again where it belongs, and every one agrees.
            log.write_index_files().unwrap();
            check_index_files_agree(&vfs, &context);
            assert_eq!(files(&vfs).1.len(), files(&vfs).0.len() - 1, "{context}");
        }
    }
}

#[test]
fn purges_and_truncations_take_their_segments_index_files() {
    for seed in 0..6u64 {
        let context = format!("seed {seed}");
        let (vfs, _) = indexed_log(seed);
        let log = open(&vfs);
        let starts: Vec<u64> = files(&vfs).0.into_keys().collect();
        log.purge_before(starts[2]).unwrap();
        let (segments, indexes) = files(&vfs);
        assert!(
            indexes.keys().all(|seq| segments.contains_key(seq)),
            "{context}: purge"
        );
        assert_eq!(indexes.len(), segments.len() - 1, "{context}: purge");
        // Into the middle of a sealed segment: it becomes the last.
        let starts: Vec<u64> = segments.into_keys().collect();
        let cut_in = starts[starts.len() / 2];
        log.truncate_after(cut_in).unwrap();
        let (segments, indexes) = files(&vfs);
        assert_eq!(*segments.keys().next_back().unwrap(), cut_in, "{context}");
        assert_eq!(indexes.len(), segments.len() - 1, "{context}: truncation");
        check_index_files_agree(&vfs, &context);
        // Sealed again with other records: its new index is its own.
        append_random(&log, &mut ChaCha8Rng::seed_from_u64(seed + 100), 20);
        log.write_index_files().unwrap();
        assert_eq!(files(&vfs).1.len(), files(&vfs).0.len() - 1, "{context}");
        check_index_files_agree(&vfs, &context);
        drop(log);
        let log = open(&vfs);
        assert_eq!(log.recovery().stale_index_files, Vec::new(), "{context}");
    }
}

#[test]
fn a_power_loss_while_index_files_are_written_leaves_only_agreeing_ones() {
    let mut states = 0;
    for seed in 0..4u64 {
        let setup = || {
            let vfs = crash_only_disk(seed);
            let log = open(&vfs);
            append_random(&log, &mut ChaCha8Rng::seed_from_u64(seed), 30);
            let records = everything(&log);
            (vfs, log, records)
        };
        for crash_at in 1.. {
            let context = format!("seed {seed}, power lost at op {crash_at}");
            let (vfs, log, records) = setup();
            vfs.crash_after_ops(crash_at);
            let outcome = log.write_index_files();
            if !vfs.is_halted() {
                vfs.crash_after_ops(0);
                outcome.unwrap_or_else(|error| panic!("{context}: no crash, yet {error}"));
                break;
            }
            drop(log);
            vfs.reboot();
            let log = open(&vfs);
            assert_eq!(everything(&log), records, "{context}: the records");
            check_index_files_agree(&vfs, &context);
            for (path, reason) in &log.recovery().stale_index_files {
                assert!(
                    reason.contains("damaged") || reason.contains("cannot be read"),
                    "{context}: {} removed because {reason}",
                    path.display()
                );
            }
            log.write_index_files().unwrap();
            assert_eq!(
                check_index_files_agree(&vfs, &context),
                files(&vfs).0.len() - 1
            );
            states += 1;
        }
    }
    assert!(states > 40, "only {states} crash states");
}

fn open_trusting(vfs: &SimVfs) -> Result<Log, durlog::Error> {
    let options = durlog::Options {
        segment_bytes: SEGMENT_BYTES,
        ..clock(7)
    };
    let tuning = tuning(IndexFiles::OnCall).with(|tuning| tuning.open_trusts_index_files = true);
    Log::open_tuned(vfs.clone(), DIR, options, tuning)
}

/// Each stream: its name, version and events.
type Streams = Vec<(String, u64, Vec<durlog::Event>)>;

/// Everything a reader can ask of a log, to hold two opens alike.
fn everything_asked(log: &Log) -> (Vec<Commit>, Streams, u64) {
    let streams = log
        .streams("")
        .into_iter()
        .map(|stream| {
            let version = log.version(&stream);
            let events = log.read(&stream, 1, usize::MAX).expect("read");
            (stream, version, events)
        })
        .collect();
    (everything(log), streams, log.last_seq())
}

#[test]
fn an_open_that_trusts_index_files_gives_the_log_a_full_scan_gives() {
    for seed in 0..8u64 {
        let context = format!("seed {seed}");
        let (vfs, _) = indexed_log(seed);
        let scanned = open(&vfs);
        let want = everything_asked(&scanned);
        let report = scanned.recovery().clone();
        drop(scanned);
        let trusting = open_trusting(&vfs).unwrap();
        assert_eq!(everything_asked(&trusting), want, "{context}");
        let trusted = trusting.recovery();
        assert_eq!(
            (
                trusted.records,
                trusted.record_bytes,
                trusted.last_seq,
                trusted.segments
            ),
            (
                report.records,
                report.record_bytes,
                report.last_seq,
                report.segments
            ),
            "{context}"
        );
        assert_eq!(trusted.index_files, report.index_files, "{context}");
        // Ids taken from the index files still make a retry a retry.
        let (stream, version, events) = (everything_asked(&trusting).1)
            .into_iter()
            .find(|(_, _, events)| events.iter().any(|event| event.id().is_some()))
            .expect("an event with an id");
        let at = events
            .iter()
            .position(|event| event.id().is_some())
            .unwrap();
        let retried = [events[at].clone()];
        assert_eq!(
            trusting.append(&stream, Expected::Any, &retried).unwrap(),
            at as u64 + 1,
            "{context}: a retry of a held id answers the version it landed at"
        );
        assert_eq!(
            trusting.version(&stream),
            version,
            "{context}: nothing written"
        );
        // And the log goes on: appends, rolls, new index files.
        append_random(&trusting, &mut ChaCha8Rng::seed_from_u64(seed + 50), 10);
        trusting.write_index_files().unwrap();
        check_index_files_agree(&vfs, &context);
    }
}

#[test]
fn a_trusting_open_does_not_read_a_sealed_segment_and_a_full_one_does() {
    for seed in 0..4u64 {
        let context = format!("seed {seed}");
        let (vfs, _) = indexed_log(seed);
        let (segments, _) = files(&vfs);
        // A bit flipped at rest in the middle of the first segment's
        // first record's payload: a full scan refuses the log.
        let first = segments.values().next().unwrap().clone();
        vfs.flip_bit_at_rest(&first, 8 * 30 + 1).unwrap();
        match Log::open_tuned(
            vfs.clone(),
            DIR,
            durlog::Options {
                segment_bytes: SEGMENT_BYTES,
                ..clock(7)
            },
            tuning(IndexFiles::OnCall),
        ) {
            Err(durlog::Error::Corrupt { file, .. }) => assert_eq!(file, first, "{context}"),
            other => panic!("{context}: a full scan gave {:?}", other.map(|_| ())),
        }
        // Trusting its index file, Open does not see it; a read does.
        let log = open_trusting(&vfs).unwrap();
        match log.read_all(1, 1) {
            Err(durlog::Error::Corrupt { file, .. }) => assert_eq!(file, first, "{context}"),
            other => panic!("{context}: the damaged record read as {other:?}"),
        }
    }
}

#[test]
fn an_index_file_that_does_not_continue_its_streams_is_not_trusted() {
    for seed in 0..4u64 {
        let context = format!("seed {seed}");
        let (vfs, records) = indexed_log(seed);
        let (_, indexes) = files(&vfs);
        let path = indexes.values().nth(1).unwrap().clone();
        let mut index = SegmentIndex::decode(&vfs.file_contents(&path).unwrap()).unwrap();
        // One version later, every record and the ids with it: whole, and
        // agreeing with the segment's length and last record, but not
        // with the stream's versions before it.
        let stream = &mut index.streams[0];
        stream.last_version += 1;
        stream
            .records
            .iter_mut()
            .for_each(|record| record.first_version += 1);
        stream.ids.iter_mut().for_each(|(_, version)| *version += 1);
        vfs.put_durable_file(&path, &index.encode());
        let log = open_trusting(&vfs).unwrap();
        assert_eq!(everything(&log), records, "{context}");
        let stale = &log.recovery().stale_index_files;
        assert_eq!(stale.len(), 1, "{context}: {stale:?}");
        assert_eq!(stale[0].0, path, "{context}");
        assert!(
            stale[0].1.contains("do not continue"),
            "{context}: {stale:?}"
        );
    }
}
