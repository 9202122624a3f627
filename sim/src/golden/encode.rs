//! The oracle's own encoder of every file FORMAT.md defines, written
//! without the engine's code: a record (its header, payload and extras,
//! with its own CRC-32C table), a table of stream metadata or consumer
//! positions, the state file. The model keeps each acknowledged record as
//! these bytes, and the layout check (`golden/mod.rs`) holds the files to
//! them.

use crate::model::event::{Extras, ModelEvent};
use crate::model::tables::{Deleted, Tables};

/// CRC-32C's tables for the reflected polynomial 0x82F63B78: the first
/// steps the register over one byte; table k over a byte followed by k
/// zero bytes, so that eight lookups take eight bytes at once (slicing by
/// 8), with no dependence between them but the register.
const CRC_TABLES: [[u32; 256]; 8] = {
    let mut tables = [[0u32; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut byte = 0;
        while byte < 256 {
            let previous = tables[k - 1][byte];
            tables[k][byte] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
};

fn crc32c(parts: &[&[u8]]) -> u32 {
    !parts.iter().fold(!0u32, |crc, part| crc_update(crc, part))
}

/// The register after `bytes`: eight at a time, then one at a time.
fn crc_update(mut crc: u32, bytes: &[u8]) -> u32 {
    let table = |k: usize, index: u32| CRC_TABLES[k][(index & 0xFF) as usize];
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let low = u32::from_le_bytes(word[..4].try_into().expect("4 bytes")) ^ crc;
        let high = u32::from_le_bytes(word[4..].try_into().expect("4 bytes"));
        crc = table(7, low)
            ^ table(6, low >> 8)
            ^ table(5, low >> 16)
            ^ table(4, low >> 24)
            ^ table(3, high)
            ^ table(2, high >> 8)
            ^ table(1, high >> 16)
            ^ table(0, high >> 24);
    }
    words.remainder().iter().fold(crc, |crc, &byte| {
        table(0, crc ^ u32::from(byte)) ^ (crc >> 8)
    })
}

/// Where an encoding goes: into bytes, or only into a count of them, so
/// that a record's size and its bytes come from one encoder.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Counts the bytes an encoding would write.
struct Length(u64);

impl Sink for Length {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len() as u64;
    }
}

/// A record's header: payload length, CRC-32C over seq and payload, seq.
fn header(sink: &mut impl Sink, payload_bytes: u32, crc: u32, seq: u64) {
    sink.put(&payload_bytes.to_le_bytes());
    sink.put(&crc.to_le_bytes());
    sink.put(&seq.to_le_bytes());
}

/// A record's payload: the batch of one append's events, each followed by
/// its extras where any event of the batch has some (the count's top bit
/// says so).
fn payload(sink: &mut impl Sink, stream: &str, first_version: u64, events: &[ModelEvent]) {
    let with_extras = events.iter().any(|event| !event.extras.is_empty());
    sink.put(&(stream.len() as u16).to_le_bytes());
    sink.put(stream.as_bytes());
    sink.put(&first_version.to_le_bytes());
    let count = events.len() as u32 | if with_extras { 1 << 31 } else { 0 };
    sink.put(&count.to_le_bytes());
    for event in events {
        sink.put(&(event.event_type.len() as u16).to_le_bytes());
        sink.put(event.event_type.as_bytes());
        sink.put(&event.at.to_le_bytes());
        sink.put(&(event.data.len() as u32).to_le_bytes());
        sink.put(&event.data);
        if with_extras {
            extras(sink, &event.extras);
        }
    }
}

/// An event's extras: which of them it has (bit 0 id, bit 1 metadata,
/// bit 2 content type), then each that it has.
fn extras(sink: &mut impl Sink, extras: &Extras) {
    let has_metadata = !extras.metadata.is_empty();
    let flags = u8::from(extras.id.is_some())
        | u8::from(has_metadata) << 1
        | u8::from(extras.content_type.is_some()) << 2;
    sink.put(&[flags]);
    if let Some(id) = &extras.id {
        sink.put(id);
    }
    if has_metadata {
        sink.put(&(extras.metadata.len() as u32).to_le_bytes());
        sink.put(&extras.metadata);
    }
    if let Some(content_type) = &extras.content_type {
        sink.put(&(content_type.len() as u16).to_le_bytes());
        sink.put(content_type.as_bytes());
    }
}

/// The record bytes FORMAT.md gives for one append.
pub fn record(seq: u64, stream: &str, first_version: u64, events: &[ModelEvent]) -> Vec<u8> {
    // Sized by the same encoder, counting: one allocation, never grown.
    let mut out = Vec::with_capacity(record_bytes(stream, events) as usize);
    header(&mut out, 0, 0, seq);
    let header_len = out.len();
    payload(&mut out, stream, first_version, events);
    let (head, batch) = out.split_at_mut(header_len);
    let crc = crc32c(&[&seq.to_le_bytes(), batch]);
    let mut fields = Vec::with_capacity(header_len);
    header(&mut fields, batch.len() as u32, crc, seq);
    head.copy_from_slice(&fields);
    out
}

/// The seq and length of the valid record (its length fits, its CRC over
/// seq and payload matches) at the front of `bytes`, by FORMAT.md.
pub fn parse(bytes: &[u8]) -> Option<(u64, usize)> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let seq = bytes.get(8..16)?;
    let payload = bytes.get(16..16usize.checked_add(len)?)?;
    (crc32c(&[seq, payload]) == crc).then(|| {
        (
            u64::from_le_bytes(seq.try_into().expect("8 bytes")),
            16 + len,
        )
    })
}

