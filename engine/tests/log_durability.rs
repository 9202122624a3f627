//! Durability: sync before acknowledgement, failed appends leave no trace,
//! the failpoint between write and sync, poisoning, and group commit.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{Backend, Op, TEST_LIMIT, clock, event, within};
use durlog::vfs::{FaultConfig, FaultKind, SimVfs};
use durlog::{Error, Expected, FAILPOINT_AFTER_WRITE, Log, Options, segment_name};

const SEG1: &str = "00000000000000000001.log";

fn write(file: &str, offset: u64, len: usize) -> Op {
    Op::Write {
        file: file.into(),
        offset,
        len,
    }
}

fn sync(file: &str) -> Op {
    Op::SyncData(file.into())
}

#[test]
fn one_sync_after_each_write_before_each_ack() {
    for backend in Backend::all() {
        let options = Options {
            segment_bytes: 100,
            max_bytes: 1000,
            ..clock(0)
        };
        let (log, recorder) = backend.open_recorded(options).unwrap();
        assert_eq!(
            recorder.ops(),
            vec![Op::SyncDir("log".into())],
            "open syncs the directory once"
        );
        recorder.clear();
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        assert_eq!(
            recorder.ops(),
            vec![
                Op::Open(SEG1.into()),
                Op::SyncDir("log".into()),
                write(SEG1, 0, 49),
                sync(SEG1)
            ],
            "{}: a new segment's directory entry is synced before its first record is acknowledged",
            backend.name()
        );
        recorder.clear();
        log.append("s", Expected::Any, &[event("t", b"two")])
            .unwrap();
        assert_eq!(recorder.ops(), vec![write(SEG1, 49, 49), sync(SEG1)]);
        recorder.clear();
        // Refused appends touch nothing.
        let _ = log
            .append("s", Expected::NoStream, &[event("t", b"x")])
            .unwrap_err();
        let _ = log.append("s", Expected::Any, &[]).unwrap_err();
        let _ = log
            .append("s", Expected::Any, &[event("t", &[0; 2000])])
            .unwrap_err();
        assert_eq!(recorder.ops(), vec![], "{}", backend.name());
        // A roll: the new file and the directory sync come first.
        log.append("s", Expected::Any, &[event("t", b"three")])
            .unwrap();
        let second = segment_name(3);
        assert_eq!(
            recorder.ops(),
            vec![
                Op::Open(second.clone()),
                Op::SyncDir("log".into()),
                write(&second, 0, 51),
                sync(&second)
            ]
        );
    }
}

#[test]
fn a_failed_write_or_sync_leaves_no_trace() {
    for backend in Backend::all() {
        for failure in ["failpoint", "write-0", "write-10", "write-all", "sync"] {
            let fail_now = Arc::new(AtomicBool::new(false));
            let hook = Arc::clone(&fail_now);
            let options = Options {
                failpoint: Some(Arc::new(move |name: &str| {
                    assert_eq!(name, FAILPOINT_AFTER_WRITE);
                    if hook.swap(false, Ordering::SeqCst) {
                        Err(std::io::Error::other("failpoint says no"))
                    } else {
                        Ok(())
                    }
                })),
                ..clock(0)
            };
            let (log, recorder) = backend.open_recorded(options.clone()).unwrap();
            log.append("s", Expected::Any, &[event("t", b"one")])
                .unwrap();
            let before = backend.snapshot();
            recorder.clear();
            match failure {
                "failpoint" => fail_now.store(true, Ordering::SeqCst),
                "write-0" => recorder.fail_next_write(0),
                "write-10" => recorder.fail_next_write(10),
                "write-all" => recorder.fail_next_write(usize::MAX),
                _ => recorder.fail_next_sync(),
            }
            let error = log
                .append("s", Expected::Any, &[event("t", b"two")])
                .unwrap_err();
            assert!(matches!(error, Error::Io(_)), "{failure}: {error}");
            assert_eq!(
                backend.snapshot(),
                before,
                "{}/{failure}: cut back",
                backend.name()
            );
            let ops = recorder.ops();
            assert_eq!(
                ops[ops.len() - 2..],
                [
                    Op::SetLen {
                        file: SEG1.into(),
                        len: 49
                    },
                    sync(SEG1)
                ],
                "{failure}"
            );
            let data_syncs = ops.iter().filter(|op| **op == sync(SEG1)).count();
            assert!(
                data_syncs <= 2,
                "{failure}: a failed sync is never retried and trusted: {ops:?}"
            );
            assert_eq!((log.version("s"), log.last_seq(), log.size()), (1, 1, 49));
            assert!(!log.is_poisoned());
            assert_eq!(log.stats().failed_appends, 1);
            // The log goes on, at the same place.
            assert_eq!(
                log.append("s", Expected::Exact(1), &[event("t", b"two")])
                    .unwrap(),
                2
            );
            drop(log);
            backend.crash();
            let log = backend.open(options).unwrap();
            let data: Vec<_> = log
                .read("s", 1, 10)
                .unwrap()
                .into_iter()
                .map(|e| e.data)
                .collect();
            assert_eq!(data, vec![b"one".to_vec(), b"two".to_vec()], "{failure}");
            drop(log);
            for name in backend.files() {
                backend.remove_file(&name);
            }
        }
    }
}

