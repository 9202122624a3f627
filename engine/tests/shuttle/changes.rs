//! Appenders racing a purge, a truncation, subscribers, the log's close,
//! and the writer of index files.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use durlog::vfs::{FaultConfig, SimVfs, Vfs};
use durlog::{
    Commit, Error, Event, Expected, Log, NextSegment, Options, Tuning, decode_batch, parse_record,
};
use shuttle::thread;

use super::appends::{appenders, plan};
use super::harness::{DIR, Setup, check, open};

/// Appenders, a purge and three subscribers race each other and the
/// log's close: each subscriber gets every acknowledged record it may
/// (none twice, none out of order, none not acknowledged), or `Purged`,
/// and then the last record or `Closed`.
#[test]
fn subscribers_purges_and_close_race_appenders() {
    check(|| {
        let setup = Setup {
            faults: FaultConfig::none(),
            segment_bytes: 160,
            max_bytes: 0,
        };
        let vfs = SimVfs::with_faults(2, setup.faults.clone());
        let log = Arc::new(open(&vfs, &setup));
        // Three, so that one sleeps as the head and wakes the others. Two
        // stop at a last record appended once everything else is done,
        // before the log closes: a lost wake-up leaves one asleep, which
        // shuttle reports as a deadlock (its `wait_timeout` never times
        // out). The third goes on until the close.
        let followers: Vec<_> = (0..3)
            .map(|index| {
                let mut subscription = log.subscribe(1);
                thread::spawn(move || {
                    let mut seen = Vec::new();
                    loop {
                        match subscription.next_timeout(Duration::from_secs(3600)) {
                            Ok(Some(commit)) if commit.stream == "last" && index > 0 => {
                                return (seen, false);
                            }
                            Ok(Some(commit)) if commit.stream != "last" => seen.push(commit.seq),
                            Ok(_) => {}
                            Err(Error::Closed) => return (seen, false),
                            Err(Error::Purged { .. }) => return (seen, true),
                            Err(error) => panic!("subscriber: {error}"),
                        }
                    }
                })
            })
            .collect();
        let purger = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let first = log.purge_before(log.last_seq()).expect("purge");
                assert!(first <= log.last_seq() + 1);
            })
        };
        let asked = appenders(&log, &vfs, plan(2));
        purger.join().expect("purger");
        let last = log.last_seq();
        let first = log.first_seq();
        log.append("last", Expected::Any, &[Event::new("t", vec![1])])
            .expect("the last append");
        let mut followers = followers.into_iter();
        let until_closed = followers.next().expect("three followers");
        let mut results: Vec<_> = followers
            .map(|follower| follower.join().expect("follower"))
            .collect();
        drop(log);
        results.push(until_closed.join().expect("follower"));
        for (seen, purged) in results {
            assert!(
                seen.windows(2).all(|pair| pair[1] == pair[0] + 1),
                "in order, no gap: {seen:?}"
            );
            if !purged {
                assert_eq!(seen.len() as u64, last, "every record, then Closed");
            } else {
                assert!(seen.last().is_none_or(|&seq| seq + 1 < first));
            }
        }
        let acked = asked.iter().filter(|ask| ask.outcome.is_ok()).count() as u64;
        assert_eq!(acked, last);
    });
}

/// The record with `seq` in what a crash would leave now, as (stream,
/// first version).
fn durable_record(vfs: &SimVfs, seq: u64) -> Option<(String, u64)> {
    let names = vfs.list_dir(Path::new(DIR)).unwrap_or_default();
    names
        .into_iter()
        .filter(|entry| entry.name.ends_with(".log"))
        .filter_map(|entry| vfs.durable_contents(&Path::new(DIR).join(&entry.name)))
        .find_map(|bytes| {
            let mut at = 0;
            while let Ok(record) = parse_record(&bytes[at..]) {
                if record.seq == seq {
                    let batch = decode_batch(record.payload).ok()?;
                    return Some((batch.stream, batch.first_version));
                }
                at += record.len;
            }
            None
        })
}

