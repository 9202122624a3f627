//! What event-sourcing users expect of the log (SPEC section 14): retries
//! that land once, filtered reads of the whole log, consumers that resume,
//! per-stream limits and deletion; each surviving a reopen and a power
//! loss at every disk operation of its change, on both backends.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use common::{Backend, clock, event};
use durlog::vfs::{CrashScript, SimVfs, TraceKind};
use durlog::{Deletion, Error, Expected, Filter, Log, Options, StreamMetadata};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn events(data: &[&str]) -> Vec<durlog::Event> {
    data.iter()
        .map(|data| event("t", data.as_bytes()))
        .collect()
}

fn data(events: &[durlog::Event]) -> Vec<String> {
    events
        .iter()
        .map(|event| String::from_utf8(event.data.clone()).unwrap())
        .collect()
}

#[test]
fn a_retry_of_an_append_that_landed_succeeds_and_writes_nothing() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        let batch = events(&["a", "b"]);
        assert_eq!(
            log.append_idempotent("s", Expected::NoStream, &batch)
                .unwrap(),
            2
        );
        let size = log.size();
        // The acknowledgement was lost: the same call again.
        assert_eq!(
            log.append_idempotent("s", Expected::NoStream, &batch)
                .unwrap(),
            2
        );
        assert_eq!(
            log.append_idempotent("s", Expected::Exact(0), &batch)
                .unwrap(),
            2
        );
        assert_eq!((log.size(), log.last_seq()), (size, 1), "nothing written");
        // The same versions, other data: a conflict.
        let other = events(&["a", "x"]);
        assert!(matches!(
            log.append_idempotent("s", Expected::Exact(0), &other),
            Err(Error::VersionConflict { actual: 2, .. })
        ));
        // A plain append's retry is still a conflict.
        assert!(matches!(
            log.append("s", Expected::Exact(0), &batch),
            Err(Error::VersionConflict { .. })
        ));
        // Further versions: the events there are compared, not the last.
        log.append("s", Expected::Exact(2), &events(&["c"]))
            .unwrap();
        assert_eq!(
            log.append_idempotent("s", Expected::Exact(2), &events(&["c"]))
                .unwrap(),
            3
        );
        assert_eq!(
            log.append_idempotent("s", Expected::Exact(1), &events(&["b", "c"]))
                .unwrap(),
            3
        );
        // More events than the stream holds past v: not the same append.
        assert!(matches!(
            log.append_idempotent("s", Expected::Exact(2), &events(&["c", "d"])),
            Err(Error::VersionConflict { actual: 3, .. })
        ));
        // A fresh one at the right version is appended.
        assert_eq!(
            log.append_idempotent("s", Expected::Exact(3), &events(&["d"]))
                .unwrap(),
            4
        );
        assert_eq!(data(&log.read("s", 1, 10).unwrap()), ["a", "b", "c", "d"]);
        // Any and StreamExists append again, as append does.
        assert_eq!(
            log.append_idempotent("s", Expected::Any, &events(&["d"]))
                .unwrap(),
            5
        );
        drop(log);
        let log = backend.open(clock(0)).unwrap();
        assert_eq!(
            log.append_idempotent("s", Expected::Exact(3), &events(&["d"]))
                .unwrap(),
            4
        );
    }
}

