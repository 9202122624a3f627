//! Retention and truncation (SPEC section 11): `purge_before`,
//! `truncate_after`, `first_seq` and the retention against a model over
//! seeded random logs, reopened between steps; a power loss at every disk
//! operation of a purge and of a truncation (and again inside the recovery
//! after it) leaving the log as it was before or as it is after; what
//! readers and subscribers see; the quota coming back on the real disk.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use common::{TEST_LIMIT, clock, crash_only_disk, event, within};
use durlog::vfs::SimVfs;
use durlog::{Commit, Error, Event, Expected, Log, Options, Retention};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIR: &str = "/log";

fn options(segment_bytes: u64) -> Options {
    Options {
        segment_bytes,
        ..clock(7)
    }
}

fn open(vfs: &SimVfs, segment_bytes: u64) -> Log {
    Log::open_with_vfs(vfs.clone(), DIR, options(segment_bytes)).expect("open")
}

/// What a log shows a reader: enough to tell two states apart.
#[derive(Clone, Debug, PartialEq, Eq)]
struct View {
    first_seq: u64,
    last_seq: u64,
    versions: BTreeMap<String, u64>,
    records: Vec<Commit>,
}

fn view(log: &Log) -> View {
    let versions = log
        .streams("")
        .into_iter()
        .map(|stream| {
            let version = log.version(&stream);
            (stream, version)
        })
        .collect();
    let first_seq = log.first_seq();
    let records = log.read_all(first_seq, usize::MAX).expect("read_all");
    assert_eq!(
        records.first().map_or(log.last_seq() + 1, |c| c.seq),
        first_seq,
        "the first record read is first_seq"
    );
    View {
        first_seq,
        last_seq: log.last_seq(),
        versions,
        records,
    }
}

/// Appends `count` random records over four streams.
fn append_random(log: &Log, rng: &mut ChaCha8Rng, count: usize) {
    for _ in 0..count {
        let stream = format!("s{}", rng.random_range(0..4));
        let events: Vec<Event> = (0..rng.random_range(1..3))
            .map(|_| {
                event(
                    "t",
                    &vec![rng.random_range(1..=255u8); rng.random_range(0..120)],
                )
            })
            .collect();
        log.append(&stream, Expected::Any, &events).expect("append");
    }
}

/// The model's view after `purge_before(before)` on a log showing `view`
/// whose segments start at `segment_starts`.
fn purged(view: &View, segment_starts: &[u64], before: u64) -> View {
    let new_first = segment_starts
        .iter()
        .copied()
        .rfind(|&start| start <= before)
        .unwrap_or(view.first_seq)
        .max(view.first_seq);
    View {
        first_seq: new_first,
        records: view
            .records
            .iter()
            .filter(|c| c.seq >= new_first)
            .cloned()
            .collect(),
        ..view.clone()
    }
}

/// The model's view after `truncate_after(seq)`.
fn truncated(view: &View, seq: u64) -> View {
    let records: Vec<Commit> = view
        .records
        .iter()
        .filter(|c| c.seq <= seq)
        .cloned()
        .collect();
    let mut versions = view.versions.clone();
    for removed in view.records.iter().filter(|c| c.seq > seq).rev() {
        versions.insert(removed.stream.clone(), removed.first_version - 1);
    }
    versions.retain(|_, version| *version > 0);
    View {
        last_seq: seq.min(view.last_seq),
        records,
        versions,
        ..view.clone()
    }
}

