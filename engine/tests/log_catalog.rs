//! The test catalog of the log ("What the tests check"), on both the real
//! file system and the simulated disk.

mod common;

use std::sync::{Arc, Mutex};

use common::{Backend, clock, event};
use durlog::vfs::OpenMode;
use durlog::{Error, Event, Expected, Log, Options, Tail, segment_name};

const SEG1: &str = "00000000000000000001.log";

#[test]
fn append_read_by_hand() {
    for backend in Backend::all() {
        let log = backend.open(clock(1_700_000_000_123_456_789)).unwrap();
        assert_eq!(
            log.append(
                "a",
                Expected::NoStream,
                &[event("x", b"1"), event("y", b"2")]
            )
            .unwrap(),
            2
        );
        assert_eq!(
            log.append("b", Expected::Any, &[event("z", b"3")]).unwrap(),
            1
        );
        assert_eq!(
            log.append("a", Expected::Exact(2), &[event("w", b"4")])
                .unwrap(),
            3
        );
        assert_eq!(log.version("a"), 3);
        assert_eq!(log.version("b"), 1);
        assert_eq!(log.version("nope"), 0);
        assert_eq!(log.last_seq(), 3);

        let all = log.read("a", 0, usize::MAX).unwrap();
        let summary: Vec<_> = all
            .iter()
            .map(|e| (e.version, e.event_type.as_str(), e.data.clone()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, "x", b"1".to_vec()),
                (2, "y", b"2".to_vec()),
                (3, "w", b"4".to_vec())
            ]
        );
        assert!(
            all.iter()
                .all(|e| e.stream == "a" && e.at == 1_700_000_000_123_456_789),
            "{}",
            backend.name()
        );
        // from is inclusive and 0 means 1; limit caps; limit 0 gives none.
        assert_eq!(log.read("a", 1, usize::MAX).unwrap(), all);
        assert_eq!(log.read("a", 2, usize::MAX).unwrap(), all[1..].to_vec());
        assert_eq!(log.read("a", 2, 1).unwrap(), all[1..2].to_vec());
        assert_eq!(log.read("a", 1, 2).unwrap(), all[..2].to_vec());
        assert_eq!(log.read("a", 3, 10).unwrap(), all[2..].to_vec());
        assert!(log.read("a", 4, 10).unwrap().is_empty());
        assert!(log.read("a", 1, 0).unwrap().is_empty());
        assert!(log.read("unknown", 1, 10).unwrap().is_empty());
        assert_eq!(log.streams(""), vec!["a".to_string(), "b".to_string()]);
        assert_eq!(log.streams("b"), vec!["b".to_string()]);
        assert!(log.streams("c").is_empty());
        assert_eq!(log.size(), backend.read_file(SEG1).len() as u64);
    }
}

#[test]
fn append_copies_the_callers_data() {
    for backend in Backend::all() {
        let log = backend.open(Options::default()).unwrap();
        let mut events = vec![event("t", b"original")];
        log.append("s", Expected::Any, &events).unwrap();
        events[0].data.copy_from_slice(b"changed!");
        events[0].event_type = "other".into();
        let read = log.read("s", 1, 1).unwrap();
        assert_eq!(read[0].data, b"original");
        assert_eq!(read[0].event_type, "t");
    }
}

#[test]
fn times_are_nanoseconds_and_survive_reopen() {
    for backend in Backend::all() {
        let at = 1_234_567_890_987_654_321;
        let log = backend.open(clock(at)).unwrap();
        log.append("s", Expected::Any, &[event("t", b"")]).unwrap();
        drop(log);
        let log = backend.open(Options::default()).unwrap();
        assert_eq!(log.read("s", 1, 1).unwrap()[0].at, at);
    }
}

#[test]
fn system_clock_is_used_by_default() {
    let backend = Backend::sim(1);
    let log = backend.open(Options::default()).unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    log.append("s", Expected::Any, &[event("t", b"")]).unwrap();
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let at = log.read("s", 1, 1).unwrap()[0].at;
    assert!(before <= at && at <= after, "{before} <= {at} <= {after}");
}

