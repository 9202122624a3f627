//! Appends whose retry lands once: a client that lost an append's
//! acknowledgement (a timeout, a crash before it saw the version) retries
//! with the same expected version, and if the stream already holds those
//! very events at those versions, the retry succeeds and writes nothing.
//!
//! "The same" is the events' types and data, byte for byte, in order:
//! their times are set by the log and differ between a try and its retry.
//! So two writers that append identical events without ids at one
//! expected version both succeed, and a retry cannot tell its own earlier
//! append from another writer's identical one; nor can it check events a
//! purge removed (the retry is then a version conflict).
//!
//! Events with ids need none of this: where every event of an append
//! carries an id, `append` itself takes the append for a retry when the
//! stream holds those ids (`group.rs`, `answer`), for any `Expected`, and
//! two writers of identical bytes with distinct ids are two appends.

use crate::error::{Error, Expected};
use crate::format::{EVENT_ID_BYTES, Event};
use crate::index::StreamIndex;

use super::{Log, lock};

/// Checks a retry's events at most this many times when purges or
/// truncations keep changing the log under it.
const CHECKS_MAX: usize = 8;

impl Log {
    /// As [`Log::append`], but a retry of an append that already landed
    /// succeeds: with `Expected::Exact(v)` (or `NoStream`, v = 0), if the
    /// stream's events v+1..=v+n have the same event types and data as
    /// `events`, it returns v+n and writes nothing. Any other mismatch is
    /// `VersionConflict`; `Any` and `StreamExists` behave as in `append`.
    pub fn append_idempotent(
        &self,
        stream: &str,
        expected: Expected,
        events: &[Event],
    ) -> Result<u64, Error> {
        if events.iter().all(|event| event.id().is_some()) {
            return self.append(stream, expected, events);
        }
        let base = match expected {
            Expected::Exact(version) => version,
            Expected::NoStream => 0,
            Expected::Any | Expected::StreamExists => {
                return self.append(stream, expected, events);
            }
        };
        let last = base.saturating_add(events.len() as u64);
        for _ in 0..CHECKS_MAX {
            let conflict = match self.append(stream, expected, events) {
                Err(conflict @ Error::VersionConflict { actual, .. }) if actual >= last => conflict,
                other => return other,
            };
            let changes = lock(&self.shared).state.changes;
            let landed = match self.read_forward(stream, base + 1, events.len(), false) {
                Ok(stored) => same_events(&stored, events),
                // Purged: nothing left to compare the retry with.
                Err(Error::Purged { .. }) => false,
                Err(error) => return Err(error),
            };
            // A truncation while it compared may have removed what it saw.
            if lock(&self.shared).state.changes == changes {
                return if landed { Ok(last) } else { Err(conflict) };
            }
        }
        Err(Error::VersionConflict {
            stream: stream.to_owned(),
            expected,
            actual: self.version(stream),
        })
    }
}

/// Whether `stored` are `events`: the same types and data, in order.
fn same_events(stored: &[Event], events: &[Event]) -> bool {
    stored.len() == events.len()
        && stored.iter().zip(events).all(|(stored, event)| {
            stored.event_type == event.event_type && stored.data == event.data
        })
}

/// Whether an append whose events carry `ids` is new to its stream, landed
/// already (every id there, in this order, as consecutive versions: the
/// last one given), or partly there (some ids, or all in another order).
pub(crate) enum Retried {
    New,
    Landed(u64),
    Partly,
}

/// [`Retried`] for `ids`, against the stream's published index and the
/// ids (with their versions) of its appends earlier in the forming group.
pub(crate) fn retried(
    ids: &[[u8; EVENT_ID_BYTES]],
    published: Option<&StreamIndex>,
    in_group: &[(u64, [u8; EVENT_ID_BYTES])],
) -> Retried {
    let version_of = |id: &[u8; EVENT_ID_BYTES]| {
        published
            .and_then(|index| index.ids.get(id).copied())
            .or_else(|| {
                in_group
                    .iter()
                    .find(|(_, held)| held == id)
                    .map(|&(version, _)| version)
            })
    };
    let found: Vec<Option<u64>> = ids.iter().map(version_of).collect();
    if found.iter().all(Option::is_none) {
        return Retried::New;
    }
    let first = found[0];
    let consecutive = (found.iter().enumerate())
        .all(|(index, version)| first.is_some() && *version == first.map(|v| v + index as u64));
    match (consecutive, found.last()) {
        (true, Some(Some(last))) => Retried::Landed(*last),
        _ => Retried::Partly,
    }
}