#[test]
fn filters_keep_matching_records_and_events_and_limit_counts_records() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        log.append(
            "order-1",
            Expected::Any,
            &[event("created", b"1"), event("paid", b"2")],
        )
        .unwrap();
        log.append("user-1", Expected::Any, &[event("created", b"3")])
            .unwrap();
        log.append("order-2", Expected::Any, &[event("shipped", b"4")])
            .unwrap();
        log.append("order-1", Expected::Any, &[event("shipped", b"5")])
            .unwrap();
        let seqs = |filter: &Filter, limit| {
            log.read_all_filtered(1, limit, filter)
                .unwrap()
                .iter()
                .map(|commit| {
                    let events: Vec<String> = commit
                        .events
                        .iter()
                        .map(|e| format!("{}:{}", e.event_type, e.version))
                        .collect();
                    format!("{}@{} {}", commit.stream, commit.seq, events.join(","))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(seqs(&Filter::all(), 10).len(), 4);
        assert_eq!(
            seqs(&Filter::all().event_type("created"), 10),
            ["order-1@1 created:1", "user-1@2 created:1"]
        );
        assert_eq!(
            seqs(
                &Filter::all().stream_prefix("order-").event_type("shipped"),
                10
            ),
            ["order-2@3 shipped:1", "order-1@4 shipped:3"]
        );
        assert_eq!(
            seqs(&Filter::all().event_type_prefix("sh"), 1),
            ["order-2@3 shipped:1"]
        );
        assert_eq!(
            seqs(&Filter::all().event_type_prefix("pa"), 10),
            ["order-1@1 paid:2"]
        );
        assert!(seqs(&Filter::all().event_type("nothing"), 10).is_empty());
        assert!(seqs(&Filter::all(), 0).is_empty());
        // A record's first version stays as stored when some events go.
        let paid = log
            .read_all_filtered(1, 10, &Filter::all().event_type("paid"))
            .unwrap();
        assert_eq!((paid[0].first_version, paid[0].events[0].version), (1, 2));
        let mut subscription = log.subscribe_filtered(1, Filter::all().event_type("shipped"));
        let first = subscription
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap();
        let second = subscription
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap();
        assert_eq!((first.seq, second.seq), (3, 4));
        log.append("order-3", Expected::Any, &[event("shipped", b"6")])
            .unwrap();
        log.append("order-3", Expected::Any, &[event("paid", b"7")])
            .unwrap();
        log.append("order-4", Expected::Any, &[event("shipped", b"8")])
            .unwrap();
        let live = subscription
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap();
        let next = subscription
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap();
        assert_eq!((live.seq, next.seq), (5, 7), "seq 6 holds no shipped event");
    }
}

/// A record as a filtered read shows it: seq, stream, and each event's
/// type and version.
type Shown = (u64, String, Vec<(String, u64)>);

/// Filters against a model, on names that share prefixes (`a`, `ab`,
/// `abc`; `t`, `ty`, `type`): an exact type matched by prefix, or a stream
/// prefix matched exactly, would pass the cases above and fail here.
#[test]
fn filters_match_a_model_over_names_that_share_prefixes() {
    const STREAMS: [&str; 4] = ["a", "ab", "abc", "b"];
    const TYPES: [&str; 4] = ["t", "ty", "type", "u"];
    for seed in 0..16u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vfs = SimVfs::new(seed);
        let log = Log::open_with_vfs(vfs, "/log", clock(3)).unwrap();
        let mut appended: Vec<(String, Vec<durlog::Event>)> = Vec::new();
        for _ in 0..40 {
            let stream = STREAMS[rng.random_range(0..4)];
            let events: Vec<durlog::Event> = (0..rng.random_range(1..4))
                .map(|i| event(TYPES[rng.random_range(0..4)], &[i]))
                .collect();
            log.append(stream, Expected::Any, &events).unwrap();
            appended.push((stream.to_owned(), log.read(stream, 1, usize::MAX).unwrap()));
        }
        for case in 0..12 {
            let mut filter = Filter::all();
            let mut conditions = Vec::new();
            for _ in 0..rng.random_range(1..3) {
                let (kind, name) = match rng.random_range(0..3) {
                    0 => ("stream prefix", STREAMS[rng.random_range(0..3)]),
                    1 => ("type", TYPES[rng.random_range(0..4)]),
                    _ => ("type prefix", TYPES[rng.random_range(0..3)]),
                };
                filter = match kind {
                    "stream prefix" => filter.stream_prefix(name),
                    "type" => filter.event_type(name),
                    _ => filter.event_type_prefix(name),
                };
                conditions.push((kind, name));
            }
            let keeps = |stream: &str, event_type: &str| {
                conditions.iter().all(|&(kind, name)| match kind {
                    "stream prefix" => stream.starts_with(name),
                    "type" => event_type == name,
                    _ => event_type.starts_with(name),
                })
            };
            // Each record's events as stored, in seq order, then filtered.
            let mut versions = std::collections::BTreeMap::<&str, u64>::new();
            let mut model: Vec<Shown> = Vec::new();
            for (index, (stream, all)) in appended.iter().enumerate() {
                let count = all.len() as u64 - versions.get(stream.as_str()).copied().unwrap_or(0);
                let first = all.len() as u64 - count + 1;
                versions.insert(stream, all.len() as u64);
                let kept: Vec<(String, u64)> = (all[first as usize - 1..].iter())
                    .filter(|event| keeps(stream, &event.event_type))
                    .map(|event| (event.event_type.clone(), event.version))
                    .collect();
                if !kept.is_empty() {
                    model.push((index as u64 + 1, stream.clone(), kept));
                }
            }
            let shape = |commits: Vec<durlog::Commit>| -> Vec<Shown> {
                commits
                    .into_iter()
                    .map(|commit| {
                        let events = (commit.events.iter())
                            .map(|event| (event.event_type.clone(), event.version))
                            .collect();
                        (commit.seq, commit.stream, events)
                    })
                    .collect()
            };
            let context = format!("seed {seed} case {case}: {conditions:?}");
            let read = log.read_all_filtered(1, usize::MAX, &filter).unwrap();
            assert_eq!(shape(read), model, "{context}");
            let limit = rng.random_range(1..5);
            let from = rng.random_range(1..=40);
            let want: Vec<_> = (model.iter())
                .filter(|(seq, ..)| *seq >= from)
                .take(limit)
                .cloned()
                .collect();
            let read = log.read_all_filtered(from, limit, &filter).unwrap();
            assert_eq!(shape(read), want, "{context}: from {from}, limit {limit}");
            let mut subscription = log.subscribe_filtered(1, filter.clone());
            let delivered: Vec<durlog::Commit> = (0..model.len())
                .map(|_| {
                    subscription
                        .next_timeout(Duration::from_secs(5))
                        .unwrap()
                        .unwrap()
                })
                .collect();
            assert_eq!(shape(delivered), model, "{context}: subscribed");
        }
    }
}