/// How a cut-back can fail after a group's sync failed: its truncate, or
/// its sync alone (the truncate then sits in the page cache only).
#[derive(Clone, Copy, Debug)]
enum CutBackFailure {
    Truncate,
    SyncOnly,
}

#[test]
fn a_cut_back_that_fails_poisons_the_log_until_reopen() {
    for failure in [CutBackFailure::Truncate, CutBackFailure::SyncOnly] {
        for backend in Backend::all() {
            let (log, recorder) = backend.open_recorded(clock(0)).unwrap();
            log.append("s", Expected::Any, &[event("t", b"one")])
                .unwrap();
            recorder.fail_next_sync();
            match failure {
                CutBackFailure::Truncate => recorder.fail_next_set_len(),
                // The group's sync (0) and the cut-back's (1).
                CutBackFailure::SyncOnly => recorder.fail_nth_sync(1),
            }
            assert!(matches!(
                log.append("s", Expected::Any, &[event("t", b"two")]),
                Err(Error::Io(_))
            ));
            assert!(log.is_poisoned(), "{failure:?} on {}", backend.name());
            let error = log
                .append("s", Expected::Any, &[event("t", b"three")])
                .unwrap_err();
            assert!(matches!(error, Error::Poisoned), "{error}");
            assert!(error.to_string().contains("reopen"), "{error}");
            assert_eq!(log.read("s", 1, 10).unwrap().len(), 1, "reads keep working");
            drop(log);
            // The unacknowledged record may survive, whole; never half of it.
            let log = backend.open(clock(0)).unwrap();
            assert!((1..=2).contains(&log.version("s")));
            assert_eq!(
                log.append("s", Expected::Any, &[event("t", b"four")])
                    .unwrap(),
                log.version("s")
            );
        }
    }
}

/// Appends queued behind a group that poisons the log fail with
/// `Poisoned` when their turn comes: none is written, none hangs.
#[test]
fn appends_queued_before_a_poisoning_fail_with_poisoned() {
    let backend = Backend::sim(3);
    let options = Options {
        // The second append does not fit beside the first: a group of its
        // own, after the one that fails.
        segment_bytes: 80,
        ..clock(0)
    };
    let (log, recorder) = backend.open_recorded(options).unwrap();
    let first = log
        .submit("s", Expected::Any, &[event("t", b"one")])
        .unwrap();
    let second = log
        .submit("s", Expected::Any, &[event("t", &[7; 40])])
        .unwrap();
    recorder.fail_next_sync();
    recorder.fail_next_set_len();
    assert_eq!(log.commit_next_group(), 1, "the first append alone");
    assert!(matches!(log.take_outcome(first), Some(Err(Error::Io(_)))));
    assert!(log.is_poisoned());
    assert_eq!(log.queued(), 1);
    assert_eq!(log.commit_next_group(), 1);
    assert!(matches!(
        log.take_outcome(second),
        Some(Err(Error::Poisoned))
    ));
    assert_eq!(log.queued(), 0);
}

/// A leader that panics in the middle of its group's I/O (a failpoint hook
/// may) leaves the disk in a state only a reopen can judge: the lead is
/// given up, the log is poisoned, and an append waiting behind it, a
/// purge and every later append fail with `Poisoned` instead of waiting
/// for a lead no one will hand on.
#[test]
fn a_leader_that_panics_poisons_the_log_and_frees_the_others() {
    within("leader_panics", TEST_LIMIT, || {
        let backend = Backend::sim(5);
        let armed = Arc::new(AtomicBool::new(false));
        let options = Options {
            failpoint: Some(Arc::new({
                let armed = Arc::clone(&armed);
                move |name: &str| {
                    if name == FAILPOINT_AFTER_WRITE && armed.swap(false, Ordering::SeqCst) {
                        // Long enough for the other thread to queue behind.
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        panic!("a hook that panics");
                    }
                    Ok(())
                }
            })),
            ..clock(0)
        };
        let log = Arc::new(backend.open(options).unwrap());
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        armed.store(true, Ordering::SeqCst);
        let leader = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || log.append("s", Expected::Any, &[event("t", b"two")]))
        };
        while armed.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let waiter = log.append("s", Expected::Any, &[event("t", b"three")]);
        assert!(leader.join().is_err(), "the leader's append panicked");
        assert!(matches!(waiter, Err(Error::Poisoned)), "{waiter:?}");
        assert!(log.is_poisoned());
        assert!(matches!(log.purge_before(10), Err(Error::Poisoned)));
        assert!(matches!(
            log.append("s", Expected::Any, &[event("t", b"four")]),
            Err(Error::Poisoned)
        ));
        assert_eq!(log.version("s"), 1);
    });
}