#[test]
fn version_conflicts_write_nothing() {
    for backend in Backend::all() {
        let log = backend.open(Options::default()).unwrap();
        log.append("s", Expected::NoStream, &[event("t", b"1")])
            .unwrap();
        let before = backend.snapshot();
        let size = log.size();
        let cases = [
            (Expected::NoStream, 1),
            (Expected::Exact(0), 1),
            (Expected::Exact(2), 1),
            // A stale writer that only checked "expected <= current".
            (Expected::Exact(0), 1),
        ];
        for (expected, actual) in cases {
            match log.append("s", expected, &[event("t", b"x")]) {
                Err(Error::VersionConflict {
                    stream,
                    expected: got,
                    actual: at,
                }) => {
                    assert_eq!((stream.as_str(), got, at), ("s", expected, actual));
                }
                other => panic!("{}: {expected:?} gave {other:?}", backend.name()),
            }
        }
        assert!(matches!(
            log.append("new", Expected::StreamExists, &[event("t", b"x")]),
            Err(Error::VersionConflict { actual: 0, .. })
        ));
        assert_eq!(backend.snapshot(), before);
        assert_eq!((log.size(), log.version("s"), log.last_seq()), (size, 1, 1));
        // Any skips the check; StreamExists and Exact accept the truth.
        assert_eq!(
            log.append("s", Expected::Any, &[event("t", b"2")]).unwrap(),
            2
        );
        assert_eq!(
            log.append("s", Expected::StreamExists, &[event("t", b"3")])
                .unwrap(),
            3
        );
        assert_eq!(
            log.append("s", Expected::Exact(3), &[event("t", b"4")])
                .unwrap(),
            4
        );
        assert_eq!(log.stats().conflicts, 5);
    }
}

#[test]
fn bad_arguments_are_clear_errors_and_write_nothing() {
    for backend in Backend::all() {
        let log = backend.open(Options::default()).unwrap();
        log.append("s", Expected::Any, &[event("t", b"1")]).unwrap();
        let before = backend.snapshot();
        let long = "x".repeat(65_536);
        assert!(matches!(
            log.append("s", Expected::Any, &[]),
            Err(Error::EmptyBatch { .. })
        ));
        // A stream needs a name, whichever way the append comes.
        let one = [event("t", b"1")];
        assert!(matches!(
            log.append("", Expected::Any, &one),
            Err(Error::EmptyStreamName)
        ));
        let retried = log.append_idempotent("", Expected::NoStream, &one);
        assert!(
            matches!(retried, Err(Error::EmptyStreamName)),
            "{retried:?}"
        );
        let submitted = log.submit("", Expected::Any, &one);
        assert!(
            matches!(submitted, Err(Error::EmptyStreamName)),
            "{submitted:?}"
        );
        let error = log
            .append(&long, Expected::Any, &[event("t", b"")])
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::NameTooLong {
                    what: "stream name",
                    len: 65_536
                }
            ),
            "{error}"
        );
        let error = log
            .append("s", Expected::Any, &[event(&long, b"")])
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::NameTooLong {
                    what: "event type",
                    len: 65_536
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("65535"), "{error}");
        // The limits themselves are fine.
        let limit = "y".repeat(65_535);
        assert_eq!(
            log.append(&limit, Expected::Any, &[event(&limit, b"")])
                .unwrap(),
            1
        );
        assert_eq!(log.read(&limit, 1, 1).unwrap()[0].event_type, limit);
        assert_eq!(backend.snapshot().len(), before.len());
    }
}

#[test]
fn reopen_recovers_everything() {
    for backend in Backend::all() {
        let options = Options {
            segment_bytes: 200,
            ..clock(42)
        };
        let log = backend.open(options.clone()).unwrap();
        for i in 0..20u8 {
            let stream = format!("s{}", i % 3);
            log.append(
                &stream,
                Expected::Any,
                &[event("t", &[i; 7]), event("u", &[i])],
            )
            .unwrap();
        }
        let reads: Vec<_> = (0..3)
            .map(|i| log.read(&format!("s{i}"), 1, 100).unwrap())
            .collect();
        let (size, seq, streams) = (log.size(), log.last_seq(), log.streams(""));
        drop(log);
        backend.crash();
        let log = backend.open(options).unwrap();
        assert_eq!(log.recovery().tail, Tail::Clean);
        assert_eq!(log.recovery().records, 20);
        let again: Vec<_> = (0..3)
            .map(|i| log.read(&format!("s{i}"), 1, 100).unwrap())
            .collect();
        assert_eq!(again, reads, "{}", backend.name());
        assert_eq!(
            (log.size(), log.last_seq(), log.streams("")),
            (size, seq, streams)
        );
        assert_eq!(
            log.append("s0", Expected::Exact(14), &[event("t", b"next")])
                .unwrap(),
            15
        );
        assert_eq!(log.last_seq(), 21);
    }
}