#[test]
fn a_consumer_position_is_durable_resumes_and_never_goes_back() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        for i in 0..5 {
            log.append("s", Expected::Any, &[event("t", &[i])]).unwrap();
        }
        assert_eq!(log.consumer_position("projector"), None);
        log.record_consumer_position("projector", 3).unwrap();
        log.record_consumer_position("projector", 2).unwrap();
        assert_eq!(
            log.consumer_position("projector"),
            Some(3),
            "never backwards"
        );
        log.record_consumer_position("mailer", 1).unwrap();
        assert!(matches!(
            log.record_consumer_position("", 1),
            Err(Error::ConsumerName { .. })
        ));
        assert!(matches!(
            log.record_consumer_position("mailer", 6),
            Err(Error::PositionAhead {
                seq: 6,
                last_seq: 5,
                ..
            })
        ));
        drop(log);
        let log = backend.open(clock(0)).unwrap();
        assert_eq!(log.consumer_position("projector"), Some(3));
        assert_eq!(log.consumer_position("mailer"), Some(1));
        // A purge keeps every position; a truncation takes back those past it.
        log.truncate_after(2).unwrap();
        assert_eq!(log.consumer_position("projector"), Some(2));
        assert_eq!(log.consumer_position("mailer"), Some(1));
        drop(log);
        let log = backend.open(clock(0)).unwrap();
        assert_eq!(log.consumer_position("projector"), Some(2));
    }
}

