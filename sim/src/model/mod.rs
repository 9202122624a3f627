//! The oracle's model: exactly what was acknowledged, nothing else. It
//! advances only when an append returns `Ok`, and shrinks only when a
//! purge or a truncation does (or an excuse covers a loss). A purge keeps
//! each stream's count of the events it removed: versions go on from it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

pub(crate) mod event;
pub(crate) mod tables;

pub use event::{Extras, ModelEvent};
pub use tables::{Deleted, Entry, Tables};

/// What the ids of an append's events say of it (FORMAT.md, "Extras"),
/// where every event carries one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdsSay {
    /// None of them is in the stream: the expected version decides.
    New,
    /// All of them are, in order, as consecutive versions, the last this
    /// one: a retry that landed, nothing written, whatever was expected.
    Landed(u64),
    /// Some are, or all in another order: a version conflict.
    Partly,
}

/// One acknowledged append (one record).
#[derive(Clone, Debug, Hash)]
struct Acked {
    seq: u64,
    stream: String,
    first_version: u64,
    events: usize,
    /// The record as FORMAT.md encodes it, by the oracle's own encoder
    /// (its length is the record's size).
    encoded: Vec<u8>,
}

#[derive(Clone, Debug, Hash)]
pub struct Model {
    /// Each stream's events that are kept (not purged), in version order.
    streams: BTreeMap<String, Vec<ModelEvent>>,
    /// Each stream's events a purge removed (only streams with some).
    purged: BTreeMap<String, u64>,
    /// The first seq kept (1 until a purge).
    first_seq: u64,
    /// In seq order; seqs are dense, so the last one is the log's last seq.
    appends: Vec<Acked>,
    /// The sum of the records' sizes, kept rather than summed at every step.
    size: u64,
    /// Stream metadata, deletions, consumer positions.
    pub tables: Tables,
    /// The records through this seq have been read back through the
    /// engine after a reopen (the oracle's bookkeeping, kept here because
    /// a truncation lowers it: the seqs past it are used again).
    read_back_through: u64,
    /// The golden check's encodings of index files (`is_index_file`).
    index_files: IndexFiles,
}

/// Index files as the golden check encodes them, by their segment's first
/// seq and last record's seq: those records never change while the
/// model keeps them (a truncation, the only change to a kept record,
/// forgets every encoding), so each is encoded once, not at every check
/// of the layout (1.7% of a run's instructions). Not part of the model's
/// state: it hashes as nothing.
#[derive(Clone, Debug, Default)]
struct IndexFiles(RefCell<BTreeMap<(u64, u64), Vec<u8>>>);

impl Hash for IndexFiles {
    fn hash<H: Hasher>(&self, _state: &mut H) {}
}

impl Default for Model {
    fn default() -> Model {
        Model {
            streams: BTreeMap::new(),
            purged: BTreeMap::new(),
            first_seq: 1,
            appends: Vec::new(),
            size: 0,
            tables: Tables::default(),
            read_back_through: 0,
            index_files: IndexFiles::default(),
        }
    }
}

impl Model {
    pub fn version(&self, stream: &str) -> u64 {
        self.purged_events(stream) + self.events(stream).len() as u64
    }

    /// Events of `stream` a purge removed: its first kept event's version
    /// is one more.
    pub fn purged_events(&self, stream: &str) -> u64 {
        self.purged.get(stream).copied().unwrap_or(0)
    }