/// A crash exactly between write and sync keeps the 5 acknowledged versions
/// and the 6th whole or not at all; over many seeds both happen.
#[test]
fn crash_at_the_failpoint_keeps_acked_and_whole_or_nothing() {
    let mut outcomes = [0usize; 2];
    for seed in 0..200u64 {
        let faults =
            FaultConfig::only(&[FaultKind::LostUnsyncedPages, FaultKind::UnsyncedSizeChange]);
        let vfs = SimVfs::with_faults(seed, faults);
        let crash_on = Arc::new(AtomicBool::new(false));
        let (hook, disk) = (Arc::clone(&crash_on), vfs.clone());
        let options = Options {
            failpoint: Some(Arc::new(move |_: &str| {
                if hook.load(Ordering::SeqCst) {
                    disk.halt();
                    return Err(std::io::Error::other("crashed at the failpoint"));
                }
                Ok(())
            })),
            ..clock(7)
        };
        let log = Log::open_with_vfs(vfs.clone(), "/db", options).unwrap();
        for i in 1..=5u64 {
            assert_eq!(
                log.append("s", Expected::Exact(i - 1), &[event("t", &[i as u8; 300])])
                    .unwrap(),
                i
            );
        }
        crash_on.store(true, Ordering::SeqCst);
        assert!(
            log.append("s", Expected::Exact(5), &[event("t", &[6; 300])])
                .is_err(),
            "seed {seed}"
        );
        drop(log);
        vfs.reboot();
        let log = Log::open_with_vfs(vfs.clone(), "/db", clock(7)).unwrap();
        let events = log.read("s", 1, 100).unwrap();
        assert!(
            events.len() == 5 || events.len() == 6,
            "seed {seed}: {} events",
            events.len()
        );
        for (i, event) in events.iter().enumerate() {
            assert_eq!(event.data, vec![i as u8 + 1; 300], "seed {seed}");
        }
        outcomes[events.len() - 5] += 1;
        assert_eq!(
            log.append("s", Expected::Any, &[event("t", b"next")])
                .unwrap(),
            events.len() as u64 + 1
        );
    }
    assert!(
        outcomes[0] > 0 && outcomes[1] > 0,
        "both outcomes explored: {outcomes:?}"
    );
}

/// 32 threads append to one stream, each re-reading the version and
/// appending at exactly version + 1: every success lands at expected + 1,
/// none is lost or doubled, and group commit shares syncs.
#[test]
fn thirty_two_threads_on_one_stream() {
    within("thirty_two_threads_on_one_stream", TEST_LIMIT, || {
        for backend in Backend::all() {
            let log = Arc::new(backend.open(clock(0)).unwrap());
            let per_thread = 20;
            let wins: Vec<Vec<u64>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..32u8)
                    .map(|thread| {
                        let log = Arc::clone(&log);
                        scope.spawn(move || {
                            let mut won = Vec::new();
                            while won.len() < per_thread {
                                let seen = log.version("s");
                                let data = [thread, won.len() as u8];
                                match log.append("s", Expected::Exact(seen), &[event("t", &data)]) {
                                    Ok(version) => {
                                        assert_eq!(version, seen + 1);
                                        won.push(version);
                                    }
                                    Err(Error::VersionConflict { actual, .. }) => {
                                        assert!(actual > seen)
                                    }
                                    Err(other) => panic!("{other}"),
                                }
                            }
                            won
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|handle| handle.join().unwrap())
                    .collect()
            });
            let mut all: Vec<u64> = wins.iter().flatten().copied().collect();
            all.sort_unstable();
            assert_eq!(
                all,
                (1..=32 * per_thread as u64).collect::<Vec<_>>(),
                "dense, none doubled"
            );
            let events = log.read("s", 1, usize::MAX).unwrap();
            assert_eq!(events.len(), 32 * per_thread);
            for (thread, won) in wins.iter().enumerate() {
                for (n, version) in won.iter().enumerate() {
                    assert_eq!(
                        events[*version as usize - 1].data,
                        vec![thread as u8, n as u8]
                    );
                }
            }
            assert_eq!(log.stats().appends, 32 * per_thread as u64);
        }
    });
}

