//! Reading the whole log and following it (SPEC section 10): `read_all`
//! and `read_backward` against a model over seeded random logs and every
//! edge of their bounds, and subscriptions: catch-up then live, no gap, no
//! repeat, nothing that was not acknowledged, the end once the log closes.

mod common;

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use common::{Backend, TEST_LIMIT, clock, event, within};
use durlog::vfs::{FaultConfig, FaultKind, SimVfs};
use durlog::{Commit, Error, Event, Expected, Filter, Log, Options, Subscription};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What a test appended, record by record, in seq order.
fn model_commit(seq: u64, stream: &str, first_version: u64, data: &[Vec<u8>]) -> Commit {
    Commit {
        seq,
        stream: stream.to_owned(),
        first_version,
        events: data
            .iter()
            .enumerate()
            .map(|(i, data)| {
                let mut event = Event::new("t", data.clone());
                event.stream = stream.to_owned();
                event.version = first_version + i as u64;
                event.at = 7;
                event
            })
            .collect(),
    }
}

/// A log of random appends over small segments, and its model.
fn random_log(seed: u64, vfs: &SimVfs) -> (Log, Vec<Commit>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let options = Options {
        segment_bytes: rng.random_range(100..2000),
        ..clock(7)
    };
    let log = Log::open_with_vfs(vfs.clone(), "/log", options).unwrap();
    let mut model: Vec<Commit> = Vec::new();
    for _ in 0..rng.random_range(0..60) {
        let stream = format!("s{}", rng.random_range(0..4));
        let data: Vec<Vec<u8>> = (0..rng.random_range(1..4))
            .map(|_| vec![rng.random_range(1..=255u8); rng.random_range(0..300)])
            .collect();
        let events: Vec<Event> = data.iter().map(|data| event("t", data)).collect();
        let first_version = log.version(&stream) + 1;
        log.append(&stream, Expected::Any, &events).unwrap();
        model.push(model_commit(
            model.len() as u64 + 1,
            &stream,
            first_version,
            &data,
        ));
    }
    (log, model)
}

/// `read_all(from, limit)` is the model's records from `max(from, 1)`, at
/// most `limit`, at every edge: 0, 1, the last seq, past it, u64::MAX.
#[test]
fn read_all_matches_the_model_at_every_bound() {
    for seed in 0..200 {
        let (log, model) = random_log(seed, &SimVfs::new(seed));
        let last = model.len() as u64;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xA11);
        let mut froms = vec![0, 1, 2, last, last + 1, u64::MAX];
        let mut limits = vec![0, 1, 2, model.len(), usize::MAX];
        for _ in 0..4 {
            froms.push(rng.random_range(0..=last + 2));
            limits.push(rng.random_range(0..=model.len() + 2));
        }
        for &from in &froms {
            for &limit in &limits {
                let want: Vec<Commit> = model
                    .iter()
                    .filter(|commit| commit.seq >= from.max(1))
                    .take(limit)
                    .cloned()
                    .collect();
                let got = log.read_all(from, limit).unwrap();
                assert_eq!(got, want, "seed {seed} from {from} limit {limit}");
            }
        }
    }
}