/// Damage took the last acknowledged record, which a consumer had
/// handled: Open takes its position back to the last seq it kept, or the
/// consumer would skip the record written next with that seq.
#[test]
fn open_takes_back_positions_past_the_records_it_kept() {
    let vfs = SimVfs::new(3);
    let open = || Log::open_with_vfs(vfs.clone(), "/log", clock(0));
    let log = open().unwrap();
    for i in 0..3 {
        log.append("s", Expected::Any, &[event("t", &[i])]).unwrap();
    }
    log.record_consumer_position("c", 3).unwrap();
    drop(log);
    let segment = std::path::Path::new("/log/00000000000000000001.log");
    let len = vfs.file_contents(segment).unwrap().len() as u64;
    vfs.flip_bit_at_rest(segment, len * 8 - 1).unwrap();
    let log = open().unwrap();
    assert_eq!(log.last_seq(), 2, "the damaged last record is cut");
    assert_eq!(log.consumer_position("c"), Some(2));
    log.append("s", Expected::Any, &[event("t", &[9])]).unwrap();
    drop(log);
    assert_eq!(open().unwrap().consumer_position("c"), Some(2), "durably");
}

#[test]
fn metadata_limits_what_every_reader_sees() {
    for backend in Backend::all() {
        let now = Arc::new(AtomicI64::new(1_000));
        let options = Options {
            now: Some(Arc::new({
                let now = Arc::clone(&now);
                move || now.load(Ordering::SeqCst)
            })),
            ..Options::default()
        };
        let log = backend.open(options.clone()).unwrap();
        for i in 1..=10u8 {
            now.store(i64::from(i) * 1_000, Ordering::SeqCst);
            log.append("s", Expected::Any, &[event("t", &[i])]).unwrap();
        }
        let versions =
            |events: Vec<durlog::Event>| events.iter().map(|e| e.version).collect::<Vec<_>>();
        let mut metadata = StreamMetadata::default();
        metadata.max_count = Some(3);
        log.set_stream_metadata("s", metadata.clone()).unwrap();
        assert_eq!(log.stream_metadata("s"), metadata);
        assert_eq!(versions(log.read("s", 1, 100).unwrap()), [8, 9, 10]);
        assert_eq!(
            versions(log.read_backward("s", u64::MAX, 100).unwrap()),
            [10, 9, 8]
        );
        let seqs = |commits: Vec<durlog::Commit>| commits.iter().map(|c| c.seq).collect::<Vec<_>>();
        let applied = Filter::all().applying_metadata();
        let all = log.read_all_filtered(1, 100, &applied).unwrap();
        assert_eq!(seqs(all), [8, 9, 10]);
        // `$all` is history: without the metadata applied, every event.
        assert_eq!(
            seqs(log.read_all(1, 100).unwrap()),
            (1..=10).collect::<Vec<_>>()
        );
        let first = |mut subscription: durlog::Subscription| {
            subscription
                .next_timeout(Duration::from_secs(5))
                .unwrap()
                .unwrap()
                .seq
        };
        assert_eq!(first(log.subscribe_filtered(1, applied)), 8);
        assert_eq!(first(log.subscribe(1)), 1);

        let mut metadata = StreamMetadata::default();
        metadata.truncate_before = Some(6);
        log.set_stream_metadata("s", metadata).unwrap();
        assert_eq!(versions(log.read("s", 1, 2).unwrap()), [6, 7]);
        assert_eq!(versions(log.read("s", 9, 100).unwrap()), [9, 10]);

        let mut metadata = StreamMetadata::default();
        metadata.max_age = Some(Duration::from_nanos(2_500));
        log.set_stream_metadata("s", metadata.clone()).unwrap();
        assert_eq!(
            versions(log.read("s", 1, 100).unwrap()),
            [8, 9, 10],
            "at 10,000 ns"
        );
        now.store(11_000, Ordering::SeqCst);
        assert_eq!(versions(log.read("s", 1, 100).unwrap()), [9, 10]);
        drop(log);
        let log = backend.open(options).unwrap();
        assert_eq!(log.stream_metadata("s"), metadata, "survives a reopen");
        assert_eq!(versions(log.read("s", 1, 1).unwrap()), [9]);
        log.set_stream_metadata("s", StreamMetadata::default())
            .unwrap();
        assert_eq!(log.read("s", 1, 100).unwrap().len(), 10);
    }
}