/// First seqs of the log's segments, from their file names.
fn segment_starts(vfs: &SimVfs) -> Vec<u64> {
    let mut starts: Vec<u64> = vfs
        .files()
        .iter()
        .filter_map(|path| {
            path.file_name()?
                .to_str()?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect();
    starts.sort();
    starts
}

#[test]
fn purges_and_truncations_match_the_model_across_reopens() {
    for seed in 0..40u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vfs = SimVfs::new(seed);
        let segment_bytes = rng.random_range(200..1200);
        let mut log = open(&vfs, segment_bytes);
        let mut model = view(&log);
        // What `stats()` counts since the last open: purges that removed
        // something, the segments they removed, truncations that did.
        let mut counted = (0, 0, 0);
        for step in 0..30 {
            let context = format!("seed {seed} step {step}");
            match rng.random_range(0..10) {
                0..=4 => {
                    let count = rng.random_range(1..8);
                    append_random(&log, &mut rng, count);
                    model = view(&log);
                }
                5 | 6 => {
                    let before = rng.random_range(0..=log.last_seq() + 2);
                    let segments = segment_starts(&vfs);
                    let expected = purged(&model, &segments, before);
                    let first = log.purge_before(before).expect("purge");
                    let removed = segments.len() - segment_starts(&vfs).len();
                    if removed > 0 {
                        counted.0 += 1;
                        counted.1 += removed as u64;
                    }
                    assert_eq!(
                        first, expected.first_seq,
                        "{context}: purge_before({before})"
                    );
                    model = expected;
                }
                7 => {
                    let seq = rng.random_range(model.first_seq.saturating_sub(1)..=model.last_seq);
                    log.truncate_after(seq).expect("truncate");
                    if seq < model.last_seq {
                        counted.2 += 1;
                    }
                    model = truncated(&model, seq);
                }
                _ => {
                    drop(log);
                    log = open(&vfs, segment_bytes);
                    counted = (0, 0, 0);
                }
            }
            let stats = log.stats();
            assert_eq!(
                (stats.purges, stats.segments_purged, stats.truncations),
                counted,
                "{context}: stats() counts purges, segments purged, truncations"
            );
            assert_eq!(view(&log), model, "{context}");
            check_reads(&log, &model, &context);
        }
        let size = log.size();
        drop(log);
        let log = open(&vfs, segment_bytes);
        assert_eq!(view(&log), model, "seed {seed}: after the last reopen");
        assert_eq!(log.size(), size, "seed {seed}: size() survives a reopen");
    }
}

/// Every stream's events read back from every version, purged ones
/// refused with `Purged`, kept ones as the model holds them.
fn check_reads(log: &Log, model: &View, context: &str) {
    for (stream, &version) in &model.versions {
        let kept: Vec<Event> = model
            .records
            .iter()
            .filter(|c| &c.stream == stream)
            .flat_map(|c| c.events.clone())
            .collect();
        let first_kept = kept.first().map_or(version + 1, |e| e.version);
        for from in 1..=version {
            let read = log.read(stream, from, usize::MAX);
            if from < first_kept {
                assert!(
                    matches!(read, Err(Error::Purged { first_seq }) if first_seq == model.first_seq),
                    "{context}: read({stream}, {from}) of a purged event: {read:?}"
                );
            } else {
                let want: Vec<Event> = kept.iter().filter(|e| e.version >= from).cloned().collect();
                assert_eq!(
                    read.expect("read"),
                    want,
                    "{context}: read({stream}, {from})"
                );
            }
        }
        let conflict = log.append(stream, Expected::NoStream, &[event("t", b"x")]);
        assert!(
            matches!(conflict, Err(Error::VersionConflict { actual, .. }) if actual == version),
            "{context}: stream {stream} keeps version {version}: {conflict:?}"
        );
    }
    if model.first_seq > 1 {
        let read = log.read_all(model.first_seq - 1, 1);
        assert!(
            matches!(read, Err(Error::Purged { .. })),
            "{context}: {read:?}"
        );
    }
}

/// The operations a crash is put inside.
#[derive(Clone, Copy, Debug)]
enum Step {
    Purge(u64),
    Truncate(u64),
}

/// A log of a few segments on a disk that loses what a crash may lose,
/// with every record synced: the state a crash test starts from.
fn crash_setup(seed: u64, purge_first: bool) -> (SimVfs, View, Vec<u64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let vfs = crash_only_disk(seed);
    let log = open(&vfs, 400);
    append_random(&log, &mut rng, 40);
    if purge_first {
        // Streams whose events were purged before, for the state file to
        // carry through the next change.
        let starts = segment_starts(&vfs);
        log.purge_before(starts[2]).expect("purge");
    }
    let view = view(&log);
    drop(log);
    let starts = segment_starts(&vfs);
    (vfs, view, starts)
}

#[test]
fn a_crash_at_every_step_of_a_purge_or_a_truncation_leaves_before_or_after() {
    within("crash_inside_purge_and_truncate", TEST_LIMIT * 4, || {
        let mut checked = 0;
        for seed in 0..6u64 {
            for purge_first in [false, true] {
                let (_, before, starts) = crash_setup(seed, purge_first);
                let middle = starts[starts.len() / 2];
                let steps = [
                    Step::Purge(middle + 1),
                    Step::Purge(before.last_seq + 1),
                    Step::Truncate(middle + 1),
                    Step::Truncate(before.first_seq - 1),
                    Step::Truncate(before.last_seq - 1),
                ];
                for step in steps {
                    checked += crash_at_every_op(seed, purge_first, step, &before, &starts);
                }
            }
        }
        eprintln!("{checked} crash states checked");
        assert!(checked > 500, "only {checked} crash points");
    });
}

/// Crashes `step` at each of its disk operations in turn (and, for each,
/// the recovery after it at each of its own), then checks that the log
/// shows `before` or the view the step leads to. Returns the crash
/// points checked.
fn crash_at_every_op(
    seed: u64,
    purge_first: bool,
    step: Step,
    before: &View,
    starts: &[u64],
) -> usize {
    let after = match step {
        Step::Purge(seq) => purged(before, starts, seq),
        Step::Truncate(seq) => truncated(before, seq),
    };
    let mut checked = 0;
    for crash_at in 1.. {
        let context =
            format!("seed {seed} purge_first {purge_first} {step:?} crash at op {crash_at}");
        let (vfs, _, _) = crash_setup(seed, purge_first);
        let log = open(&vfs, 400);
        vfs.crash_after_ops(crash_at);
        let outcome = match step {
            Step::Purge(seq) => log.purge_before(seq).map(|_| ()),
            Step::Truncate(seq) => log.truncate_after(seq),
        };
        if !vfs.is_halted() {
            vfs.crash_after_ops(0);
            outcome.unwrap_or_else(|error| panic!("{context}: no crash, yet {error}"));
            assert_eq!(view(&log), after, "{context}: the step ran whole");
            return checked;
        }
        drop(log);
        vfs.reboot();
        // Recovery crashed too, at its first few operations.
        for recovery_crash in [0, 1, 2, 3, 5, 8] {
            if recovery_crash > 0 {
                vfs.crash_after_ops(recovery_crash);
                let _ = Log::open_with_vfs(vfs.clone(), DIR, options(400));
                vfs.crash_after_ops(0);
                vfs.reboot();
            }
            let log = Log::open_with_vfs(vfs.clone(), DIR, options(400)).unwrap_or_else(|error| {
                panic!("{context}, recovery crash {recovery_crash}: refused: {error}")
            });
            let seen = view(&log);
            assert!(
                seen == *before || seen == after,
                "{context}, recovery crash {recovery_crash}: neither before nor after:\n{seen:?}\nbefore {before:?}\nafter {after:?}"
            );
            check_reads(&log, &seen, &context);
            checked += 1;
        }
    }
    unreachable!("the loop ends when a step runs whole")
}

#[test]
fn a_subscriber_behind_a_purge_gets_purged_and_one_past_a_truncation_is_told() {
    within("subscribers_and_retention", TEST_LIMIT, || {
        let vfs = SimVfs::new(3);
        let log = open(&vfs, 300);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        append_random(&log, &mut rng, 30);
        let mut behind = log.subscribe(1);
        let mut ahead = log.subscribe(1);
        for _ in 0..25 {
            ahead
                .next_timeout(Duration::ZERO)
                .unwrap()
                .expect("a record");
        }
        let first = log.purge_before(10).expect("purge");
        assert!(first > 1 && first <= 10, "purged up to {first}");
        assert!(matches!(
            behind.next_timeout(Duration::ZERO),
            Err(Error::Purged { first_seq }) if first_seq == first
        ));
        log.truncate_after(20).expect("truncate");
        assert!(matches!(
            ahead.next_timeout(Duration::ZERO),
            Err(Error::Truncated { seq: 20 })
        ));
        log.append("new", Expected::NoStream, &[event("t", b"after")])
            .unwrap();
        let next = ahead
            .next_timeout(Duration::ZERO)
            .unwrap()
            .expect("the new record");
        assert_eq!((next.seq, next.stream.as_str()), (21, "new"));
        // A subscriber that had not passed the truncation sees no error.
        let mut fresh = log.subscribe(first);
        let seqs: Vec<u64> = (first..=21)
            .map(|_| fresh.next_timeout(Duration::ZERO).unwrap().unwrap().seq)
            .collect();
        assert_eq!(seqs, (first..=21).collect::<Vec<u64>>());
    });
}

#[test]
fn truncating_before_the_purged_prefix_is_refused_and_changes_nothing() {
    let vfs = SimVfs::new(4);
    let log = open(&vfs, 300);
    append_random(&log, &mut ChaCha8Rng::seed_from_u64(4), 30);
    let first = log.purge_before(15).unwrap();
    let before = view(&log);
    let files = vfs.files();
    // Truncating after any seq past the last changes nothing.
    log.truncate_after(u64::MAX).unwrap();
    assert_eq!(view(&log), before);
    let refused = log.truncate_after(first - 2);
    assert!(
        matches!(refused, Err(Error::Purged { first_seq }) if first_seq == first),
        "{refused:?}"
    );
    assert_eq!(view(&log), before);
    assert_eq!(vfs.files(), files);
    // Truncating to just before the first kept record empties the log but
    // keeps every version.
    log.truncate_after(first - 1).unwrap();
    assert_eq!((log.first_seq(), log.last_seq()), (first, first - 1));
    let emptied = truncated(&before, first - 1);
    assert_eq!(view(&log), emptied);
    assert!(!emptied.versions.is_empty(), "the purged versions stay");
    drop(log);
    let log = open(&vfs, 300);
    assert_eq!((log.first_seq(), log.last_seq()), (first, first - 1));
    assert_eq!(view(&log), emptied);
    let version = log
        .append("s0", Expected::Any, &[event("t", b"x")])
        .unwrap();
    assert_eq!(version, emptied.versions["s0"] + 1, "versions continue");
    assert_eq!(log.last_seq(), first);
}

#[test]
fn read_only_and_poisoned_logs_refuse_to_purge() {
    let vfs = SimVfs::new(5);
    let log = open(&vfs, 300);
    append_random(&log, &mut ChaCha8Rng::seed_from_u64(5), 20);
    drop(log);
    let reader = Log::open_read_only(vfs.clone(), DIR).unwrap();
    assert!(matches!(
        reader.purge_before(10),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(
        reader.truncate_after(3),
        Err(Error::ReadOnly { .. })
    ));
}

#[test]
fn the_retention_keeps_the_log_within_its_bytes_and_its_age() {
    within("retention", TEST_LIMIT, || {
        let vfs = SimVfs::new(6);
        let now = Arc::new(AtomicI64::new(0));
        let clock = Arc::clone(&now);
        let options = Options {
            segment_bytes: 1000,
            now: Some(Arc::new(move || clock.load(Ordering::Relaxed))),
            ..Options::default()
        };
        let log = Log::open_with_vfs(vfs.clone(), DIR, options.clone()).unwrap();
        log.set_retention(Retention::default().with(|retention| {
            retention.max_bytes = Some(5000);
        }));
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        for round in 0..400 {
            append_random(&log, &mut rng, 1);
            // At most one segment over: the active one is never purged,
            // and the retention runs at rolls.
            assert!(
                log.size() <= 5000 + 1000,
                "round {round}: size {}",
                log.size()
            );
            now.fetch_add(1_000_000, Ordering::Relaxed);
        }
        assert!(log.stats().purges > 10, "{:?}", log.stats());
        let size = log.size();
        let versions = view(&log).versions;
        log.set_retention(Retention::default().with(|retention| {
            retention.max_age = Some(Duration::from_millis(30));
        }));
        for _ in 0..100 {
            append_random(&log, &mut rng, 1);
            now.fetch_add(1_000_000, Ordering::Relaxed);
        }
        // Each record is 1 ms younger than the last: 30 ms is 30 records,
        // plus what the segment holding the oldest of them and the active
        // one keep (a segment holds at most 1000 / 21 records).
        let kept = log.last_seq() - log.first_seq() + 1;
        assert!((30..30 + 2 * 48).contains(&kept), "kept {kept} records");
        drop(log);
        let log = Log::open_with_vfs(vfs.clone(), DIR, options).unwrap();
        for (stream, version) in versions {
            assert!(log.version(&stream) >= version, "{stream} kept its version");
        }
        assert!(log.size() < size + 10_000);
    });
}

#[test]
fn on_the_real_disk_a_full_log_resumes_after_a_purge_and_keeps_its_versions() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let options = Options {
        segment_bytes: 4096,
        max_bytes: 32 * 1024,
        ..clock(9)
    };
    let log = Log::open(&dir, options.clone()).unwrap();
    let data = vec![7u8; 200];
    let mut appended = 0;
    let full = loop {
        match log.append(
            &format!("s{}", appended % 3),
            Expected::Any,
            &[event("t", &data)],
        ) {
            Ok(_) => appended += 1,
            Err(error) => break error,
        }
    };
    assert!(matches!(full, Error::Quota { .. }), "{full}");
    let versions: Vec<u64> = (0..3).map(|i| log.version(&format!("s{i}"))).collect();
    let first = log.purge_before(log.last_seq() / 2).unwrap();
    assert!(first > 1);
    let size = log.size();
    let mut more = 0;
    while log
        .append("s0", Expected::Any, &[event("t", &data)])
        .is_ok()
    {
        more += 1;
    }
    assert!(
        more > 10,
        "appended {more} after the purge (size was {size})"
    );
    let before = view(&log);
    drop(log);
    let log = Log::open(&dir, options).unwrap();
    assert_eq!(view(&log), before, "every kept record reads back");
    assert_eq!(log.version("s0"), versions[0] + more);
    assert_eq!(log.version("s1"), versions[1]);
    assert!(matches!(log.read("s1", 1, 1), Err(Error::Purged { .. })));
}

#[test]
fn purges_and_truncations_race_appenders_and_readers_safely() {
    within("retention_threads", TEST_LIMIT, || {
        let vfs = SimVfs::new(8);
        let log = Arc::new(open(&vfs, 2000));
        let race = Arc::new(Race::default());
        // Set on the way out, also on a failure, so that no writer is
        // left appending forever.
        let _stop = StopOnDrop(Arc::clone(&race));
        let writers: Vec<_> = (0..3)
            .map(|w| {
                let (log, race) = (Arc::clone(&log), Arc::clone(&race));
                std::thread::spawn(move || race_writer(&log, &format!("w{w}"), &race.stop))
            })
            .collect();
        let follower = {
            let (log, race) = (Arc::clone(&log), Arc::clone(&race));
            std::thread::spawn(move || race_follower(&log, &race))
        };
        let (mut targets, mut doomed) = (Vec::new(), 0);
        for round in 0..50 {
            // Behind by the time the purge runs, as writers go on: a purge
            // before an older seq only keeps more, and nothing here counts
            // on what it removed.
            let last = log.last_seq();
            log.purge_before(last.saturating_sub(100)).expect("purge");
            if round % 5 == 0 {
                let cut_back = [1, 5, 30, 60][targets.len() % 4];
                let (target, removed) = truncate_under_writers(&log, &race, &follower, cut_back);
                targets.push(target);
                doomed += removed;
            }
            std::thread::yield_now();
        }
        race.stop.store(true, Ordering::SeqCst);
        let acked: Vec<Vec<u64>> = writers
            .into_iter()
            .map(|writer| writer.join().expect("writer"))
            .collect();
        // Nobody appends any more: truncating after the last seq provably
        // removes nothing.
        let settled = view(&log);
        log.truncate_after(settled.last_seq).expect("truncate");
        assert_eq!(view(&log), settled, "a truncation after the last seq");
        log.append(RACE_END, Expected::NoStream, &[event("t", b"end")])
            .expect("the last append");
        let (followed, notices) = follower.join().expect("follower");
        assert_eq!(
            notices, targets,
            "the follower, past each truncation's seq when it came, is told of each, once"
        );
        let records = log.read_all(log.first_seq(), usize::MAX).expect("read_all");
        let kept: Vec<Commit> = followed
            .into_iter()
            .filter(|commit| commit.seq >= log.first_seq())
            .collect();
        if let Some(at) =
            (0..kept.len().max(records.len())).find(|&at| kept.get(at) != records.get(at))
        {
            panic!(
                "the follower's records differ from the log's at the {at}-th kept: {:?} against {:?}",
                kept.get(at),
                records.get(at)
            );
        }
        let mut removed = 0;
        for (w, acked) in acked.iter().enumerate() {
            removed += check_race_writer(&log, &format!("w{w}"), acked, &records);
        }
        // Every record holds one event, every seq is a record's: the last
        // seq counts the appends no truncation took back, and the end.
        let survived: u64 = (0..3).map(|w| log.version(&format!("w{w}"))).sum();
        assert_eq!(log.last_seq(), survived + 1, "the last seq");
        assert!(
            removed >= doomed,
            "the truncations removed {removed} appends, yet {doomed} were in the log past their targets"
        );
        let appended: usize = acked.iter().map(Vec::len).sum();
        eprintln!(
            "{appended} appends, {removed} removed by {} truncations",
            targets.len()
        );
    });
}

/// The stream the last record of the race goes to: the follower stops there.
const RACE_END: &str = "end";

/// Appends each writer makes at least, and goes on making until the
/// truncations are over.
const RACE_APPENDS_MIN: usize = 300;

/// What the threads of the race share.
#[derive(Default)]
struct Race {
    /// The truncations are over: writers make their last append.
    stop: AtomicBool,
    /// The last seq the follower delivered and still keeps.
    delivered: AtomicU64,
    /// The truncations the follower was told of.
    notices: AtomicUsize,
}

struct StopOnDrop(Arc<Race>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
    }
}

