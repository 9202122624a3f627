//! One test per pitfall of SPEC section 7, each named for it. Each was
//! checked by planting the pitfall (`.ci/plant sim/pitfalls/NN-*.patch --
//! cargo test -p durlog --test log_pitfalls pitfall_NN`) and seeing it fail.

mod common;

use common::{Backend, Op, clock, crc32c_bitwise, event};
use durlog::{Error, Expected, Options, Tail, parse_record, segment_name};

const SEG1: &str = "00000000000000000001.log";

#[test]
fn pitfall_01_crc_covers_seq_and_payload_with_castagnoli() {
    for backend in Backend::all() {
        let log = backend.open(clock(5)).unwrap();
        for data in ["one", "two", "three"] {
            log.append("s", Expected::Any, &[event("t", data.as_bytes())])
                .unwrap();
        }
        drop(log);
        let bytes = backend.read_file(SEG1);
        let mut offset = 0;
        for seq in 1..=3u64 {
            let len = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
            let stored = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
            assert_eq!(&bytes[offset + 8..offset + 16], &seq.to_le_bytes());
            assert_eq!(
                stored,
                crc32c_bitwise(&bytes[offset + 8..offset + 16 + len]),
                "seq {seq}"
            );
            offset += 16 + len;
        }
        assert_eq!(offset, bytes.len());
    }
}

#[test]
fn pitfall_02_length_is_checked_against_the_bytes_left() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        drop(log);
        let mut bytes = backend.read_file(SEG1);
        let good = bytes.len();
        // A torn header claiming nearly 4 GiB.
        bytes.extend_from_slice(&[
            0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4, 2, 0, 0, 0, 0, 0, 0, 0, 9, 9,
        ]);
        assert_eq!(
            parse_record(&bytes[good..]),
            Err(durlog::RecordError::Short)
        );
        backend.write_file(SEG1, &bytes);
        let log = backend.open(clock(0)).unwrap();
        assert_eq!(log.last_seq(), 1);
        assert_eq!(backend.read_file(SEG1).len(), good);
    }
}

#[test]
fn pitfall_03_a_torn_tail_is_truncated_and_the_seq_restored() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        log.append("s", Expected::Any, &[event("t", b"two")])
            .unwrap();
        drop(log);
        let bytes = backend.read_file(SEG1);
        backend.write_file(SEG1, &bytes[..49 + 30]);
        let log = backend.open(clock(0)).unwrap();
        assert!(matches!(log.recovery().tail, Tail::Torn { offset: 49, .. }));
        assert_eq!((log.last_seq(), log.version("s")), (1, 1));
        assert_eq!(
            backend.read_file(SEG1).len(),
            49,
            "truncated on disk, not skipped in memory"
        );
        assert_eq!(
            log.append("s", Expected::Exact(1), &[event("t", b"two")])
                .unwrap(),
            2
        );
        drop(log);
        // Were the garbage left in place, this reopen would drop version 2.
        let log = backend.open(clock(0)).unwrap();
        assert_eq!((log.last_seq(), log.version("s")), (2, 2));
        assert_eq!(backend.read_file(SEG1), bytes);
    }
}

#[test]
fn pitfall_04_damage_in_an_earlier_segment_is_not_a_torn_tail() {
    for backend in Backend::all() {
        let options = Options {
            segment_bytes: 100,
            ..clock(0)
        };
        let log = backend.open(options.clone()).unwrap();
        for data in ["one", "two", "three", "four", "five"] {
            log.append("s", Expected::Any, &[event("t", data.as_bytes())])
                .unwrap();
        }
        drop(log);
        let first = backend.read_file(SEG1);
        let mut damaged = first.clone();
        damaged[first.len() - 1] ^= 1;
        backend.write_file(SEG1, &damaged);
        let before = backend.snapshot();
        match backend.open(options) {
            Err(Error::Corrupt { file, offset, .. }) => {
                assert_eq!((file, offset), (backend.path(SEG1), 49));
            }
            other => panic!("{}: {:?}", backend.name(), other.map(|log| log.last_seq())),
        }
        assert_eq!(backend.snapshot(), before);
    }
}

#[test]
fn pitfall_05_a_stale_writer_gets_a_conflict() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        for version in 0..3 {
            log.append("s", Expected::Exact(version), &[event("t", b"x")])
                .unwrap();
        }
        for stale in [0, 1, 2, 4] {
            let result = log.append("s", Expected::Exact(stale), &[event("t", b"stale")]);
            assert!(
                matches!(result, Err(Error::VersionConflict { actual: 3, .. })),
                "expected {stale}: {result:?}"
            );
        }
        assert_eq!(log.version("s"), 3);
        assert!(log.read("s", 1, 10).unwrap().iter().all(|e| e.data == b"x"));
    }
}

#[test]
fn pitfall_06_versions_and_reads_have_no_off_by_one() {
    for backend in Backend::all() {
        let log = backend.open(clock(0)).unwrap();
        assert_eq!(
            log.append(
                "s",
                Expected::NoStream,
                &[event("t", b"1"), event("t", b"2")]
            )
            .unwrap(),
            2
        );
        assert_eq!(
            log.append("s", Expected::Exact(2), &[event("t", b"3")])
                .unwrap(),
            3
        );
        let versions = |from, limit| -> Vec<u64> {
            log.read("s", from, limit)
                .unwrap()
                .iter()
                .map(|e| e.version)
                .collect()
        };
        assert_eq!(versions(0, 10), vec![1, 2, 3]);
        assert_eq!(versions(1, 10), vec![1, 2, 3]);
        assert_eq!(versions(2, 10), vec![2, 3]);
        assert_eq!(versions(3, 10), vec![3]);
        assert_eq!(versions(1, 2), vec![1, 2]);
        assert_eq!(versions(2, 1), vec![2]);
        assert_eq!(log.read("s", 1, 10).unwrap()[0].data, b"1");
    }
}

