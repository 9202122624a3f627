//! Appenders alone: conflicting expectations on shared streams, rolls with
//! the preparer thread, a quota, failed writes and syncs.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use durlog::vfs::{FaultConfig, FaultKind, SimVfs, Vfs};
use durlog::{
    Commit, Error, Event, Expected, Log, LogState, STATE_FILE_NAME, decode_batch, parse_record,
};
use shuttle::thread;

use super::harness::{DIR, Setup, check, open};

/// Rolls that renamed a file the preparer thread wrote, over all schedules.
static PREPARED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One append as a thread asked it, and what it got.
#[derive(Clone, Debug)]
pub(crate) struct Asked {
    thread: usize,
    stream: &'static str,
    expected: Expected,
    events: u32,
    pub(crate) outcome: Result<u64, String>,
    /// The stream's durable version when the `Ok` was returned.
    durable: u64,
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
pub(crate) fn appenders(
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
pub(crate) fn plan(threads: usize) -> Vec<Vec<(&'static str, Expected, u32)>> {
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