/// 32 threads append to one stream with `Any`: every returned version is
/// distinct, they are dense, each holds its own data, and group commit
/// shares syncs.
#[test]
fn thirty_two_threads_on_one_stream_share_syncs() {
    within(
        "thirty_two_threads_on_one_stream_share_syncs",
        TEST_LIMIT,
        || {
            for backend in Backend::all() {
                let log = Arc::new(backend.open(clock(0)).unwrap());
                let per_thread = 25;
                let versions: Vec<Vec<u64>> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..32u8)
                        .map(|thread| {
                            let log = Arc::clone(&log);
                            scope.spawn(move || {
                                (0..per_thread)
                                    .map(|n| {
                                        log.append("s", Expected::Any, &[event("t", &[thread, n])])
                                            .unwrap()
                                    })
                                    .collect()
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|handle| handle.join().unwrap())
                        .collect()
                });
                let mut all: Vec<u64> = versions.iter().flatten().copied().collect();
                all.sort_unstable();
                assert_eq!(all, (1..=32 * u64::from(per_thread)).collect::<Vec<_>>());
                let events = log.read("s", 1, usize::MAX).unwrap();
                for (thread, mine) in versions.iter().enumerate() {
                    assert!(
                        mine.windows(2).all(|pair| pair[0] < pair[1]),
                        "one thread's appends stay in order"
                    );
                    for (n, version) in mine.iter().enumerate() {
                        assert_eq!(
                            events[*version as usize - 1].data,
                            vec![thread as u8, n as u8]
                        );
                    }
                }
                let stats = log.stats();
                if backend.name() == "posix" {
                    assert!(
                        stats.groups < stats.appends,
                        "group commit shares syncs: {stats:?}"
                    );
                }
            }
        },
    );
}

#[test]
fn thirty_two_threads_on_distinct_streams() {
    within("thirty_two_threads_on_distinct_streams", TEST_LIMIT, || {
        let backend = Backend::posix();
        let log = Arc::new(backend.open(clock(0)).unwrap());
        std::thread::scope(|scope| {
            for thread in 0..32 {
                let log = Arc::clone(&log);
                scope.spawn(move || {
                    let stream = format!("stream-{thread:02}");
                    for n in 0..30u64 {
                        assert_eq!(
                            log.append(
                                &stream,
                                Expected::Exact(n),
                                &[event("t", &n.to_le_bytes())]
                            )
                            .unwrap(),
                            n + 1
                        );
                    }
                });
            }
        });
        let stats = log.stats();
        assert_eq!(stats.appends, 32 * 30);
        assert!(
            stats.groups < stats.appends / 2,
            "group commit: {} groups for {} appends",
            stats.groups,
            stats.appends
        );
        assert!(stats.appends_per_group.max() > 1);
        drop(Arc::try_unwrap(log).ok().unwrap());
        let log = backend.open(clock(0)).unwrap();
        assert_eq!(log.last_seq(), 32 * 30);
        for thread in 0..32 {
            let events = log.read(&format!("stream-{thread:02}"), 1, 100).unwrap();
            let data: Vec<_> = events
                .iter()
                .map(|e| u64::from_le_bytes(e.data[..].try_into().unwrap()))
                .collect();
            assert_eq!(data, (0..30).collect::<Vec<_>>());
        }
    });
}

#[test]
fn stats_count_what_happened() {
    let backend = Backend::sim(3);
    let log = backend
        .open(Options {
            max_bytes: 100,
            ..clock(0)
        })
        .unwrap();
    log.append(
        "s",
        Expected::Any,
        &[event("t", b"one"), event("t", b"two")],
    )
    .unwrap();
    let _ = log
        .append("s", Expected::NoStream, &[event("t", b"x")])
        .unwrap_err();
    let _ = log
        .append("s", Expected::Any, &[event("t", &[0; 100])])
        .unwrap_err();
    let stats = log.stats();
    assert_eq!(
        (
            stats.appends,
            stats.events,
            stats.groups,
            stats.conflicts,
            stats.quota_rejections
        ),
        (1, 2, 1, 1, 1)
    );
    assert_eq!(stats.bytes, log.size());
    assert_eq!(stats.segments_created, 1);
    assert_eq!(stats.sync_latency_ns.count(), 1);
    assert_eq!(stats.appends_per_group.quantile(0.5), 1);
}
