//! Event ids, metadata and content types (SPEC 14, amended 2026-12-03):
//! each survives every read and a reopen; an append all of whose events
//! carry ids is a retry when the stream holds exactly those ids, for any
//! `Expected`, and a conflict when it holds some; two writers of the same
//! bytes with distinct ids are two appends. Checked on both backends, and
//! against a seeded model of the ids a stream holds.

mod common;

use std::time::Duration;

use common::{Backend, clock};
use durlog::{
    BatchError, Error, Event, Expected, Filter, Log, decode_batch, encode_batch, parse_record,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn id(n: u8) -> [u8; 16] {
    let mut id = [0xA5; 16];
    id[0] = n;
    id
}

fn deposit(n: u8) -> Event {
    Event::new("deposited", &b"100"[..]).with_id(id(n))
}

fn full(n: u8) -> Event {
    deposit(n)
        .with_metadata(format!("{{\"correlation\":{n}}}"))
        .with_content_type("application/json")
}

/// What a reader must give back of an appended event.
fn same_extras(read: &Event, appended: &Event) -> bool {
    read.id() == appended.id()
        && read.metadata() == appended.metadata()
        && read.content_type() == appended.content_type()
        && read.event_type == appended.event_type
        && read.data == appended.data
}

#[test]
fn ids_metadata_and_content_types_survive_every_read_and_a_reopen() {
    for backend in Backend::all() {
        let log = backend.open(clock(5)).unwrap();
        let events = [
            full(1),
            Event::new("plain", &b"x"[..]),
            deposit(3).with_metadata(vec![0, 1, 2]),
            Event::new("typed", &b""[..]).with_content_type(""),
        ];
        log.append("s", Expected::NoStream, &events).unwrap();
        log.append("t", Expected::Any, &[Event::new("t", &b"y"[..])])
            .unwrap();
        let check = |log: &Log, when: &str| {
            let read = log.read("s", 1, 10).unwrap();
            assert_eq!(read.len(), events.len(), "{when}");
            for (read, appended) in read.iter().zip(&events) {
                assert!(same_extras(read, appended), "{when}: read {read:?}");
            }
            let backward = log.read_backward("s", u64::MAX, 10).unwrap();
            assert!(same_extras(&backward[0], &events[3]), "{when}: backward");
            let all = log.read_all(1, 10).unwrap();
            assert!(same_extras(&all[0].events[0], &events[0]), "{when}: $all");
            let filtered = log
                .read_all_filtered(1, 10, &Filter::all().event_type("plain"))
                .unwrap();
            assert!(same_extras(&filtered[0].events[0], &events[1]), "{when}");
            let delivered = log
                .subscribe(1)
                .next_timeout(Duration::from_secs(5))
                .unwrap()
                .unwrap();
            assert!(same_extras(&delivered.events[2], &events[2]), "{when}");
            assert_eq!(log.read("t", 1, 1).unwrap()[0].id(), None, "{when}");
        };
        check(&log, "live");
        drop(log);
        let log = backend.open(clock(5)).unwrap();
        check(&log, "after a reopen");
    }
}

#[test]
fn a_batch_without_extras_is_encoded_as_before_and_every_batch_decodes_to_itself() {
    let plain = [Event::new("T", &b"hi"[..])];
    // FORMAT.md's golden payload: extras change nothing for events without.
    let golden = [
        0x01, 0x00, 0x73, 0x01, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0x01, 0x00, 0x54, 0, 0, 0, 0,
        0, 0, 0, 0, 0x02, 0, 0, 0, 0x68, 0x69,
    ];
    assert_eq!(encode_batch("s", 1, &plain), golden);
    let mut rng = ChaCha8Rng::seed_from_u64(0x1d5);
    for round in 0..500 {
        let events: Vec<Event> = (0..rng.random_range(1..5))
            .map(|index| {
                let mut event = Event::new(format!("t{index}"), vec![7; rng.random_range(0..9)]);
                if rng.random_bool(0.5) {
                    event = event.with_id(id(rng.random()));
                }
                if rng.random_bool(0.3) {
                    event = event.with_metadata(vec![1; rng.random_range(0..4)]);
                }
                if rng.random_bool(0.3) {
                    event = event.with_content_type("text/plain");
                }
                event
            })
            .collect();
        let payload = encode_batch("stream", 9, &events);
        // The length the log sizes buffers and checks limits with.
        assert_eq!(
            durlog::format::batch_encoded_len("stream", &events),
            payload.len() as u64,
            "round {round}"
        );
        let batch = decode_batch(&payload).unwrap_or_else(|error| panic!("round {round}: {error}"));
        assert_eq!(
            encode_batch("stream", 9, &batch.events),
            payload,
            "round {round}"
        );
        for (decoded, event) in batch.events.iter().zip(&events) {
            assert!(same_extras(decoded, event), "round {round}");
        }
        // Every cut is refused, never a panic.
        for cut in 0..payload.len() {
            assert!(
                decode_batch(&payload[..cut]).is_err(),
                "round {round} cut {cut}"
            );
        }
    }
}

#[test]
fn the_decoder_takes_only_the_encoders_form_of_extras() {
    let payload = encode_batch("s", 1, &[Event::new("T", &b"hi"[..])]);
    // The extras flag (count's top bit) on a batch no event of which has
    // any, with each event's extras byte 0.
    let mut flagged = payload.clone();
    flagged[14] |= 0x80;
    flagged.push(0);
    assert!(matches!(
        decode_batch(&flagged),
        Err(BatchError::NotCanonical { .. })
    ));
    // An extras byte naming a field this version does not know.
    let mut unknown = flagged.clone();
    *unknown.last_mut().unwrap() = 0x08;
    assert!(matches!(
        decode_batch(&unknown),
        Err(BatchError::UnknownExtras { flags: 0x08, .. })
    ));
    // Metadata present but empty.
    let mut empty = flagged.clone();
    *empty.last_mut().unwrap() = 0x02;
    empty.extend_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        decode_batch(&empty),
        Err(BatchError::NotCanonical { .. })
    ));
    // The record parser is not fooled either: a record of a batch with
    // extras parses, and its CRC covers them.
    let mut record = Vec::new();
    let with_id = encode_batch("s", 1, &[deposit(1)]);
    durlog::append_record(&mut record, 1, &with_id);
    assert_eq!(parse_record(&record).unwrap().payload, &with_id[..]);
    record[with_id.len()] ^= 1;
    assert!(parse_record(&record).is_err());
}

