//! Properties of the record format and the batch codec (SPEC 2.1, 2.2):
//! round trips, truncation, bit flips, seeded mutation, and each way
//! `decode_batch` rejects a payload, by its `BatchError` variant.
//!
//! Randomness outside proptest comes from one `ChaCha8Rng` per case, seeded
//! from `DURLOG_SEED` (default below) plus the case number; a failing case
//! prints the command that replays it alone.

mod common;

use common::crc32c_bitwise;
use durlog::format::inspect_batch;
use durlog::{
    Batch, BatchError, Event, HEADER_SIZE, RecordError, append_record, crc32c, decode_batch,
    encode_batch, parse_record,
};
use proptest::collection::vec;
use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

// ---------------------------------------------------------------------------
// Helpers: building records and batches, and where their fields are.

fn event(event_type: impl Into<String>, data: impl Into<Vec<u8>>, at: i64) -> Event {
    let mut event = Event::new(event_type, data);
    event.at = at;
    event
}

fn record_bytes(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    append_record(&mut bytes, seq, payload);
    bytes
}

/// The batch `decode_batch` must return for what `encode_batch` was given:
/// the events with the stream and dense versions filled in.
fn expected_batch(stream: &str, first_version: u64, events: &[Event]) -> Batch {
    let events = events
        .iter()
        .enumerate()
        .map(|(index, event)| {
            let mut event = event.clone();
            event.stream = stream.to_owned();
            event.version = first_version + index as u64;
            event
        })
        .collect();
    Batch {
        stream: stream.to_owned(),
        first_version,
        events,
    }
}

/// Offsets of the fields of an encoded batch, from the layout of SPEC 2.2
/// (computed here, not asked of the encoder).
struct Layout {
    stream_at: usize,
    count_at: usize,
    events: Vec<EventLayout>,
}

struct EventLayout {
    type_len_at: usize,
    type_at: usize,
    data_len_at: usize,
    data_at: usize,
}

fn layout(stream: &str, events: &[Event]) -> Layout {
    let stream_at = 2;
    let count_at = stream_at + stream.len() + 8;
    let mut offset = count_at + 4;
    let events = events
        .iter()
        .map(|event| {
            let type_len_at = offset;
            let type_at = type_len_at + 2;
            let data_len_at = type_at + event.event_type.len() + 8;
            let data_at = data_len_at + 4;
            offset = data_at + event.data.len();
            EventLayout {
                type_len_at,
                type_at,
                data_len_at,
                data_at,
            }
        })
        .collect();
    Layout {
        stream_at,
        count_at,
        events,
    }
}

/// The length fields of an encoded batch as (offset, width in bytes).
fn batch_length_fields(stream: &str, events: &[Event]) -> Vec<(usize, usize)> {
    let layout = layout(stream, events);
    let mut fields = vec![(0, 2), (layout.count_at, 4)];
    for event in &layout.events {
        fields.push((event.type_len_at, 2));
        fields.push((event.data_len_at, 4));
    }
    fields
}

/// The error `parse_record` must give for bytes it rejects: `Short` when the
/// header or the payload its length announces is missing, else `Checksum`.
fn expected_record_error(bytes: &[u8]) -> RecordError {
    match bytes.first_chunk::<4>() {
        Some(length) if bytes.len() >= HEADER_SIZE => {
            if u64::from(u32::from_le_bytes(*length)) > (bytes.len() - HEADER_SIZE) as u64 {
                RecordError::Short
            } else {
                RecordError::Checksum
            }
        }
        _ => RecordError::Short,
    }
}

