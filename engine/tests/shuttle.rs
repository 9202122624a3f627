//! The real `Log`, its group commit, segment preparer, purges and
//! subscribers, run by threads under shuttle's schedulers (PCT and random)
//! on the simulated disk. `cargo test -p durlog --features shuttle --test
//! shuttle`; `DURLOG_SHUTTLE_ITERATIONS=N` sets the schedules per test
//! (default 2,000: the CI run; TESTING.md gives the long one).
//!
//! On every schedule: every thread returns (shuttle fails a schedule where
//! all threads are blocked, and one that passes its step limit); the
//! outcomes are those of running the appends one at a time in an order
//! consistent with each thread's own (the order of the records' seqs);
//! every `Ok` is durable on the simulated disk at the moment it is
//! returned; versions and seqs are dense; a thread that saw the log
//! poisoned sees every later append refused. A failure prints shuttle's
//! schedule: `DURLOG_SHUTTLE_REPLAY='<schedule>' cargo test -p durlog
//! --features shuttle --test shuttle <test>` runs that schedule again.
//! `DURLOG_SHUTTLE_SCHEDULER=pct` (or `random`) runs one scheduler only.

#![cfg(feature = "shuttle")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durlog::vfs::{FaultConfig, FaultKind, SimVfs, Vfs};
use durlog::{
    Commit, Error, Event, Expected, Log, LogState, NextSegment, Options, STATE_FILE_NAME, Tuning,
    decode_batch, parse_record,
};
use shuttle::scheduler::{PctScheduler, RandomScheduler};
use shuttle::{Config, MaxSteps, Runner, thread};

const DIR: &str = "/log";