/// Nine records (one/two/three, three times) in segments 1, 4 and 7 of
/// 149 bytes each; returns the options that wrote them.
fn three_segments_of_three(backend: &Backend) -> Options {
    let options = Options {
        segment_bytes: 170,
        ..clock(0)
    };
    let log = backend.open(options.clone()).unwrap();
    for _ in 0..3 {
        one_two_three(&log);
    }
    options
}

/// Stream s, type t, data one/two/three: records of 49, 49 and 51 bytes.
fn one_two_three(log: &durlog::Log) {
    for data in ["one", "two", "three"] {
        log.append("s", Expected::Any, &[event("t", data.as_bytes())])
            .unwrap();
    }
}

#[test]
fn segments_roll_and_are_named_by_first_seq() {
    for backend in Backend::all() {
        let log = backend
            .open(Options {
                segment_bytes: 170,
                ..clock(0)
            })
            .unwrap();
        for _ in 0..3 {
            one_two_three(&log);
        }
        let names: Vec<String> = [1, 4, 7].iter().map(|seq| segment_name(*seq)).collect();
        assert_eq!(backend.files(), names, "{}", backend.name());
        for name in &names {
            let len = backend.read_file(name).len();
            assert_eq!(len, 149, "{name}");
        }
        assert_eq!(log.size(), 3 * 149);
        drop(log);
        let log = backend
            .open(Options {
                segment_bytes: 170,
                ..clock(0)
            })
            .unwrap();
        assert_eq!(log.read("s", 1, 100).unwrap().len(), 9);
    }
}

#[test]
fn a_record_that_exactly_fills_a_segment_stays_in_it() {
    for backend in Backend::all() {
        // 49 + 49 + 51 = 149: the third record ends exactly at the limit.
        let log = backend
            .open(Options {
                segment_bytes: 149,
                ..clock(0)
            })
            .unwrap();
        one_two_three(&log);
        assert_eq!(backend.files(), vec![SEG1.to_string()]);
        one_two_three(&log);
        assert_eq!(backend.files(), vec![SEG1.to_string(), segment_name(4)]);
    }
}

#[test]
fn a_record_larger_than_a_segment_gets_one_of_its_own() {
    for backend in Backend::all() {
        let log = backend
            .open(Options {
                segment_bytes: 100,
                ..clock(0)
            })
            .unwrap();
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        log.append("s", Expected::Any, &[event("t", &[7; 500])])
            .unwrap();
        log.append("s", Expected::Any, &[event("t", b"two")])
            .unwrap();
        assert_eq!(
            backend.files(),
            vec![SEG1.to_string(), segment_name(2), segment_name(3)]
        );
        assert_eq!(
            backend.read_file(&segment_name(2)).len(),
            16 + 15 + 15 + 500
        );
        drop(log);
        let log = backend
            .open(Options {
                segment_bytes: 100,
                ..clock(0)
            })
            .unwrap();
        assert_eq!(log.read("s", 2, 1).unwrap()[0].data, vec![7; 500]);
    }
}

#[test]
fn quota_rejects_and_resumes() {
    for backend in Backend::all() {
        // 49 + 49 + 51 bytes: a quota of 149 fits all three exactly.
        let options = Options {
            max_bytes: 149,
            ..clock(0)
        };
        let log = backend.open(options.clone()).unwrap();
        one_two_three(&log);
        assert_eq!(log.size(), 149);
        let before = backend.snapshot();
        match log.append("s", Expected::Any, &[event("t", b"four")]) {
            Err(Error::Quota {
                limit: 149,
                needed: 199,
            }) => {}
            Err(other) => panic!("{}: {other}", backend.name()),
            Ok(_) => panic!("{}: a misplaced record was believed", backend.name()),
        }
        assert_eq!(backend.snapshot(), before);
        assert_eq!((log.size(), log.version("s"), log.last_seq()), (149, 3, 3));
        assert_eq!(log.read("s", 1, 10).unwrap().len(), 3, "reads keep working");
        // Checks run in order: arguments, expected version, quota.
        assert!(matches!(
            log.append("s", Expected::Exact(1), &[event("t", b"x")]),
            Err(Error::VersionConflict { .. })
        ));
        assert!(matches!(
            log.append("s", Expected::Exact(1), &[]),
            Err(Error::EmptyBatch { .. })
        ));
        drop(log);
        let log = backend
            .open(Options {
                max_bytes: 199,
                ..options
            })
            .unwrap();
        assert_eq!(
            log.append("s", Expected::Any, &[event("t", b"four")])
                .unwrap(),
            4
        );
        assert_eq!(log.size(), 199);
    }
}

