//! The in-memory index: for each stream, its version and where each of its
//! records lies. Event payloads are never kept in memory; reads fetch them
//! from the segment files.
//!
//! A record is 16 bytes here (a `Location`) until its segment is sealed
//! with an index file on disk and every segment before it too: the
//! stream then keeps one `Part` for that segment, 16 bytes however many
//! of its records the segment holds, and reads find the records through
//! the index file (`log/index_cache.rs`). So memory holds the records of
//! the active segment (and of any not yet indexed) and a fixed cost per
//! stream and sealed segment.

use std::collections::BTreeMap;

use crate::format::{EVENT_ID_BYTES, SegmentIndex};

/// Where one record of a stream lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    /// Version of the record's first event.
    pub first_version: u64,
    /// The id of its segment (`SegmentMeta::id`).
    pub segment: u32,
    /// Byte offset of the record in that segment. Fits in 32 bits because
    /// records start below `segment_bytes`, which the log caps at 4 GiB.
    pub offset: u32,
}

impl Location {
    /// Where it lies in the log: ids grow with seqs, so this orders
    /// records as their seqs do.
    fn place(&self) -> (u32, u32) {
        (self.segment, self.offset)
    }
}

/// A stream's records in a sealed segment whose index file is on disk:
/// they are found through that file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    /// The id of the segment (`SegmentMeta::id`).
    pub segment: u32,
    /// Version of the stream's first event in it.
    pub first_version: u64,
}

/// One of a stream's entries, oldest first: its parts, then its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    Part(Part),
    Record(Location),
}

/// The records of one stream, in version order: those in sealed segments
/// with index files as one `Part` a segment, the rest one by one.
#[derive(Debug, Default)]
pub(crate) struct StreamIndex {
    /// Version of the stream's last acknowledged event (0 if none).
    pub version: u64,
    /// In segments before every one of `records`.
    pub parts: Vec<Part>,
    pub records: Vec<Location>,
    /// The version of each event id the stream's kept events carry (an
    /// append whose ids are here is a retry). About 40 bytes an id; none
    /// for streams whose events carry none. Sorted, so no hash order can
    /// reach a run.
    pub ids: BTreeMap<[u8; EVENT_ID_BYTES], u64>,
}

impl StreamIndex {
    /// Records that the stream gained `count` events at `location`.
    pub fn push(&mut self, count: u32, location: Location) {
        debug_assert_eq!(self.version + 1, location.first_version);
        self.version = location.first_version + u64::from(count) - 1;
        self.records.push(location);
    }

    /// Remembers the ids of the stream's events just indexed, with their
    /// versions.
    pub fn remember_ids(&mut self, ids: &[(u64, [u8; EVENT_ID_BYTES])]) {
        for &(version, id) in ids {
            debug_assert!(version <= self.version, "an id of an indexed event");
            self.ids.insert(id, version);
        }
    }

    /// Version of the stream's first event kept, if it has any.
    pub fn first_version(&self) -> Option<u64> {
        match (self.parts.first(), self.records.first()) {
            (Some(part), _) => Some(part.first_version),
            (None, Some(location)) => Some(location.first_version),
            (None, None) => None,
        }
    }

    /// How many entries (parts and records) the stream has.
    pub fn entries(&self) -> usize {
        self.parts.len() + self.records.len()
    }

    /// The entry at `at` (below `entries()`): parts first.
    pub fn entry(&self, at: usize) -> Entry {
        match self.parts.get(at) {
            Some(part) => Entry::Part(*part),
            None => Entry::Record(self.records[at - self.parts.len()]),
        }
    }

    /// Index of the entry holding `version`, or the first entry if
    /// `version` precedes it.
    pub fn entry_holding(&self, version: u64) -> usize {
        let in_records = self.parts.is_empty()
            || (self.records.first()).is_some_and(|first| first.first_version <= version);
        if in_records {
            let at = self
                .records
                .partition_point(|location| location.first_version <= version);
            return self.parts.len() + at.saturating_sub(1);
        }
        self.parts
            .partition_point(|part| part.first_version <= version)
            .saturating_sub(1)
    }

