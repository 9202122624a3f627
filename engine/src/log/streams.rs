//! What event-sourcing users keep beside a stream's events: its metadata
//! (a maximum count, a maximum age, a truncate-before version), its
//! deletion (soft or hard), and the positions of named consumers.
//!
//! Both tables live in the log's directory (`durlog.streams`,
//! `durlog.consumers`, FORMAT.md "Stream metadata and consumer
//! positions"), each replaced whole and atomically through the same
//! machinery as the state file, under the tables' own lock (`Rank::Tables`), and
//! published in memory once durable. Stream reads apply them at once: a
//! stream's events outside what its metadata and deletion show are never
//! returned ([`Shown`]) by `read` and `read_backward`; `read_all*` and
//! subscriptions apply them only when their filter asks
//! (`Filter::applying_metadata`: `$all` is history). Space comes back only as it does for every record: whole sealed
//! segments, by a purge or the retention. Nothing here rewrites a segment.

use std::collections::BTreeMap;

use crate::error::Error;
use crate::format::{
    CONSUMERS_FILE_NAME, CONSUMERS_TEMP_NAME, Deleted, MAX_NAME_BYTES, STREAMS_FILE_NAME,
    STREAMS_TEMP_NAME, StreamEntry, StreamMetadata, encode_consumers, encode_streams,
};
use crate::recovery::{StateWrite, replace_file};
use crate::sync::lock;

use super::Log;
use super::group::Published;

/// How [`Log::delete_stream`] deletes a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// The stream reads as empty and `streams()` leaves it out; its
    /// version stays, and a later append (with `Expected::Exact(version)`
    /// or `Any`) continues its versions and shows again from there.
    Soft,
    /// The stream reads as empty, `streams()` leaves it out, and every
    /// later append to it fails with `Error::StreamDeleted`. For good.
    Hard,
}

/// Which of a stream's events its reads show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The first version shown.
    pub from_version: u64,
    /// Events stamped before this (unix nanoseconds) are not shown.
    pub not_before: Option<i64>,
}

impl Shown {
    pub const ALL: Shown = Shown {
        from_version: 1,
        not_before: None,
    };

    /// What `entry` shows of a stream at `version`, with the log's clock
    /// reading `now` (asked only if the metadata has a maximum age).
    pub fn of(entry: &StreamEntry, version: u64, now: impl FnOnce() -> i64) -> Shown {
        let metadata = &entry.metadata;
        let by_count = metadata
            .max_count
            .map_or(1, |count| version.saturating_sub(count).saturating_add(1));
        let by_deletion = match entry.deleted {
            Some(Deleted::Soft { at_version }) => at_version.saturating_add(1),
            // Nothing, ever: no version reaches this.
            Some(Deleted::Hard) => u64::MAX,
            None => 1,
        };
        let from_version = [by_count, metadata.truncate_before.unwrap_or(1), by_deletion]
            .into_iter()
            .max()
            .expect("not empty")
            .max(1);
        let not_before = metadata.max_age.map(|age| {
            let age = i64::try_from(age.as_nanos()).unwrap_or(i64::MAX);
            now().saturating_sub(age)
        });
        Shown {
            from_version,
            not_before,
        }
    }

    pub fn shows(&self, version: u64, at: i64) -> bool {
        version >= self.from_version && self.not_before.is_none_or(|not_before| at >= not_before)
    }
}

impl Published {
    /// What `stream`'s reads show now.
    pub(crate) fn shown(&self, stream: &str, now: impl FnOnce() -> i64) -> Shown {
        match self.tables.streams.get(stream) {
            None => Shown::ALL,
            Some(entry) => Shown::of(entry, self.index.version(stream), now),
        }
    }

    /// Whether `streams()` leaves `stream` out: deleted hard, or soft
    /// with nothing appended since.
    pub(crate) fn is_deleted(&self, stream: &str) -> bool {
        match self
            .tables
            .streams
            .get(stream)
            .and_then(|entry| entry.deleted)
        {
            Some(Deleted::Hard) => true,
            Some(Deleted::Soft { at_version }) => self.index.version(stream) <= at_version,
            None => false,
        }
    }

    pub(crate) fn is_hard_deleted(&self, stream: &str) -> bool {
        self.tables
            .streams
            .get(stream)
            .is_some_and(|entry| entry.deleted == Some(Deleted::Hard))
    }
}

