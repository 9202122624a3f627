//! `durlog delete DIR STREAM [--hard]` and `durlog metadata DIR STREAM
//! [--max-count N] [--max-age SECS] [--truncate-before V]`: a stream's
//! deletion and metadata (SPEC section 14). Changing either is a writer's
//! command, like `purge`: it opens the log with `Log::open` (so while
//! another writer has the log it fails at once with `Error::Locked` and
//! changes nothing), makes one call, which is durable before it returns,
//! and only then prints one line. `metadata` with no option only shows
//! what the stream has, read-only.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use durlog::vfs::PosixVfs;
use durlog::{Deletion, Log};

use crate::error::CliError;
use crate::escape::escape;
use crate::retention::open_existing;
use crate::tables::{describe_entry, read_tables};

/// One field of `metadata`: set to a number, or cleared (`none`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    Set(u64),
    Clear,
}

impl Setting {
    /// `N` or `none`, as the command line gives it.
    pub fn parse(text: &str) -> Result<Setting, String> {
        match text {
            "none" => Ok(Setting::Clear),
            number => number.parse().map(Setting::Set).map_err(|_| {
                format!("{number:?} is neither a whole number (0 to 2^64 - 1) nor `none`")
            }),
        }
    }

    fn apply<T>(setting: Option<Setting>, field: &mut Option<T>, value: impl Fn(u64) -> T) {
        match setting {
            Some(Setting::Set(number)) => *field = Some(value(number)),
            Some(Setting::Clear) => *field = None,
            None => {}
        }
    }
}

/// What `metadata` changes: each field given replaces the stream's, each
/// left out keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetadataChange {
    pub max_count: Option<Setting>,
    /// In seconds.
    pub max_age: Option<Setting>,
    pub truncate_before: Option<Setting>,
}

impl MetadataChange {
    fn is_empty(&self) -> bool {
        *self == MetadataChange::default()
    }
}

/// `durlog delete`: deletes `stream`, soft (it reads as empty, its next
/// append continues its versions) or hard (for good).
pub fn delete(
    dir: &Path,
    stream: &str,
    hard: bool,
    output: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CliError> {
    let log = open_existing(dir, "delete", notes)?;
    let version = log.version(stream);
    let deletion = if hard { Deletion::Hard } else { Deletion::Soft };
    log.delete_stream(stream, deletion)
        .map_err(|error| CliError::log(dir, error))?;
    let name = escape(stream.as_bytes());
    let line = match deletion {
        Deletion::Hard => format!(
            "deleted stream {name} for good (hard, at version {version}): it reads as empty and refuses every later append"
        ),
        Deletion::Soft => format!(
            "deleted stream {name} (soft, at version {version}): it reads as empty until a later append, which gets version {}",
            version + 1
        ),
    };
    finish(dir, log, &line, output)
}

/// `durlog metadata`: with changes, applies them to `stream`'s metadata
/// (a writer); either way prints the stream's metadata and deletion.
pub fn metadata(
    dir: &Path,
    stream: &str,
    change: MetadataChange,
    output: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CliError> {
    if change.is_empty() {
        // Only shown: no lock, nothing changed. The open checks the
        // tables (a damaged one is refused, named).
        let log = Log::open_read_only(PosixVfs, dir).map_err(|error| CliError::log(dir, error))?;
        let line = line(dir, stream, &log);
        return writeln!(output, "{line}")
            .and_then(|()| output.flush())
            .map_err(CliError::Output);
    }
    let log = open_existing(dir, "metadata", notes)?;
    let mut metadata = log.stream_metadata(stream);
    Setting::apply(change.max_count, &mut metadata.max_count, |n| n);
    Setting::apply(change.max_age, &mut metadata.max_age, Duration::from_secs);
    Setting::apply(change.truncate_before, &mut metadata.truncate_before, |n| n);
    log.set_stream_metadata(stream, metadata)
        .map_err(|error| CliError::log(dir, error))?;
    let line = line(dir, stream, &log);
    finish(dir, log, &line, output)
}

/// `stream s (version 9): max count 5; deleted (soft, at version 7)`.
fn line(dir: &Path, stream: &str, log: &Log) -> String {
    // The deletion is only in the table; the log (open) has just read or
    // written it, so the file holds what the log holds.
    let deleted = read_tables(dir)
        .streams
        .and_then(|streams| streams.get(stream).and_then(|entry| entry.deleted));
    format!(
        "stream {} (version {}): {}",
        escape(stream.as_bytes()),
        log.version(stream),
        describe_entry(&log.stream_metadata(stream), deleted)
    )
}

/// Prints `line` (the change is durable: the call returned) and closes the
/// log.
fn finish(dir: &Path, log: Log, line: &str, output: &mut dyn Write) -> Result<(), CliError> {
    writeln!(output, "{line}")
        .and_then(|()| output.flush())
        .map_err(CliError::Output)?;
    log.close().map_err(|error| CliError::log(dir, error))
}
