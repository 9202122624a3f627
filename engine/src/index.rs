//! The in-memory index: for each stream, its version and where each of its
//! records lies. Event payloads are never kept in memory; reads fetch them
//! from the segment files.
//!
//! One entry per record is 16 bytes, so 10 million one-event appends cost
//! about 160 MB plus the vector's growth slack, whatever the payload sizes.

use std::collections::BTreeMap;

use crate::format::EVENT_ID_BYTES;

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

/// The records of one stream, in version order.
#[derive(Debug, Default)]
pub(crate) struct StreamIndex {
    /// Version of the stream's last acknowledged event (0 if none).
    pub version: u64,
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

    /// Index of the record holding `version`, or the first record if
    /// `version` precedes it.
    pub fn record_holding(&self, version: u64) -> usize {
        self.records
            .partition_point(|location| location.first_version <= version)
            .saturating_sub(1)
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
        debug_assert!(index.records.is_empty() && version > 0);
        index.version = version;
    }

    /// Each stream's version before the first record in segment `id` or
    /// later: what a purge of the segments before `id` must keep. Streams
    /// with no event there are left out.
    pub fn versions_before_segment(&self, id: u32) -> std::collections::BTreeMap<String, u64> {
        self.streams
            .iter()
            .filter_map(|(name, index)| {
                let kept = index
                    .records
                    .partition_point(|location| location.segment < id);
                let before = index
                    .records
                    .get(kept)
                    .map_or(index.version, |location| location.first_version - 1);
                (before > 0).then(|| (name.clone(), before))
            })
            .collect()
    }

    /// Forgets the records in segments before `id` (a purge removed
    /// them); every stream keeps its version.
    pub fn drop_segments_before(&mut self, id: u32) {
        for index in self.streams.values_mut() {
            let purged = index
                .records
                .partition_point(|location| location.segment < id);
            index.records.drain(..purged);
            // A purged event's id goes with it (FORMAT.md: a retry of an
            // append a purge removed is not recognised).
            let first_kept = index
                .records
                .first()
                .map_or(index.version + 1, |location| location.first_version);
            index.ids.retain(|_, version| *version >= first_kept);
        }
    }

    /// Forgets the records at `(segment, offset)` or later (a truncation
    /// removed them): each stream goes back to its version before the
    /// first of them, and a stream left with no event at all goes.
    pub fn truncate_from(&mut self, segment: u32, offset: u32) {
        self.streams.retain(|_, index| {
            let kept = index
                .records
                .partition_point(|location| location.place() < (segment, offset));
            if let Some(first_removed) = index.records.get(kept) {
                index.version = first_removed.first_version - 1;
                index.records.truncate(kept);
                let version = index.version;
                index.ids.retain(|_, id_version| *id_version <= version);
            }
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
