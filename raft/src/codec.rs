//! A Raft entry as a durlog event: postcard (serde, a compact and stable
//! wire format) for the bytes, the entry's kind as the event type so that
//! `durlog dump` and `durlog tail` show what each record is.
//!
//! Every entry is one record of the stream [`STREAM`], holding one event.
//! As that is the log's only stream, its version equals the record's seq,
//! which the store checks with `Expected::Exact` at every append.

use durlog::Event;
use openraft::entry::RaftPayload;
use openraft::{RaftLogId, RaftTypeConfig};

use crate::Error;

/// The one stream of a Raft log.
pub const STREAM: &str = "raft";

/// The event type of an entry: `blank`, `membership` or `normal`.
pub fn event_type<C: RaftTypeConfig>(entry: &C::Entry) -> &'static str {
    if entry.is_blank() {
        "blank"
    } else if entry.get_membership().is_some() {
        "membership"
    } else {
        "normal"
    }
}

/// The event that stores `entry`.
pub fn encode<C: RaftTypeConfig>(entry: &C::Entry) -> Result<Event, Error> {
    let data = postcard::to_allocvec(entry).map_err(Error::Codec)?;
    Ok(Event::new(event_type::<C>(entry), data))
}

/// The entry stored in record `seq` as `data`, checked to have the index
/// the mapping expects there.
pub fn decode<C: RaftTypeConfig>(seq: u64, data: &[u8], index: u64) -> Result<C::Entry, Error> {
    let entry: C::Entry = postcard::from_bytes(data).map_err(Error::Codec)?;
    let found = entry.get_log_id().index;
    if found != index {
        return Err(Error::Mismatch {
            seq,
            expected_index: index,
            found_index: found,
        });
    }
    Ok(entry)
}