#[test]
fn quota_counts_all_segments() {
    for backend in Backend::all() {
        let options = Options {
            max_bytes: 300,
            segment_bytes: 100,
            ..clock(0)
        };
        let log = backend.open(options).unwrap();
        let mut written = 0;
        while log
            .append("s", Expected::Any, &[event("t", b"one")])
            .is_ok()
        {
            written += 49;
        }
        assert_eq!(written, 294);
        assert_eq!(log.size(), 294);
        let on_disk: usize = backend
            .files()
            .iter()
            .map(|name| backend.read_file(name).len())
            .sum();
        assert_eq!(on_disk, 294);
    }
}

/// The bytes of a clean log of stream s: one, two, three.
fn written_one_two_three(backend: &Backend) -> Vec<u8> {
    let log = backend.open(clock(0)).unwrap();
    one_two_three(&log);
    drop(log);
    let bytes = backend.read_file(SEG1);
    assert_eq!(bytes.len(), 149);
    bytes
}

#[test]
fn torn_tail_is_truncated_at_every_offset() {
    for backend in Backend::all() {
        let full = written_one_two_three(&backend);
        for cut in 98..full.len() {
            backend.write_file(SEG1, &full[..cut]);
            for round in 0..2 {
                let log = backend.open(clock(0)).unwrap();
                assert_eq!(log.version("s"), 2, "cut {cut} round {round}");
                assert_eq!(log.last_seq(), 2);
                assert_eq!(log.size(), 98);
                if round == 0 && cut > 98 {
                    assert!(
                        matches!(&log.recovery().tail, Tail::Torn { offset: 98, .. }),
                        "{:?}",
                        log.recovery()
                    );
                    assert_eq!(log.recovery().bytes_truncated, (cut - 98) as u64);
                }
                assert_eq!(
                    backend.read_file(SEG1),
                    full[..98].to_vec(),
                    "cut {cut}: file truncated"
                );
            }
            let log = backend.open(clock(0)).unwrap();
            assert_eq!(
                log.append("s", Expected::Exact(2), &[event("t", b"three")])
                    .unwrap(),
                3
            );
            assert_eq!(log.last_seq(), 3);
            drop(log);
            assert_eq!(
                backend.read_file(SEG1),
                full,
                "the next append lands where the torn one was"
            );
        }
    }
}

#[test]
fn garbage_tails_are_truncated() {
    for backend in Backend::all() {
        let full = written_one_two_three(&backend);
        let mut absurd_length = full.clone();
        absurd_length.extend_from_slice(&u32::MAX.to_le_bytes());
        absurd_length.extend_from_slice(&[9; 12]);
        let tails: Vec<(&str, Vec<u8>)> = vec![
            ("zeros", [full.clone(), vec![0; 4096]].concat()),
            (
                "junk",
                [
                    full.clone(),
                    b"\xde\xad\xbe\xefjunk that is not a record".to_vec(),
                ]
                .concat(),
            ),
            ("absurd length", absurd_length),
            (
                "half a header",
                [full.clone(), full[98..106].to_vec()].concat(),
            ),
            ("one byte", [full.clone(), vec![1]].concat()),
            // A valid record copied to the wrong place fails against the
            // seq it claims: a stale page or a duplicated write, garbage.
            (
                "a repeated record (the last)",
                [full.clone(), full[98..].to_vec()].concat(),
            ),
            (
                "a repeated record (the first)",
                [full.clone(), full[..49].to_vec()].concat(),
            ),
            (
                "a repeated record, torn",
                [full.clone(), full[49..80].to_vec()].concat(),
            ),
        ];
        for (what, bytes) in tails {
            backend.write_file(SEG1, &bytes);
            let log = backend.open(clock(0)).unwrap();
            assert_eq!(
                (log.version("s"), log.last_seq(), log.size()),
                (3, 3, 149),
                "{what}"
            );
            assert_eq!(backend.read_file(SEG1), full, "{}: {what}", backend.name());
            assert_eq!(
                log.append("s", Expected::Exact(3), &[event("t", b"four")])
                    .unwrap(),
                4
            );
            drop(log);
            let log = backend.open(clock(0)).unwrap();
            assert_eq!(log.read("s", 4, 1).unwrap()[0].data, b"four", "{what}");
            drop(log);
            backend.write_file(SEG1, &full);
        }
    }
}