/// Rolls that renamed a file the preparer thread wrote, over all schedules.
static PREPARED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Schedules per test and scheduler.
fn iterations() -> usize {
    std::env::var("DURLOG_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
}

/// Runs `test` under PCT (depth 3), then under the random scheduler
/// (`DURLOG_SHUTTLE_SCHEDULER=pct` or `random` runs one only). A schedule
/// longer than 100,000 steps fails: a spin that never ends. Prints the
/// schedules each scheduler ran and their time, also when one fails.
fn check(test: impl Fn() + Send + Sync + 'static) {
    // A failure prints its schedule; this runs that one schedule again.
    if let Ok(schedule) = std::env::var("DURLOG_SHUTTLE_REPLAY") {
        shuttle::replay(test, &schedule);
        return;
    }
    let test = Arc::new(test);
    let mut config = Config::new();
    config.max_steps = MaxSteps::FailAfter(100_000);
    let only = std::env::var("DURLOG_SHUTTLE_SCHEDULER").unwrap_or_default();
    if only != "random" {
        let tally = Tally::new("pct");
        let (test, runs) = (Arc::clone(&test), Arc::clone(&tally.runs));
        let pct = PctScheduler::new(3, iterations());
        Runner::new(pct, config.clone()).run(move || {
            runs.fetch_add(1, Relaxed);
            test();
        });
    }
    if only != "pct" {
        let tally = Tally::new("random");
        let runs = Arc::clone(&tally.runs);
        let random = RandomScheduler::new(iterations());
        Runner::new(random, config).run(move || {
            runs.fetch_add(1, Relaxed);
            test();
        });
    }
}

/// Counts a scheduler's schedules and prints them when dropped, on
/// success or while a failure unwinds.
struct Tally {
    scheduler: &'static str,
    runs: Arc<AtomicUsize>,
    started: Instant,
}

impl Tally {
    fn new(scheduler: &'static str) -> Tally {
        Tally {
            scheduler,
            runs: Arc::new(AtomicUsize::new(0)),
            started: Instant::now(),
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        let runs = self.runs.load(Relaxed);
        let seconds = self.started.elapsed().as_secs_f64();
        let failed = if std::thread::panicking() {
            ", failed"
        } else {
            ""
        };
        eprintln!(
            "{}: {runs} schedules in {seconds:.2} s{failed}",
            self.scheduler
        );
        assert!(
            std::thread::panicking() || runs >= iterations(),
            "shuttle ran {runs} schedules"
        );
    }
}

/// One append as a thread asked it, and what it got.
#[derive(Clone, Debug)]
struct Asked {
    thread: usize,
    stream: &'static str,
    expected: Expected,
    events: u32,
    outcome: Result<u64, String>,
    /// The stream's durable version when the `Ok` was returned.
    durable: u64,
}

/// The log's setup for a scenario.
struct Setup {
    faults: FaultConfig,
    segment_bytes: u64,
    max_bytes: u64,
}

fn open(vfs: &SimVfs, setup: &Setup) -> Log {
    let options = Options {
        segment_bytes: setup.segment_bytes,
        max_bytes: setup.max_bytes,
        now: Some(Arc::new(|| 7)),
        failpoint: None,
    };
    let tuning = Tuning::default().with(|tuning| {
        tuning.next_segment = NextSegment::Background;
        tuning.preallocate_after_bytes = 0;
        tuning.preallocate_chunk_bytes = 64;
    });
    Log::open_tuned(vfs.clone(), DIR, options, tuning).expect("open")
}

/// The highest version of `stream` in what a crash would leave now.
fn durable_version(vfs: &SimVfs, stream: &str) -> u64 {
    let mut segments: Vec<_> = vfs
        .list_dir(Path::new(DIR))
        .unwrap_or_default()
        .into_iter()
        .filter(|entry| entry.name.ends_with(".log"))
        .map(|entry| entry.name)
        .collect();
    segments.sort();
    // Events a purge removed count as the state file says.
    let state = vfs.durable_contents(&Path::new(DIR).join(STATE_FILE_NAME));
    let mut version = state
        .and_then(|bytes| LogState::decode(&bytes).ok())
        .and_then(|state| state.purged_versions.get(stream).copied())
        .unwrap_or(0);
    for name in segments {
        let Some(bytes) = vfs.durable_contents(&Path::new(DIR).join(&name)) else {
            continue;
        };
        let mut at = 0;
        while let Ok(record) = parse_record(&bytes[at..]) {
            if let Ok(batch) = decode_batch(record.payload)
                && batch.stream == stream
            {
                version = version.max(batch.first_version + batch.events.len() as u64 - 1);
            }
            at += record.len;
        }
    }
    version
}

/// Runs `plan` (per thread: stream, expectation, events) on `log`, one
/// thread per entry, and returns every append with its outcome.
fn appenders(
    log: &Arc<Log>,
    vfs: &SimVfs,
    plan: Vec<Vec<(&'static str, Expected, u32)>>,
) -> Vec<Asked> {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = plan
        .into_iter()
        .enumerate()
        .map(|(thread, appends)| {
            let (log, vfs, asked) = (Arc::clone(log), vfs.clone(), Arc::clone(&asked));
            thread::spawn(move || {
                let mut poisoned = false;
                for (stream, expected, events) in appends {
                    let batch: Vec<Event> = (0..events)
                        .map(|i| Event::new("t", vec![thread as u8 + 1; 20 + i as usize]))
                        .collect();
                    let outcome = log.append(stream, expected, &batch);
                    assert!(
                        !poisoned || outcome.is_err(),
                        "thread {thread}: an append succeeded after the log was poisoned"
                    );
                    poisoned |= matches!(outcome, Err(Error::Poisoned)) || log.is_poisoned();
                    let durable = match &outcome {
                        Ok(_) => durable_version(&vfs, stream),
                        Err(_) => 0,
                    };
                    if let Ok(version) = outcome {
                        assert!(
                            durable >= version,
                            "thread {thread}: {stream} acknowledged at version {version}, durable only up to {durable}"
                        );
                    }
                    asked.lock().unwrap().push(Asked {
                        thread,
                        stream,
                        expected,
                        events,
                        outcome: outcome.map_err(|error| format!("{error:?}")),
                        durable,
                    });
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("an appender panicked");
    }
    Arc::try_unwrap(asked).unwrap().into_inner().unwrap()
}

/// The outcomes are those of some serial run consistent with each
/// thread's order: the records' seqs give that order.
fn check_serial(asked: &[Asked], records: &[Commit]) {
    // Seqs dense from 1, versions dense per stream.
    let mut versions: BTreeMap<&str, u64> = BTreeMap::new();
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record.seq, i as u64 + 1, "seqs are dense");
        let version = versions.entry(leak(&record.stream)).or_default();
        assert_eq!(record.first_version, *version + 1, "versions are dense");
        *version += record.events.len() as u64;
    }
    // Each Ok is the record of its stream and version; a thread's Oks in
    // increasing seq.
    let seq_of = |stream: &str, version: u64| {
        records
            .iter()
            .find(|record| {
                record.stream == stream
                    && record.first_version + record.events.len() as u64 - 1 == version
            })
            .map(|record| record.seq)
    };
    let mut last_seq: BTreeMap<usize, u64> = BTreeMap::new();
    for ask in asked {
        if let Ok(version) = ask.outcome {
            let seq = seq_of(ask.stream, version)
                .unwrap_or_else(|| panic!("{ask:?}: no record holds that version"));
            let record = &records[seq as usize - 1];
            assert_eq!(record.events.len() as u32, ask.events, "{ask:?}");
            let previous = last_seq.insert(ask.thread, seq).unwrap_or(0);
            assert!(seq > previous, "{ask:?}: out of its thread's order");
            // The expectation held just before the record.
            let before = record.first_version - 1;
            assert!(
                matches_expected(ask.expected, before),
                "{ask:?} acknowledged with the stream at {before}"
            );
        }
    }
    // A conflict names a version the stream had while the append waited.
    for ask in asked {
        if let Err(error) = &ask.outcome
            && let Some(actual) = error
                .strip_prefix("VersionConflict { stream: ")
                .and_then(|rest| rest.split("actual: ").nth(1))
                .and_then(|rest| rest.trim_end_matches(" }").parse::<u64>().ok())
        {
            assert!(
                !matches_expected(ask.expected, actual),
                "{ask:?}: a conflict although {actual} matches"
            );
            let had = std::iter::once(0)
                .chain(
                    records
                        .iter()
                        .filter(|record| record.stream == ask.stream)
                        .map(|record| record.first_version + record.events.len() as u64 - 1),
                )
                .any(|version| version == actual);
            assert!(had, "{ask:?}: the stream never was at {actual}");
        }
    }
    let total = asked.iter().filter(|ask| ask.outcome.is_ok()).count();
    assert_eq!(
        total,
        records.len(),
        "every record is an acknowledged append"
    );
}

fn matches_expected(expected: Expected, current: u64) -> bool {
    match expected {
        Expected::Any => true,
        Expected::NoStream | Expected::Exact(0) => current == 0,
        Expected::StreamExists => current > 0,
        Expected::Exact(version) => version == current,
    }
}

/// Streams in this file are literals; records carry owned names.
fn leak(stream: &str) -> &'static str {
    match stream {
        "a" => "a",
        "b" => "b",
        other => panic!("unexpected stream {other}"),
    }
}

/// The appends of the scenarios: conflicting expectations on shared
/// streams, batches of one to three events.
fn plan(threads: usize) -> Vec<Vec<(&'static str, Expected, u32)>> {
    let all = vec![
        vec![
            ("a", Expected::NoStream, 1),
            ("a", Expected::Exact(1), 2),
            ("b", Expected::Any, 1),
        ],
        vec![
            ("a", Expected::Any, 1),
            ("b", Expected::NoStream, 3),
            ("a", Expected::StreamExists, 1),
        ],
        vec![
            ("b", Expected::Exact(3), 1),
            ("a", Expected::Exact(2), 1),
            ("b", Expected::Any, 2),
        ],
        vec![("a", Expected::Any, 1), ("a", Expected::Any, 1)],
    ];
    all.into_iter().take(threads).collect()
}

/// Appenders with segment rolls (the preparer thread running), then the
/// log reopened: the outcomes against the records.
fn appenders_scenario(threads: usize, setup: Setup) {
    let vfs = SimVfs::with_faults(1, setup.faults.clone());
    let log = Arc::new(open(&vfs, &setup));
    let asked = appenders(&log, &vfs, plan(threads));
    PREPARED.fetch_add(log.stats().segments_prepared, Relaxed);
    drop(log);
    // A crash with every fault off keeps exactly what was durable.
    vfs.set_faults(FaultConfig::none());
    vfs.crash();
    let log = open(
        &vfs,
        &Setup {
            faults: FaultConfig::none(),
            ..setup
        },
    );
    let records = log.read_all(1, usize::MAX).expect("read_all");
    check_serial(&asked, &records);
    for ask in &asked {
        if let Ok(version) = ask.outcome {
            assert!(ask.durable >= version);
        }
    }
}

#[test]
fn appenders_with_rolls_and_the_preparer() {
    check(|| {
        appenders_scenario(
            3,
            Setup {
                faults: FaultConfig::none(),
                segment_bytes: 160,
                max_bytes: 0,
            },
        )
    });
    let prepared = PREPARED.load(Relaxed);
    assert!(
        prepared > 0,
        "no roll took a segment the preparer thread wrote"
    );
}

#[test]
fn four_appenders_at_a_quota() {
    check(|| {
        appenders_scenario(
            4,
            Setup {
                faults: FaultConfig::none(),
                segment_bytes: 200,
                max_bytes: 420,
            },
        )
    });
}

#[test]
fn appenders_with_failed_writes_and_syncs() {
    check(|| {
        appenders_scenario(
            2,
            Setup {
                faults: FaultConfig::none()
                    .with(FaultKind::FailedFsync, 0.15)
                    .with(FaultKind::ShortWrite, 0.1),
                segment_bytes: 160,
                max_bytes: 0,
            },
        )
    });
}

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

#[test]
fn index_files_race_appenders_purges_and_truncations() {
    check(|| {
        let vfs = SimVfs::with_faults(4, FaultConfig::none());
        let options = Options {
            segment_bytes: 160,
            now: Some(Arc::new(|| 7)),
            ..Options::default()
        };
        let tuning = Tuning::default().with(|tuning| {
            tuning.next_segment = NextSegment::OnCall;
            tuning.index_files = durlog::IndexFiles::OnCall;
        });
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
        index_files_agree(&vfs);
        log.write_index_files().expect("the last index files");
        let (written, sealed) = index_files_agree(&vfs);
        assert_eq!(written, sealed, "every sealed segment has its index file");
        drop(log);
        let reopened = Log::open_with_vfs(vfs.clone(), DIR, Options::default()).expect("reopen");
        assert_eq!(reopened.recovery().stale_index_files, Vec::new());
        assert_eq!(reopened.recovery().index_files, written);
    });
}
