//! [`Commit`]: one record as every reader of the whole log hands it over
//! (`read_all*`, subscriptions, filters), in a file of its own so that the
//! readers (`all.rs`) and the filter that builds it (`filter.rs`) both
//! depend on it and not on each other.

use crate::format::Event;

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
