//! `durlog append DIR STREAM`: every line of the input becomes one event of
//! `STREAM` (one `Log::append` per line, the first with the expected
//! version asked for, `Expected::Any` by default), and its new
//! version is printed and flushed only after that append returned, that is
//! after the `fdatasync` covering it. A version on the output is therefore
//! a promise: it survives a crash of this process or of the machine.

use std::io::{BufRead, Write};
use std::path::Path;

use durlog::vfs::PosixVfs;
use durlog::{Event, Expected, Log, NextSegment, Options, Tail, Tuning};

use crate::error::CliError;

/// The event type `append` uses unless told otherwise.
pub const DEFAULT_EVENT_TYPE: &str = "line";

/// What to append, and where.
#[derive(Clone, Debug)]
pub struct AppendArgs<'a> {
    /// The log directory (created if missing).
    pub dir: &'a Path,
    /// The stream every line goes to.
    pub stream: &'a str,
    /// The type of every event.
    pub event_type: &'a str,
    /// What the stream's version must be before the first line. Each later
    /// line then expects the version the one before made, unless this is
    /// `Expected::Any`.
    pub expected: Expected,
}

/// `--expected`'s value: a version (0 is no stream), `no-stream`, `exists`
/// or `any`.
pub fn parse_expected(text: &str) -> Result<Expected, String> {
    match text {
        "any" => Ok(Expected::Any),
        "no-stream" => Ok(Expected::NoStream),
        "exists" => Ok(Expected::StreamExists),
        _ => text
            .parse()
            .map(Expected::Exact)
            .map_err(|_| format!("{text:?} is not a version: a number, no-stream, exists or any")),
    }
}

/// Opens the log in `args.dir` (recovering it) and appends every line of
/// `input` as one event, writing each new version to `output` as a line and
/// flushing it after the append returned. A line is the bytes up to a line
/// feed, which is not part of the event; a carriage return is kept. A
/// last line without a line feed is appended too. A note about a recovered
/// torn tail goes to `notes`. Returns the number of events appended.
pub fn run(
    args: &AppendArgs<'_>,
    options: Options,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<u64, CliError> {
    // Refused before anything is opened or made, even with no input.
    if args.stream.is_empty() {
        return Err(CliError::log(args.dir, durlog::Error::EmptyStreamName));
    }
    let log = open_writer(args.dir, options, "append", notes)?;
    let mut line = Vec::new();
    let mut appended = 0;
    let mut expected = args.expected;
    loop {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .map_err(CliError::Input)?
            == 0
        {
            return Ok(appended);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let event = Event::new(args.event_type, &line[..]);
        let version = log
            .append(args.stream, expected, std::slice::from_ref(&event))
            .map_err(|error| CliError::log(args.dir, error))?;
        appended += 1;
        if expected != Expected::Any {
            expected = Expected::Exact(version);
        }
        // Printed only now: the append returned, so the event is durable.
        writeln!(output, "{version}")
            .and_then(|()| output.flush())
            .map_err(|source| CliError::VersionNotPrinted {
                stream: args.stream.to_owned(),
                version,
                source,
            })?;
    }
}

/// Opens the log in `dir` for a writer's command (`append`, `purge`,
/// `truncate`): recovery runs, and the directory's lock is taken, so while
/// another writer has the log this fails at once with `Error::Locked`. A
/// note about a recovered torn tail goes to `notes`, prefixed with the
/// command's name. Creates the directory if it is missing.
pub(crate) fn open_writer(
    dir: &Path,
    options: Options,
    command: &str,
    notes: &mut dyn Write,
) -> Result<Log, CliError> {
    // One command per process: a next segment prepared ahead would only be
    // removed by the next process's Open, so none is.
    let tuning = Tuning::default().with(|tuning| {
        tuning.next_segment = NextSegment::CreateAtRoll;
    });
    let log = Log::open_tuned(PosixVfs, dir, options, tuning)
        .map_err(|error| CliError::log(dir, error))?;
    if let Tail::Torn {
        file,
        offset,
        bytes,
        reason,
        may_be_acknowledged,
    } = &log.recovery().tail
    {
        // Only a note: recovery did what the format promises, but the user
        // should know what was dropped, as far as the bytes tell.
        let what = if *may_be_acknowledged {
            "a record that may have been acknowledged: one flipped bit would make it valid, and nothing after it proves it was synced"
        } else {
            "an append that was never acknowledged"
        };
        let _ = writeln!(
            notes,
            "durlog {command}: recovered {}: cut a torn tail of {bytes} bytes at offset {offset} ({what}: {reason})",
            file.display()
        );
    }
    Ok(log)
}