/// The size of the record [`record`] gives for one append, without
/// encoding it (seq, version and times do not change a record's size).
pub fn record_bytes(stream: &str, events: &[ModelEvent]) -> u64 {
    let mut length = Length(0);
    header(&mut length, 0, 0, 0);
    payload(&mut length, stream, 0, events);
    length.0
}

/// The table of stream metadata FORMAT.md gives for `tables`, if it has
/// an entry (a log that never had one has no file).
pub fn streams_file(tables: &Tables) -> Vec<u8> {
    table(b"DURLOGSM", tables.entries.iter(), |out, entry| {
        let numbers = [
            entry.max_count,
            entry.max_age,
            entry.truncate_before,
            match entry.deleted {
                Some(Deleted::Soft(at)) => Some(at),
                _ => None,
            },
        ];
        let flags = numbers
            .iter()
            .enumerate()
            .map(|(bit, number)| u8::from(number.is_some()) << bit)
            .sum::<u8>()
            | u8::from(entry.deleted == Some(Deleted::Hard)) << 4;
        out.put(&[flags]);
        for number in numbers {
            out.put(&number.unwrap_or(0).to_le_bytes());
        }
    })
}

/// The table of consumer positions FORMAT.md gives for `tables`.
pub fn consumers_file(tables: &Tables) -> Vec<u8> {
    table(b"DURLOGCP", tables.consumers.iter(), |out, seq| {
        out.put(&seq.to_le_bytes())
    })
}

fn table<'a, V: 'a>(
    magic: &[u8; 8],
    entries: impl ExactSizeIterator<Item = (&'a String, &'a V)>,
    value: impl Fn(&mut Vec<u8>, &V),
) -> Vec<u8> {
    let mut body = Vec::new();
    body.put(&(entries.len() as u32).to_le_bytes());
    for (name, entry) in entries {
        body.put(&(name.len() as u16).to_le_bytes());
        body.put(name.as_bytes());
        value(&mut body, entry);
    }
    sealed(magic, &body)
}

/// The state file FORMAT.md gives for a log whose first kept record is
/// `first_seq`, with no truncation under way, whose streams stood at
/// `purged` (by name) before it.
pub fn state_file(first_seq: u64, purged: &std::collections::BTreeMap<String, u64>) -> Vec<u8> {
    let mut body = Vec::new();
    body.put(&first_seq.to_le_bytes());
    body.put(&u64::MAX.to_le_bytes());
    body.put(&(purged.len() as u32).to_le_bytes());
    for (name, version) in purged {
        body.put(&(name.len() as u16).to_le_bytes());
        body.put(name.as_bytes());
        body.put(&version.to_le_bytes());
    }
    sealed(b"DURLOGST", &body)
}

/// One record of a sealed segment, as an index file sees it.
pub struct IndexedRecord<'m> {
    /// The record's bytes, header first.
    pub bytes: &'m [u8],
    pub stream: &'m str,
    pub first_version: u64,
    pub events: &'m [ModelEvent],
}