/// What the codec promises for any bytes given as a payload: an error (the
/// same from `decode_batch` and `inspect_batch`), or a well-formed batch
/// that re-encodes to exactly those bytes. Returns whether it decoded.
fn check_payload(bytes: &[u8]) -> bool {
    let decoded = decode_batch(bytes);
    // Recovery validates with `inspect_batch`, reads with `decode_batch`:
    // they must agree on every input, error included.
    let inspected = inspect_batch(bytes);
    let batch = match (decoded, inspected) {
        (Ok(batch), Ok(view)) => {
            assert_eq!(
                (view.stream, view.first_version, view.count as usize),
                (
                    batch.stream.as_str(),
                    batch.first_version,
                    batch.events.len()
                )
            );
            batch
        }
        (Err(decode_error), Err(inspect_error)) => {
            assert_eq!(
                decode_error, inspect_error,
                "inspect_batch and decode_batch reject differently"
            );
            return false;
        }
        (decoded, inspected) => {
            panic!("decode_batch gives {decoded:?} but inspect_batch gives {inspected:?}")
        }
    };
    assert!(!batch.events.is_empty(), "decoded an empty batch");
    assert!(batch.first_version >= 1, "decoded first_version 0");
    for (index, event) in batch.events.iter().enumerate() {
        assert_eq!(event.stream, batch.stream);
        assert_eq!(event.version, batch.first_version + index as u64);
    }
    let again = encode_batch(&batch.stream, batch.first_version, &batch.events);
    assert_eq!(
        again, bytes,
        "a decoded batch does not re-encode to its bytes"
    );
    true
}

/// What the format promises for any bytes at a record's offset: the right
/// error, or a record that re-appends to exactly the bytes it consumed (and
/// whose payload then satisfies `check_payload`). Returns the record's length
/// and whether its payload decoded.
fn check_record(bytes: &[u8]) -> Result<(usize, bool), RecordError> {
    match parse_record(bytes) {
        Ok(record) => {
            assert_eq!(record.len, HEADER_SIZE + record.payload.len());
            assert!(record.len <= bytes.len());
            let mut again = Vec::new();
            append_record(&mut again, record.seq, record.payload);
            assert_eq!(
                again,
                bytes[..record.len],
                "a parsed record does not re-append to its bytes"
            );
            Ok((record.len, check_payload(record.payload)))
        }
        Err(error) => {
            assert_eq!(error, expected_record_error(bytes), "wrong record error");
            Err(error)
        }
    }
}

// ---------------------------------------------------------------------------
// Strategies.

/// Any Unicode text, newlines and NUL included, up to 24 chars.
fn name() -> impl Strategy<Value = String> {
    "(?s).{0,24}"
}

fn nonempty_name() -> impl Strategy<Value = String> {
    "(?s).{1,24}"
}

fn events(
    type_name: impl Strategy<Value = String>,
    data_bytes_max: usize,
    events_max: usize,
) -> impl Strategy<Value = Vec<Event>> {
    vec(
        (
            type_name,
            vec(any::<u8>(), 0..=data_bytes_max),
            any::<i64>(),
        )
            .prop_map(|(event_type, data, at)| event(event_type, data, at)),
        1..=events_max,
    )
}

/// A stream, a first version that leaves room for every event's version
/// (edges included), and 1..=`events_max` events.
fn batch(
    stream: impl Strategy<Value = String>,
    type_name: impl Strategy<Value = String>,
    data_bytes_max: usize,
    events_max: usize,
) -> impl Strategy<Value = (String, u64, Vec<Event>)> {
    (stream, events(type_name, data_bytes_max, events_max)).prop_flat_map(|(stream, events)| {
        let first_version_max = u64::MAX - (events.len() as u64 - 1);
        let first_version = prop_oneof![
            Just(1),
            Just(first_version_max),
            1..=first_version_max,
            1..=1000_u64,
        ];
        (Just(stream), first_version, Just(events))
    })
}

/// Batches as the spec's round trip asks: any Unicode names, data up to
/// 2 KiB, 1..=8 events.
fn any_batch() -> impl Strategy<Value = (String, u64, Vec<Event>)> {
    batch(name(), name(), 2048, 8)
}

/// Smaller batches, for properties that try every byte or bit.
fn small_batch() -> impl Strategy<Value = (String, u64, Vec<Event>)> {
    batch(name(), name(), 64, 3)
}

fn seq() -> impl Strategy<Value = u64> {
    prop_oneof![Just(1), Just(u64::MAX), any::<u64>()]
}

// ---------------------------------------------------------------------------
// Records.