    /// Replaces the stream's records in segment `segment` by a part:
    /// every segment before it is sealed already.
    fn seal(&mut self, segment: u32) {
        debug_assert!(
            self.records
                .first()
                .is_none_or(|first| first.segment >= segment),
            "segments are sealed oldest first"
        );
        let sealed = self
            .records
            .partition_point(|location| location.segment <= segment);
        if sealed == 0 {
            return;
        }
        self.parts.push(Part {
            segment,
            first_version: self.records[0].first_version,
        });
        self.records.drain(..sealed);
        // A stream that was busy keeps no room for records it no longer has.
        if self.records.capacity() > 4 * self.records.len().max(16) {
            self.records.shrink_to_fit();
        }
    }
}

/// Every stream's index, sorted by name (so `streams(prefix)` is a range
/// scan and nothing depends on hash order).
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub streams: BTreeMap<String, StreamIndex>,
}

impl Index {
    pub fn version(&self, stream: &str) -> u64 {
        self.streams.get(stream).map_or(0, |index| index.version)
    }

    /// Records that `stream` gained `count` events at `location`.
    pub fn push(&mut self, stream: &str, count: u32, location: Location) {
        let index = match self.streams.get_mut(stream) {
            Some(index) => index,
            None => self.streams.entry(stream.to_owned()).or_default(),
        };
        index.push(count, location);
    }

    /// Records that `stream`'s events up to `last_version` are in `part`
    /// (all its records so far are parts, of segments before).
    pub fn push_part(&mut self, stream: &str, part: Part, last_version: u64) {
        let index = match self.streams.get_mut(stream) {
            Some(index) => index,
            None => self.streams.entry(stream.to_owned()).or_default(),
        };
        debug_assert!(index.records.is_empty(), "parts come before records");
        debug_assert_eq!(index.version + 1, part.first_version);
        debug_assert!(part.first_version <= last_version);
        index.parts.push(part);
        index.version = last_version;
    }

    /// Remembers the ids of `stream`'s events just indexed, with their
    /// versions.
    pub fn remember_ids(&mut self, stream: &str, ids: &[(u64, [u8; EVENT_ID_BYTES])]) {
        if ids.is_empty() {
            return;
        }
        self.streams
            .get_mut(stream)
            .expect("ids of an indexed stream")
            .remember_ids(ids);
    }

    /// Starts `stream` at `version` with no record: the versions a purge
    /// removed still count (recovery, from the state file).
    pub fn seed(&mut self, stream: &str, version: u64) {
        let index = self.streams.entry(stream.to_owned()).or_default();
        debug_assert!(index.entries() == 0 && version > 0);
        index.version = version;
    }

    /// Each stream's version before the first record in segment `id` or
    /// later: what a purge of the segments before `id` must keep. Streams
    /// with no event there are left out.
    pub fn versions_before_segment(&self, id: u32) -> std::collections::BTreeMap<String, u64> {
        self.streams
            .iter()
            .filter_map(|(name, index)| {
                let kept_part = index.parts.iter().find(|part| part.segment >= id);
                let kept = index
                    .records
                    .partition_point(|location| location.segment < id);
                let first_kept = match kept_part {
                    Some(part) => Some(part.first_version),
                    None => index
                        .records
                        .get(kept)
                        .map(|location| location.first_version),
                };
                let before = first_kept.map_or(index.version, |version| version - 1);
                (before > 0).then(|| (name.clone(), before))
            })
            .collect()
    }

    /// Forgets the records in segments before `id` (a purge removed
    /// them); every stream keeps its version.
    pub fn drop_segments_before(&mut self, id: u32) {
        for index in self.streams.values_mut() {
            let purged = index.parts.partition_point(|part| part.segment < id);
            index.parts.drain(..purged);
            let purged = index
                .records
                .partition_point(|location| location.segment < id);
            index.records.drain(..purged);
            // A purged event's id goes with it (FORMAT.md: a retry of an
            // append a purge removed is not recognised).
            let first_kept = index.first_version().unwrap_or(index.version + 1);
            index.ids.retain(|_, version| *version >= first_kept);
        }
    }