impl Log {
    /// Sets `stream`'s metadata (replacing what it had), durably before it
    /// returns; reads honour it at once. A stream need not exist yet. A
    /// hard-deleted stream's metadata is final: a change is refused
    /// (`StreamDeleted`), setting what it has is not. A maximum age is
    /// kept in nanoseconds (u64): one longer than that (584 years) is kept
    /// as `u64::MAX` nanoseconds, which reads alike.
    pub fn set_stream_metadata(
        &self,
        stream: &str,
        mut metadata: StreamMetadata,
    ) -> Result<(), Error> {
        check_name(stream)?;
        // The table holds u64 nanoseconds, and its encoder checks that it
        // reads back what it was given. Reads clamp the age to i64
        // nanoseconds anyway, so the clamp changes no read.
        metadata.max_age = metadata
            .max_age
            .map(|age| age.min(std::time::Duration::from_nanos(u64::MAX)));
        self.change_streams(stream, |entry, _version| {
            entry.metadata = metadata;
        })
    }

    /// `stream`'s metadata (the default, nothing limited, if it has none).
    pub fn stream_metadata(&self, stream: &str) -> StreamMetadata {
        let shared = lock(&self.shared);
        let entry = shared.state.tables.streams.get(stream);
        entry
            .map(|entry| entry.metadata.clone())
            .unwrap_or_default()
    }

    /// How `stream` is deleted, if it reads as deleted now: `Hard` for
    /// good, `Soft` until its next append.
    pub fn stream_deletion(&self, stream: &str) -> Option<Deletion> {
        let shared = lock(&self.shared);
        let state = &shared.state;
        match state.tables.streams.get(stream)?.deleted? {
            Deleted::Hard => Some(Deletion::Hard),
            Deleted::Soft { .. } if state.is_deleted(stream) => Some(Deletion::Soft),
            Deleted::Soft { .. } => None,
        }
    }

    /// Deletes `stream` (see [`Deletion`]), durably before it returns. A
    /// stream that does not exist yet may be deleted too; a hard deletion
    /// is final (a second one is a no-op, a soft one after it is refused).
    pub fn delete_stream(&self, stream: &str, deletion: Deletion) -> Result<(), Error> {
        check_name(stream)?;
        self.change_streams(stream, |entry, version| {
            entry.deleted = Some(match deletion {
                Deletion::Soft => Deleted::Soft {
                    at_version: version,
                },
                Deletion::Hard => Deleted::Hard,
            });
        })
    }

    /// Changes `stream`'s entry by `change` (given the stream's version):
    /// the table written durably, then published.
    fn change_streams(
        &self,
        stream: &str,
        change: impl FnOnce(&mut StreamEntry, u64),
    ) -> Result<(), Error> {
        self.writable()?;
        let _file = lock(&self.tables_file);
        let mut streams = {
            let shared = lock(&self.shared);
            let state = &shared.state;
            let mut streams = state.tables.streams.clone();
            let entry = streams.entry(stream.to_owned()).or_default();
            let before = entry.clone();
            change(entry, state.index.version(stream));
            // Final: deleting it hard again changes nothing and is not
            // refused; it writes the table all the same, as every change
            // does, so that a retry of one that failed is durable.
            if state.is_hard_deleted(stream) && *entry != before {
                return Err(Error::StreamDeleted {
                    stream: stream.to_owned(),
                });
            }
            if *entry == StreamEntry::default() {
                streams.remove(stream);
            }
            streams
        };
        let bytes = encode_streams(&streams);
        let written = self.replace_table(STREAMS_FILE_NAME, STREAMS_TEMP_NAME, &bytes);
        if published_anyway(&written) {
            let any = !streams.is_empty();
            std::mem::swap(&mut lock(&self.shared).state.tables.streams, &mut streams);
            self.feed.set_stream_rules(any);
        }
        written.map_err(|error| Error::Io(error.into_io()))
    }

    /// The last seq consumer `name` recorded as handled, if it ever did.
    pub fn consumer_position(&self, name: &str) -> Option<u64> {
        lock(&self.shared).state.tables.consumers.get(name).copied()
    }