#[test]
fn distinct_ids_at_one_expected_version_one_lands_one_conflicts() {
    for backend in Backend::all() {
        let log = backend.open(clock(1)).unwrap();
        log.append("account", Expected::NoStream, &[deposit(0)])
            .unwrap();
        // Two identical deposit commands, each with its own id, at version 1.
        assert_eq!(
            log.append("account", Expected::Exact(1), &[deposit(1)])
                .ok(),
            Some(2)
        );
        assert!(matches!(
            log.append_idempotent("account", Expected::Exact(1), &[deposit(2)]),
            Err(Error::VersionConflict { actual: 2, .. })
        ));
        // The first writer's retry lands, for Exact and for Any, and
        // writes nothing; also after a restart.
        let last_seq = log.last_seq();
        assert_eq!(
            log.append("account", Expected::Exact(1), &[deposit(1)])
                .ok(),
            Some(2)
        );
        assert_eq!(
            log.append("account", Expected::Any, &[deposit(1)]).ok(),
            Some(2)
        );
        assert_eq!(
            log.append_idempotent("account", Expected::Exact(1), &[deposit(1)])
                .ok(),
            Some(2)
        );
        assert_eq!(log.last_seq(), last_seq, "a retry writes nothing");
        drop(log);
        let log = backend.open(clock(1)).unwrap();
        assert_eq!(
            log.append("account", Expected::Any, &[deposit(1)]).ok(),
            Some(2)
        );
        assert_eq!(
            log.append("account", Expected::NoStream, &[deposit(0)])
                .ok(),
            Some(1),
            "the first append's retry, with an expected version long past"
        );
        assert_eq!(log.last_seq(), last_seq, "after a reopen too");
        // Some of the ids, or all in another order: a conflict.
        log.append("account", Expected::Any, &[deposit(3), deposit(4)])
            .unwrap();
        for events in [[deposit(4), deposit(3)], [deposit(3), deposit(5)]] {
            assert!(matches!(
                log.append("account", Expected::Any, &events),
                Err(Error::VersionConflict { actual: 4, .. })
            ));
        }
        // Without ids, the byte-equal rule of append_idempotent stands.
        let plain = [Event::new("deposited", &b"100"[..])];
        assert_eq!(
            log.append("account", Expected::Exact(4), &plain).ok(),
            Some(5)
        );
        assert_eq!(
            log.append_idempotent("account", Expected::Exact(4), &plain)
                .ok(),
            Some(5)
        );
    }
}