/// The garbage forms of the catalog, each written over the last record
/// from every position of it (a crash tore record 3 there and left the
/// garbage after its first bytes): every one is truncated at record 3,
/// durably, and the next append takes its place.
///
/// Two limits, both in FORMAT.md. A copy of an earlier record stands at
/// the damage or after record 3's whole header, never shifted into it by
/// a few bytes: a stale page or a duplicated write moves whole sectors,
/// and the bytes of a record shifted into the header's seq field can spell
/// a later seq, which the header rule takes for another record's start. A
/// whole copy of record 3 itself after a torn prefix of it is no garbage a
/// crash leaves: record 3's bytes went where its write did not aim, so its
/// group may have been acknowledged there, and Open refuses ("misplaced
/// record").
#[test]
fn garbage_over_the_last_record_is_truncated_at_every_position() {
    for backend in Backend::all() {
        let full = written_one_two_three(&backend);
        let (two, three) = (&full[..98], &full[98..]);
        let anywhere: Vec<usize> = (0..three.len()).collect();
        let whole_sectors: Vec<usize> = [0].into_iter().chain(16..three.len()).collect();
        let forms: Vec<(&str, Vec<u8>, &[usize])> = vec![
            ("zeros", vec![0; 600], &anywhere),
            (
                "junk",
                b"\xde\xad\xbe\xefjunk that is not a record".to_vec(),
                &anywhere,
            ),
            (
                "absurd length",
                [u32::MAX.to_le_bytes().to_vec(), vec![9; 12]].concat(),
                &anywhere,
            ),
            ("half a header", three[..8].to_vec(), &anywhere),
            ("one byte", vec![1], &anywhere),
            (
                "a repeated record (seq 1)",
                full[..49].to_vec(),
                &whole_sectors,
            ),
            (
                "a repeated record (seq 2)",
                full[49..98].to_vec(),
                &whole_sectors,
            ),
            (
                "a repeated record (seq 1), torn",
                full[..30].to_vec(),
                &whole_sectors,
            ),
        ];
        for (what, garbage, positions) in &forms {
            for &position in *positions {
                let bytes = [two, &three[..position], garbage].concat();
                backend.write_file(SEG1, &bytes);
                let log = backend
                    .open(clock(0))
                    .unwrap_or_else(|error| panic!("{what} at {position}: {error}"));
                assert_eq!(
                    (log.version("s"), log.last_seq(), log.size()),
                    (2, 2, 98),
                    "{what} at {position} on {}",
                    backend.name()
                );
                assert_eq!(backend.read_file(SEG1), two, "{what} at {position}: cut");
                assert_eq!(
                    log.append("s", Expected::Exact(2), &[event("t", b"three")])
                        .unwrap(),
                    3
                );
                drop(log);
                assert_eq!(backend.read_file(SEG1), full, "{what} at {position}");
            }
        }
        for position in 1..three.len() {
            backend.write_file(SEG1, &[two, &three[..position], three].concat());
            assert!(
                matches!(
                    backend.open(clock(0)),
                    Err(Error::Corrupt { offset: 98, .. })
                ),
                "record 3 whole at {} after a torn copy of it",
                98 + position
            );
        }
        backend.write_file(SEG1, &full);
    }
}

#[test]
fn damage_in_an_earlier_segment_is_refused_untouched() {
    for backend in Backend::all() {
        let options = three_segments_of_three(&backend);
        let clean = backend.snapshot();
        for (victim, offset) in [
            (segment_name(1), 60usize),
            (segment_name(4), 148),
            (segment_name(1), 0),
        ] {
            let mut bytes = backend.read_file(&victim);
            bytes[offset] ^= 0x10;
            backend.write_file(&victim, &bytes);
            let before = backend.snapshot();
            match backend.open(options.clone()) {
                Err(Error::Corrupt {
                    file,
                    offset: at,
                    reason,
                }) => {
                    assert_eq!(file, backend.path(&victim), "{reason}");
                    let record_start = if offset >= 98 {
                        98
                    } else if offset >= 49 {
                        49
                    } else {
                        0
                    };
                    assert_eq!(at, record_start, "{reason}");
                }
                other => panic!(
                    "{}: damage in {victim} at {offset}: {:?}",
                    backend.name(),
                    other.map(|_| ())
                ),
            }
            assert_eq!(backend.snapshot(), before, "refusal touches nothing");
            backend.write_file(
                &victim,
                &clean.iter().find(|(name, _)| *name == victim).unwrap().1,
            );
        }
        // Truncating an earlier segment is also damage, not a torn tail.
        backend.write_file(
            &segment_name(4),
            &backend.read_file(&segment_name(4))[..100],
        );
        assert!(matches!(
            backend.open(options.clone()),
            Err(Error::Corrupt { .. })
        ));
    }
}