    /// Records that consumer `name` has handled every record up to `seq`,
    /// durably before it returns (a crash at any point leaves the position
    /// before or after). A position never moves backwards: a `seq` below
    /// the one recorded changes nothing; one past the log's last seq is
    /// refused (`PositionAhead`). (A truncation is the exception: it takes
    /// back every position past its last seq, whose records are gone and
    /// whose seqs will be used again; so does Open, past the last seq it
    /// recovered.)
    pub fn record_consumer_position(&self, name: &str, seq: u64) -> Result<(), Error> {
        if name.is_empty() || name.len() > MAX_NAME_BYTES {
            return Err(Error::ConsumerName {
                name: name.to_owned(),
            });
        }
        self.writable()?;
        let mut file = lock(&self.tables_file);
        let mut consumers = {
            let shared = lock(&self.shared);
            let last_seq = shared.state.last_seq;
            if seq > last_seq {
                return Err(Error::PositionAhead {
                    name: name.to_owned(),
                    seq,
                    last_seq,
                });
            }
            let consumers = &shared.state.tables.consumers;
            let recorded = consumers.get(name).copied();
            // Nothing to write, unless memory may be ahead of the disk.
            if recorded.is_some_and(|recorded| recorded >= seq) && !file.consumers_unsure {
                return Ok(());
            }
            let mut consumers = consumers.clone();
            consumers.insert(
                name.to_owned(),
                recorded.map_or(seq, |recorded| recorded.max(seq)),
            );
            consumers
        };
        self.write_consumers(&mut file, &mut consumers)
    }

    /// A truncation's part, under the tables' lock: every position past
    /// `last_seq` taken back to it, durably.
    pub(super) fn take_back_positions(&self, last_seq: u64) -> std::io::Result<()> {
        let mut file = lock(&self.tables_file);
        let mut consumers = lock(&self.shared).state.tables.consumers.clone();
        if !take_back(&mut consumers, last_seq) {
            return Ok(());
        }
        self.write_consumers(&mut file, &mut consumers)
            .map_err(|error| match error {
                Error::Io(error) => error,
                other => std::io::Error::other(other.to_string()),
            })
    }

    fn write_consumers(
        &self,
        file: &mut TablesFile,
        consumers: &mut BTreeMap<String, u64>,
    ) -> Result<(), Error> {
        let bytes = encode_consumers(consumers);
        let written = self.replace_table(CONSUMERS_FILE_NAME, CONSUMERS_TEMP_NAME, &bytes);
        match &written {
            Ok(()) => file.consumers_unsure = false,
            Err(_) if published_anyway(&written) => file.consumers_unsure = true,
            // The disk as it was before: no surer than it was.
            Err(_) => {}
        }
        if published_anyway(&written) {
            std::mem::swap(&mut lock(&self.shared).state.tables.consumers, consumers);
        }
        written.map_err(|error| Error::Io(error.into_io()))
    }

    fn replace_table(&self, name: &str, temp: &str, bytes: &[u8]) -> Result<(), StateWrite> {
        let (vfs, dir) = (self.settings.vfs.as_ref(), self.settings.dir.as_path());
        replace_file(vfs, dir, name, temp, bytes)
    }
}

/// What the writer of the tables knows beyond their contents (under
/// `Log::tables_file`).
#[derive(Debug, Default)]
pub(super) struct TablesFile {
    /// The last replacement of the consumers' table failed after its
    /// rename: memory holds the new positions, the disk maybe the old.
    /// A position recorded again must then be written, not skipped as
    /// already recorded. (Every change to the streams' table writes.)
    consumers_unsure: bool,
}

/// Takes every position past `last_seq` back to it; whether any moved.
pub(super) fn take_back(consumers: &mut BTreeMap<String, u64>, last_seq: u64) -> bool {
    let mut moved = false;
    for seq in consumers.values_mut().filter(|seq| **seq > last_seq) {
        *seq = last_seq;
        moved = true;
    }
    moved
}

fn check_name(stream: &str) -> Result<(), Error> {
    if stream.len() > MAX_NAME_BYTES {
        return Err(Error::NameTooLong {
            what: "stream name",
            len: stream.len(),
        });
    }
    Ok(())
}

/// Whether a table's replacement is published in memory: when done, and
/// when maybe done (renamed, the directory's sync failed), so that the
/// next write, from it, never takes back what the disk may hold.
fn published_anyway(written: &Result<(), StateWrite>) -> bool {
    !matches!(written, Err(StateWrite::Before(_)))
}