proptest! {
    #[test]
    fn crc32c_equals_the_bitwise_definition(bytes in vec(any::<u8>(), 0..4096)) {
        prop_assert_eq!(crc32c(&bytes), crc32c_bitwise(&bytes));
    }

    #[test]
    fn batches_and_records_round_trip((stream, first_version, events) in any_batch(), seq in seq()) {
        let payload = encode_batch(&stream, first_version, &events);
        prop_assert_eq!(
            decode_batch(&payload),
            Ok(expected_batch(&stream, first_version, &events))
        );
        let record = record_bytes(seq, &payload);
        let mut covered = seq.to_le_bytes().to_vec();
        covered.extend_from_slice(&payload);
        prop_assert_eq!(&record[4..8], &crc32c_bitwise(&covered).to_le_bytes()[..]);
        let parsed = parse_record(&record).unwrap();
        prop_assert_eq!((parsed.seq, parsed.payload, parsed.len), (seq, &payload[..], record.len()));
        // A record followed by more bytes (the next record, or zeros)
        // consumes only its own.
        let mut followed = record.clone();
        followed.extend_from_slice(&[0; 40]);
        prop_assert_eq!(parse_record(&followed).unwrap().len, record.len());
    }

    #[test]
    fn every_truncation_of_a_record_is_short((stream, first_version, events) in small_batch(), seq in seq()) {
        let record = record_bytes(seq, &encode_batch(&stream, first_version, &events));
        for cut in 0..record.len() {
            prop_assert_eq!(parse_record(&record[..cut]), Err(RecordError::Short), "cut at {}", cut);
        }
    }

    #[test]
    fn a_bit_flip_after_the_length_is_a_checksum_error(
        (stream, first_version, events) in any_batch(),
        seq in seq(),
        bit in any::<prop::sample::Index>(),
    ) {
        let mut record = record_bytes(seq, &encode_batch(&stream, first_version, &events));
        let bit = 32 + bit.index(record.len() * 8 - 32);
        record[bit / 8] ^= 1 << (bit % 8);
        prop_assert_eq!(parse_record(&record), Err(RecordError::Checksum), "bit {}", bit);
    }

    #[test]
    fn a_length_flip_never_parses(
        (stream, first_version, events) in small_batch(),
        seq in seq(),
        bit in 0..32_usize,
        tail in vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = record_bytes(seq, &encode_batch(&stream, first_version, &events));
        bytes.extend_from_slice(&tail);
        bytes[bit / 8] ^= 1 << (bit % 8);
        let result = parse_record(&bytes);
        prop_assert_eq!(result, Err(expected_record_error(&bytes)), "bit {}", bit);
    }
}

/// Records small enough to try every bit of, covering the spec's examples.
fn fixture_records() -> Vec<Vec<u8>> {
    let mut records = vec![
        record_bytes(1, &encode_batch("s", 1, &[event("T", "hi", 0)])),
        record_bytes(1, &encode_batch("s", 1, &[event("t", "one", 0)])),
        record_bytes(3, &encode_batch("s", 3, &[event("t", "three", 0)])),
        record_bytes(
            1,
            &encode_batch(
                "s",
                1,
                &[
                    event("t", "one", 0),
                    event("t", "two", 0),
                    event("t", "three", 0),
                ],
            ),
        ),
        record_bytes(
            u64::MAX,
            &encode_batch("köln/日本", u64::MAX, &[event("Zählung", "", -1)]),
        ),
    ];
    let kibibyte: Vec<u8> = (0..1024_u32).map(|i| (i * 7 + 3) as u8).collect();
    records.push(record_bytes(
        0x0123_4567_89AB_CDEF,
        &encode_batch("stream", 42, &[event("type", kibibyte, i64::MIN)]),
    ));
    records
}

#[test]
fn every_single_bit_flip_of_crc_seq_or_payload_is_a_checksum_error() {
    for record in fixture_records() {
        for bit in 32..record.len() * 8 {
            let mut flipped = record.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                parse_record(&flipped),
                Err(RecordError::Checksum),
                "bit {bit} of a {}-byte record",
                record.len()
            );
        }
    }
}