#[test]
fn a_retry_in_the_same_group_is_acknowledged_with_the_first_after_its_sync() {
    let backend = Backend::sim(3);
    let log = backend.open(clock(1)).unwrap();
    let first = log
        .submit("s", Expected::NoStream, &[deposit(1), deposit(2)])
        .unwrap();
    let retry = log
        .submit("s", Expected::Any, &[deposit(1), deposit(2)])
        .unwrap();
    let partly = log
        .submit("s", Expected::Any, &[deposit(2), deposit(9)])
        .unwrap();
    let conflict = log.submit("s", Expected::Any, &[deposit(2), deposit(1)]);
    assert_eq!(log.commit_next_group(), 4);
    assert_eq!(log.take_outcome(first).and_then(Result::ok), Some(2));
    assert_eq!(log.take_outcome(retry).and_then(Result::ok), Some(2));
    assert!(matches!(
        log.take_outcome(partly),
        Some(Err(Error::VersionConflict { .. }))
    ));
    assert!(matches!(
        log.take_outcome(conflict.unwrap()),
        Some(Err(Error::VersionConflict { .. }))
    ));
    assert_eq!(log.last_seq(), 1, "one record");
}

/// A seeded model: appends with fresh ids, retries of earlier ones (whole
/// or reordered), truncations and purges, restarts; each outcome as the
/// model of the stream's ids says. A purged record's ids are forgotten:
/// its retry is a new append, checked by its expected version.
#[test]
fn retries_by_id_follow_a_model_across_truncations_purges_and_restarts() {
    for seed in 0..30 {
        let backend = Backend::sim(seed);
        let options = durlog::Options {
            segment_bytes: 400,
            ..clock(1)
        };
        let mut log = backend.open(options.clone()).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Each record's ids, by seq from 1; the first `forgotten` purged.
        let mut records: Vec<Vec<u8>> = Vec::new();
        let mut forgotten = 0;
        // Records a truncation removed: their ids are forgotten with them.
        let mut removed: Vec<Vec<u8>> = Vec::new();
        let mut next_id = 0u8;
        for step in 0..80 {
            let version: u64 = records.iter().map(|ids| ids.len() as u64).sum();
            let context = format!("seed {seed} step {step}");
            match rng.random_range(0..10) {
                0..5 => {
                    let ids: Vec<u8> = (0..rng.random_range(1..4))
                        .map(|_| {
                            next_id += 1;
                            next_id
                        })
                        .collect();
                    let events: Vec<Event> = ids.iter().map(|&n| deposit(n)).collect();
                    let appended = log.append("s", Expected::Any, &events);
                    assert_eq!(appended.ok(), Some(version + ids.len() as u64), "{context}");
                    records.push(ids);
                }
                5 | 6 if !records.is_empty() => {
                    let at = rng.random_range(0..records.len());
                    let reordered = records[at].len() > 1 && rng.random_bool(0.4);
                    let mut ids = records[at].clone();
                    if reordered {
                        ids.reverse();
                    }
                    let events: Vec<Event> = ids.iter().map(|&n| deposit(n)).collect();
                    let outcome = log.append("s", Expected::Exact(0), &events);
                    let end: u64 = records[..=at].iter().map(|ids| ids.len() as u64).sum();
                    if at >= forgotten && !reordered {
                        assert_eq!(
                            outcome.ok(),
                            Some(end),
                            "{context}: a retry of seq {}",
                            at + 1
                        );
                    } else {
                        assert!(
                            matches!(outcome, Err(Error::VersionConflict { .. })),
                            "{context}: seq {} reordered {reordered}: {outcome:?}",
                            at + 1
                        );
                    }
                }
                7 if records.len() > forgotten => {
                    let keep = rng.random_range(forgotten..records.len());
                    log.truncate_after(keep as u64).unwrap();
                    removed.extend(records.drain(keep..));
                }
                9 if !removed.is_empty() => {
                    let ids = &removed[rng.random_range(0..removed.len())];
                    let events: Vec<Event> = ids.iter().map(|&n| deposit(n)).collect();
                    let outcome = log.append("s", Expected::Exact(version + 1), &events);
                    assert!(
                        matches!(outcome, Err(Error::VersionConflict { .. })),
                        "{context}: ids a truncation removed, retried: {outcome:?}"
                    );
                }
                8 => {
                    let first = log.purge_before(log.last_seq() + 1).unwrap();
                    forgotten = forgotten.max((first - 1) as usize);
                }
                _ => {
                    drop(log);
                    log = backend.open(options.clone()).unwrap();
                }
            }
            assert_eq!(log.last_seq(), records.len() as u64, "{context}");
        }
    }
}