#[test]
fn pitfall_07_segments_are_named_by_first_seq_and_roll_before_the_limit() {
    for backend in Backend::all() {
        let log = backend
            .open(Options {
                segment_bytes: 100,
                ..clock(0)
            })
            .unwrap();
        for data in ["one", "two", "six", "ten", "abc"] {
            log.append("s", Expected::Any, &[event("t", data.as_bytes())])
                .unwrap();
        }
        // 49-byte records, 2 per 100-byte segment.
        assert_eq!(
            backend.files(),
            vec![segment_name(1), segment_name(3), segment_name(5)]
        );
        for name in backend.files() {
            assert!(backend.read_file(&name).len() <= 100, "{name}");
        }
    }
}

#[test]
fn pitfall_08_data_is_copied_and_times_are_nanoseconds() {
    for backend in Backend::all() {
        let at = 1_700_000_000_987_654_321;
        let log = backend.open(clock(at)).unwrap();
        let mut events = vec![event("t", b"mine")];
        log.append("s", Expected::Any, &events).unwrap();
        events[0].data[0] = b'X';
        drop(log);
        let log = backend.open(Options::default()).unwrap();
        let read = &log.read("s", 1, 1).unwrap()[0];
        assert_eq!((read.data.as_slice(), read.at), (&b"mine"[..], at));
    }
}

#[test]
fn pitfall_09_the_quota_accepts_an_exact_fit_and_refuses_one_byte_more() {
    for backend in Backend::all() {
        let log = backend
            .open(Options {
                max_bytes: 98,
                ..clock(0)
            })
            .unwrap();
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        assert_eq!(
            log.append("s", Expected::Any, &[event("t", b"two")])
                .unwrap(),
            2,
            "fits exactly"
        );
        let result = log.append("s", Expected::Any, &[event("t", b"")]);
        assert!(
            matches!(
                result,
                Err(Error::Quota {
                    limit: 98,
                    needed: 144
                })
            ),
            "{result:?}"
        );
        assert_eq!(log.size(), 98);
    }
}

#[test]
fn pitfall_10_a_failed_sync_cuts_the_record_back() {
    for backend in Backend::all() {
        let (log, recorder) = backend.open_recorded(clock(0)).unwrap();
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        recorder.fail_next_sync();
        assert!(
            log.append("s", Expected::Any, &[event("t", b"two")])
                .is_err()
        );
        assert_eq!(backend.read_file(SEG1).len(), 49, "{}", backend.name());
        drop(log);
        backend.crash();
        assert_eq!(
            backend.open(clock(0)).unwrap().last_seq(),
            1,
            "the unacknowledged record never comes back"
        );
    }
}

#[test]
fn pitfall_11_nothing_is_acknowledged_before_its_sync() {
    for backend in Backend::all() {
        let (log, recorder) = backend.open_recorded(clock(0)).unwrap();
        for n in 0..3u8 {
            recorder.clear();
            log.append("s", Expected::Any, &[event("t", &[n])]).unwrap();
            let ops = recorder.ops();
            let write = ops
                .iter()
                .position(|op| matches!(op, Op::Write { .. }))
                .expect("a write");
            assert_eq!(
                ops.last(),
                Some(&Op::SyncData(SEG1.into())),
                "{}: the last thing before the ack is the sync",
                backend.name()
            );
            assert!(write < ops.len() - 1);
        }
    }
}

#[test]
fn pitfall_12_a_new_segment_is_made_durable_in_its_directory_first() {
    for backend in Backend::all() {
        let (log, recorder) = backend
            .open_recorded(Options {
                segment_bytes: 60,
                ..clock(0)
            })
            .unwrap();
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        recorder.clear();
        log.append("s", Expected::Any, &[event("t", b"two")])
            .unwrap();
        let ops = recorder.ops();
        let created = ops
            .iter()
            .position(|op| *op == Op::Open(segment_name(2)))
            .expect("created");
        let dir_sync = ops
            .iter()
            .position(|op| *op == Op::SyncDir("log".into()))
            .expect("directory synced");
        let write = ops
            .iter()
            .position(|op| matches!(op, Op::Write { .. }))
            .expect("written");
        assert!(created < dir_sync && dir_sync < write, "{ops:?}");
    }
}

#[test]
fn pitfall_13_a_failed_fsync_is_never_retried_and_trusted() {
    for backend in Backend::all() {
        let (log, recorder) = backend.open_recorded(clock(0)).unwrap();
        log.append("s", Expected::Any, &[event("t", b"one")])
            .unwrap();
        recorder.clear();
        recorder.fail_next_sync();
        let result = log.append("s", Expected::Any, &[event("t", b"two")]);
        assert!(matches!(result, Err(Error::Io(_))), "{result:?}");
        assert_eq!(
            recorder.ops(),
            vec![
                Op::Write {
                    file: SEG1.into(),
                    offset: 49,
                    len: 49
                },
                Op::SyncData(SEG1.into()),
                Op::SetLen {
                    file: SEG1.into(),
                    len: 49
                },
                Op::SyncData(SEG1.into()),
            ],
            "write, failed sync, cut back, sync the cut back"
        );
        assert_eq!(log.version("s"), 1);
    }
}
