//! Properties of the log over generated inputs, on the simulated disk:
//! reopen reads back exactly what was acknowledged; group commit gives the
//! outcomes of running the appends one by one; every flipped bit is
//! detected or truncated, never believed; the quota never lets an append
//! through that does not fit.

mod common;

use std::collections::BTreeMap;

use common::{clock, event};
use durlog::vfs::SimVfs;
use durlog::{Error, Event, Expected, Log, Options, Ticket};
use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIR: &str = "/db";

/// What the model keeps per stream: (type, data) of each acknowledged event.
type Model = BTreeMap<String, Vec<(String, Vec<u8>)>>;

/// SPEC section 4's expected-version rule, written apart from the engine's.
fn expected_matches(expected: Expected, current: u64) -> bool {
    match expected {
        Expected::Any => true,
        Expected::NoStream | Expected::Exact(0) => current == 0,
        Expected::StreamExists => current > 0,
        Expected::Exact(version) => version == current,
    }
}

fn check_against(log: &Log, model: &Model) {
    assert_eq!(log.streams(""), model.keys().cloned().collect::<Vec<_>>());
    for (stream, want) in model {
        let got: Vec<(String, Vec<u8>)> = log
            .read(stream, 1, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|e| (e.event_type, e.data))
            .collect();
        assert_eq!(&got, want, "{stream}");
        assert_eq!(log.version(stream), want.len() as u64);
    }
}

#[derive(Clone, Debug)]
enum Step {
    Append {
        stream: u8,
        events: Vec<(u8, Vec<u8>)>,
        expected: u8,
    },
    Reopen,
    PowerLoss,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..4u8, prop::collection::vec((0..3u8, prop::collection::vec(any::<u8>(), 0..80)), 1..4), 0..4u8)
            .prop_map(|(stream, events, expected)| Step::Append { stream, events, expected }),
        1 => Just(Step::Reopen),
        1 => Just(Step::PowerLoss),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// For any sequence of appends (right and wrong expected versions),
    /// restarts and power losses, the log holds exactly what was
    /// acknowledged, across tiny segments.
    #[test]
    fn reopen_reads_back_exactly_what_was_acknowledged(
        steps in prop::collection::vec(step(), 1..60),
        segment_bytes in 40u64..400,
    ) {
        let vfs = SimVfs::new(7);
        let options = Options { segment_bytes, ..clock(11) };
        let mut log = Log::open_with_vfs(vfs.clone(), DIR, options.clone()).unwrap();
        let mut model = Model::new();
        for step in steps {
            match step {
                Step::Append { stream, events, expected } => {
                    let stream = format!("s{stream}");
                    let current = model.get(&stream).map_or(0, Vec::len) as u64;
                    let expected = match expected {
                        0 => Expected::Exact(current),
                        1 => Expected::Exact(current + 1),
                        2 => Expected::Any,
                        _ => Expected::NoStream,
                    };
                    let events: Vec<Event> = events.iter().map(|(t, data)| event(&format!("t{t}"), data)).collect();
                    match log.append(&stream, expected, &events) {
                        Ok(version) => {
                            prop_assert!(expected_matches(expected, current));
                            prop_assert_eq!(version, current + events.len() as u64);
                            model.entry(stream).or_default().extend(events.into_iter().map(|e| (e.event_type, e.data)));
                        }
                        Err(Error::VersionConflict { actual, .. }) => {
                            prop_assert!(!expected_matches(expected, current));
                            prop_assert_eq!(actual, current);
                        }
                        Err(other) => prop_assert!(false, "{}", other),
                    }
                }
                Step::Reopen => {
                    drop(log);
                    log = Log::open_with_vfs(vfs.clone(), DIR, options.clone()).unwrap();
                }
                Step::PowerLoss => {
                    drop(log);
                    vfs.crash();
                    log = Log::open_with_vfs(vfs.clone(), DIR, options.clone()).unwrap();
                }
            }
            check_against(&log, &model);
        }
    }

    /// The quota: an append that would pass it changes nothing; one that
    /// fits (exactly or with room) is accepted.
    #[test]
    fn the_quota_is_exact(sizes in prop::collection::vec(0usize..200, 1..30), max_bytes in 40u64..2000) {
        let vfs = SimVfs::new(3);
        let log = Log::open_with_vfs(vfs.clone(), DIR, Options { max_bytes, ..clock(0) }).unwrap();
        for size in sizes {
            let record = 16 + 15 + 15 + size as u64;
            let before = (log.size(), log.last_seq(), vfs.file_contents(&std::path::Path::new(DIR).join("00000000000000000001.log")));
            match log.append("s", Expected::Any, &[event("t", &vec![1; size])]) {
                Ok(_) => prop_assert!(before.0 + record <= max_bytes),
                Err(Error::Quota { limit, needed }) => {
                    prop_assert_eq!((limit, needed), (max_bytes, before.0 + record));
                    prop_assert!(needed > limit);
                    let after = (log.size(), log.last_seq(), vfs.file_contents(&std::path::Path::new(DIR).join("00000000000000000001.log")));
                    prop_assert_eq!(after, before);
                }
                Err(other) => prop_assert!(false, "{}", other),
            }
        }
    }
}