#[test]
fn every_single_bit_flip_of_the_length_is_short_or_checksum() {
    let records = fixture_records();
    for (index, record) in records.iter().enumerate() {
        // Alone, and followed by the next record so that a larger length
        // can fit in the bytes present and reach the CRC check.
        let next = &records[(index + 1) % records.len()];
        for tail in [&[][..], next] {
            let mut bytes = record.clone();
            bytes.extend_from_slice(tail);
            for bit in 0..32 {
                let mut flipped = bytes.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                let result = parse_record(&flipped);
                assert!(
                    matches!(result, Err(RecordError::Short) | Err(RecordError::Checksum)),
                    "length bit {bit} of a {}-byte record gave {result:?}",
                    record.len()
                );
                assert_eq!(result, Err(expected_record_error(&flipped)), "bit {bit}");
            }
        }
    }
}

#[test]
fn every_truncation_of_the_fixture_records_is_short() {
    for record in fixture_records() {
        for cut in 0..record.len() {
            assert_eq!(
                parse_record(&record[..cut]),
                Err(RecordError::Short),
                "cut at {cut}"
            );
        }
    }
}

#[test]
fn huge_length_fields_are_short() {
    let record = &fixture_records()[0];
    for length in [
        u32::MAX,
        u32::MAX - 15,
        u32::MAX - 16,
        0x8000_0000,
        33,
        1 << 20,
    ] {
        let mut bytes = record.clone();
        bytes[..4].copy_from_slice(&length.to_le_bytes());
        assert_eq!(parse_record(&bytes), Err(RecordError::Short), "{length}");
    }
}

#[test]
fn a_record_under_another_seq_is_a_checksum_error() {
    // SPEC 2.1: the CRC covers seq, so a valid record copied to the place of
    // another seq fails.
    let mut record = fixture_records()[0].clone();
    record[8..16].copy_from_slice(&2_u64.to_le_bytes());
    assert_eq!(parse_record(&record), Err(RecordError::Checksum));
}

// ---------------------------------------------------------------------------
// Seeded mutation.

/// Base seed of the mutation test when `DURLOG_SEED` is not set.
const MUTATION_SEED_DEFAULT: u64 = 0x00D0_7106_5EED;

/// Mutation cases run when `DURLOG_CASES` is not set.
const MUTATION_CASES_DEFAULT: u64 = 24_000;

/// Prints how to replay the case if the thread panics while it lives.
struct ReportSeedOnPanic {
    case_seed: u64,
}

impl Drop for ReportSeedOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "seeded mutation case failed: seed {0}. Reproduce with\n  \
                 DURLOG_SEED={0} DURLOG_CASES=1 cargo test -p durlog --test format_props \
                 seeded_mutations -- --nocapture",
                self.case_seed
            );
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a u64")),
        Err(_) => default,
    }
}

/// Unicode text from a palette that mixes 1- to 4-byte chars with arbitrary
/// scalar values.
fn random_name(rng: &mut ChaCha8Rng, chars_max: usize) -> String {
    const PALETTE: [char; 10] = [
        'a',
        'Z',
        '/',
        '-',
        '\0',
        '\n',
        'ö',
        '日',
        '😀',
        '\u{10FFFF}',
    ];
    let chars = rng.random_range(0..=chars_max);
    (0..chars)
        .map(|_| {
            if rng.random_bool(0.8) {
                PALETTE[rng.random_range(0..PALETTE.len())]
            } else {
                rng.random::<char>()
            }
        })
        .collect()
}

fn random_batch(rng: &mut ChaCha8Rng) -> (String, u64, Vec<Event>) {
    let stream = random_name(rng, 12);
    let count = rng.random_range(1..=4_usize);
    let events: Vec<Event> = (0..count)
        .map(|_| {
            let event_type = random_name(rng, 8);
            let data_len = if rng.random_bool(0.9) {
                rng.random_range(0..=64)
            } else {
                rng.random_range(0..=1024)
            };
            let data: Vec<u8> = (0..data_len).map(|_| rng.random()).collect();
            let at = if rng.random_bool(0.5) {
                rng.random()
            } else {
                0
            };
            event(event_type, data, at)
        })
        .collect();
    let first_version_max = u64::MAX - (count as u64 - 1);
    let first_version = match rng.random_range(0..4) {
        0 => 1,
        1 => first_version_max,
        2 => rng.random_range(1..=first_version_max),
        _ => rng.random_range(1..=100),
    };
    (stream, first_version, events)
}

