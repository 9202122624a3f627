//! What a failing command reports: one line, naming the path (and the offset
//! where there is one), and what to do.

use std::io;
use std::path::{Path, PathBuf};

/// A command's failure. `Display` is a single line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The log could not be opened, read or appended to.
    #[error("{}", log_message(dir, source))]
    Log {
        /// The log directory the command was given.
        dir: PathBuf,
        /// What the engine reported.
        source: durlog::Error,
    },
    /// `read` asked for events of a stream that a purge removed.
    #[error("{}", purged_message(dir, stream, *from, *first_seq, *kept))]
    Purged {
        /// The log directory the command was given.
        dir: PathBuf,
        /// The stream read.
        stream: String,
        /// The first version asked for.
        from: u64,
        /// The seq of the first record the log keeps.
        first_seq: u64,
        /// What is left of the stream: its first version kept, or its
        /// version if a purge removed every event of it.
        kept: Kept,
    },
    /// `tail --consumer`: a purge removed records after the consumer's
    /// position before it read them.
    #[error(
        "{}: consumer {name:?} handled the records up to seq {position}, but a purge removed seqs {} to {} before it read them; to go on from the first record kept, add --from {first_seq}",
        dir.display(), position + 1, first_seq - 1
    )]
    ConsumerBehind {
        /// The log directory the command was given.
        dir: PathBuf,
        /// The consumer.
        name: String,
        /// Its recorded position (0 if none).
        position: u64,
        /// The seq of the first record the log keeps.
        first_seq: u64,
    },
    /// A bookkeeping file of the log read outside the engine (`tail
    /// --follow` reads `durlog.streams` again as it follows) is damaged.
    #[error("{}: {reason}; restore it from a backup", file.display())]
    Damaged {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading standard input failed.
    #[error("reading standard input: {0}")]
    Input(io::Error),
    /// Writing standard output failed.
    #[error("writing standard output: {0}")]
    Output(io::Error),
    /// `append` made an event durable but could not print its version, and
    /// stopped there: whoever reads the output must learn the version from
    /// the log (`durlog read`).
    #[error(
        "appended version {version} of stream {stream:?} durably, but could not print it: {source}; stopped before the next line"
    )]
    VersionNotPrinted {
        /// The stream appended to.
        stream: String,
        /// The durable version that went unprinted.
        version: u64,
        /// Why the write to the output failed.
        source: io::Error,
    },
}

impl CliError {
    /// A `Log` error for `dir`.
    pub fn log(dir: &Path, source: durlog::Error) -> CliError {
        CliError::Log {
            dir: dir.to_path_buf(),
            source,
        }
    }

    /// True when standard output was closed by its reader (`durlog read ..
    /// | head`): the reader wanted no more, which is not a failure.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(error) if error.kind() == io::ErrorKind::BrokenPipe)
    }

    /// The message on one line: any line break a reason might hold becomes
    /// a space, so a script reading stderr line by line sees one error.
    pub fn one_line(&self) -> String {
        one_line(&self.to_string())
    }
}

/// What a purge left of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Its events from this version on.
    From(u64),
    /// None of its events: every one up to this version was purged.
    None(u64),
}

/// `DIR: stream "s": version 1 was purged ...`, and what to read instead.
fn purged_message(dir: &Path, stream: &str, from: u64, first_seq: u64, kept: Kept) -> String {
    let what = match kept {
        Kept::From(version) => format!(
            "its events from version {version} on are kept: read them with --from {version}"
        ),
        Kept::None(version) => format!("every one of its {version} events was purged"),
    };
    format!(
        "{}: stream {stream:?}: version {from} was purged (the log keeps seq {first_seq} and later); {what}",
        dir.display()
    )
}

/// `text` with every line break replaced by a space.
pub fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// The engine's message, prefixed with the directory unless it already
/// names it (`Corrupt` names the damaged file inside it; some I/O errors
/// name no path at all).
fn log_message(dir: &Path, source: &durlog::Error) -> String {
    let message = source.to_string();
    let dir_text = dir.display().to_string();
    if message.contains(&dir_text) {
        message
    } else {
        format!("{dir_text}: {message}")
    }
}