/// `read_backward(stream, from, limit)`: the stream's events with version
/// <= `from`, newest first, at most `limit`.
/// Logs larger than one read's run of records (1 MiB) and than a segment:
/// every read API returns all of it, in order, whatever the bounds. (A
/// `read_all` that stopped after its first run, or a stream read after its
/// first segment, passed every other test.)
#[test]
fn reads_that_span_many_runs_and_segments_return_everything() {
    // Segments smaller than a run, larger, and the default (one segment).
    let cases = [(0, 256 << 10), (1, 3 << 20), (2, 0), (3, 3 << 20)];
    for (seed, segment_bytes) in cases {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vfs = SimVfs::new(seed);
        let options = Options {
            segment_bytes,
            ..clock(7)
        };
        let log = Log::open_with_vfs(vfs.clone(), "/log", options).unwrap();
        let mut model: Vec<Commit> = Vec::new();
        while model
            .iter()
            .map(|commit| commit.events.len())
            .sum::<usize>()
            < 600
        {
            let stream = format!("s{}", rng.random_range(0..3));
            let data: Vec<Vec<u8>> = (0..rng.random_range(1..3))
                .map(|_| vec![rng.random_range(1..=255u8); rng.random_range(2000..9000)])
                .collect();
            let events: Vec<Event> = data.iter().map(|data| event("t", data)).collect();
            let first_version = log.version(&stream) + 1;
            log.append(&stream, Expected::Any, &events).unwrap();
            let seq = model.len() as u64 + 1;
            model.push(model_commit(seq, &stream, first_version, &data));
        }
        let context = format!(
            "seed {seed}, {} records, segments of {segment_bytes} bytes",
            model.len()
        );
        assert_eq!(log.read_all(1, usize::MAX).unwrap(), model, "{context}");
        for _ in 0..8 {
            let from = rng.random_range(1..=model.len() as u64);
            let limit = rng.random_range(1..=model.len());
            let want: Vec<Commit> = model
                .iter()
                .skip(from as usize - 1)
                .take(limit)
                .cloned()
                .collect();
            assert_eq!(
                log.read_all(from, limit).unwrap(),
                want,
                "{context}: from {from}, limit {limit}"
            );
        }
        for stream in ["s0", "s1", "s2"] {
            let events: Vec<Event> = (model.iter())
                .filter(|commit| commit.stream == stream)
                .flat_map(|commit| commit.events.clone())
                .collect();
            assert_eq!(
                log.read(stream, 1, usize::MAX).unwrap(),
                events,
                "{context}: {stream}"
            );
            let mut backward = events.clone();
            backward.reverse();
            let read = log.read_backward(stream, u64::MAX, usize::MAX).unwrap();
            assert_eq!(read, backward, "{context}: {stream} backward");
        }
        let mut subscription = log.subscribe(1);
        let delivered: Vec<Commit> = (0..model.len())
            .map_while(|_| next(&mut subscription))
            .collect();
        assert_eq!(delivered, model, "{context}: a subscription's catch-up");
    }
}

#[test]
fn read_backward_matches_the_model_at_every_bound() {
    for seed in 0..200 {
        let (log, model) = random_log(seed, &SimVfs::new(seed));
        for stream in ["s0", "s1", "s2", "s3", "nothing"] {
            let events: Vec<Event> = model
                .iter()
                .filter(|commit| commit.stream == stream)
                .flat_map(|commit| commit.events.clone())
                .collect();
            let version = events.len() as u64;
            for from in [
                0,
                1,
                2,
                version.saturating_sub(1),
                version,
                version + 1,
                u64::MAX,
            ] {
                for limit in [0, 1, 2, 3, events.len(), usize::MAX] {
                    let want: Vec<Event> = events
                        .iter()
                        .rev()
                        .filter(|event| event.version <= from)
                        .take(limit)
                        .cloned()
                        .collect();
                    let got = log.read_backward(stream, from, limit).unwrap();
                    assert_eq!(got, want, "seed {seed} {stream} from {from} limit {limit}");
                }
            }
        }
    }
}

#[test]
fn reads_of_the_whole_log_survive_reopen() {
    for backend in Backend::all() {
        let options = Options {
            segment_bytes: 120,
            ..clock(7)
        };
        let log = backend.open(options.clone()).unwrap();
        for data in ["one", "two", "three", "four"] {
            log.append("s", Expected::Any, &[event("t", data.as_bytes())])
                .unwrap();
        }
        let before = log.read_all(1, usize::MAX).unwrap();
        assert_eq!(before.len(), 4);
        assert!(backend.files().len() > 1, "the records span segments");
        drop(log);
        let log = backend.open(options).unwrap();
        assert_eq!(
            log.read_all(0, usize::MAX).unwrap(),
            before,
            "{}",
            backend.name()
        );
    }
}