/// Applies one random mutation to `bytes` and says which. `length_fields`
/// are (offset, width) of the fields that hold lengths; `donor` is another
/// valid input to splice in.
fn mutate(
    rng: &mut ChaCha8Rng,
    bytes: &mut Vec<u8>,
    length_fields: &[(usize, usize)],
    donor: &[u8],
) -> String {
    let len = bytes.len();
    match rng.random_range(0..7) {
        0 if len > 0 => {
            let bit = rng.random_range(0..len * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            format!("flip bit {bit}")
        }
        1 if len > 0 => {
            let at = rng.random_range(0..len);
            let value = [0x00, 0xFF, 0x80, rng.random()][rng.random_range(0..4)];
            bytes[at] = value;
            format!("set byte {at} to {value:#04x}")
        }
        2 => {
            let keep = rng.random_range(0..=len);
            bytes.truncate(keep);
            format!("truncate to {keep}")
        }
        3 => {
            let at = rng.random_range(0..=len);
            let count = rng.random_range(1..=16);
            let inserted: Vec<u8> = (0..count).map(|_| rng.random()).collect();
            bytes.splice(at..at, inserted);
            format!("insert {count} bytes at {at}")
        }
        4 if len > 0 => {
            let at = rng.random_range(0..len);
            let count = rng.random_range(1..=16.min(len - at));
            bytes.drain(at..at + count);
            format!("delete {count} bytes at {at}")
        }
        5 => {
            let keep = rng.random_range(0..=len);
            let from = rng.random_range(0..=donor.len());
            bytes.truncate(keep);
            bytes.extend_from_slice(&donor[from..]);
            format!("splice: first {keep} bytes, then the donor from {from}")
        }
        _ => {
            let fields: Vec<_> = length_fields
                .iter()
                .filter(|&&(at, width)| at + width <= len)
                .collect();
            let Some(&&(at, width)) = fields.get(rng.random_range(0..fields.len().max(1))) else {
                bytes.push(rng.random());
                return String::from("append a byte (no length field left)");
            };
            let value: u32 = match rng.random_range(0..5) {
                0 => u32::MAX,
                1 => u32::MAX - rng.random_range(0..=16),
                2 => 0x8000_0000,
                3 => u32::from(u16::MAX),
                _ => rng.random(),
            };
            bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
            format!("set the {width}-byte length field at {at} to {value:#x}")
        }
    }
}

#[derive(Default, Debug)]
struct Outcomes {
    payload_ok: u64,
    payload_err: u64,
    record_ok: u64,
    record_short: u64,
    record_checksum: u64,
    resealed_decoded: u64,
    resealed_rejected: u64,
}

/// One case: a random valid batch, as a payload or a record (alone, followed
/// by a second record, or resealed with a valid CRC after its payload was
/// mutated so the batch decoder is reached), mutated 1..=3 times.
fn mutation_case(case_seed: u64, outcomes: &mut Outcomes) {
    let mut rng = ChaCha8Rng::seed_from_u64(case_seed);
    let (stream, first_version, events) = random_batch(&mut rng);
    let payload = encode_batch(&stream, first_version, &events);
    let (donor_stream, donor_first_version, donor_events) = random_batch(&mut rng);
    let donor_payload = encode_batch(&donor_stream, donor_first_version, &donor_events);
    let seq: u64 = rng.random();
    let payload_fields = batch_length_fields(&stream, &events);
    let record_fields: Vec<(usize, usize)> = std::iter::once((0, 4))
        .chain(
            payload_fields
                .iter()
                .map(|&(at, width)| (at + HEADER_SIZE, width)),
        )
        .collect();
    let kind = rng.random_range(0..4);
    let (mut bytes, fields, donor) = match kind {
        0 => (payload.clone(), payload_fields, donor_payload),
        1 | 3 => (
            record_bytes(seq, &payload),
            record_fields,
            record_bytes(seq.wrapping_add(1), &donor_payload),
        ),
        _ => {
            let mut two = record_bytes(seq, &payload);
            two.extend_from_slice(&record_bytes(seq.wrapping_add(1), &donor_payload));
            (two, record_fields, record_bytes(seq, &donor_payload))
        }
    };
    let mutations: Vec<String> = (0..rng.random_range(1..=3))
        .map(|_| mutate(&mut rng, &mut bytes, &fields, &donor))
        .collect();
    let context = format!("case seed {case_seed}, kind {kind}, mutations {mutations:?}");
    match kind {
        0 => {
            if check_payload(&bytes) {
                outcomes.payload_ok += 1;
            } else {
                outcomes.payload_err += 1;
            }
        }
        3 => {
            // The payload was mutated inside the record: reseal it so the
            // record is valid and its payload reaches the batch decoder.
            let resealed = match bytes.get(HEADER_SIZE..) {
                Some(mutated_payload) => record_bytes(seq, mutated_payload),
                None => record_bytes(seq, &bytes),
            };
            let (len, decoded) = check_record(&resealed).unwrap_or_else(|error| {
                panic!("a resealed record does not parse ({error}); {context}")
            });
            assert_eq!(len, resealed.len(), "{context}");
            if decoded {
                outcomes.resealed_decoded += 1;
            } else {
                outcomes.resealed_rejected += 1;
            }
        }
        _ => {
            // Walk the bytes as recovery does: record after record until the
            // first that fails.
            let mut offset = 0;
            while offset < bytes.len() {
                match check_record(&bytes[offset..]) {
                    Ok((len, _)) => {
                        outcomes.record_ok += 1;
                        offset += len;
                    }
                    Err(RecordError::Short) => {
                        outcomes.record_short += 1;
                        break;
                    }
                    Err(RecordError::Checksum) => {
                        outcomes.record_checksum += 1;
                        break;
                    }
                }
            }
        }
    }
}

#[test]
fn seeded_mutations_give_an_error_or_an_exact_round_trip() {
    let base_seed = env_u64("DURLOG_SEED", MUTATION_SEED_DEFAULT);
    let cases = env_u64("DURLOG_CASES", MUTATION_CASES_DEFAULT);
    eprintln!("seeded mutations: DURLOG_SEED={base_seed}, {cases} cases");
    let mut outcomes = Outcomes::default();
    for case in 0..cases {
        let case_seed = base_seed.wrapping_add(case);
        let _report = ReportSeedOnPanic { case_seed };
        mutation_case(case_seed, &mut outcomes);
    }
    eprintln!("{outcomes:?}");
    if cases >= MUTATION_CASES_DEFAULT {
        // Every path was taken: the property is not vacuously true.
        for (what, count) in [
            ("payloads decoded", outcomes.payload_ok),
            ("payloads rejected", outcomes.payload_err),
            ("records parsed", outcomes.record_ok),
            ("records short", outcomes.record_short),
            ("records with a bad CRC", outcomes.record_checksum),
            ("resealed payloads decoded", outcomes.resealed_decoded),
            ("resealed payloads rejected", outcomes.resealed_rejected),
        ] {
            assert!(count >= 100, "only {count} {what}: {outcomes:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// decode_batch rejects, with the right variant.

proptest! {
    #[test]
    fn every_truncation_of_a_payload_is_truncated((stream, first_version, events) in small_batch()) {
        let payload = encode_batch(&stream, first_version, &events);
        for cut in 0..payload.len() {
            let result = decode_batch(&payload[..cut]);
            prop_assert!(matches!(result, Err(BatchError::Truncated { .. })), "cut {}: {:?}", cut, result);
        }
    }

    #[test]
    fn trailing_bytes_are_rejected(
        (stream, first_version, events) in small_batch(),
        extra in vec(any::<u8>(), 1..64),
    ) {
        let mut payload = encode_batch(&stream, first_version, &events);
        let end = payload.len();
        payload.extend_from_slice(&extra);
        prop_assert_eq!(
            decode_batch(&payload),
            Err(BatchError::TrailingBytes { offset: end, extra: extra.len() })
        );
    }

    #[test]
    fn an_overrunning_stream_length_is_rejected(
        (stream, first_version, events) in small_batch(),
        excess in 1..=u16::MAX,
    ) {
        let mut payload = encode_batch(&stream, first_version, &events);
        let overrun = (payload.len() - 2).saturating_add(usize::from(excess)).min(usize::from(u16::MAX));
        prop_assume!(overrun > payload.len() - 2);
        payload[..2].copy_from_slice(&(overrun as u16).to_le_bytes());
        prop_assert_eq!(
            decode_batch(&payload),
            Err(BatchError::Truncated { field: "stream name", offset: 0 })
        );
    }

    #[test]
    fn an_overrunning_count_is_rejected(
        (stream, first_version, events) in small_batch(),
        count in prop_oneof![Just(u32::MAX), Just(u32::MAX / 14 + 1), 1_000_000..=u32::MAX],
    ) {
        let mut payload = encode_batch(&stream, first_version, &events);
        let count_at = layout(&stream, &events).count_at;
        payload[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
        let first_version_fits = first_version.checked_add(u64::from(count) - 1).is_some();
        let expected = if first_version_fits {
            BatchError::Truncated { field: "events", offset: count_at + 4 }
        } else {
            BatchError::VersionOverflow
        };
        prop_assert_eq!(decode_batch(&payload), Err(expected));
    }

    #[test]
    fn one_count_too_many_is_rejected((stream, events) in (name(), events(name(), 64, 3))) {
        // Versions start at 1 so that the extra count cannot overflow them.
        let mut payload = encode_batch(&stream, 1, &events);
        let count_at = layout(&stream, &events).count_at;
        payload[count_at..count_at + 4].copy_from_slice(&(events.len() as u32 + 1).to_le_bytes());
        let result = decode_batch(&payload);
        prop_assert!(
            result == Err(BatchError::Truncated { field: "events", offset: count_at + 4 })
                || result == Err(BatchError::Truncated { field: "event type", offset: payload.len() }),
            "{:?}", result
        );
    }

    #[test]
    fn an_overrunning_type_length_is_rejected(
        (stream, first_version, events) in small_batch(),
        which in any::<prop::sample::Index>(),
        excess in 1..=u16::MAX,
    ) {
        let mut payload = encode_batch(&stream, first_version, &events);
        let event = &layout(&stream, &events).events[which.index(events.len())];
        let remaining = payload.len() - event.type_at;
        prop_assume!(remaining < usize::from(u16::MAX));
        let overrun = remaining.saturating_add(usize::from(excess)).min(usize::from(u16::MAX));
        let at = event.type_len_at;
        payload[at..at + 2].copy_from_slice(&(overrun as u16).to_le_bytes());
        prop_assert_eq!(
            decode_batch(&payload),
            Err(BatchError::Truncated { field: "event type", offset: at })
        );
    }

    #[test]
    fn an_overrunning_data_length_is_rejected(
        (stream, first_version, events) in small_batch(),
        which in any::<prop::sample::Index>(),
        excess in prop_oneof![Just(1_u32), Just(u32::MAX), 1..=u32::MAX],
    ) {
        let mut payload = encode_batch(&stream, first_version, &events);
        let event = &layout(&stream, &events).events[which.index(events.len())];
        let remaining = (payload.len() - event.data_at) as u32;
        let overrun = remaining.saturating_add(excess);
        let at = event.data_len_at;
        payload[at..at + 4].copy_from_slice(&overrun.to_le_bytes());
        prop_assert_eq!(
            decode_batch(&payload),
            Err(BatchError::Truncated { field: "data", offset: event.data_at })
        );
    }

    #[test]
    fn invalid_utf8_in_the_stream_is_rejected(
        (stream, first_version, events) in batch(nonempty_name(), name(), 64, 3),
        position in any::<prop::sample::Index>(),
        // Bytes that never occur in UTF-8, wherever they land.
        bad in prop_oneof![Just(0xC0_u8), Just(0xC1), 0xF5..=0xFF_u8],
    ) {
        let mut payload = encode_batch(&stream, first_version, &events);
        let at = layout(&stream, &events).stream_at;
        payload[at + position.index(stream.len())] = bad;
        prop_assert_eq!(
            decode_batch(&payload),
            Err(BatchError::InvalidUtf8 { field: "stream name", offset: at })
        );
    }

    #[test]
    fn invalid_utf8_in_a_type_is_rejected(
        (stream, first_version, events) in batch(name(), nonempty_name(), 64, 3),
        which in any::<prop::sample::Index>(),
        position in any::<prop::sample::Index>(),
    ) {
        let mut payload = encode_batch(&stream, first_version, &events);
        let index = which.index(events.len());
        let at = layout(&stream, &events).events[index].type_at;
        payload[at + position.index(events[index].event_type.len())] = 0xFF;
        prop_assert_eq!(
            decode_batch(&payload),
            Err(BatchError::InvalidUtf8 { field: "event type", offset: at })
        );
    }

    #[test]
    fn count_zero_is_an_empty_batch(stream in name(), first_version in any::<u64>(), tail in vec(any::<u8>(), 0..32)) {
        // Count 0 is rejected first, whatever the version or the bytes after.
        let mut payload = encode_batch(&stream, first_version, &[]);
        payload.extend_from_slice(&tail);
        prop_assert_eq!(decode_batch(&payload), Err(BatchError::EmptyBatch));
    }

    #[test]
    fn first_version_zero_is_rejected((stream, _, events) in small_batch()) {
        let payload = encode_batch(&stream, 0, &events);
        prop_assert_eq!(decode_batch(&payload), Err(BatchError::ZeroVersion));
    }

    #[test]
    fn versions_past_u64_max_are_rejected(
        (stream, events) in (name(), events(name(), 16, 8)),
        short_of_max in any::<prop::sample::Index>(),
    ) {
        prop_assume!(events.len() >= 2);
        // The last version would be first_version + count - 1 > u64::MAX.
        let count = events.len() as u64;
        let first_version = u64::MAX - short_of_max.index(count as usize - 1) as u64;
        prop_assert!(first_version.checked_add(count - 1).is_none());
        let payload = encode_batch(&stream, first_version, &events);
        prop_assert_eq!(decode_batch(&payload), Err(BatchError::VersionOverflow));
        // One version lower fits exactly.
        let payload = encode_batch(&stream, u64::MAX - (count - 1), &events);
        prop_assert!(decode_batch(&payload).is_ok());
    }
}

#[test]
fn names_of_the_maximum_length_round_trip() {
    let stream = "s".repeat(usize::from(u16::MAX));
    let event_type = "日".repeat(usize::from(u16::MAX) / 3);
    let events = [event(event_type.as_str(), "x", 1)];
    let payload = encode_batch(&stream, 1, &events);
    assert_eq!(
        decode_batch(&payload),
        Ok(expected_batch(&stream, 1, &events))
    );
}

#[test]
fn each_rejection_of_a_hand_made_payload() {
    // The spec's example payload, then each way of breaking it.
    let good = encode_batch("s", 1, &[event("T", "hi", 0)]);
    let check = |patch: &dyn Fn(&mut Vec<u8>), expected: BatchError| {
        let mut payload = good.clone();
        patch(&mut payload);
        assert_eq!(decode_batch(&payload), Err(expected), "{payload:02x?}");
    };
    check(
        &|p| p.push(0),
        BatchError::TrailingBytes {
            offset: 32,
            extra: 1,
        },
    );
    check(
        &|p| p[0] = 31,
        BatchError::Truncated {
            field: "stream name",
            offset: 0,
        },
    );
    check(
        &|p| p[11..15].copy_from_slice(&u32::MAX.to_le_bytes()),
        BatchError::Truncated {
            field: "events",
            offset: 15,
        },
    );
    check(
        &|p| p[15] = 16,
        BatchError::Truncated {
            field: "event type",
            offset: 15,
        },
    );
    check(
        &|p| p[26] = 3,
        BatchError::Truncated {
            field: "data",
            offset: 30,
        },
    );
    check(
        &|p| p[2] = 0xFF,
        BatchError::InvalidUtf8 {
            field: "stream name",
            offset: 2,
        },
    );
    check(
        &|p| p[17] = 0xC3,
        BatchError::InvalidUtf8 {
            field: "event type",
            offset: 17,
        },
    );
    check(&|p| p[11] = 0, BatchError::EmptyBatch);
    check(&|p| p[3] = 0, BatchError::ZeroVersion);
    check(
        &|p| {
            p[3..11].copy_from_slice(&u64::MAX.to_le_bytes());
            p[11] = 2;
            p.extend_from_slice(&good[15..]);
        },
        BatchError::VersionOverflow,
    );
    assert!(decode_batch(&good).is_ok());
}