/// The index file FORMAT.md ("Index files") gives for the sealed segment
/// whose first seq is `first_seq` and whose records are `records`, in seq
/// order (at least one).
pub fn index_file(first_seq: u64, records: &[IndexedRecord<'_>]) -> Vec<u8> {
    struct Entry<'m> {
        last_version: u64,
        records: Vec<(u64, u32)>,
        ids: std::collections::BTreeMap<[u8; durlog::EVENT_ID_BYTES], u64>,
        name: &'m str,
    }
    let mut streams: std::collections::BTreeMap<&str, Entry<'_>> = Default::default();
    let mut offsets = Vec::with_capacity(records.len());
    let mut offset = 0u64;
    for (ordinal, record) in records.iter().enumerate() {
        offsets.push(offset as u32);
        offset += record.bytes.len() as u64;
        let entry = streams.entry(record.stream).or_insert_with(|| Entry {
            last_version: 0,
            records: Vec::new(),
            ids: Default::default(),
            name: record.stream,
        });
        entry.records.push((record.first_version, ordinal as u32));
        for (at, event) in record.events.iter().enumerate() {
            if let Some(id) = event.extras.id {
                entry.ids.insert(id, record.first_version + at as u64);
            }
        }
        entry.last_version = record.first_version + record.events.len() as u64 - 1;
    }
    let last = records.last().expect("a sealed segment holds a record");
    let mut body = Vec::new();
    body.put(&first_seq.to_le_bytes());
    body.put(&offset.to_le_bytes());
    body.put(&last.bytes[4..8]);
    body.put(&(records.len() as u32).to_le_bytes());
    body.put(&(streams.len() as u32).to_le_bytes());
    for offset in &offsets {
        body.put(&offset.to_le_bytes());
    }
    for entry in streams.values() {
        body.put(&(entry.name.len() as u16).to_le_bytes());
        body.put(entry.name.as_bytes());
        body.put(&entry.last_version.to_le_bytes());
        body.put(&(entry.records.len() as u32).to_le_bytes());
        for (first_version, ordinal) in &entry.records {
            body.put(&first_version.to_le_bytes());
            body.put(&ordinal.to_le_bytes());
        }
        body.put(&(entry.ids.len() as u32).to_le_bytes());
        for (id, version) in &entry.ids {
            body.put(id);
            body.put(&version.to_le_bytes());
        }
    }
    sealed(b"DURLOGIX", &body)
}

/// A file of FORMAT.md's tables, state and index files: `magic`, version
/// 1, the CRC-32C of `body`, then `body`.
fn sealed(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(magic.len() + 8 + body.len());
    out.put(magic);
    out.put(&1u32.to_le_bytes());
    out.put(&crc32c(&[body]).to_le_bytes());
    out.put(body);
    out
}

#[cfg(test)]
mod tests {
    use crate::model::{Extras, ModelEvent};

    fn event(event_type: &str, data: &[u8]) -> ModelEvent {
        ModelEvent {
            event_type: event_type.to_owned(),
            data: data.to_vec(),
            at: 0,
            extras: Extras::default(),
        }
    }