/// A damaged record is an error naming its file and offset, never data.
#[test]
fn read_all_refuses_damaged_bytes() {
    let vfs = SimVfs::new(3);
    let (log, model) = random_log(3, &vfs);
    assert!(model.len() > 2);
    let first = &vfs.files()[0];
    vfs.flip_bit_at_rest(first, 8 * 20).unwrap();
    match log.read_all(1, usize::MAX) {
        Err(Error::Corrupt {
            file, offset: 0, ..
        }) => assert_eq!(&file, first),
        other => panic!("{other:?}"),
    }
}

/// `visit_all` lends exactly what `read_all` returns, in seq order, from
/// any seq, and stops where its visitor says; the records it lent before
/// a damaged one stay lent, and the damage is the error, named; a seq a
/// purge removed is `Purged`, as for `read_all`.
#[test]
fn visit_all_lends_what_read_all_returns_and_stops_at_damage() {
    for seed in 0..40 {
        let vfs = SimVfs::new(seed);
        let (log, model) = random_log(seed, &vfs);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let from = rng.random_range(0..=model.len() as u64 + 2);
        let stop = rng.random_range(0..=model.len() + 1);
        let mut lent = Vec::new();
        log.visit_all(from, usize::MAX, &Filter::all(), |commit| {
            lent.push(commit.to_commit());
            match lent.len() < stop {
                true => ControlFlow::Continue(()),
                false => ControlFlow::Break(()),
            }
        })
        .unwrap();
        let want = log.read_all(from, stop.max(1)).unwrap();
        assert_eq!(lent, want, "seed {seed} from {from} stop {stop}");
        let start = (from.max(1) as usize - 1).min(model.len());
        let model_want: Vec<Commit> = model[start..].iter().take(stop.max(1)).cloned().collect();
        assert_eq!(lent, model_want, "seed {seed}");
        log.close().unwrap();
    }

    let vfs = SimVfs::new(3);
    let (log, model) = random_log(3, &vfs);
    let segments: Vec<_> = vfs
        .files()
        .into_iter()
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    let second = segments[1].clone();
    let stem = second.file_stem().unwrap().to_str().unwrap();
    let first_of_second = stem.parse::<usize>().unwrap() - 1;
    assert!(first_of_second > 0 && first_of_second < model.len());
    vfs.flip_bit_at_rest(&second, 8 * 20).unwrap();
    let mut lent = Vec::new();
    let read = log.visit_all(1, usize::MAX, &Filter::all(), |commit| {
        lent.push(commit.to_commit());
        ControlFlow::Continue(())
    });
    match read {
        Err(Error::Corrupt {
            file, offset: 0, ..
        }) => assert_eq!(file, second),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        lent,
        model[..first_of_second],
        "every record before the damage, lent"
    );
}

fn assert_send_static<T: Send + 'static>() {}

#[test]
fn a_subscription_is_send_and_static() {
    assert_send_static::<Subscription>();
}

fn next(subscription: &mut Subscription) -> Option<Commit> {
    subscription
        .next_timeout(Duration::from_millis(0))
        .expect("no error")
}

