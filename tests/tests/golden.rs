//! Golden snapshots of the bytes on disk (SPEC 2.1-2.4, FORMAT.md).
//!
//! Each test builds records with `durlog::format`, checks them against values
//! computed here independently (a bitwise CRC-32C, literal bytes from the
//! spec, size arithmetic), and snapshots a hex dump with every field
//! annotated. A changed byte fails the test; under `CI=true` insta writes
//! nothing. To accept an intended format change, run `cargo insta test -p
//! durlog-tests` and `cargo insta review` (see FORMAT.md, "Golden snapshots").

use durlog::{Event, HEADER_SIZE, append_record, encode_batch, parse_record, segment_name};
use durlog_tests::hexdump::{annotate_records, hexdump};

/// CRC-32C one bit at a time, exactly as SPEC 2.1 and FORMAT.md define it:
/// reflected polynomial 0x82F63B78, init and xor-out 0xFFFFFFFF. Written here
/// so the golden values do not depend on the `crc32c` crate the engine uses.
fn crc32c_bitwise(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFF_u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    crc ^ 0xFFFF_FFFF
}

/// The CRC a record must carry, by the bitwise definition: over the 8
/// little-endian bytes of seq, then the payload.
fn record_crc_bitwise(seq: u64, payload: &[u8]) -> u32 {
    let mut covered = seq.to_le_bytes().to_vec();
    covered.extend_from_slice(payload);
    crc32c_bitwise(&covered)
}

/// An event as `append` would store it: type, data and time.
fn event(event_type: &str, data: &[u8], at: i64) -> Event {
    let mut event = Event::new(event_type, data);
    event.at = at;
    event
}

/// One record holding one batch, checked field by field against the spec's
/// layout: length, bitwise CRC, seq, and a parse that gives it all back.
fn record(seq: u64, stream: &str, first_version: u64, events: &[Event]) -> Vec<u8> {
    let payload = encode_batch(stream, first_version, events);
    let mut bytes = Vec::new();
    append_record(&mut bytes, seq, &payload);
    assert_eq!(bytes.len(), HEADER_SIZE + payload.len());
    assert_eq!(bytes[0..4], (payload.len() as u32).to_le_bytes());
    assert_eq!(
        bytes[4..8],
        record_crc_bitwise(seq, &payload).to_le_bytes(),
        "stored CRC differs from the bitwise CRC-32C over seq ++ payload"
    );
    assert_eq!(bytes[8..16], seq.to_le_bytes());
    assert_eq!(bytes[16..], payload[..]);
    let parsed = parse_record(&bytes).expect("a record just encoded parses");
    assert_eq!(
        (parsed.seq, parsed.len, parsed.payload),
        (seq, bytes.len(), &payload[..])
    );
    bytes
}

/// The text of a snapshot: what the bytes are, a plain hex dump, and every
/// field annotated.
fn dump(title: &str, bytes: &[u8]) -> String {
    format!(
        "{title}\n\n{} bytes:\n{}\nfields:\n{}",
        bytes.len(),
        hexdump(bytes),
        annotate_records(bytes)
    )
}

#[test]
fn bitwise_crc32c_matches_the_check_value_and_the_engine() {
    assert_eq!(crc32c_bitwise(b"123456789"), 0xE306_9283);
    assert_eq!(durlog::crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c_bitwise(b""), 0);
    for input in [&b""[..], b"a", b"hi", &[0u8; 32], &[0xFF; 100], &[7; 4096]] {
        assert_eq!(durlog::crc32c(input), crc32c_bitwise(input), "{input:?}");
    }
}