#[test]
fn damage_to_the_structure_is_refused() {
    for backend in Backend::all() {
        let options = three_segments_of_three(&backend);
        let clean = backend.snapshot();
        let restore = |backend: &Backend| {
            for name in backend.files() {
                backend.remove_file(&name);
            }
            for (name, bytes) in &clean {
                backend.write_file(name, bytes);
            }
        };
        // A missing middle segment: a seq gap.
        backend.remove_file(&segment_name(4));
        let error = backend.open(options.clone()).err().expect("gap refused");
        assert!(
            matches!(&error, Error::Corrupt { file, .. } if *file == backend.path(&segment_name(7))),
            "{error}"
        );
        restore(&backend);
        // A missing first segment.
        backend.remove_file(&segment_name(1));
        assert!(matches!(
            backend.open(options.clone()),
            Err(Error::Corrupt { .. })
        ));
        restore(&backend);
        // A segment whose name is not its first record's seq.
        backend.remove_file(&segment_name(7));
        backend.write_file(&segment_name(8), &clean[2].1);
        assert!(matches!(
            backend.open(options.clone()),
            Err(Error::Corrupt { .. })
        ));
        restore(&backend);
        // Files named like segments (ending in .log) that are not ones.
        for stranger in [
            "0000000000000000001.log",
            "garbage.log",
            "00000000000000000abc.log",
        ] {
            backend.write_file(stranger, b"hello");
            let error = backend
                .open(options.clone())
                .err()
                .expect("stranger refused");
            match &error {
                Error::Corrupt { file, .. } => assert_eq!(*file, backend.path(stranger)),
                other => panic!("{other}"),
            }
            assert!(error.to_string().contains(stranger), "{error}");
            backend.remove_file(stranger);
        }
        assert_eq!(backend.snapshot(), clean);
        assert_eq!(backend.open(options).unwrap().last_seq(), 9);
    }
}

/// Entries that are not the log's (SPEC 2.4, "Directory contents") are
/// passed over, listed, and never changed; the log opens, appends and
/// reopens around them.
#[test]
fn foreign_entries_are_ignored_and_left_alone() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        one_two_three(&log);
        drop(log);
        let foreign = [
            ".DS_Store",
            "README",
            "notes.txt",
            "00000000000000000010.log.tmp",
        ];
        for name in foreign {
            backend.write_file(name, name.as_bytes());
        }
        let lost_found = backend.path("lost+found");
        backend.vfs().create_dir_all(&lost_found).unwrap();
        let log = backend.open(clock(0)).unwrap();
        let mut ignored: Vec<_> = foreign.iter().map(|name| backend.path(name)).collect();
        ignored.push(lost_found);
        ignored.sort();
        assert_eq!(log.recovery().ignored, ignored, "{}", backend.name());
        assert_eq!(
            log.append("s", Expected::Exact(3), &[event("t", b"four")])
                .unwrap(),
            4
        );
        drop(log);
        let log = backend.open(clock(0)).unwrap();
        assert_eq!(log.version("s"), 4);
        assert_eq!(
            durlog::recovery::verify(&*backend.vfs(), &backend.dir())
                .unwrap()
                .ignored,
            ignored
        );
        for name in foreign {
            assert_eq!(backend.read_file(name), name.as_bytes(), "{name} untouched");
        }
    }
}

#[test]
fn a_torn_first_record_of_the_last_segment_leaves_it_empty() {
    for backend in Backend::all() {
        let options = Options {
            segment_bytes: 170,
            ..clock(0)
        };
        let log = backend.open(options.clone()).unwrap();
        one_two_three(&log);
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        drop(log);
        let second = segment_name(4);
        let bytes = backend.read_file(&second);
        backend.write_file(&second, &bytes[..20]);
        let log = backend.open(options.clone()).unwrap();
        assert_eq!((log.last_seq(), log.version("s")), (3, 3));
        assert!(backend.read_file(&second).is_empty());
        assert_eq!(
            log.append("s", Expected::Exact(3), &[event("t", b"one")])
                .unwrap(),
            4
        );
        drop(log);
        assert_eq!(backend.read_file(&second), bytes);
    }
}