/// The data of a writer's `i`-th append: `i` itself, so that a record
/// names the append it came from.
fn race_data(i: usize) -> Vec<u8> {
    format!("{i:050}").into_bytes()
}

fn race_index(data: &[u8]) -> usize {
    std::str::from_utf8(data)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("not a race append: {data:?}"))
}

/// Appends to `stream` until `stop`, at least `RACE_APPENDS_MIN` times;
/// returns the version each append was given. A truncation that removed
/// some of the stream's records shows in the next version, which is no
/// higher than the one before.
fn race_writer(log: &Log, stream: &str, stop: &AtomicBool) -> Vec<u64> {
    let mut acked = Vec::new();
    loop {
        // Loaded before the append: the last append starts after the last
        // truncation returned, so its version is the stream's at the end.
        let last = stop.load(Ordering::SeqCst);
        let events = [event("t", &race_data(acked.len()))];
        acked.push(log.append(stream, Expected::Any, &events).expect("append"));
        if last && acked.len() >= RACE_APPENDS_MIN {
            return acked;
        }
    }
}

/// Follows the log from seq 1 to the record of `RACE_END`: each record
/// the next seq, a purge skipping to the first seq kept, a truncation's
/// notice taking back what it removed. Returns the records kept and the
/// seq of each notice.
fn race_follower(log: &Log, race: &Race) -> (Vec<Commit>, Vec<u64>) {
    let mut subscription = log.subscribe(1);
    let (mut kept, mut notices) = (Vec::<Commit>::new(), Vec::new());
    let mut next_seq = 1;
    loop {
        match subscription.next_timeout(Duration::from_millis(10)) {
            Ok(Some(commit)) => {
                assert_eq!(commit.seq, next_seq, "no gap, no repeat");
                next_seq += 1;
                let end = commit.stream == RACE_END;
                kept.push(commit);
                race.delivered.store(next_seq - 1, Ordering::SeqCst);
                if end {
                    return (kept, notices);
                }
            }
            Ok(None) => {}
            Err(Error::Purged { first_seq }) => {
                assert!(
                    first_seq > next_seq,
                    "purged from {next_seq} to {first_seq}"
                );
                next_seq = first_seq;
                race.delivered.store(next_seq - 1, Ordering::SeqCst);
                subscription = log.subscribe(first_seq);
            }
            Err(Error::Truncated { seq }) => {
                assert!(
                    seq + 1 < next_seq,
                    "told of a truncation after {seq}, delivered {next_seq} - 1"
                );
                kept.retain(|commit| commit.seq <= seq);
                next_seq = seq + 1;
                notices.push(seq);
                race.delivered.store(seq, Ordering::SeqCst);
                race.notices.fetch_add(1, Ordering::SeqCst);
            }
            Err(error) => panic!("follower: {error}"),
        }
    }
}