#[test]
fn spec_2_3_golden_record() {
    // SPEC 2.3, byte for byte: one event, stream "s", type "T", data "hi",
    // at 0 ns, seq 1, version 1.
    const PAYLOAD: [u8; 32] = [
        0x01, 0x00, 0x73, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x54, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x68, 0x69,
    ];
    const HEADER: [u8; 16] = [
        0x20, 0x00, 0x00, 0x00, 0x5e, 0x1a, 0x72, 0x0b, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00,
    ];
    let bytes = record(1, "s", 1, &[event("T", b"hi", 0)]);
    assert_eq!(bytes[16..], PAYLOAD);
    assert_eq!(record_crc_bitwise(1, &PAYLOAD), 0x0B72_1A5E);
    assert_eq!(bytes[..16], HEADER);
    assert_eq!(bytes.len(), 48);
    let text = dump(
        "SPEC 2.3: stream \"s\", type \"T\", data \"hi\", at 0, seq 1, version 1.\n\
         CRC-32C over 01 00 00 00 00 00 00 00 ++ payload = 0x0b721a5e.",
        &bytes,
    );
    insta::assert_snapshot!(text);
}

#[test]
fn three_events_in_one_record() {
    let events = [
        event("t", b"one", 0),
        event("t", b"two", 0),
        event("t", b"three", 0),
    ];
    let bytes = record(1, "s", 1, &events);
    // 16 header + 15 batch prefix (2 + 1 + 8 + 4) + per event
    // 15 (2 + 1 + 8 + 4) + data.
    assert_eq!(bytes.len(), 16 + 15 + (15 + 3) + (15 + 3) + (15 + 5));
    let text = dump(
        "One append of three events: stream \"s\", type \"t\", data \"one\", \"two\", \"three\",\n\
         at 0, seq 1, versions 1..=3. Size: 16 + 15 + (15+3) + (15+3) + (15+5) = 87.",
        &bytes,
    );
    insta::assert_snapshot!(text);
}

#[test]
fn three_records_of_49_49_51_bytes() {
    let mut bytes = Vec::new();
    let mut sizes = Vec::new();
    for (seq, data) in [(1, &b"one"[..]), (2, b"two"), (3, b"three")] {
        let one = record(seq, "s", seq, &[event("t", data, 0)]);
        sizes.push(one.len());
        bytes.extend_from_slice(&one);
    }
    // SPEC 2.3: 16 + 15 + 15 + data length.
    assert_eq!(sizes, [49, 49, 51]);
    let text = dump(
        "Three appends of one event each: stream \"s\", type \"t\", data \"one\", \"two\",\n\
         \"three\", at 0, seqs 1..=3, versions 1..=3, one after another as in a segment file.\n\
         Sizes: 16 + 15 + 15 + data length = 49, 49, 51.",
        &bytes,
    );
    insta::assert_snapshot!(text);
}

#[test]
fn empty_data_and_negative_time() {
    let bytes = record(7, "s", 5, &[event("t", b"", -1)]);
    assert_eq!(bytes.len(), 16 + 15 + 15);
    let text = dump(
        "An event with empty data (data_len 0, no data bytes) at -1 ns (i64, two's\n\
         complement), seq 7, version 5. Size: 16 + 15 + 15 + 0 = 46.",
        &bytes,
    );
    insta::assert_snapshot!(text);
}

#[test]
fn non_ascii_stream_and_type() {
    let stream = "köln/日本";
    let event_type = "Zählung";
    // Lengths on disk are UTF-8 bytes, not chars: ö and ä take 2 bytes,
    // 日 and 本 take 3 each.
    assert_eq!((stream.len(), stream.chars().count()), (12, 7));
    assert_eq!((event_type.len(), event_type.chars().count()), (8, 7));
    let bytes = record(
        2,
        stream,
        1,
        &[event(
            event_type,
            &[0x00, 0xFF, 0x0A],
            1_764_412_800_000_000_001,
        )],
    );
    assert_eq!(bytes.len(), 16 + (14 + 12) + (14 + 8) + 3);
    let text = dump(
        "Non-ASCII names: stream \"köln/日本\" (12 bytes, 7 chars), type \"Zählung\"\n\
         (8 bytes, 7 chars), data 00 ff 0a (not UTF-8, opaque), at 2025-11-29T10:40:00.000000001Z,\n\
         seq 2, version 1. Size: 16 + (14 + 12) + (14 + 8) + 3 = 67.",
        &bytes,
    );
    insta::assert_snapshot!(text);
}

