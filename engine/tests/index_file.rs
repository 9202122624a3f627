//! Properties of a sealed segment's index file (`SegmentIndex`, FORMAT.md
//! "Index files"): every valid index round-trips; every truncation and
//! every flipped bit is refused with the offset of the fault; and each
//! rule of the decoder, with the CRC made right so that it is the rule and
//! not the CRC that refuses, names where the fault is.

use durlog::format::{IndexedRecord, SegmentIndex, StreamRecords, index_file_name};
use durlog::{EVENT_ID_BYTES, crc32c};
use proptest::collection::{btree_set, vec};
use proptest::prelude::*;

/// Where the file keeps the CRC of every byte after it.
const CRC_FIELD: std::ops::Range<usize> = 12..16;
/// Where the offsets begin (after the fixed fields).
const OFFSETS_AT: usize = 44;

/// `bytes` with its CRC made right again.
fn recrc(mut bytes: Vec<u8>) -> Vec<u8> {
    let crc = crc32c(&bytes[CRC_FIELD.end..]);
    bytes[CRC_FIELD].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// A valid index: `counts[i]` events in each record, each record given to
/// the stream `owners[i]` names; ids on some events.
fn index_of(first_seq: u64, records: &[(usize, u64, bool)], names: &[String]) -> SegmentIndex {
    let mut offsets = Vec::new();
    let mut offset = 0u32;
    let mut streams: Vec<StreamRecords> = names
        .iter()
        .map(|name| StreamRecords {
            name: name.clone(),
            last_version: 0,
            records: Vec::new(),
            ids: Vec::new(),
        })
        .collect();
    for (ordinal, &(owner, events, with_id)) in records.iter().enumerate() {
        offsets.push(offset);
        offset += 44 + 17 * events as u32;
        let stream = &mut streams[owner % names.len()];
        let first_version = stream.last_version + 1;
        stream.records.push(IndexedRecord {
            first_version,
            ordinal: ordinal as u32,
        });
        stream.last_version += events;
        if with_id {
            let mut id = [0u8; EVENT_ID_BYTES];
            id[..8].copy_from_slice(&first_version.to_be_bytes());
            id[8..16].copy_from_slice(&(ordinal as u64).to_be_bytes());
            stream.ids.push((id, first_version));
        }
    }
    streams.retain(|stream| !stream.records.is_empty());
    for stream in &mut streams {
        stream.ids.sort();
    }
    SegmentIndex {
        first_seq,
        segment_len: u64::from(offset),
        last_record_crc: 0x0B72_1A5E,
        offsets,
        streams,
    }
}

fn any_index() -> impl Strategy<Value = SegmentIndex> {
    (
        1u64..u64::MAX / 2,
        btree_set("[a-z]{0,6}", 1..5),
        vec((0usize..8, 1u64..4, any::<bool>()), 1..40),
    )
        .prop_map(|(first_seq, names, records)| {
            let names: Vec<String> = names.into_iter().collect();
            index_of(first_seq, &records, &names)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_valid_index_round_trips(index in any_index()) {
        let bytes = index.encode();
        prop_assert_eq!(SegmentIndex::decode(&bytes), Ok(index));
    }

    #[test]
    fn every_truncation_is_refused_where_the_bytes_end(index in any_index()) {
        let bytes = index.encode();
        for len in 0..bytes.len() {
            let cut = recrc_if_long(bytes[..len].to_vec());
            let error = SegmentIndex::decode(&cut).expect_err("a truncated index decoded");
            prop_assert!(error.offset <= len, "fault at {} past the end {len}", error.offset);
        }
    }

    #[test]
    fn every_flipped_bit_is_refused(index in any_index(), pick in any::<prop::sample::Index>()) {
        let bytes = index.encode();
        let bit = pick.index(bytes.len() * 8);
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(SegmentIndex::decode(&flipped).is_err(), "bit {bit} flipped decoded");
    }

    /// With the CRC made right, any bytes either are refused or decode to
    /// an index that encodes back to exactly them: nothing is read that
    /// is not there, and nothing there is ignored.
    #[test]
    fn mutated_bytes_are_refused_or_exact(
        index in any_index(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = index.encode();
        let len = bytes.len();
        for (at, value) in edits {
            let at = CRC_FIELD.end + at.index(len - CRC_FIELD.end);
            bytes[at] = value;
        }
        let bytes = recrc(bytes);
        if let Ok(decoded) = SegmentIndex::decode(&bytes) {
            prop_assert_eq!(decoded.encode(), bytes);
        }
    }
}

/// A prefix keeps its CRC field right where it still has one, so that
/// the rule that refuses it is the length's, not the CRC's.
fn recrc_if_long(bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= CRC_FIELD.end {
        recrc(bytes)
    } else {
        bytes
    }
}

/// The index of FORMAT.md's example: stream `s`, three records.
fn three_records() -> SegmentIndex {
    index_of(
        1,
        &[(0, 1, false), (0, 1, false), (0, 1, false)],
        &["s".to_owned()],
    )
}

/// Breaks one rule in an index file's bytes.
type Breaker = Box<dyn Fn(&mut Vec<u8>)>;

/// Each rule, broken alone with the CRC right, is refused at the offset of
/// the field that breaks it.
#[test]
fn each_rule_names_the_field_that_breaks_it() {
    let good = three_records().encode();
    let stream_at = OFFSETS_AT + 3 * 4;
    // Stream entry: name length 2, name 1, last version 8, record count 4.
    let first_record_at = stream_at + 2 + 1 + 8 + 4;
    let cases: Vec<(&str, Breaker, usize)> = vec![
        ("magic", Box::new(|b: &mut Vec<u8>| b[0] = b'X'), 0),
        ("format version", Box::new(|b: &mut Vec<u8>| b[8] = 2), 8),
        ("no record", Box::new(|b: &mut Vec<u8>| b[36] = 0), 36),
        (
            "offsets not from 0",
            Box::new(|b: &mut Vec<u8>| b[OFFSETS_AT] = 1),
            OFFSETS_AT,
        ),
        (
            "offsets not rising",
            Box::new(|b: &mut Vec<u8>| {
                b[OFFSETS_AT + 8..OFFSETS_AT + 12].copy_from_slice(&44u32.to_le_bytes())
            }),
            OFFSETS_AT + 8,
        ),
        (
            "segment shorter than its records",
            Box::new(|b: &mut Vec<u8>| b[24..32].copy_from_slice(&100u64.to_le_bytes())),
            24,
        ),
        (
            "name not UTF-8",
            Box::new(move |b: &mut Vec<u8>| b[stream_at + 2] = 0xFF),
            stream_at,
        ),
        (
            "a record in two entries",
            Box::new(move |b: &mut Vec<u8>| b[first_record_at + 12 + 8] = 0),
            first_record_at + 12,
        ),
        (
            "an ordinal past the records",
            Box::new(move |b: &mut Vec<u8>| b[first_record_at + 8] = 3),
            first_record_at,
        ),
        (
            "version 0",
            Box::new(move |b: &mut Vec<u8>| b[first_record_at] = 0),
            first_record_at,
        ),
        (
            "bytes after the last stream",
            Box::new(|b: &mut Vec<u8>| b.push(0)),
            good.len(),
        ),
    ];
    for (rule, break_it, offset) in cases {
        let mut bytes = good.clone();
        break_it(&mut bytes);
        let bytes = if rule == "magic" { bytes } else { recrc(bytes) };
        let error = SegmentIndex::decode(&bytes).expect_err(rule);
        assert_eq!(error.offset, offset, "{rule}: {error}");
    }
}

/// The bytes of `index` laid out from the table in FORMAT.md, field by
/// field, with no rule checked: the encoder's twin, written apart from it.
fn laid_out(index: &SegmentIndex) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"DURLOGIX");
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&index.first_seq.to_le_bytes());
    out.extend_from_slice(&index.segment_len.to_le_bytes());
    out.extend_from_slice(&index.last_record_crc.to_le_bytes());
    out.extend_from_slice(&(index.offsets.len() as u32).to_le_bytes());
    out.extend_from_slice(&(index.streams.len() as u32).to_le_bytes());
    for offset in &index.offsets {
        out.extend_from_slice(&offset.to_le_bytes());
    }
    for stream in &index.streams {
        out.extend_from_slice(&(stream.name.len() as u16).to_le_bytes());
        out.extend_from_slice(stream.name.as_bytes());
        out.extend_from_slice(&stream.last_version.to_le_bytes());
        out.extend_from_slice(&(stream.records.len() as u32).to_le_bytes());
        for record in &stream.records {
            out.extend_from_slice(&record.first_version.to_le_bytes());
            out.extend_from_slice(&record.ordinal.to_le_bytes());
        }
        out.extend_from_slice(&(stream.ids.len() as u32).to_le_bytes());
        for (id, version) in &stream.ids {
            out.extend_from_slice(id);
            out.extend_from_slice(&version.to_le_bytes());
        }
    }
    recrc(out)
}

proptest! {
    #[test]
    fn the_encoder_lays_fields_out_as_the_table_says(index in any_index()) {
        prop_assert_eq!(index.encode(), laid_out(&index));
    }
}

#[test]
fn a_record_no_stream_owns_is_refused() {
    let mut index = three_records();
    index.streams[0].records.pop();
    index.streams[0].last_version = 2;
    let error = SegmentIndex::decode(&laid_out(&index)).expect_err("record 2 has no stream");
    assert_eq!(error.offset, OFFSETS_AT + 2 * 4, "{error}");
}

#[test]
fn streams_out_of_name_order_are_refused() {
    let mut index = index_of(
        1,
        &[(0, 1, false), (1, 1, false)],
        &["a".to_owned(), "b".to_owned()],
    );
    index.streams.swap(0, 1);
    let error = SegmentIndex::decode(&laid_out(&index)).expect_err("b before a");
    assert!(error.reason.contains("name order"), "{error}");
}

#[test]
fn names_are_those_of_their_segments() {
    assert_eq!(index_file_name(1), "00000000000000000001.idx");
    assert_eq!(three_records().last_seq(), 3);
}

#[test]
fn ids_out_of_order_or_outside_the_segment_are_refused() {
    let with_ids = index_of(
        1,
        &[(0, 1, true), (0, 2, true), (0, 1, false)],
        &["s".to_owned()],
    );
    assert_eq!(with_ids.streams[0].ids.len(), 2);
    SegmentIndex::decode(&laid_out(&with_ids)).expect("the ids in order decode");
    let mut swapped = with_ids.clone();
    swapped.streams[0].ids.swap(0, 1);
    let error = SegmentIndex::decode(&laid_out(&swapped)).expect_err("ids out of order");
    assert!(error.reason.contains("ids not in order"), "{error}");
    for version in [0, with_ids.streams[0].last_version + 1] {
        let mut outside = with_ids.clone();
        outside.streams[0].ids[1].1 = version;
        let error = SegmentIndex::decode(&laid_out(&outside)).expect_err("id outside");
        assert!(
            error.reason.contains("outside"),
            "version {version}: {error}"
        );
    }
}

#[test]
fn a_record_in_two_streams_is_refused() {
    let mut index = index_of(
        1,
        &[(0, 1, false), (1, 1, false)],
        &["a".to_owned(), "b".to_owned()],
    );
    index.streams[1].records[0].ordinal = 0;
    let error = SegmentIndex::decode(&laid_out(&index)).expect_err("record 0 twice");
    assert!(error.reason.contains("two entries"), "{error}");
}

/// A segment of `records` (stream, events, ids on them?) appended from
/// seq `first_seq`, and the index its own bookkeeping says it has.
fn segment_of(first_seq: u64, records: &[(usize, usize, bool)]) -> (Vec<u8>, SegmentIndex) {
    let names = ["a", "b", "c"];
    let mut versions = [0u64; 3];
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    let mut streams: Vec<StreamRecords> = Vec::new();
    let mut last_record_crc = 0;
    for (ordinal, &(stream, events, with_ids)) in records.iter().enumerate() {
        let stream = stream % names.len();
        let first_version = versions[stream] + 1;
        let batch: Vec<durlog::Event> = (0..events as u64)
            .map(|index| {
                let event = durlog::Event::new("t", vec![index as u8; index as usize]);
                let mut id = [0u8; EVENT_ID_BYTES];
                id[..8].copy_from_slice(&(ordinal as u64 * 16 + index).to_le_bytes());
                if with_ids { event.with_id(id) } else { event }
            })
            .collect();
        let seq = first_seq + ordinal as u64;
        offsets.push(bytes.len() as u32);
        let record_at = bytes.len();
        durlog::append_record(
            &mut bytes,
            seq,
            &durlog::encode_batch(names[stream], first_version, &batch),
        );
        last_record_crc =
            u32::from_le_bytes(bytes[record_at + 4..record_at + 8].try_into().unwrap());
        versions[stream] += events as u64;
        let entry = match streams.iter_mut().find(|entry| entry.name == names[stream]) {
            Some(entry) => entry,
            None => {
                streams.push(StreamRecords {
                    name: names[stream].to_owned(),
                    last_version: 0,
                    records: Vec::new(),
                    ids: Vec::new(),
                });
                streams.last_mut().unwrap()
            }
        };
        entry.last_version = versions[stream];
        entry.records.push(IndexedRecord {
            first_version,
            ordinal: ordinal as u32,
        });
        if with_ids {
            for (index, event) in batch.iter().enumerate() {
                entry.ids.push((
                    event.id().expect("with an id"),
                    first_version + index as u64,
                ));
            }
        }
    }
    streams.sort_by(|a, b| a.name.cmp(&b.name));
    for stream in &mut streams {
        stream.ids.sort();
    }
    let segment_len = bytes.len() as u64;
    (
        bytes,
        SegmentIndex {
            first_seq,
            segment_len,
            last_record_crc,
            offsets,
            streams,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The index of a segment read from its bytes is the one its writer's
    /// bookkeeping gives, and it round-trips through its file.
    #[test]
    fn a_segments_index_is_what_its_records_say(
        first_seq in 1u64..1 << 40,
        records in vec((0usize..3, 1usize..4, any::<bool>()), 1..30),
    ) {
        let (bytes, expected) = segment_of(first_seq, &records);
        let index = SegmentIndex::of_segment(first_seq, &bytes).expect("a valid segment");
        prop_assert_eq!(&index, &expected);
        prop_assert_eq!(SegmentIndex::decode(&index.encode()), Ok(index));
    }

    /// Damage to a segment's bytes is never indexed: a cut inside a record
    /// or a flipped bit is an error at or before the damaged record.
    #[test]
    fn a_damaged_segment_is_refused(
        records in vec((0usize..3, 1usize..4, any::<bool>()), 1..12),
        pick in any::<prop::sample::Index>(),
        cut in any::<bool>(),
    ) {
        let (mut bytes, index) = segment_of(1, &records);
        let at = pick.index(bytes.len());
        let record_at = *index.offsets.iter().rev().find(|&&offset| offset as usize <= at).unwrap();
        if cut {
            bytes.truncate(at.max(1));
        } else {
            bytes[at] ^= 0x10;
        }
        if cut && index.offsets.contains(&(at.max(1) as u32)) {
            // A cut between records leaves a shorter valid segment.
            prop_assert!(SegmentIndex::of_segment(1, &bytes).is_ok());
        } else {
            let error = SegmentIndex::of_segment(1, &bytes).expect_err("damage indexed");
            prop_assert!(error.offset <= record_at as usize, "{error} after the damage at {at}");
        }
    }
}

#[test]
fn records_out_of_place_are_refused() {
    let record = |seq: u64, version: u64| {
        let mut bytes = Vec::new();
        let events = [durlog::Event::new("t", b"x".to_vec())];
        durlog::append_record(
            &mut bytes,
            seq,
            &durlog::encode_batch("a", version, &events),
        );
        bytes
    };
    let first = record(1, 1);
    for (second, fault) in [(record(3, 2), "seq 3"), (record(2, 3), "version 3 after 1")] {
        let bytes = [first.clone(), second].concat();
        let error = SegmentIndex::of_segment(1, &bytes).expect_err(fault);
        assert_eq!(error.offset, first.len(), "{fault}: {error}");
        assert!(error.reason.contains(fault), "{fault}: {error}");
    }
    let error = SegmentIndex::of_segment(2, &first).expect_err("named 2, holds seq 1");
    assert_eq!(error.offset, 0, "{error}");
    assert!(
        SegmentIndex::of_segment(1, &[]).is_err(),
        "an empty segment"
    );
}