    /// Each stream's version before the first kept record (streams with
    /// events purged only): what the log's state file must say.
    pub fn purged_versions(&self) -> &BTreeMap<String, u64> {
        &self.purged
    }

    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }

    pub fn last_seq(&self) -> u64 {
        self.appends
            .last()
            .map_or(self.first_seq - 1, |acked| acked.seq)
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn events(&self, stream: &str) -> &[ModelEvent] {
        self.streams.get(stream).map_or(&[], Vec::as_slice)
    }

    /// The streams `streams()` lists: those with events, but the deleted.
    pub fn stream_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .streams
            .keys()
            .chain(self.purged.keys())
            .filter(|name| !self.tables.is_deleted(name, self.version(name)))
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Every stream with events (deleted ones too).
    pub fn all_stream_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .streams
            .keys()
            .chain(self.purged.keys())
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The first version `stream`'s reads show now.
    pub fn shown_from(&self, stream: &str) -> u64 {
        self.tables.shown_from(stream, self.version(stream))
    }

    /// Bytes of the kept records with seq `from` or later.
    pub fn bytes_from(&self, from: u64) -> u64 {
        self.appends
            .iter()
            .filter(|acked| acked.seq >= from)
            .map(|acked| acked.encoded.len() as u64)
            .sum()
    }

    /// The time of the newest event of the records with seqs in `seqs`.
    pub fn newest_at(&self, seqs: std::ops::Range<u64>) -> Option<i64> {
        seqs.filter_map(|seq| self.record(seq))
            .filter_map(|(_, _, events)| events.last().map(|event| event.at))
            .max()
    }

    /// A purge made `first_seq` the first record kept: the records before
    /// it go, their events still count in their streams' versions.
    pub fn purge(&mut self, first_seq: u64) {
        debug_assert!(first_seq >= self.first_seq && first_seq <= self.last_seq() + 1);
        while self
            .appends
            .first()
            .is_some_and(|acked| acked.seq < first_seq)
        {
            let acked = self.appends.remove(0);
            let events = self.streams.get_mut(&acked.stream).expect("acked stream");
            events.drain(..acked.events);
            if events.is_empty() {
                self.streams.remove(&acked.stream);
            }
            *self.purged.entry(acked.stream).or_default() += acked.events as u64;
            self.size -= acked.encoded.len() as u64;
        }
        self.first_seq = first_seq;
        (self.index_files.0.get_mut()).retain(|&(first, _), _| first >= first_seq);
    }

    /// Records an acknowledged append: the next seq, the stream's next
    /// versions.
    pub fn acknowledge(&mut self, stream: &str, events: Vec<ModelEvent>) {
        let seq = self.last_seq() + 1;
        let first_version = self.version(stream) + 1;
        let encoded = crate::golden::encode::record(seq, stream, first_version, &events);
        self.size += encoded.len() as u64;
        self.appends.push(Acked {
            seq,
            stream: stream.to_owned(),
            first_version,
            events: events.len(),
            encoded,
        });
        self.streams
            .entry(stream.to_owned())
            .or_default()
            .extend(events);
    }

    /// Forgets every append with a seq above `last_seq`: a truncation, or
    /// acknowledged data that a fault destroyed, where the oracle allows
    /// it. Purged records stay purged.
    pub fn truncate(&mut self, last_seq: u64) {
        self.read_back_through = self.read_back_through.min(last_seq);
        self.index_files.0.get_mut().clear();
        while self
            .appends
            .last()
            .is_some_and(|acked| acked.seq > last_seq)
        {
            let acked = self.appends.pop().expect("checked");
            let events = self.streams.get_mut(&acked.stream).expect("acked stream");
            events.truncate(events.len() - acked.events);
            if events.is_empty() {
                self.streams.remove(&acked.stream);
            }
            self.size -= acked.encoded.len() as u64;
        }
    }

    /// The last seq read back through the engine after a reopen.
    pub fn read_back_through(&self) -> u64 {
        self.read_back_through
    }

    /// Every record acknowledged so far has been read back.
    pub fn read_back(&mut self) {
        self.read_back_through = self.last_seq();
    }

    /// Whether `bytes` are the index file of the sealed segment whose
    /// records are seqs `first..=last`, as `encode` gives it (called once
    /// for each such segment while the model keeps its records).
    pub fn is_index_file(
        &self,
        (first, last): (u64, u64),
        bytes: &[u8],
        encode: impl FnOnce() -> Vec<u8>,
    ) -> bool {
        let mut encoded = self.index_files.0.borrow_mut();
        encoded
            .entry((first, last))
            .or_insert_with(encode)
            .as_slice()
            == bytes
    }

    /// Every acknowledged record, in seq order, as FORMAT.md encodes it.
    pub fn encoded_records(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.appends
            .iter()
            .map(|acked| (acked.seq, acked.encoded.as_slice()))
    }

    /// The acknowledged record with `seq`: its stream, first version and
    /// events.
    pub fn record(&self, seq: u64) -> Option<(&str, u64, &[ModelEvent])> {
        let first = self.appends.first()?.seq;
        let acked = self
            .appends
            .get(usize::try_from(seq.checked_sub(first)?).ok()?)?;
        debug_assert_eq!(acked.seq, seq, "the model's seqs are dense");
        let events = self.streams.get(&acked.stream)?;
        let from = (acked.first_version - 1 - self.purged_events(&acked.stream)) as usize;
        Some((
            &acked.stream,
            acked.first_version,
            &events[from..from + acked.events],
        ))
    }

    /// What the ids of `events` say of an append of them to `stream`;
    /// `None` unless every event carries one. An id names the newest kept
    /// event of the stream that carries it (a purge or truncation forgets
    /// the ids of what it removed).
    pub fn ids_say(&self, stream: &str, events: &[ModelEvent]) -> Option<IdsSay> {
        let ids: Vec<[u8; durlog::EVENT_ID_BYTES]> = events
            .iter()
            .map(|event| event.extras.id)
            .collect::<Option<_>>()?;
        let first_kept = self.purged_events(stream) + 1;
        let kept = self.events(stream);
        let found: Vec<Option<u64>> = (ids.iter())
            .map(|id| {
                (kept.iter())
                    .rposition(|event| event.extras.id == Some(*id))
                    .map(|at| first_kept + at as u64)
            })
            .collect();
        let first = found.first().copied().flatten();
        Some(match first {
            _ if found.iter().all(Option::is_none) => IdsSay::New,
            Some(first)
                if (found.iter().enumerate())
                    .all(|(index, version)| *version == Some(first + index as u64)) =>
            {
                IdsSay::Landed(first + ids.len() as u64 - 1)
            }
            _ => IdsSay::Partly,
        })
    }

    /// The canary: changes one acknowledged byte, as a broken engine would.
    pub fn plant_canary(&mut self) -> bool {
        // An event that reads show (not hidden by its stream's metadata or
        // deletion, its time not judged within a maximum age's band).
        let shown = self.streams.iter().find(|(stream, events)| {
            let version = self.version(stream);
            !events.is_empty()
                && self.tables.entry(stream).max_age.is_none()
                && self.tables.shown_from(stream, version) <= version
        });
        let Some(stream) = shown.map(|(stream, _)| stream.clone()) else {
            return false;
        };
        let events = self.streams.get_mut(&stream).expect("found");
        events.last_mut().expect("not empty").at ^= 1;
        self.index_files.0.get_mut().clear();
        true
    }
}