/// Lays records out into segments by SPEC 2.4: a new segment starts before a
/// record that would take the current one past `segment_bytes` (never before
/// the first record of a segment, so a single larger record gets a segment of
/// its own), named by the seq of its first record.
fn lay_out_segments(segment_bytes: u64, records: &[(u64, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut segments: Vec<(String, Vec<u8>)> = Vec::new();
    for (seq, bytes) in records {
        let fits = segments.last().is_some_and(|(_, current)| {
            current.len() as u64 <= segment_bytes
                && bytes.len() as u64 <= segment_bytes - current.len() as u64
        });
        if !fits {
            segments.push((segment_name(*seq), Vec::new()));
        }
        let current = &mut segments.last_mut().expect("a segment exists").1;
        current.extend_from_slice(bytes);
    }
    segments
}

#[test]
fn record_that_exactly_fills_a_segment() {
    const SEGMENT_BYTES: u64 = 98;
    let records: Vec<(u64, Vec<u8>)> = [(1, &b"one"[..]), (2, b"two"), (3, b"three")]
        .into_iter()
        .map(|(seq, data)| (seq, record(seq, "s", seq, &[event("t", data, 0)])))
        .collect();
    let segments = lay_out_segments(SEGMENT_BYTES, &records);
    let summary: Vec<(&str, usize)> = segments
        .iter()
        .map(|(name, bytes)| (name.as_str(), bytes.len()))
        .collect();
    assert_eq!(
        summary,
        [
            ("00000000000000000001.log", 98),
            ("00000000000000000003.log", 51)
        ]
    );
    // A single record over the limit still gets written, in a segment of its
    // own: the only way a segment exceeds segment_bytes.
    let oversized: Vec<usize> = lay_out_segments(40, &records)
        .iter()
        .map(|(_, bytes)| bytes.len())
        .collect();
    assert_eq!(oversized, [49, 49, 51]);
    let mut text = String::from(
        "segment_bytes = 98; the records of seqs 1, 2, 3 take 49, 49 and 51 bytes.\n\
         seq 1: segment 1 holds 0 bytes, 0 + 49 = 49 <= 98: written at offset 0.\n\
         seq 2: segment 1 holds 49 bytes, 49 + 49 = 98 <= 98: fills it exactly, at offset 49.\n\
         seq 3: segment 1 holds 98 bytes, 98 + 51 = 149 > 98: a new segment starts,\n\
         named by seq 3, and the record is written at its offset 0.\n",
    );
    for (name, bytes) in &segments {
        text.push_str(&format!("\n=== {name}\n"));
        text.push_str(&dump(&format!("segment file {name}"), bytes));
    }
    insta::assert_snapshot!(text);
}

/// FORMAT.md's worked examples of the tables ("Stream metadata and
/// consumer positions"), byte for byte, literal here: consumer `p` at seq
/// 3, and stream `s` with a maximum count of 2, soft-deleted at version 5;
/// each CRC the bitwise CRC-32C of every byte after its field.
#[test]
fn table_worked_examples() {
    use durlog::StreamMetadata;
    use durlog::format::{
        Deleted, StreamEntry, decode_consumers, decode_streams, encode_consumers, encode_streams,
    };
    const CONSUMERS: [u8; 31] = [
        0x44, 0x55, 0x52, 0x4c, 0x4f, 0x47, 0x43, 0x50, // magic "DURLOGCP"
        0x01, 0x00, 0x00, 0x00, // format version 1
        0x55, 0xd4, 0x6b, 0x36, // CRC-32C
        0x01, 0x00, 0x00, 0x00, // 1 entry
        0x01, 0x00, 0x70, // name "p"
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 3
    ];
    const STREAMS: [u8; 56] = [
        0x44, 0x55, 0x52, 0x4c, 0x4f, 0x47, 0x53, 0x4d, // magic "DURLOGSM"
        0x01, 0x00, 0x00, 0x00, // format version 1
        0xe7, 0x58, 0xb3, 0x6c, // CRC-32C
        0x01, 0x00, 0x00, 0x00, // 1 entry
        0x01, 0x00, 0x73, // name "s"
        0x09, // flags: a maximum count (bit 0), soft-deleted (bit 3)
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // maximum count 2
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // no maximum age
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // no truncate-before
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // soft-deleted at version 5
    ];
    assert_eq!(crc32c_bitwise(&CONSUMERS[16..]), 0x366B_D455);
    assert_eq!(crc32c_bitwise(&STREAMS[16..]), 0x6CB3_58E7);
    for table in [&CONSUMERS[..], &STREAMS[..]] {
        assert_eq!(
            table[12..16],
            crc32c_bitwise(&table[16..]).to_le_bytes(),
            "the stored CRC is the bitwise CRC-32C of the bytes after it"
        );
    }
    let positions = [("p".to_owned(), 3)].into();
    assert_eq!(encode_consumers(&positions), CONSUMERS);
    assert_eq!(decode_consumers(&CONSUMERS), Ok(positions));
    let mut metadata = StreamMetadata::default();
    metadata.max_count = Some(2);
    let entry = StreamEntry {
        metadata,
        deleted: Some(Deleted::Soft { at_version: 5 }),
    };
    let streams = [("s".to_owned(), entry)].into();
    assert_eq!(encode_streams(&streams), STREAMS);
    assert_eq!(decode_streams(&STREAMS), Ok(streams));
}

/// FORMAT.md's worked example of an index file ("Index files"), byte for
/// byte, literal here: the segment of the three records of 49, 49 and 51
/// bytes above, sealed; its last record's CRC and the file's CRC the
/// bitwise CRC-32C.
#[test]
fn index_file_worked_example() {
    use durlog::format::{IndexedRecord, SegmentIndex, StreamRecords};
    const INDEX: [u8; 111] = [
        0x44, 0x55, 0x52, 0x4c, 0x4f, 0x47, 0x49, 0x58, // magic "DURLOGIX"
        0x01, 0x00, 0x00, 0x00, // format version 1
        0x3f, 0x2c, 0x74, 0x3c, // CRC-32C of every byte after this field
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // first seq 1
        0x95, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // segment length 149
        0xc0, 0xbc, 0xe5, 0xb9, // the last record's CRC field
        0x03, 0x00, 0x00, 0x00, // 3 records
        0x01, 0x00, 0x00, 0x00, // 1 stream
        0x00, 0x00, 0x00, 0x00, // record 0 at offset 0
        0x31, 0x00, 0x00, 0x00, // record 1 at 49
        0x62, 0x00, 0x00, 0x00, // record 2 at 98
        0x01, 0x00, 0x73, // stream "s"
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // its last version, 3
        0x03, 0x00, 0x00, 0x00, // 3 records of it
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // version 1: record 0
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
        0x00, // version 2: record 1
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
        0x00, // version 3: record 2
        0x00, 0x00, 0x00, 0x00, // no event id
    ];
    let mut segment = Vec::new();
    let mut offsets = Vec::new();
    for (seq, data) in [(1, &b"one"[..]), (2, b"two"), (3, b"three")] {
        offsets.push(segment.len() as u32);
        segment.extend_from_slice(&record(seq, "s", seq, &[event("t", data, 0)]));
    }
    let last_record_crc = u32::from_le_bytes(segment[98 + 4..98 + 8].try_into().unwrap());
    assert_eq!(last_record_crc, 0xB9E5_BCC0);
    assert_eq!(INDEX[12..16], crc32c_bitwise(&INDEX[16..]).to_le_bytes());
    let records = (0..3)
        .map(|ordinal| IndexedRecord {
            first_version: u64::from(ordinal) + 1,
            ordinal,
        })
        .collect();
    let index = SegmentIndex {
        first_seq: 1,
        segment_len: segment.len() as u64,
        last_record_crc,
        offsets,
        streams: vec![StreamRecords {
            name: "s".to_owned(),
            last_version: 3,
            records,
            ids: Vec::new(),
        }],
    };
    assert_eq!(index.encode(), INDEX);
    assert_eq!(SegmentIndex::decode(&INDEX), Ok(index));
}