    /// The oracle's index files, byte for byte those the engine derives
    /// from the same segment (`SegmentIndex::of_segment`), over seeded
    /// segments of several streams, some events with ids.
    #[test]
    fn index_files_as_the_engine_derives_them() {
        use rand::{RngExt, SeedableRng};
        for seed in 0..300u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let first_seq = rng.random_range(1..1_000u64);
            let mut versions = std::collections::BTreeMap::new();
            let mut appends = Vec::new();
            for seq in first_seq..first_seq + rng.random_range(1..12u64) {
                let stream = ["a", "bb", "s1", "\u{fc}"][rng.random_range(0..4)];
                let first_version = match versions.get(stream) {
                    Some(version) => version + 1,
                    None => rng.random_range(1..5u64),
                };
                let events: Vec<ModelEvent> = (0..rng.random_range(1..4))
                    .map(|_| {
                        let mut made = event("t", &vec![7; rng.random_range(0..20)]);
                        if rng.random_bool(0.4) {
                            made.extras.id = Some(rng.random());
                        }
                        made
                    })
                    .collect();
                versions.insert(stream, first_version + events.len() as u64 - 1);
                let bytes = super::record(seq, stream, first_version, &events);
                appends.push((bytes, stream, first_version, events));
            }
            let records: Vec<super::IndexedRecord<'_>> = appends
                .iter()
                .map(
                    |(bytes, stream, first_version, events)| super::IndexedRecord {
                        bytes,
                        stream,
                        first_version: *first_version,
                        events,
                    },
                )
                .collect();
            let segment: Vec<u8> = appends.iter().flat_map(|append| append.0.clone()).collect();
            let engine = durlog::format::SegmentIndex::of_segment(first_seq, &segment)
                .unwrap_or_else(|error| panic!("seed {seed}: {error}"));
            assert_eq!(
                super::index_file(first_seq, &records),
                engine.encode(),
                "seed {seed}"
            );
        }
    }

    /// The worked example of FORMAT.md, computed independently of the engine.
    #[test]
    fn golden_example() {
        let bytes = super::record(1, "s", 1, &[event("T", b"hi")]);
        assert_eq!(bytes.len(), 48);
        assert_eq!(super::record_bytes("s", &[event("T", b"hi")]), 48);
        assert_eq!(
            &bytes[..16],
            &[
                0x20, 0, 0, 0, 0x5e, 0x1a, 0x72, 0x0b, 1, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        assert_eq!(super::crc32c(&[b"123456789"]), 0xE306_9283);
        // The state file's worked example (FORMAT.md), and the engine's
        // encoder agreeing with this one.
        let purged = [("s".to_owned(), 2)].into();
        let state = super::state_file(3, &purged);
        assert_eq!(state.len(), 36 + 2 + 1 + 8);
        assert_eq!(&state[..12], b"DURLOGST\x01\0\0\0");
        let engine = durlog::LogState {
            first_seq: 3,
            truncate_after: None,
            purged_versions: purged,
        };
        assert_eq!(state, engine.encode());
        for data in ["one", "two", "three"] {
            let events = [event("t", data.as_bytes())];
            assert_eq!(super::record(1, "s", 1, &events).len(), 46 + data.len());
            assert_eq!(super::record_bytes("s", &events), 46 + data.len() as u64);
        }
    }

    /// Eight bytes at a time give the register one byte at a time gives,
    /// at every length and alignment, and the standard check value.
    #[test]
    fn slicing_by_eight_is_the_bytewise_crc() {
        let bytewise = |bytes: &[u8]| {
            !bytes.iter().fold(!0u32, |crc, &byte| {
                super::CRC_TABLES[0][((crc ^ u32::from(byte)) & 0xFF) as usize] ^ (crc >> 8)
            })
        };
        let bytes: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for end in start..bytes.len() {
                let slice = &bytes[start..end];
                assert_eq!(super::crc32c(&[slice]), bytewise(slice), "{start}..{end}");
            }
        }
        let (head, tail) = bytes.split_at(13);
        assert_eq!(super::crc32c(&[head, tail]), bytewise(&bytes));
        assert_eq!(super::crc32c(&[b"123456789"]), 0xE306_9283);
    }

    /// Events with extras (an id, metadata, a content type, each alone and
    /// all three) are encoded as the engine encodes them, and a batch
    /// with none of them as before extras existed.
    #[test]
    fn extras_as_the_engine_encodes_them() {
        let plain = durlog::Event::new("T", "hi");
        let engine_events = [
            plain.clone().with_id([7; 16]),
            plain.clone().with_metadata("m"),
            plain.clone().with_content_type("text/plain"),
            plain
                .clone()
                .with_id([9; 16])
                .with_metadata("meta")
                .with_content_type("a/b"),
            plain.clone(),
        ];
        let model: Vec<ModelEvent> = (engine_events.iter())
            .map(|event| {
                let mut event = event.clone();
                event.at = 5;
                ModelEvent::acknowledged(event, 5)
            })
            .collect();
        let mut engine = Vec::new();
        let at_five: Vec<durlog::Event> = (engine_events.iter())
            .map(|event| {
                let mut event = event.clone();
                event.at = 5;
                event
            })
            .collect();
        durlog::append_record(&mut engine, 3, &durlog::encode_batch("s", 2, &at_five));
        assert_eq!(super::record(3, "s", 2, &model), engine);
        assert_eq!(super::record_bytes("s", &model), engine.len() as u64);
        let none = [event("T", b"hi")];
        assert_eq!(
            super::record(1, "s", 1, &none).len(),
            48,
            "no extras, as before"
        );
    }
}
