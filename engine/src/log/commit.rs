//! [`Commit`]: one record as every reader of the whole log hands it over
//! (`read_all*`, subscriptions, filters), and [`CommitRef`], the same
//! borrowed (`visit_all`); in a file of their own so that the
//! readers (`all.rs`) and the filter that builds it (`filter.rs`) both
//! depend on it and not on each other.

use crate::format::{Event, EventRef};

/// One record (one append), as a reader of the whole log sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// The record's seq: its position in the whole log.
    pub seq: u64,
    /// The stream all its events belong to.
    pub stream: String,
    /// The version of its first event; the rest follow densely.
    pub first_version: u64,
    /// Its events, as `read` returns them (stream, version and time set).
    pub events: Vec<Event>,
}

/// One record as [`crate::Log::visit_all`] hands it over: a [`Commit`]
/// borrowed from the bytes the read fetched, for the length of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitRef<'a> {
    /// The record's seq: its position in the whole log.
    pub seq: u64,
    /// The stream all its events belong to.
    pub stream: &'a str,
    /// The version of its first event; the rest follow densely.
    pub first_version: u64,
    /// The events the reader's filter keeps (at least one).
    pub events: &'a [EventRef<'a>],
}

impl CommitRef<'_> {
    /// The commit, copied: what `read_all` returns.
    pub fn to_commit(&self) -> Commit {
        Commit {
            seq: self.seq,
            stream: self.stream.to_owned(),
            first_version: self.first_version,
            events: self.events.iter().map(EventRef::to_event).collect(),
        }
    }
}