/// Truncates about `cut_back` records while the writers append, once the
/// follower has delivered them (so it must be told), and checks that every
/// record acknowledged after the target before the call is gone after it.
/// Returns the target, once the follower was told of it, and how many
/// records it removed at least.
///
/// The target is below a seq read before the call; writers append more
/// before the truncation takes the lead, and it removes those too: what
/// it removed is accounted for by what each writer and the follower see,
/// not by a count fixed here.
fn truncate_under_writers(
    log: &Log,
    race: &Race,
    follower: &JoinHandle<(Vec<Commit>, Vec<u64>)>,
    cut_back: u64,
) -> (u64, usize) {
    // The test's thread is the only one that purges or truncates: the
    // first seq holds still, and the last seq only grows meanwhile.
    let first_seq = log.first_seq();
    wait_for("a record", follower, || log.last_seq() >= first_seq);
    let last = log.last_seq();
    wait_for("the follower to deliver it", follower, || {
        race.delivered.load(Ordering::SeqCst) >= last
    });
    let target = last.saturating_sub(cut_back).max(first_seq - 1);
    let doomed = log.read_all(target + 1, usize::MAX).expect("read_all");
    assert!(doomed.len() as u64 >= last - target);
    let told = race.notices.load(Ordering::SeqCst);
    log.truncate_after(target).expect("truncate");
    let after = log.read_all(target + 1, usize::MAX).expect("read_all");
    for commit in &after {
        assert!(
            !doomed
                .iter()
                .any(|gone| (&gone.stream, &gone.events[0].data)
                    == (&commit.stream, &commit.events[0].data)),
            "seq {} of {} survived truncate_after({target})",
            commit.seq,
            commit.stream
        );
    }
    wait_for("the follower's notice", follower, || {
        race.notices.load(Ordering::SeqCst) > told
    });
    (target, doomed.len())
}