/// Catch-up from any position, then live: exactly the acknowledged
/// records from there, in order, each once; across rolls; a failed append
/// (cut back) never delivered; the end (`Closed`) once the log is gone and
/// everything before was delivered.
#[test]
fn a_subscription_catches_up_then_follows_with_no_gap_and_no_repeat() {
    let backend = Backend::sim(11);
    let (log, recorder) = backend
        .open_recorded(Options {
            segment_bytes: 150,
            ..clock(7)
        })
        .unwrap();
    let append = |data: &str| {
        log.append("s", Expected::Any, &[event("t", data.as_bytes())])
            .map(|_| log.last_seq())
    };
    for data in ["a", "b", "c"] {
        append(data).unwrap();
    }
    let mut from_start = log.subscribe(0);
    let mut from_two = log.subscribe(2);
    let mut filtered = log.subscribe_streams("other", 1);
    assert_eq!(next(&mut from_start).unwrap().seq, 1);
    assert_eq!(next(&mut from_two).unwrap().seq, 2);
    recorder.fail_next_sync();
    assert!(append("cut back").is_err());
    for data in ["d", "e", "f", "g"] {
        append(data).unwrap();
    }
    log.append("other-1", Expected::Any, &[event("t", b"x")])
        .unwrap();
    let seqs = |subscription: &mut Subscription| -> Vec<u64> {
        std::iter::from_fn(|| next(subscription))
            .map(|commit| commit.seq)
            .collect()
    };
    assert_eq!(seqs(&mut from_start), (2..=8).collect::<Vec<_>>());
    assert_eq!(seqs(&mut from_two), (3..=8).collect::<Vec<_>>());
    assert_eq!(seqs(&mut filtered), vec![8]);
    let delivered = log.read_all(1, usize::MAX).unwrap();
    assert!(
        delivered
            .iter()
            .all(|commit| commit.events[0].data != b"cut back")
    );
    assert_eq!(next(&mut from_start), None, "nothing new yet");
    append("last").unwrap();
    drop(log);
    assert_eq!(
        next(&mut from_start).unwrap().seq,
        9,
        "acknowledged before the close"
    );
    assert!(matches!(
        from_start.next_timeout(Duration::from_millis(0)),
        Err(Error::Closed)
    ));
    assert_eq!(
        from_two.by_ref().map(|item| item.unwrap().seq).last(),
        Some(9)
    );
}

/// `is_caught_up` against a model over seeded random runs: false while
/// an acknowledged record the subscription keeps is undelivered, true
/// after a call that found nothing new, and after the delivery of the
/// last record of an unfiltered one; before and after truncations.
#[test]
fn a_subscription_says_when_it_has_caught_up() {
    for seed in 0..40 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let backend = Backend::sim(seed);
        let log = backend
            .open(Options {
                segment_bytes: rng.random_range(100..600),
                ..clock(7)
            })
            .unwrap();
        let from = rng.random_range(0..4);
        let mut all = log.subscribe(from);
        let mut some = log.subscribe_streams("a", 0);
        // The seq of the last record each was seen to deliver.
        let (mut all_seen, mut some_seen) = (0, 0);
        for step in 0..60 {
            let context = format!("seed {seed} step {step}");
            match rng.random_range(0..10) {
                0..=4 => {
                    let stream = ["a", "b"][rng.random_range(0..2)];
                    log.append(stream, Expected::Any, &[event("t", b"x")])
                        .unwrap();
                    // Unless it starts past the record.
                    if log.last_seq() >= from {
                        assert!(!all.is_caught_up(), "{context}: a record is undelivered");
                    }
                    if stream == "a" {
                        assert!(
                            !some.is_caught_up(),
                            "{context}: a record of a is undelivered"
                        );
                    }
                }
                5 if log.last_seq() > 1 => {
                    let keep = rng.random_range(1..log.last_seq());
                    log.truncate_after(keep).unwrap();
                    if all_seen > keep {
                        assert!(
                            !all.is_caught_up(),
                            "{context}: the truncation is unreported"
                        );
                    }
                    all_seen = all_seen.min(keep);
                    some_seen = some_seen.min(keep);
                }
                _ => {
                    for (subscription, seen, everything) in [
                        (&mut all, &mut all_seen, true),
                        (&mut some, &mut some_seen, false),
                    ] {
                        match subscription.next_timeout(Duration::ZERO) {
                            Ok(Some(commit)) => {
                                *seen = commit.seq;
                                if everything {
                                    assert_eq!(
                                        subscription.is_caught_up(),
                                        commit.seq == log.last_seq(),
                                        "{context}: delivered {}",
                                        commit.seq
                                    );
                                }
                            }
                            Ok(None) => {
                                assert!(subscription.is_caught_up(), "{context}: found nothing new")
                            }
                            Err(Error::Truncated { .. }) => {}
                            Err(error) => panic!("{context}: {error}"),
                        }
                    }
                }
            }
        }
    }
}