/// A truncation races appenders and two subscribers: every record a
/// subscriber keeps was durable when it got it (after a truncation, the
/// places of the records cut off fill with new records before they are
/// synced), and once told `Truncated` and given the last record, each
/// has exactly the log's records; none sleeps through the truncation
/// (a deadlock under shuttle, whose `wait_timeout` never times out).
#[test]
fn a_truncation_races_appenders_and_subscribers() {
    check(|| {
        let setup = Setup {
            faults: FaultConfig::none(),
            segment_bytes: 160,
            max_bytes: 0,
        };
        let vfs = SimVfs::with_faults(3, setup.faults.clone());
        let log = Arc::new(open(&vfs, &setup));
        let followers: Vec<_> = (0..2)
            .map(|_| {
                let mut subscription = log.subscribe(1);
                let vfs = vfs.clone();
                thread::spawn(move || {
                    // Each record with whether it was durable when looked
                    // at, a moment after delivery: one the truncation cut
                    // meanwhile is not, and must then be taken back.
                    let mut seen: Vec<(Commit, bool)> = Vec::new();
                    loop {
                        match subscription.next_timeout(Duration::from_secs(3600)) {
                            Ok(Some(commit)) if commit.stream == "last" => return seen,
                            Ok(Some(commit)) => {
                                let held = (commit.stream.clone(), commit.first_version);
                                let durable = durable_record(&vfs, commit.seq) == Some(held);
                                seen.push((commit, durable));
                            }
                            Ok(None) => {}
                            Err(Error::Truncated { seq }) => {
                                seen.retain(|(commit, _)| commit.seq <= seq);
                            }
                            Err(error) => panic!("subscriber: {error}"),
                        }
                    }
                })
            })
            .collect();
        let truncater = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let last = log.last_seq();
                if last > 1 {
                    log.truncate_after(last - 1).expect("truncate");
                }
            })
        };
        // Not `appenders`: its check that an `Ok` is durable when it
        // returns does not hold with a truncation cutting records off.
        let writers: Vec<_> = (0..2u8)
            .map(|writer| {
                let log = Arc::clone(&log);
                thread::spawn(move || {
                    let stream = ["w0", "w1"][usize::from(writer)];
                    for size in 0..3 {
                        let events = [Event::new("t", vec![writer + 1; 20 + size])];
                        log.append(stream, Expected::Any, &events).expect("append");
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().expect("writer");
        }
        truncater.join().expect("truncater");
        log.append("last", Expected::Any, &[Event::new("t", vec![1])])
            .expect("the last append");
        let records = log.read_all(1, usize::MAX).expect("read_all");
        let wanted: Vec<(u64, String, u64)> = records
            .into_iter()
            .filter(|commit| commit.stream != "last")
            .map(|commit| (commit.seq, commit.stream, commit.first_version))
            .collect();
        for follower in followers {
            let seen = follower.join().expect("follower");
            if let Some((commit, _)) = seen.iter().find(|(_, durable)| !durable) {
                panic!("seq {} delivered before it was durable", commit.seq);
            }
            let seen: Vec<_> = seen
                .into_iter()
                .map(|(commit, _)| (commit.seq, commit.stream, commit.first_version))
                .collect();
            assert_eq!(seen, wanted, "a subscriber's records against the log's");
        }
    });
}

/// Each index file in the log's directory is the index of the sealed
/// segment of its name, byte for byte; returns how many there are, and
/// how many sealed segments.
fn index_files_agree(vfs: &SimVfs) -> (usize, usize) {
    let mut segments = BTreeMap::new();
    let mut indexes = BTreeMap::new();
    for entry in vfs.list_dir(Path::new(DIR)).expect("list") {
        let path = Path::new(DIR).join(&entry.name);
        if let Some(seq) = durlog::format::parse_segment_name(&entry.name) {
            segments.insert(seq, path);
        } else if let Some(seq) = durlog::format::parse_index_file_name(&entry.name) {
            indexes.insert(seq, path);
        }
    }
    let last = segments.keys().next_back().copied();
    for (seq, path) in &indexes {
        assert_ne!(Some(*seq), last, "the last segment has an index file");
        let segment = segments.get(seq).expect("an index file's segment exists");
        let bytes = vfs.file_contents(segment).expect("segment");
        let index = durlog::format::SegmentIndex::of_segment(*seq, &bytes).expect("segment");
        assert_eq!(
            vfs.file_contents(path).expect("index file"),
            index.encode(),
            "{} is its segment's index",
            path.display()
        );
    }
    (indexes.len(), segments.len().saturating_sub(1))
}

/// A disk with no faults, and a log of 160-byte segments (one record of
/// about 60 bytes of data each) whose index files `index_files` writes.
fn indexed_setup(seed: u64, index_files: durlog::IndexFiles) -> (SimVfs, Options, Tuning) {
    let options = Options {
        segment_bytes: 160,
        now: Some(Arc::new(|| 7)),
        ..Options::default()
    };
    let tuning = Tuning::default().with(|tuning| {
        tuning.next_segment = NextSegment::OnCall;
        tuning.index_files = index_files;
    });
    (
        SimVfs::with_faults(seed, FaultConfig::none()),
        options,
        tuning,
    )
}

#[test]
fn index_files_race_appenders_purges_and_truncations() {
    index_files_race(durlog::IndexFiles::OnCall);
}

/// The log's own indexing thread, woken at each roll, races the same
/// changes, and a caller's `write_index_files` beside it: the two writers
/// of one segment's index file write it once.
#[test]
fn the_indexing_thread_races_appenders_purges_truncations_and_a_caller() {
    index_files_race(durlog::IndexFiles::Background);
}

/// Appenders that roll, a purge and a truncation, and a thread that calls
/// `write_index_files`, with index files written as `index_files` says:
/// every index file is its sealed segment's, and Open agrees.
fn index_files_race(index_files: durlog::IndexFiles) {
    check(move || {
        let (vfs, options, tuning) = indexed_setup(4, index_files);
        let log = Arc::new(Log::open_tuned(vfs.clone(), DIR, options, tuning).expect("open"));
        for size in 0..4 {
            log.append(
                "seed",
                Expected::Any,
                &[Event::new("t", vec![9; 60 + size])],
            )
            .expect("append");
        }
        let indexer = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for _ in 0..3 {
                    log.write_index_files().expect("write index files");
                }
            })
        };
        let changer = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                log.purge_before(3).expect("purge");
                let last = log.last_seq();
                log.truncate_after(last - 1).expect("truncate");
            })
        };
        let writer = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for size in 0..3 {
                    let events = [Event::new("t", vec![1; 50 + size])];
                    log.append("w", Expected::Any, &events).expect("append");
                }
            })
        };
        for thread in [indexer, changer, writer] {
            thread.join().expect("thread");
        }
        // The log's own thread may be writing one now; a call waits for it.
        if index_files == durlog::IndexFiles::OnCall {
            index_files_agree(&vfs);
        }
        log.write_index_files().expect("the last index files");
        let (written, sealed) = index_files_agree(&vfs);
        assert_eq!(written, sealed, "every sealed segment has its index file");
        drop(log);
        let reopened = Log::open_with_vfs(vfs.clone(), DIR, Options::default()).expect("reopen");
        assert_eq!(reopened.recovery().stale_index_files, Vec::new());
        assert_eq!(reopened.recovery().index_files, written);
    });
}

/// A log dropped right after a roll, while its indexing thread may be
/// writing the sealed segment's index file: the drop waits for it, so the
/// next Open finds every index file its segment's, none stale, and no
/// index file comes after, for a segment the next life cut or removed.
#[test]
fn a_dropped_log_waits_for_its_indexing_thread() {
    check(|| {
        let (vfs, options, tuning) = indexed_setup(5, durlog::IndexFiles::Background);
        let log = Log::open_tuned(vfs.clone(), DIR, options.clone(), tuning).expect("open");
        for size in 0..3 {
            let events = [Event::new("t", vec![9; 60 + size])];
            log.append("s", Expected::Any, &events).expect("append");
        }
        drop(log);
        let reopened = Log::open_with_vfs(vfs.clone(), DIR, options).expect("reopen");
        assert_eq!(reopened.recovery().stale_index_files, Vec::new());
        let (written, sealed) = index_files_agree(&vfs);
        assert!(written <= sealed && sealed > 1, "{written} of {sealed}");
        // Every segment but the first goes, and the first is the last.
        reopened.truncate_after(1).expect("truncate");
        thread::yield_now();
        assert_eq!(
            index_files_agree(&vfs),
            (0, 0),
            "no index file after the cut"
        );
    });
}
