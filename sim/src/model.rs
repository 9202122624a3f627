//! The oracle's model: exactly what was acknowledged, nothing else. It
//! advances only when an append returns `Ok`.

use std::collections::BTreeMap;

/// One acknowledged event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEvent {
    pub event_type: String,
    pub data: Vec<u8>,
    pub at: i64,
}

/// One acknowledged append (one record).
#[derive(Clone, Debug)]
struct Acked {
    seq: u64,
    stream: String,
    first_version: u64,
    events: usize,
    /// The record as FORMAT.md encodes it, by the oracle's own encoder
    /// (its length is the record's size).
    encoded: Vec<u8>,
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    streams: BTreeMap<String, Vec<ModelEvent>>,
    /// In seq order; seqs are dense, so the last one is the log's last seq.
    appends: Vec<Acked>,
    /// The sum of the records' sizes, kept rather than summed at every step.
    size: u64,
}

impl Model {
    pub fn version(&self, stream: &str) -> u64 {
        self.streams
            .get(stream)
            .map_or(0, |events| events.len() as u64)
    }

    pub fn last_seq(&self) -> u64 {
        self.appends.last().map_or(0, |acked| acked.seq)
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn events(&self, stream: &str) -> &[ModelEvent] {
        self.streams.get(stream).map_or(&[], Vec::as_slice)
    }

    pub fn stream_names(&self) -> Vec<String> {
        self.streams.keys().cloned().collect()
    }

    /// Records an acknowledged append: the next seq, the stream's next
    /// versions.
    pub fn acknowledge(&mut self, stream: &str, events: Vec<ModelEvent>) {
        let seq = self.last_seq() + 1;
        let first_version = self.version(stream) + 1;
        let encoded = crate::golden::record(seq, stream, first_version, &events);
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

    /// Forgets every append with a seq above `last_seq` (acknowledged data
    /// that a fault destroyed, where the oracle allows it).
    pub fn truncate(&mut self, last_seq: u64) {
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
        let from = (acked.first_version - 1) as usize;
        Some((
            &acked.stream,
            acked.first_version,
            &events[from..from + acked.events],
        ))
    }

    /// The canary: changes one acknowledged byte, as a broken engine would.
    pub fn plant_canary(&mut self) -> bool {
        for events in self.streams.values_mut() {
            if let Some(event) = events.first_mut() {
                event.at ^= 1;
                return true;
            }
        }
        false
    }
}