#[test]
fn deleted_streams_read_as_empty_and_hard_ones_take_nothing_more() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        log.append("soft", Expected::Any, &events(&["a", "b"]))
            .unwrap();
        log.append("hard", Expected::Any, &events(&["a"])).unwrap();
        log.append("other", Expected::Any, &events(&["a"])).unwrap();
        log.delete_stream("soft", Deletion::Soft).unwrap();
        log.delete_stream("hard", Deletion::Hard).unwrap();
        assert_eq!(log.streams(""), ["other"]);
        assert!(log.read("soft", 1, 10).unwrap().is_empty());
        assert!(log.read("hard", 1, 10).unwrap().is_empty());
        assert!(log.read_backward("soft", u64::MAX, 10).unwrap().is_empty());
        let applied = Filter::all().applying_metadata();
        let kept = log.read_all_filtered(1, 10, &applied).unwrap();
        assert_eq!(kept.len(), 1, "only other's record");
        assert_eq!(log.read_all(1, 10).unwrap().len(), 3, "history keeps all");
        assert_eq!((log.version("soft"), log.version("hard")), (2, 1));
        assert!(matches!(
            log.append("hard", Expected::Any, &events(&["x"])),
            Err(Error::StreamDeleted { .. })
        ));
        assert!(matches!(
            log.delete_stream("hard", Deletion::Soft),
            Err(Error::StreamDeleted { .. })
        ));
        log.delete_stream("hard", Deletion::Hard)
            .expect("a second hard deletion is a no-op");
        assert!(matches!(
            log.append("soft", Expected::NoStream, &events(&["x"])),
            Err(Error::VersionConflict { actual: 2, .. })
        ));
        drop(log);
        let log = backend.open(clock(0)).unwrap();
        assert!(matches!(
            log.append("hard", Expected::Any, &events(&["x"])),
            Err(Error::StreamDeleted { .. })
        ));
        // A soft-deleted stream takes appends and shows again from them.
        assert_eq!(
            log.append("soft", Expected::Exact(2), &events(&["c"]))
                .unwrap(),
            3
        );
        assert_eq!(data(&log.read("soft", 1, 10).unwrap()), ["c"]);
        assert_eq!(log.streams(""), ["other", "soft"]);
    }
}

/// A change to a log, whose outcome a power loss may cut.
type Change = dyn Fn(&Log) -> Result<(), Error>;

/// A power loss at every disk operation of a metadata change, a deletion
/// and a position recorded: after recovery, each is there whole or not at
/// all, and what was there before is untouched.
#[test]
fn every_change_survives_a_power_loss_at_any_of_its_operations() {
    for crash_at in 1..40 {
        let vfs = SimVfs::new(crash_at);
        let dir = "/log";
        let open = || Log::open_with_vfs(vfs.clone(), dir, clock(0));
        let log = open().unwrap();
        for data in ["a", "b", "c"] {
            log.append("s", Expected::Any, &events(&[data])).unwrap();
        }
        let mut metadata = StreamMetadata::default();
        metadata.max_count = Some(2);
        log.set_stream_metadata("s", metadata.clone()).unwrap();
        log.record_consumer_position("c", 1).unwrap();
        vfs.crash_after_ops(crash_at);
        let changes: [&Change; 3] = [
            &|log| log.record_consumer_position("c", 3),
            &|log| log.delete_stream("s", Deletion::Hard),
            &|log| log.set_stream_metadata("s", StreamMetadata::default()),
        ];
        let mut done = 0;
        for change in changes {
            if change(&log).is_ok() && !vfs.is_halted() {
                done += 1;
            }
        }
        let halted = vfs.is_halted();
        drop(log);
        vfs.crash_after_ops(0);
        vfs.crash();
        let log = open().unwrap();
        let position = log.consumer_position("c").unwrap();
        let deleted = log.append("s", Expected::Any, &events(&["x"])).is_err();
        assert!(
            position == 1 || position == 3,
            "crash at {crash_at}: position {position}"
        );
        if !halted {
            assert_eq!(
                (position, deleted, done),
                (3, true, 2),
                "crash at {crash_at}: nothing cut"
            );
        }
        if done >= 1 {
            assert_eq!(
                position, 3,
                "crash at {crash_at}: a recorded position is kept"
            );
        }
        if done >= 2 {
            assert!(deleted, "crash at {crash_at}: a hard deletion is kept");
        }
        if !deleted {
            assert_eq!(log.stream_metadata("s"), metadata, "crash at {crash_at}");
        }
    }
}