#[test]
fn open_creates_a_missing_directory() {
    for backend in Backend::all() {
        let log = backend.open(Options::default()).unwrap();
        assert!(
            backend.files().is_empty(),
            "no segment before the first append"
        );
        assert_eq!((log.last_seq(), log.size()), (0, 0));
        log.append("s", Expected::NoStream, &[Event::new("t", vec![])])
            .unwrap();
        assert_eq!(backend.files(), vec![SEG1.to_string()]);
    }
}

#[test]
fn read_only_open_changes_nothing() {
    for backend in Backend::all() {
        let missing = Log::open_read_only(backend.vfs(), backend.dir());
        assert!(
            matches!(missing, Err(Error::Io(ref error)) if error.kind() == std::io::ErrorKind::NotFound)
        );
        assert!(
            backend.vfs().list_dir(&backend.dir()).is_err(),
            "no directory created"
        );
        let full = written_one_two_three(&backend);
        backend.write_file(SEG1, &full[..120]);
        let before = backend.snapshot();
        let log = Log::open_read_only(backend.vfs(), backend.dir()).unwrap();
        assert!(matches!(
            &log.recovery().tail,
            Tail::Torn { offset: 98, .. }
        ));
        assert_eq!(log.read("s", 1, 10).unwrap().len(), 2);
        let error = log
            .append("s", Expected::Any, &[event("t", b"x")])
            .unwrap_err();
        assert!(matches!(error, Error::ReadOnly { .. }), "{error}");
        drop(log);
        assert_eq!(backend.snapshot(), before, "{}", backend.name());
    }
}

#[test]
fn a_read_of_damaged_bytes_is_an_error_naming_the_file_never_wrong_data() {
    // Bit 31 of the length field (the record now claims 2 GiB, and no read
    // may size an allocation by it), and every bit of the data `one`, whose
    // record still has the right length: only the CRC can tell.
    let data_bits = (46 * 8)..(49 * 8);
    for bit in std::iter::once(31).chain(data_bits) {
        let backend = Backend::sim(9);
        let log = backend.open(clock(0)).unwrap();
        one_two_three(&log);
        let Backend::Sim { vfs } = &backend else {
            unreachable!()
        };
        vfs.flip_bit_at_rest(&backend.path(SEG1), bit).unwrap();
        let error = log.read("s", 1, 10).unwrap_err();
        match &error {
            Error::Corrupt {
                file, offset: 0, ..
            } => assert_eq!(*file, backend.path(SEG1), "bit {bit}"),
            other => panic!("bit {bit}: {other}"),
        }
        // The records the damage did not touch still read back.
        assert_eq!(log.read("s", 2, 10).unwrap().len(), 2, "bit {bit}");
    }
}

/// The names and sizes SPEC section 4 fixes, as literals: tests outside
/// the project use them, so a change here is a change of contract.
#[test]
fn the_contract_constants_are_the_specs() {
    assert_eq!(durlog::DEFAULT_SEGMENT_BYTES, 64 << 20);
    assert_eq!(durlog::DEFAULT_SEGMENT_BYTES, 67_108_864);
    assert_eq!(
        durlog::FAILPOINT_AFTER_WRITE,
        "dur/log/after-write-before-fsync"
    );
    assert_eq!(durlog::HEADER_SIZE, 16);
}

/// `segment_bytes: 0` means 64 MiB: 63 records of 1 MiB and 46 bytes fill
/// a segment to 66,063,186 bytes, and the 64th, which would take it past
/// 67,108,864, opens the second.
#[test]
fn the_default_segment_holds_64_mib() {
    let backend = Backend::sim(1);
    let log = backend.open(clock(0)).unwrap();
    let data = vec![0x5A; 1 << 20];
    for _ in 0..64 {
        log.append("s", Expected::Any, &[event("t", &data)])
            .unwrap();
    }
    assert_eq!(backend.files(), [SEG1.to_owned(), segment_name(64)]);
    assert_eq!(backend.read_file(SEG1).len(), 63 * 1_048_622);
    assert_eq!(log.stats().segments_created, 2);
}

/// The failpoint between write and sync is called by its literal name,
/// once per group commit, and nowhere else.
#[test]
fn the_failpoint_has_its_literal_name() {
    let backend = Backend::sim(2);
    let names = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&names);
    let options = Options {
        failpoint: Some(Arc::new(move |name: &str| {
            seen.lock().unwrap().push(name.to_owned());
            Ok(())
        })),
        ..clock(0)
    };
    let log = backend.open(options).unwrap();
    one_two_three(&log);
    assert_eq!(
        *names.lock().unwrap(),
        ["dur/log/after-write-before-fsync"; 3]
    );
}

