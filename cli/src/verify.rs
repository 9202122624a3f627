//! `durlog verify DIR`: what `Log::open` would find, without changing a
//! byte. It runs the recovery scan alone (`durlog::recovery::verify`), which
//! opens every file read-only and never truncates, creates or syncs.
//!
//! Exit codes follow fsck(8):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | clean (a zero-filled tail after the last record is the end of the log, clean) |
//! | 1 | a torn tail `Log::open` would truncate: an append that was never acknowledged |
//! | 4 | corruption `Log::open` would refuse: acknowledged data or the directory's structure is damaged |
//! | 8 | an operational error: missing directory, permission, an I/O error |
//! | 16 | a usage error (from the argument parser) |

use std::path::Path;

use durlog::vfs::PosixVfs;
use durlog::{Error, RecoveryReport, Tail};

use crate::error::{CliError, one_line};
use crate::tables::{read_tables, table_summary};
use crate::words::plural;

/// fsck's "no errors".
pub const EXIT_CLEAN: u8 = 0;
/// fsck's "errors corrected": here, errors the next open corrects.
pub const EXIT_TORN_TAIL: u8 = 1;
/// fsck's "errors left uncorrected".
pub const EXIT_CORRUPT: u8 = 4;
/// fsck's "operational error".
pub const EXIT_OPERATIONAL: u8 = 8;
/// fsck's "usage or syntax error".
pub const EXIT_USAGE: u8 = 16;

/// The outcome of `verify`: an exit code and the one line that explains
/// it, for stdout when clean and stderr otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// One of the `EXIT_*` codes.
    pub exit_code: u8,
    /// One line, no line break.
    pub message: String,
}

/// Scans `dir` read-only and judges it.
pub fn run(dir: &Path) -> Verdict {
    match durlog::recovery::verify(&PosixVfs, dir) {
        Ok(report) => judge(dir, &report),
        Err(error @ Error::Corrupt { .. }) => verdict(EXIT_CORRUPT, error.to_string()),
        Err(error) => verdict(EXIT_OPERATIONAL, CliError::log(dir, error).to_string()),
    }
}

fn judge(dir: &Path, report: &RecoveryReport) -> Verdict {
    // A log never purged starts at seq 1, and its line stays as it was
    // before logs could be purged.
    let first_seq = match report.first_seq {
        1 => String::new(),
        seq => format!("first seq {seq}, "),
    };
    let mut summary = format!(
        "{}: {}, {} of {} bytes, {first_seq}last seq {}",
        dir.display(),
        plural(report.segments as u64, "segment"),
        plural(report.records, "record"),
        report.record_bytes,
        report.last_seq
    );
    if let Some(seq) = report.truncating {
        summary.push_str(&format!(
            "; truncation under way after seq {seq}: the records after it are no longer the log's, and the next writer (`durlog append`, Log::open) removes them"
        ));
    }
    if report.purged_leftovers > 0 {
        summary.push_str(&format!(
            "; {} left to remove (a purge removed them from the log; the next writer deletes the files)",
            plural(report.purged_leftovers as u64, "purged segment")
        ));
    }
    if report.index_files > 0 {
        summary.push_str(&format!(
            "; {} agreeing with their segments",
            plural(report.index_files as u64, "index file")
        ));
    }
    for (path, why) in &report.stale_index_files {
        summary.push_str(&format!(
            "; stale index file {} ({why}): the next writer removes it",
            path.display()
        ));
    }
    if let Some(tables) = table_summary(&read_tables(dir)) {
        summary.push_str(&format!("; {tables}"));
    }
    if !report.ignored.is_empty() {
        let names: Vec<String> = report
            .ignored
            .iter()
            .map(|path| {
                path.file_name().map_or_else(
                    || path.display().to_string(),
                    |name| name.to_string_lossy().into_owned(),
                )
            })
            .collect();
        summary.push_str(&format!("; ignored (not the log's): {}", names.join(", ")));
    }
    match &report.tail {
        Tail::Clean => verdict(EXIT_CLEAN, format!("clean: {summary}")),
        Tail::Zeros {
            file,
            offset,
            bytes,
        } => verdict(
            EXIT_CLEAN,
            format!(
                "clean: {summary}; {bytes} zero bytes follow at offset {offset} of {} (the end of the log)",
                file.display()
            ),
        ),
        Tail::Torn {
            file,
            offset,
            bytes,
            reason,
            may_be_acknowledged,
        } => {
            let what = if *may_be_acknowledged {
                "the record there may have been acknowledged: one flipped bit would make it valid, and nothing after it proves it was synced"
            } else {
                "bytes that no acknowledged append wrote"
            };
            verdict(
                EXIT_TORN_TAIL,
                format!(
                    "torn tail: {} at offset {offset}: {bytes} bytes, {what} ({reason}); `durlog append` (Log::open) will truncate them; {summary}",
                    file.display()
                ),
            )
        }
        other => verdict(
            EXIT_OPERATIONAL,
            format!("{}: unknown tail state {other:?}", dir.display()),
        ),
    }
}

fn verdict(exit_code: u8, message: String) -> Verdict {
    Verdict {
        exit_code,
        message: one_line(&message),
    }
}
