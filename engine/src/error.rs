//! The engine's error type: what the world did (I/O, damage, conflicts,
//! quota) kept apart from what the caller asked for that cannot be done.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The expected version of a stream for an append (optimistic concurrency,
/// with the conventions of event stores such as EventStoreDB/KurrentDB).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expected {
    /// No check.
    Any,
    /// The stream must not exist yet (version 0).
    NoStream,
    /// The stream must have at least one event.
    StreamExists,
    /// The stream must be at exactly this version; `Exact(0)` is `NoStream`.
    Exact(u64),
}

impl Expected {
    /// Whether a stream at version `current` satisfies this expectation.
    pub fn matches(self, current: u64) -> bool {
        match self {
            Expected::Any => true,
            Expected::NoStream => current == 0,
            Expected::StreamExists => current >= 1,
            Expected::Exact(version) => current == version,
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Any => f.write_str("any version"),
            Expected::NoStream => f.write_str("no stream"),
            Expected::StreamExists => f.write_str("an existing stream"),
            Expected::Exact(version) => write!(f, "version {version}"),
        }
    }
}

/// Everything that can go wrong in the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The stream is not at the expected version; nothing was written.
    #[error(
        "version conflict on stream {stream:?}: expected {expected}, but it is at version {actual}; re-read the stream and retry"
    )]
    VersionConflict {
        /// The stream appended to.
        stream: String,
        /// What the caller expected.
        expected: Expected,
        /// The stream's version at the time of the check.
        actual: u64,
    },

    /// The append would take the log past its quota; nothing was written.
    #[error(
        "quota exceeded: this append would grow the log to {needed} bytes, over its limit of {limit}; reopen with a higher Options::max_bytes to resume writes"
    )]
    Quota {
        /// `Options::max_bytes`.
        limit: u64,
        /// The size the log would have reached.
        needed: u64,
    },

    /// The log was closed: a `Subscription` returns it once its log is
    /// closed (or dropped) and every record acknowledged before that was
    /// delivered. No method of `Log` returns it (`close` takes the log by
    /// value).
    #[error("the log is closed")]
    Closed,

    /// A failed write or sync could not be cut back durably, so the file may
    /// hold bytes nobody acknowledged: appends are refused until reopen.
    #[error(
        "the log refuses appends: a failed write or sync could not be undone durably; reopen the log to recover"
    )]
    Poisoned,

    /// Acknowledged bytes are damaged, or the directory's structure is wrong.
    #[error("corrupt log: {file} at offset {offset}: {reason}; the log was left untouched")]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Where in it the damage starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },

    /// Another process, or another `Log` in this one, has the directory
    /// open for writing (SPEC section 9): one writer per log.
    #[error("log {} is in use by another process or Log", dir.display())]
    Locked {
        /// The log's directory.
        dir: PathBuf,
    },

    /// An append to a log opened with `Log::open_read_only`.
    #[error("the log in {dir} was opened read-only; open it with Log::open to append")]
    ReadOnly {
        /// The log's directory.
        dir: PathBuf,
    },

    /// A read of records that a purge removed (`Log::purge_before`, or
    /// the retention), or a truncation back past them.
    #[error("records before seq {first_seq} were purged: the log keeps seq {first_seq} and later")]
    Purged {
        /// The seq of the first record the log still keeps.
        first_seq: u64,
    },

    /// A subscription delivered records after `seq` that a truncation
    /// (`Log::truncate_after`) then removed: they are not the log's any
    /// more. The subscription goes on from `seq + 1`.
    #[error(
        "records after seq {seq} that this subscription delivered were removed by a truncation; it goes on from seq {}", seq + 1
    )]
    Truncated {
        /// The last seq the truncation kept.
        seq: u64,
    },

    /// An operating-system error (the message names the path).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),

    /// `append` with no events.
    #[error("append to stream {stream:?} with no events: a batch needs at least one")]
    EmptyBatch {
        /// The stream appended to.
        stream: String,
    },

    /// An append to the stream named "": a stream needs a name (an empty
    /// one reads as nothing in every listing and command line).
    #[error("append to the stream named \"\": a stream needs a name of at least one byte")]
    EmptyStreamName,

    /// A stream name or event type longer than 65535 bytes.
    #[error("{what} is {len} bytes, over the limit of 65535")]
    NameTooLong {
        /// "stream name" or "event type".
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },

    /// An append to a stream that was hard-deleted (`Log::delete_stream`
    /// with `Deletion::Hard`): it takes no event, ever again.
    #[error("stream {stream:?} was deleted for good (hard delete); it takes no more events")]
    StreamDeleted {
        /// The stream appended to.
        stream: String,
    },

    /// A consumer's name that is empty or longer than 65535 bytes.
    #[error("consumer name {name:?} is empty or longer than 65535 bytes")]
    ConsumerName {
        /// The name given.
        name: String,
    },

    /// A consumer position recorded past the log's last seq: it names no
    /// record, only one that will be written later, which the consumer
    /// would then skip.
    #[error("consumer {name:?} cannot record seq {seq}: the log's last seq is {last_seq}")]
    PositionAhead {
        /// The consumer.
        name: String,
        /// The seq given.
        seq: u64,
        /// The log's last seq.
        last_seq: u64,
    },

    /// The record for this append would exceed the u32 payload limit.
    #[error(
        "append to stream {stream:?} would make a record payload of {bytes} bytes, over the limit of 4294967295"
    )]
    RecordTooLarge {
        /// The stream appended to.
        stream: String,
        /// The payload size it would have had.
        bytes: u64,
    },
}

impl Error {
    /// A copy for a second caller: `Io` errors keep their kind and message.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::VersionConflict {
                stream,
                expected,
                actual,
            } => Error::VersionConflict {
                stream: stream.clone(),
                expected: *expected,
                actual: *actual,
            },
            Error::Quota { limit, needed } => Error::Quota {
                limit: *limit,
                needed: *needed,
            },
            Error::Closed => Error::Closed,
            Error::Poisoned => Error::Poisoned,
            Error::Corrupt {
                file,
                offset,
                reason,
            } => Error::Corrupt {
                file: file.clone(),
                offset: *offset,
                reason: reason.clone(),
            },
            Error::ReadOnly { dir } => Error::ReadOnly { dir: dir.clone() },
            Error::Locked { dir } => Error::Locked { dir: dir.clone() },
            Error::Purged { first_seq } => Error::Purged {
                first_seq: *first_seq,
            },
            Error::Truncated { seq } => Error::Truncated { seq: *seq },
            Error::Io(error) => Error::Io(io::Error::new(error.kind(), error.to_string())),
            Error::StreamDeleted { stream } => Error::StreamDeleted {
                stream: stream.clone(),
            },
            Error::ConsumerName { name } => Error::ConsumerName { name: name.clone() },
            Error::PositionAhead {
                name,
                seq,
                last_seq,
            } => Error::PositionAhead {
                name: name.clone(),
                seq: *seq,
                last_seq: *last_seq,
            },
            Error::EmptyBatch { stream } => Error::EmptyBatch {
                stream: stream.clone(),
            },
            Error::EmptyStreamName => Error::EmptyStreamName,
            Error::NameTooLong { what, len } => Error::NameTooLong { what, len: *len },
            Error::RecordTooLarge { stream, bytes } => Error::RecordTooLarge {
                stream: stream.clone(),
                bytes: *bytes,
            },
        }
    }
}