    /// Replaces each stream's records in segment `id` by a part (its
    /// index file is on disk, and every segment before it is sealed so).
    pub fn seal_segment(&mut self, id: u32) {
        for index in self.streams.values_mut() {
            index.seal(id);
        }
    }

    /// Forgets the records at `(segment, offset)` or later (a truncation
    /// removed them): each stream goes back to its version before the
    /// first of them, and a stream left with no event at all goes.
    /// `sealed`: the records of `segment` as its index file gives them,
    /// if the streams hold that segment as parts.
    pub fn truncate_from(&mut self, segment: u32, offset: u32, sealed: Option<&SegmentIndex>) {
        self.streams.retain(|name, index| {
            let first_gone = index.parts.partition_point(|part| part.segment < segment);
            if first_gone < index.parts.len() {
                // Every record is after the parts: the cut ends them all.
                let gone = index.parts.split_off(first_gone);
                // The cut segment's own part comes back as records, cut
                // below; the rest of the stream goes whole.
                let cut = gone[0].segment == segment;
                let after = match gone.get(usize::from(cut)) {
                    Some(part) => part.first_version,
                    None => {
                        (index.records.first()).map_or(index.version + 1, |next| next.first_version)
                    }
                };
                index.records.clear();
                index.version = after - 1;
                if cut {
                    let sealed = sealed.expect("the index of a sealed segment cut");
                    index.records = locations(sealed, name, segment);
                    debug_assert_eq!(
                        index.records.first().map(|first| first.first_version),
                        Some(gone[0].first_version),
                        "the index file holds the part's records"
                    );
                }
            }
            let kept = index
                .records
                .partition_point(|location| location.place() < (segment, offset));
            if let Some(first_removed) = index.records.get(kept) {
                index.version = first_removed.first_version - 1;
                index.records.truncate(kept);
            }
            let version = index.version;
            index.ids.retain(|_, id_version| *id_version <= version);
            index.version > 0
        });
    }