/// One writer per log (SPEC section 9): a second `Log` on the directory
/// fails at once with `Locked` naming it, on either backend; a read-only
/// opening takes no lock; dropping the writer frees the directory.
#[test]
fn a_second_writer_is_refused_until_the_first_goes() {
    for backend in Backend::all() {
        let first = backend.open(clock(0)).unwrap();
        first
            .append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        let error = backend.open(clock(0)).err().expect("a second writer");
        match &error {
            Error::Locked { dir } => assert_eq!(*dir, backend.dir()),
            other => panic!("{}: {other}", backend.name()),
        }
        assert_eq!(
            error.to_string(),
            format!(
                "log {} is in use by another process or Log",
                backend.dir().display()
            )
        );
        let reader = Log::open_read_only(backend.vfs(), backend.dir()).unwrap();
        assert_eq!(reader.version("s"), 1, "readers take no lock");
        drop(reader);
        first
            .append("s", Expected::Any, &[event("t", b"two")])
            .unwrap();
        drop(first);
        let again = backend.open(clock(0)).unwrap();
        assert_eq!(again.version("s"), 2);
    }
}

/// A refused second opener leaves the files as they were, bytes, sizes
/// and (on the simulated disk) what is durable: while a writer holds the
/// log with a write in flight past its last record (a torn tail in the
/// making, which an Open of a log nobody holds would cut), an Open that
/// scanned and repaired before it took the lock would cut the live
/// writer's tail. The writer then goes on as if nothing happened.
#[test]
fn a_refused_second_opener_changes_no_byte() {
    for backend in Backend::all() {
        let first = backend.open(clock(0)).unwrap();
        for data in [&b"one"[..], b"two", b"three"] {
            first
                .append("s", Expected::Any, &[event("t", data)])
                .unwrap();
        }
        let segment = backend.path(&segment_name(1));
        let in_flight = vec![0xa5; 300];
        let vfs = backend.vfs();
        let file = vfs.open(&segment, OpenMode::ReadWrite).unwrap();
        let end = file.len().unwrap();
        file.write_at(&in_flight, end).unwrap();
        let before = backend.snapshot();
        let durable_before = durable_snapshot(&backend);
        for _ in 0..2 {
            let error = backend.open(clock(0)).err().expect("a second writer");
            assert!(
                matches!(error, Error::Locked { .. }),
                "{}: {error}",
                backend.name()
            );
        }
        assert_eq!(
            backend.snapshot(),
            before,
            "{}: the refused opener changed a file",
            backend.name()
        );
        assert_eq!(
            durable_snapshot(&backend),
            durable_before,
            "{}: it synced",
            backend.name()
        );
        file.set_len(end).unwrap();
        first
            .append("s", Expected::Exact(3), &[event("t", b"four")])
            .unwrap();
        let read: Vec<Vec<u8>> = first
            .read("s", 1, 10)
            .unwrap()
            .into_iter()
            .map(|ev| ev.data)
            .collect();
        assert_eq!(
            read,
            [&b"one"[..], b"two", b"three", b"four"],
            "{}",
            backend.name()
        );
    }
}

/// What a power loss would leave of each file of the simulated disk (the
/// real one has no such view: empty).
fn durable_snapshot(backend: &Backend) -> Vec<(String, Option<Vec<u8>>)> {
    match backend {
        Backend::Sim { vfs } => backend
            .files()
            .into_iter()
            .map(|name| (name.clone(), vfs.durable_contents(&backend.path(&name))))
            .collect(),
        Backend::Posix { .. } => Vec::new(),
    }
}

/// A power loss frees the lock, as the kernel frees a dead process's
/// `flock`: the next life opens even while the old `Log` value lingers.
#[test]
fn a_power_loss_frees_the_lock() {
    let backend = Backend::sim(5);
    let old = backend.open(clock(0)).unwrap();
    old.append("s", Expected::Any, &[event("t", b"one")])
        .unwrap();
    backend.crash();
    let new = backend.open(clock(0)).unwrap();
    assert_eq!(new.version("s"), 1);
    drop(old);
    assert!(
        matches!(backend.open(clock(0)), Err(Error::Locked { .. })),
        "the old life's drop must not free the new life's lock"
    );
}