#[test]
fn damaged_tables_are_refused_naming_the_file() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        log.append("s", Expected::Any, &events(&["a"])).unwrap();
        log.record_consumer_position("c", 1).unwrap();
        log.delete_stream("s", Deletion::Soft).unwrap();
        drop(log);
        for name in ["durlog.consumers", "durlog.streams"] {
            let good = backend.read_file(name);
            let mut bad = good.clone();
            bad[good.len() - 1] ^= 0x40;
            backend.write_file(name, &bad);
            match backend.open(clock(0)) {
                Err(Error::Corrupt { file, .. }) => assert_eq!(file, backend.path(name)),
                other => panic!("{name}: {:?}", other.map(|_| ())),
            }
            backend.write_file(name, &good);
        }
        assert!(backend.open(clock(0)).is_ok());
    }
}

/// A change whose call failed may be in memory and not on disk (its file
/// renamed into place, the directory's sync failed): the same change made
/// again must write it, for its `Ok` to mean durable. Each counted
/// operation of a recording and of a hard deletion fails in turn, the
/// change is made again, and power fails keeping only what was synced.
#[test]
fn a_change_made_again_after_it_failed_is_durable() {
    type Again = (&'static str, &'static dyn Fn(&Log) -> Result<(), Error>);
    let changes: [Again; 2] = [
        ("position", &|log| log.record_consumer_position("c", 3)),
        ("hard deletion", &|log| {
            log.delete_stream("s", Deletion::Hard)
        }),
    ];
    for (what, change) in changes {
        let mut failed = 0;
        for fail_at in 1..12 {
            let vfs = SimVfs::new(fail_at);
            let open = || Log::open_with_vfs(vfs.clone(), "/log", clock(0));
            let log = open().unwrap();
            for data in ["a", "b", "c"] {
                log.append("s", Expected::Any, &events(&[data])).unwrap();
            }
            log.record_consumer_position("c", 1).unwrap();
            let fail_at_op = vfs.op_count() + fail_at;
            vfs.set_crash_script(Some(CrashScript {
                fail_at_op: Some(fail_at_op),
                ..Default::default()
            }));
            if change(&log).is_err() {
                failed += 1;
            }
            if vfs.op_count() < fail_at_op {
                break; // past the change's last operation
            }
            change(&log).unwrap_or_else(|error| panic!("{what}, failing op {fail_at}: {error}"));
            drop(log);
            // No scripted power loss left: exactly what was synced stays.
            vfs.set_crash_script(Some(CrashScript::default()));
            vfs.crash();
            let log = open().unwrap();
            let kept = match what {
                "position" => log.consumer_position("c") == Some(3),
                _ => log.stream_deletion("s") == Some(Deletion::Hard),
            };
            assert!(kept, "{what}, failing op {fail_at}: Ok, then lost");
        }
        assert!(failed >= 2, "{what}: only {failed} operations failed");
    }
}

