//! `durlog purge DIR --before SEQ` and `durlog truncate DIR --after SEQ`:
//! the writer's commands that shrink a log (SPEC section 11). Each opens
//! the log as `append` does (`Log::open`, which takes the directory's
//! lock: while another writer has the log it fails at once with
//! `Error::Locked`, and changes nothing), makes one call, and prints one
//! line of what it removed only after that call returned, that is once the
//! change is durable.

use std::io::Write;
use std::path::Path;

use durlog::{Log, Options};

use crate::append::open_writer;
use crate::error::CliError;
use crate::words::plural;

/// `durlog purge`: removes every sealed segment all of whose records have
/// a seq below `before`, and prints what went and the first seq kept.
pub fn purge(
    dir: &Path,
    before: u64,
    output: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CliError> {
    let log = open_existing(dir, "purge", notes)?;
    let first_before = log.first_seq();
    let size_before = log.size();
    let segments_before = log.stats().segments_purged;
    let first_after = log
        .purge_before(before)
        .map_err(|error| CliError::log(dir, error))?;
    let segments = log.stats().segments_purged - segments_before;
    let mut line = format!(
        "purged {} ({}, {} bytes); first seq {first_after}",
        plural(segments, "segment"),
        plural(first_after - first_before, "record"),
        size_before - log.size()
    );
    if first_after < before && first_after <= log.last_seq() {
        line.push_str(&format!(
            "; the records from seq {first_after} on stay (a purge removes whole segments only, and never the last one)"
        ));
    }
    finish(dir, log, &line, output)
}

/// `durlog truncate`: removes every record with a seq above `after`, and
/// prints what went and the last seq kept.
pub fn truncate(
    dir: &Path,
    after: u64,
    output: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CliError> {
    let log = open_existing(dir, "truncate", notes)?;
    let last_before = log.last_seq();
    let size_before = log.size();
    // A seq at or past the last one changes nothing; passed on as the last
    // seq, since the engine computes `seq + 1`, which u64::MAX overflows.
    log.truncate_after(after.min(last_before))
        .map_err(|error| CliError::log(dir, error))?;
    let last_after = log.last_seq();
    let line = format!(
        "truncated after seq {after}: removed {} ({} bytes); last seq {last_after}",
        plural(last_before - last_after, "record"),
        size_before - log.size()
    );
    finish(dir, log, &line, output)
}

/// Opens the log in `dir` as a writer. `Log::open` creates a missing
/// directory, which suits `append`; a purge or truncation of a mistyped
/// path must fail instead, and leave nothing behind. (`tail --consumer`,
/// `delete` and `metadata` open the log this way too.)
pub(crate) fn open_existing(
    dir: &Path,
    command: &str,
    notes: &mut dyn Write,
) -> Result<Log, CliError> {
    std::fs::read_dir(dir).map_err(|error| CliError::log(dir, durlog::Error::Io(error)))?;
    open_writer(dir, Options::default(), command, notes)
}

/// Prints `line` (the change is durable: the call returned) and closes the
/// log.
fn finish(dir: &Path, log: Log, line: &str, output: &mut dyn Write) -> Result<(), CliError> {
    writeln!(output, "{line}")
        .and_then(|()| output.flush())
        .map_err(CliError::Output)?;
    log.close().map_err(|error| CliError::log(dir, error))
}