/// Polls `ready` until it holds; fails at once if the follower ended (it
/// failed: its message is above) instead of waiting for the test's limit.
fn wait_for<T>(what: &str, follower: &JoinHandle<T>, ready: impl Fn() -> bool) {
    while !ready() {
        assert!(
            !follower.is_finished(),
            "the follower ended while the test waited for {what}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Checks a writer's stream against what its appends were told: the
/// stream's version is its last append's, and the event at each version
/// still in the log is the last append told that version (a truncation
/// removed the earlier ones). Returns how many appends a truncation
/// removed.
fn check_race_writer(log: &Log, stream: &str, acked: &[u64], records: &[Commit]) -> usize {
    let version = log.version(stream);
    assert_eq!(
        Some(&version),
        acked.last(),
        "{stream}: its last append's version"
    );
    // Dense: each append one past the stream's version, which only a
    // truncation lowers.
    assert_eq!(acked[0], 1, "{stream}: its first version");
    if let Some(pair) = acked.windows(2).find(|pair| pair[1] > pair[0] + 1) {
        panic!("{stream}: version {} after {}", pair[1], pair[0]);
    }
    let mut last_told = BTreeMap::new();
    for (i, &told) in acked.iter().enumerate() {
        last_told.insert(told, i);
    }
    let events: Vec<Event> = records
        .iter()
        .filter(|commit| commit.stream == stream)
        .flat_map(|commit| commit.events.clone())
        .collect();
    let first = events.first().map_or(version + 1, |event| event.version);
    let versions: Vec<u64> = events.iter().map(|event| event.version).collect();
    assert_eq!(
        versions,
        (first..=version).collect::<Vec<u64>>(),
        "{stream}: dense to its version"
    );
    for event in &events {
        assert_eq!(
            race_index(&event.data),
            last_told[&event.version],
            "{stream} version {}: the last append told it",
            event.version
        );
    }
    assert_eq!(log.read(stream, first, usize::MAX).expect("read"), events);
    acked.len() - version as usize
}