    pub fn names_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.streams
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// The records of `stream` in the segment `segment` that `index` indexes,
/// as locations, in version order (none if it has none there).
pub(crate) fn locations(index: &SegmentIndex, stream: &str, segment: u32) -> Vec<Location> {
    let Ok(at) = (index.streams).binary_search_by(|entry| entry.name.as_str().cmp(stream)) else {
        return Vec::new();
    };
    (index.streams[at].records.iter())
        .map(|record| Location {
            first_version: record.first_version,
            segment,
            offset: index.offsets[record.ordinal as usize],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! An index that holds sealed segments as parts answers as one that
    //! holds every record, once its parts are read through the segments'
    //! indexes.

    use super::*;
    use crate::format::{IndexedRecord, SegmentIndex, StreamRecords};
    use proptest::prelude::*;

    const STREAMS: [&str; 3] = ["a", "b", "c"];

    /// A log: each record's stream, event count and segment (rising).
    #[derive(Debug, Clone)]
    struct Shape {
        records: Vec<(usize, u32, u32)>,
    }

    fn shape() -> impl Strategy<Value = Shape> {
        prop::collection::vec(
            (0..STREAMS.len(), 1..4u32, prop::bool::weighted(0.2)),
            1..40,
        )
        .prop_map(|draws| {
            let mut segment = 0;
            let records = (draws.into_iter().enumerate())
                .map(|(at, (stream, count, roll))| {
                    segment += u32::from(roll && at > 0);
                    (stream, count, segment)
                })
                .collect();
            Shape { records }
        })
    }

    /// Every record pushed, and each segment's index as its file holds it.
    fn build(shape: &Shape) -> (Index, Vec<SegmentIndex>) {
        let mut index = Index::default();
        let mut segments: Vec<SegmentIndex> = Vec::new();
        let mut streams: Vec<Vec<StreamRecords>> = Vec::new();
        for (seq, &(stream, count, segment)) in (1..).zip(&shape.records) {
            if segments.len() <= segment as usize {
                segments.push(SegmentIndex {
                    first_seq: seq,
                    segment_len: 0,
                    last_record_crc: 0,
                    offsets: Vec::new(),
                    streams: Vec::new(),
                });
                streams.push(Vec::new());
            }
            let sealed = &mut segments[segment as usize];
            let name = STREAMS[stream];
            let location = Location {
                first_version: index.version(name) + 1,
                segment,
                offset: sealed.segment_len as u32,
            };
            let ordinal = sealed.offsets.len() as u32;
            sealed.offsets.push(location.offset);
            sealed.segment_len += 50 + u64::from(count);
            index.push(name, count, location);
            let entries = &mut streams[segment as usize];
            let entry = match entries.iter().position(|entry| entry.name == name) {
                Some(at) => &mut entries[at],
                None => {
                    entries.push(StreamRecords {
                        name: name.into(),
                        last_version: 0,
                        records: Vec::new(),
                        ids: Vec::new(),
                    });
                    entries.last_mut().expect("just pushed")
                }
            };
            entry.records.push(IndexedRecord {
                first_version: location.first_version,
                ordinal,
            });
            entry.last_version = index.version(name);
        }
        for (sealed, mut entries) in segments.iter_mut().zip(streams) {
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            sealed.streams = entries;
        }
        (index, segments)
    }

    /// Each stream's version and records, parts read through `segments`.
    fn expanded(index: &Index, segments: &[SegmentIndex]) -> Vec<(String, u64, Vec<Location>)> {
        (index.streams.iter())
            .map(|(name, stream)| {
                let mut records: Vec<Location> = (stream.parts.iter())
                    .flat_map(|part| {
                        locations(&segments[part.segment as usize], name, part.segment)
                    })
                    .collect();
                records.extend(&stream.records);
                (name.clone(), stream.version, records)
            })
            .collect()
    }

    proptest! {
        #[test]
        fn parts_answer_as_the_records_they_stand_for(
            shape in shape(),
            sealed_draw in 0..8u32,
            cut_draw in 0..64usize,
            purge_draw in 0..8u32,
        ) {
            let (all, segments) = build(&shape);
            let (mut parted, _) = build(&shape);
            let last = segments.len() as u32 - 1;
            let sealed = sealed_draw % (last + 1);
            for id in 0..sealed {
                parted.seal_segment(id);
            }
            let want = expanded(&all, &segments);
            prop_assert_eq!(&expanded(&parted, &segments), &want);
            // Where a version is, and what a purge keeps.
            for (name, stream) in &all.streams {
                let other = &parted.streams[name];
                prop_assert_eq!(stream.first_version(), other.first_version());
                for version in 1..=stream.version {
                    let holding = stream.records[stream.entry_holding(version)].segment;
                    let found = match other.entry(other.entry_holding(version)) {
                        Entry::Part(part) => part.segment,
                        Entry::Record(location) => location.segment,
                    };
                    prop_assert_eq!(holding, found, "version {} of {}", version, name);
                }
            }
            let purge = purge_draw % (last + 1);
            prop_assert_eq!(all.versions_before_segment(purge), parted.versions_before_segment(purge));
            // A truncation at a record's start, or at a segment's.
            let records: Vec<Location> = want.iter().flat_map(|(_, _, records)| records.clone()).collect();
            let (segment, offset) = match records.get(cut_draw % (records.len() + 3)) {
                Some(location) => (location.segment, location.offset),
                None => (cut_draw as u32 % (last + 1), 0),
            };
            let cut_sealed = (segment < sealed).then(|| &segments[segment as usize]);
            let (mut all_cut, mut parted_cut) = (all, parted);
            all_cut.truncate_from(segment, offset, None);
            parted_cut.truncate_from(segment, offset, cut_sealed);
            prop_assert_eq!(expanded(&parted_cut, &segments), expanded(&all_cut, &segments));
            all_cut.drop_segments_before(purge);
            parted_cut.drop_segments_before(purge);
            prop_assert_eq!(expanded(&parted_cut, &segments), expanded(&all_cut, &segments));
        }
    }
}