/// Live delivery across threads: writers append while subscribers follow
/// (one of them batching); every subscriber sees every acknowledged
/// record once, in seq order.
#[test]
fn live_subscribers_see_every_record_of_concurrent_writers() {
    within(
        "live_subscribers_see_every_record_of_concurrent_writers",
        TEST_LIMIT,
        || {
            let backend = Backend::sim(12);
            let log = backend
                .open(Options {
                    segment_bytes: 4096,
                    ..clock(7)
                })
                .unwrap();
            let subscribers: Vec<_> = (0..3)
                .map(|i| {
                    let mut subscription = log.subscribe(1 + i);
                    if i == 1 {
                        subscription.set_batching(Duration::from_millis(2));
                    }
                    std::thread::spawn(move || {
                        subscription
                            .map(|item| item.expect("no error").seq)
                            .collect::<Vec<u64>>()
                    })
                })
                .collect();
            std::thread::scope(|scope| {
                for writer in 0..4 {
                    let log = &log;
                    scope.spawn(move || {
                        for i in 0..50 {
                            log.append(
                                &format!("w{writer}"),
                                Expected::Any,
                                &[event("t", format!("{i}").as_bytes())],
                            )
                            .unwrap();
                        }
                    });
                }
            });
            drop(log);
            for (i, subscriber) in subscribers.into_iter().enumerate() {
                let seqs = subscriber.join().unwrap();
                assert_eq!(
                    seqs,
                    (1 + i as u64..=200).collect::<Vec<_>>(),
                    "subscriber {i}"
                );
            }
        },
    );
}

/// A record is delivered only once durable: with the sync failing, the
/// subscriber sees nothing of the append.
#[test]
fn nothing_unsynced_is_delivered() {
    let vfs = SimVfs::with_faults(5, FaultConfig::default());
    let log = Log::open_with_vfs(vfs.clone(), "/log", clock(7)).unwrap();
    let mut subscription = log.subscribe(1);
    log.append("s", Expected::Any, &[event("t", b"one")])
        .unwrap();
    vfs.set_faults(FaultConfig::default().with(FaultKind::FailedFsync, 1.0));
    assert!(
        log.append("s", Expected::Any, &[event("t", b"two")])
            .is_err()
    );
    assert_eq!(next(&mut subscription).map(|commit| commit.seq), Some(1));
    assert_eq!(next(&mut subscription), None);
}

/// A caught-up subscription waits out its timeout before it says no
/// record came (a lower bound only: the machine may be slower, never
/// faster).
#[test]
fn next_timeout_waits_for_its_timeout() {
    let log = Backend::sim(6).open(clock(7)).unwrap();
    log.append("s", Expected::Any, &[event("t", b"one")])
        .unwrap();
    let mut subscription = log.subscribe(1);
    assert_eq!(next(&mut subscription).map(|commit| commit.seq), Some(1));
    let timeout = Duration::from_millis(30);
    let started = Instant::now();
    assert_eq!(subscription.next_timeout(timeout).unwrap(), None);
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
}

/// With batching, a subscription that delivered the last record published
/// lets records gather for its window before it looks again: a record
/// appended meanwhile still comes, only after the window (a lower bound
/// again). Without batching, it comes at once.
#[test]
fn a_batching_subscription_waits_its_window_once_caught_up() {
    let log = Backend::sim(7).open(clock(7)).unwrap();
    let window = Duration::from_millis(40);
    let mut batching = log.subscribe(1);
    batching.set_batching(window);
    let mut eager = log.subscribe(1);
    log.append("s", Expected::Any, &[event("t", b"one")])
        .unwrap();
    for subscription in [&mut batching, &mut eager] {
        let first = subscription.next_timeout(Duration::from_secs(60)).unwrap();
        assert_eq!(first.map(|commit| commit.seq), Some(1));
    }
    log.append("s", Expected::Any, &[event("t", b"two")])
        .unwrap();
    let started = Instant::now();
    let second = batching.next_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(second.map(|commit| commit.seq), Some(2));
    assert!(started.elapsed() >= window, "{:?}", started.elapsed());
    let second = eager.next_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(second.map(|commit| commit.seq), Some(2));
}