/// A recording that failed after its rename leaves the disk unsure; one
/// that fails before its rename (of another consumer) changes nothing of
/// that: the first recorded again is still written, and kept.
#[test]
fn a_failure_before_a_rename_leaves_an_earlier_doubt() {
    let mut cases = 0;
    for after in 1..8 {
        let vfs = SimVfs::new(after);
        let open = || Log::open_with_vfs(vfs.clone(), "/log", clock(0));
        let log = open().unwrap();
        for data in ["a", "b", "c"] {
            log.append("s", Expected::Any, &events(&[data])).unwrap();
        }
        let fail = |ops: u64| {
            vfs.set_crash_script(Some(CrashScript {
                fail_at_op: Some(vfs.op_count() + ops),
                ..Default::default()
            }));
        };
        fail(after);
        let first = log.record_consumer_position("c", 3);
        if first.is_ok() || log.consumer_position("c") != Some(3) {
            continue; // not a failure after the rename
        }
        // The same steps replace the table each time: fail the write.
        let ops = vfs.crash_script().unwrap().ops;
        let write = ops
            .iter()
            .position(|kind| *kind == TraceKind::Write)
            .unwrap();
        fail(write as u64 + 1);
        assert!(log.record_consumer_position("d", 2).is_err());
        assert_eq!(log.consumer_position("d"), None, "failed before its rename");
        vfs.set_crash_script(Some(CrashScript::default()));
        log.record_consumer_position("c", 3).unwrap();
        drop(log);
        vfs.crash();
        assert_eq!(
            open().unwrap().consumer_position("c"),
            Some(3),
            "after op {after}"
        );
        cases += 1;
    }
    assert!(cases >= 1, "no recording failed after its rename");
}

/// Closing a log under live subscribers, on OS threads (the shuttle test
/// of the same, `subscribers_purges_and_close_race_appenders`, compiles only
/// with `--features shuttle`): subscribers asleep at the close, behind it,
/// or waiting for a seq never written each end with `Closed` after every
/// acknowledged record, in order, none twice.
#[test]
fn a_close_ends_every_subscriber_after_every_record() {
    for seed in 0..6u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vfs = SimVfs::new(seed);
        let log = Arc::new(Log::open_with_vfs(vfs, "/log", clock(1)).unwrap());
        // From the start, from a later seq, and past the last record ever.
        let appends = rng.random_range(20..80u64);
        let froms = [
            1,
            1,
            rng.random_range(1..=appends),
            appends + 1,
            appends + 5,
        ];
        let subscribers: Vec<_> = froms
            .iter()
            .map(|&from| {
                let mut subscription = log.subscribe(from);
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    // Far longer than any wake-up takes: a subscriber
                    // that runs into it slept through the close.
                    let patience = Duration::from_secs(20);
                    loop {
                        let asked = std::time::Instant::now();
                        match subscription.next_timeout(patience) {
                            Ok(Some(commit)) => seen.push(commit.seq),
                            Ok(None) => panic!("seed {seed}: from {from}, still asleep"),
                            Err(Error::Closed) if asked.elapsed() >= patience => {
                                panic!("seed {seed}: from {from}: the close woke no one")
                            }
                            Err(Error::Closed) => return (from, seen),
                            Err(error) => panic!("seed {seed}: from {from}: {error}"),
                        }
                    }
                })
            })
            .collect();
        let appenders: Vec<_> = (0..2)
            .map(|client| {
                let log = Arc::clone(&log);
                let count = appends / 2 + client * (appends % 2);
                let size = rng.random_range(0..200);
                std::thread::spawn(move || {
                    for _ in 0..count {
                        let events = [event("t", &vec![7; size])];
                        log.append(&format!("s{client}"), Expected::Any, &events)
                            .unwrap();
                    }
                })
            })
            .collect();
        for appender in appenders {
            appender.join().unwrap();
        }
        let log = Arc::try_unwrap(log).ok().expect("the appenders are done");
        assert_eq!(log.last_seq(), appends);
        if rng.random_bool(0.5) {
            log.close().unwrap();
        } else {
            drop(log);
        }
        for subscriber in subscribers {
            let (from, seen) = subscriber.join().unwrap();
            let want: Vec<u64> = (from..=appends).collect();
            assert_eq!(seen, want, "seed {seed}: from {from}");
        }
    }
}
