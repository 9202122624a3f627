//! Filters on the whole log: `read_all_filtered` and `subscribe_filtered`
//! take the records of matching streams and, of those, the events of
//! matching types (KurrentDB's filtered `$all`).
//!
//! `$all` is history (SPEC 14, amended 2026-12-03): a reader of the whole
//! log gets every event until a purge removes its segment, whatever
//! metadata or deletion its stream has since, so that a projection rebuilt
//! from the start sees what the live one saw. Metadata and deletions
//! govern stream reads, and a whole-log read only when its filter asks for
//! them ([`Filter::applying_metadata`]): then it keeps only what each
//! stream's metadata and deletion show as the read runs.
//!
//! A record is filtered before its data is copied: the stream is read from
//! the batch's head, and an event whose type (or version, or time) is not
//! kept is passed over in place ([`Keep::lend`]), and one kept is lent to
//! the reader, copied only for a reader that returns it ([`Keep::commit`]).

use std::collections::BTreeMap;

use crate::format::{EventRef, Record, visit_batch_where};

use super::commit::{Commit, CommitRef};
use super::group::Published;
use super::streams::Shown;

/// Which records and events a filtered read of the whole log returns.
/// Every condition added must hold: `Filter::all().stream_prefix("order-")
/// .event_type("shipped")` keeps the `shipped` events of `order-` streams.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    stream_prefixes: Vec<String>,
    types: Vec<TypeMatch>,
    /// Each stream's metadata and deletion applied, as stream reads apply
    /// them; without it the read is history.
    applying_metadata: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum TypeMatch {
    Exact(String),
    Prefix(String),
}

impl Filter {
    /// Matches every event.
    pub fn all() -> Filter {
        Filter::default()
    }

    /// And the stream's name starts with `prefix`.
    pub fn stream_prefix(mut self, prefix: &str) -> Filter {
        self.stream_prefixes.push(prefix.to_owned());
        self
    }

    /// And the event's type is exactly `event_type`.
    pub fn event_type(mut self, event_type: &str) -> Filter {
        self.types.push(TypeMatch::Exact(event_type.to_owned()));
        self
    }

    /// And the event's type starts with `prefix`.
    pub fn event_type_prefix(mut self, prefix: &str) -> Filter {
        self.types.push(TypeMatch::Prefix(prefix.to_owned()));
        self
    }

    /// And only the events each stream's metadata and deletion show, as
    /// `read` shows them at the moment each record is read. Without it a
    /// read of the whole log is history: every event until its segment is
    /// purged.
    pub fn applying_metadata(mut self) -> Filter {
        self.applying_metadata = true;
        self
    }

    /// Whether [`Filter::applying_metadata`] was asked for.
    pub fn applies_metadata(&self) -> bool {
        self.applying_metadata
    }

    /// Whether records of `stream` pass the stream conditions (every
    /// prefix given). Public for tools that read segment files themselves
    /// (`durlog tail --follow`) and must filter as the log does.
    pub fn keeps_stream(&self, stream: &str) -> bool {
        self.stream_prefixes
            .iter()
            .all(|prefix| stream.starts_with(prefix.as_str()))
    }

    /// Whether events of `event_type` pass the type conditions (every
    /// exact type and prefix given). Public as [`Filter::keeps_stream`].
    pub fn keeps_type(&self, event_type: &str) -> bool {
        self.types.iter().all(|matching| match matching {
            TypeMatch::Exact(wanted) => event_type == wanted,
            TypeMatch::Prefix(prefix) => event_type.starts_with(prefix.as_str()),
        })
    }
}

/// What a reader of the whole log keeps of each record: the events its
/// filter matches and, if the filter applies metadata, that their stream's
/// metadata shows.
pub(crate) struct Keep<'a> {
    filter: &'a Filter,
    /// The streams whose metadata or deletion hides events; the others
    /// show them all.
    shown: BTreeMap<String, Shown>,
}

impl<'a> Keep<'a> {
    /// Everything `filter` matches; if it applies metadata, as `state`'s
    /// tables show it now.
    pub(crate) fn new(filter: &'a Filter, state: &Published, now: impl Fn() -> i64) -> Keep<'a> {
        if !filter.applies_metadata() {
            return Keep::unshown(filter);
        }
        let shown = state
            .tables
            .streams
            .keys()
            .map(|stream| (stream.clone(), state.shown(stream, &now)))
            .collect();
        Keep { filter, shown }
    }

    /// What `filter` matches, no stream hiding anything (the reader takes
    /// the tables into account itself, or none has an entry).
    pub(crate) fn unshown(filter: &'a Filter) -> Keep<'a> {
        Keep {
            filter,
            shown: BTreeMap::new(),
        }
    }

    /// The record's commit with the events kept, `None` if none is; an
    /// error if it is not the record with `seq`, or its batch is damaged.
    pub(crate) fn commit(&self, record: &Record<'_>, seq: u64) -> Result<Option<Commit>, String> {
        let mut events = Vec::new();
        let commit = self.lend(record, seq, &mut events)?;
        Ok(commit.map(|commit| commit.to_commit()))
    }

    /// [`Keep::commit`], borrowed from the record (`events` holds the
    /// events kept; it is cleared first).
    pub(crate) fn lend<'r: 'e, 'e>(
        &self,
        record: &Record<'r>,
        seq: u64,
        events: &'e mut Vec<EventRef<'r>>,
    ) -> Result<Option<CommitRef<'e>>, String> {
        if record.seq != seq {
            return Err(format!(
                "record holds seq {} in {} bytes, the log expects seq {seq}",
                record.seq, record.len
            ));
        }
        events.clear();
        // Set by the stream's check, which comes before any event's.
        let shown = std::cell::Cell::new(Shown::ALL);
        let head = visit_batch_where(
            record.payload,
            |stream| {
                if let Some(rules) = self.shown.get(stream) {
                    shown.set(*rules);
                }
                self.filter.keeps_stream(stream)
            },
            |version, event_type, at| {
                shown.get().shows(version, at) && self.filter.keeps_type(event_type)
            },
            |_, event| events.push(event),
        )
        .map_err(|error| error.to_string())?;
        let Some(head) = head.filter(|_| !events.is_empty()) else {
            return Ok(None);
        };
        let events: &'e [EventRef<'r>] = events;
        Ok(Some(CommitRef {
            seq,
            stream: head.stream,
            first_version: head.first_version,
            events,
        }))
    }
}