/// Group commit is invisible: appends submitted by many clients and
/// committed in groups at seeded moments get exactly the outcomes (and the
/// log the contents) of running them one by one in submission order.
#[test]
fn group_commit_matches_serial_execution() {
    for seed in 0..300u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let segment_bytes = rng.random_range(60..600);
        let max_bytes = if rng.random_bool(0.3) {
            rng.random_range(200..3000)
        } else {
            0
        };
        let log = Log::open_with_vfs(
            SimVfs::new(seed),
            DIR,
            Options {
                segment_bytes,
                max_bytes,
                ..clock(1)
            },
        )
        .unwrap();
        let mut serial = Serial {
            model: Model::new(),
            size: 0,
            max_bytes,
            queued: Vec::new(),
            seed,
        };
        let mut grouped = 0;
        for _ in 0..rng.random_range(10..80) {
            if rng.random_bool(0.6) {
                let stream = format!("s{}", rng.random_range(0..3));
                let current = serial.model.get(&stream).map_or(0, Vec::len) as u64;
                let expected = match rng.random_range(0..4) {
                    0 => Expected::Exact(current),
                    1 => Expected::Exact(current + rng.random_range(0..3)),
                    2 => Expected::Any,
                    _ => Expected::StreamExists,
                };
                let events: Vec<Event> = (0..rng.random_range(1..4))
                    .map(|i| event(&format!("t{i}"), &vec![i as u8; rng.random_range(0..90)]))
                    .collect();
                let ticket = log.submit(&stream, expected, &events).unwrap();
                serial.queued.push((ticket, stream, expected, events));
            } else {
                grouped = grouped.max(log.commit_next_group());
            }
            serial.check_outcomes(&log);
        }
        while log.queued() > 0 {
            log.commit_next_group();
        }
        serial.check_outcomes(&log);
        assert!(serial.queued.is_empty(), "seed {seed}");
        check_against(&log, &serial.model);
        if seed == 0 {
            assert!(grouped > 1, "some groups hold several appends");
        }
    }
}

/// The serial model of [`group_commit_matches_serial_execution`].
struct Serial {
    model: Model,
    size: u64,
    max_bytes: u64,
    queued: Vec<(Ticket, String, Expected, Vec<Event>)>,
    seed: u64,
}

impl Serial {
    /// Outcomes arrive in submission order; checks each as if run alone.
    fn check_outcomes(&mut self, log: &Log) {
        while let Some((ticket, _, _, _)) = self.queued.first() {
            let Some(outcome) = log.take_outcome(*ticket) else {
                break;
            };
            let (_, stream, expected, events) = self.queued.remove(0);
            let current = self.model.get(&stream).map_or(0, Vec::len) as u64;
            let record = 16 + durlog::format::batch_encoded_len(&stream, &events);
            let want: Result<u64, String> = if !expected_matches(expected, current) {
                Err("conflict".into())
            } else if self.max_bytes > 0 && self.size + record > self.max_bytes {
                Err("quota".into())
            } else {
                Ok(current + events.len() as u64)
            };
            let got = outcome.map_err(|error| match error {
                Error::VersionConflict { .. } => "conflict".to_string(),
                Error::Quota { .. } => "quota".to_string(),
                other => other.to_string(),
            });
            assert_eq!(got, want, "seed {}", self.seed);
            if got.is_ok() {
                self.size += record;
                self.model
                    .entry(stream)
                    .or_default()
                    .extend(events.into_iter().map(|e| (e.event_type, e.data)));
            }
        }
    }
}

/// Every single-bit flip at rest anywhere in a two-segment log is either
/// refused as corruption naming its file, or (only in the log's last
/// record, where a flip looks exactly like a torn write) truncated; and
/// whatever opens reads back only true data.
#[test]
fn every_flipped_bit_is_refused_or_truncated_never_believed() {
    let build = || {
        let vfs = SimVfs::new(1);
        let log = Log::open_with_vfs(
            vfs.clone(),
            DIR,
            Options {
                segment_bytes: 160,
                ..clock(3)
            },
        )
        .unwrap();
        for (i, data) in ["alpha", "beta", "gamma", "delta", "epsilon"]
            .iter()
            .enumerate()
        {
            log.append(
                &format!("s{}", i % 2),
                Expected::Any,
                &[event("t", data.as_bytes())],
            )
            .unwrap();
        }
        drop(log);
        vfs
    };
    let clean = build();
    let mut files = clean.files();
    files.retain(|file| file.extension().is_some_and(|ext| ext == "log"));
    assert_eq!(files.len(), 2, "{files:?}");
    let truth: Vec<Vec<Event>> = {
        let log = Log::open_with_vfs(clean.clone(), DIR, clock(3)).unwrap();
        (0..2)
            .map(|i| log.read(&format!("s{i}"), 1, 10).unwrap())
            .collect()
    };
    let last_record_start = {
        let bytes = clean.file_contents(&files[1]).unwrap();
        let mut offset = 0;
        let mut start = 0;
        while offset < bytes.len() {
            start = offset;
            offset += durlog::parse_record(&bytes[offset..]).unwrap().len;
        }
        start as u64
    };
    let (mut refused, mut truncated) = (0, 0);
    for (file_index, file) in files.iter().enumerate() {
        let len = clean.file_contents(file).unwrap().len() as u64;
        for bit in 0..len * 8 {
            let vfs = build();
            vfs.flip_bit_at_rest(file, bit).unwrap();
            match Log::open_with_vfs(vfs.clone(), DIR, clock(3)) {
                Err(Error::Corrupt { file: named, .. }) => {
                    assert_eq!(&named, file, "bit {bit}");
                    refused += 1;
                }
                Ok(log) => {
                    assert_eq!(
                        file_index, 1,
                        "a flip in a sealed segment (bit {bit}) must be refused"
                    );
                    assert!(
                        bit / 8 >= last_record_start,
                        "bit {bit}: only the last record is ambiguous"
                    );
                    assert_eq!(
                        log.last_seq(),
                        4,
                        "bit {bit}: exactly the last record is dropped"
                    );
                    assert!(
                        matches!(
                            log.recovery().tail,
                            durlog::Tail::Torn {
                                may_be_acknowledged: true,
                                ..
                            }
                        ),
                        "bit {bit}: the report says the record may have been acknowledged"
                    );
                    for (i, events) in truth.iter().enumerate() {
                        let read = log.read(&format!("s{i}"), 1, 10).unwrap();
                        assert_eq!(read[..], events[..read.len()], "bit {bit}");
                    }
                    truncated += 1;
                }
                Err(other) => panic!("bit {bit} of {file:?}: {other}"),
            }
        }
    }
    assert!(
        refused > 0 && truncated > 0,
        "refused {refused}, truncated {truncated}"
    );
}
