//! The read-only commands: `read`, `dump` and `streams`. None of them
//! changes a byte: `read` and `streams` open the log with
//! `Log::open_read_only` (no directory created, no torn tail truncated,
//! nothing synced), which loads the tables of stream metadata and
//! deletions, so they honour both as every reader does; `dump` runs the
//! recovery scan alone (and reads the state file and the tables, if any). A torn tail is left in place; they see the valid
//! records before it.

use std::io::{self, Write};
use std::path::Path;

use durlog::recovery::{RecordInfo, visit_records};
use durlog::vfs::PosixVfs;
use durlog::{Event, Log, RecoveryReport, Tail, decode_batch};

use crate::error::{CliError, Kept};
use crate::escape::escape;
use crate::state::{read_state, state_lines};
use crate::tables::{read_tables, table_lines};
use crate::time::rfc3339_nanos;
use crate::words::plural;

/// Events `read` asks the log for at a time, so a long stream is never
/// held in memory whole.
const READ_PAGE_EVENTS: u64 = 1024;

/// How `read` prints an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFormat {
    /// `version TAB type TAB at TAB data`, type and data escaped.
    Text,
    /// One JSON object per line.
    Json,
}

/// Which events `read` prints.
#[derive(Clone, Debug)]
pub struct ReadArgs<'a> {
    /// The log directory.
    pub dir: &'a Path,
    /// The stream.
    pub stream: &'a str,
    /// The first version printed (0 and 1 both mean the first event).
    pub from: u64,
    /// At most this many events; `None` means all.
    pub limit: Option<u64>,
    /// Text or JSON lines.
    pub format: ReadFormat,
}

fn open_read_only(dir: &Path) -> Result<Log, CliError> {
    Log::open_read_only(PosixVfs, dir).map_err(|error| CliError::log(dir, error))
}

/// `durlog read`: the stream's events from `from` on, one per line. An
/// unknown stream prints nothing.
pub fn read(args: &ReadArgs<'_>, output: &mut dyn Write) -> Result<(), CliError> {
    let log = open_read_only(args.dir)?;
    let mut next = args.from.max(1);
    let mut remaining = args.limit.unwrap_or(u64::MAX);
    let mut output = io::BufWriter::new(output);
    while remaining > 0 {
        let page = remaining.min(READ_PAGE_EVENTS) as usize;
        let events = log
            .read(args.stream, next, page)
            .map_err(|error| read_error(args, &log, next, error))?;
        let Some(last) = events.last() else { break };
        // A stream's metadata or deletion may hide versions (below a
        // truncate-before, past a maximum count, older than a maximum
        // age, before a soft deletion): versions go up, not always by one.
        assert!(
            events[0].version >= next
                && events
                    .windows(2)
                    .all(|pair| pair[0].version < pair[1].version),
            "the log went back a version of {:?}",
            args.stream
        );
        next = last.version + 1;
        remaining -= events.len() as u64;
        for event in &events {
            match args.format {
                ReadFormat::Text => write_text(&mut output, event),
                ReadFormat::Json => write_json(&mut output, event),
            }
            .map_err(CliError::Output)?;
        }
    }
    output.flush().map_err(CliError::Output)
}

/// The error of a `read` from version `from`: for one a purge caused, the
/// stream's first version kept, which the state file says (`--from` is a
/// version, and the engine's error names only the first seq kept).
fn read_error(args: &ReadArgs<'_>, log: &Log, from: u64, error: durlog::Error) -> CliError {
    let durlog::Error::Purged { first_seq } = error else {
        return CliError::log(args.dir, error);
    };
    let purged =
        read_state(args.dir).and_then(|state| state.purged_versions.get(args.stream).copied());
    let Some(purged) = purged else {
        return CliError::log(args.dir, error);
    };
    let version = log.version(args.stream);
    CliError::Purged {
        dir: args.dir.to_path_buf(),
        stream: args.stream.to_owned(),
        from,
        first_seq,
        kept: if purged < version {
            Kept::From(purged + 1)
        } else {
            Kept::None(version)
        },
    }
}

fn write_text(output: &mut dyn Write, event: &Event) -> io::Result<()> {
    writeln!(
        output,
        "{}\t{}\t{}\t{}",
        event.version,
        escape(event.event_type.as_bytes()),
        rfc3339_nanos(event.at),
        escape(&event.data)
    )
}

/// `{"version":V,"type":T,"at":RFC3339,"at_unix_nanos":N,"data":D}`, where
/// `data` is the data as a JSON string when it is valid UTF-8; otherwise
/// the key is `data_hex` and the value the bytes in lowercase hex. An
/// event's extras follow where it has them: `"id"` (32 lowercase hex
/// digits), `"metadata"` (or `"metadata_hex"`, as the data) and
/// `"content_type"`.
pub(crate) fn write_json(output: &mut dyn Write, event: &Event) -> io::Result<()> {
    let mut extras = String::new();
    if let Some(id) = event.id() {
        extras.push_str(&format!(",\"id\":\"{}\"", hex(&id)));
    }
    if !event.metadata().is_empty() {
        extras.push_str(&format!(",{}", bytes_field("metadata", event.metadata())));
    }
    if let Some(content_type) = event.content_type() {
        extras.push_str(&format!(",\"content_type\":{}", json_string(content_type)));
    }
    writeln!(
        output,
        "{{\"version\":{},\"type\":{},\"at\":\"{}\",\"at_unix_nanos\":{},{}{extras}}}",
        event.version,
        json_string(&event.event_type),
        rfc3339_nanos(event.at),
        event.at,
        bytes_field("data", &event.data)
    )
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a str always serializes")
}

/// `"KEY":"TEXT"` for bytes that are valid UTF-8, else `"KEY_hex":"HEX"`.
fn bytes_field(key: &str, bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => format!("\"{key}\":{}", json_string(text)),
        Err(_) => format!("\"{key}_hex\":\"{}\"", hex(bytes)),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// `durlog streams`: the names of the streams starting with `prefix`,
/// sorted, escaped, one per line.
pub fn streams(dir: &Path, prefix: &str, output: &mut dyn Write) -> Result<(), CliError> {
    let log = open_read_only(dir)?;
    let mut output = io::BufWriter::new(output);
    for name in log.streams(prefix) {
        writeln!(output, "{}", escape(name.as_bytes())).map_err(CliError::Output)?;
    }
    output.flush().map_err(CliError::Output)
}

/// The first line of `dump`'s output: the column names.
pub const DUMP_HEADER: &str = "# file\toffset\tseq\tlength\tstream\tversions\ttypes";

/// `durlog dump`: a header, the state file's content if the log has one
/// (`# state: ` lines), every valid record (file name, offset, seq,
/// length with header, stream, first..last version, the distinct event
/// types in order of first appearance, comma separated), then one line with
/// the tail state. Names are escaped, and a comma inside a type as `\x2c`.
/// On damage that `Log::open` would refuse, the records before it are
/// printed and the error is returned.
pub fn dump(dir: &Path, output: &mut dyn Write) -> Result<(), CliError> {
    let mut output = io::BufWriter::new(output);
    writeln!(output, "{DUMP_HEADER}").map_err(CliError::Output)?;
    // A state file or table that cannot be read or decoded prints nothing
    // here: the scan below refuses it, naming it.
    let state = read_state(dir).as_ref().map(state_lines);
    let tables = table_lines(&read_tables(dir));
    for line in state.unwrap_or_default().into_iter().chain(tables) {
        writeln!(output, "{line}").map_err(CliError::Output)?;
    }
    // The scan cannot be stopped from the visitor: keep the first write
    // error and stop writing.
    let mut write_error: Option<io::Error> = None;
    let scanned = visit_records(&PosixVfs, dir, &mut |record| {
        if write_error.is_none() {
            write_error = write_record(&mut output, record).err();
        }
    });
    if let Some(error) = write_error {
        return Err(CliError::Output(error));
    }
    let report = match scanned {
        Ok(report) => report,
        Err(error) => {
            output.flush().map_err(CliError::Output)?;
            return Err(CliError::log(dir, error));
        }
    };
    writeln!(output, "{}", tail_line(&report)).map_err(CliError::Output)?;
    output.flush().map_err(CliError::Output)
}

fn write_record(output: &mut dyn Write, record: &RecordInfo<'_>) -> io::Result<()> {
    let file = record.file.file_name().map_or_else(
        || record.file.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    );
    let batch = record.batch;
    let last_version = batch.first_version + u64::from(batch.count) - 1;
    // The scan checked that the payload decodes; decoding again only
    // collects the types.
    let types = match decode_batch(record.payload) {
        Ok(decoded) => {
            let mut distinct: Vec<&str> = Vec::new();
            for event in &decoded.events {
                if !distinct.contains(&event.event_type.as_str()) {
                    distinct.push(&event.event_type);
                }
            }
            let escaped: Vec<String> = distinct
                .iter()
                .map(|name| escape(name.as_bytes()).replace(',', "\\x2c"))
                .collect();
            escaped.join(",")
        }
        Err(error) => format!("? ({error})"),
    };
    writeln!(
        output,
        "{file}\t{}\t{}\t{}\t{}\t{}..{last_version}\t{types}",
        record.offset,
        record.seq,
        record.len,
        escape(batch.stream.as_bytes()),
        batch.first_version,
    )
}

fn tail_line(report: &RecoveryReport) -> String {
    let totals = format!(
        "{}, {} of {} bytes, last seq {}",
        plural(report.segments as u64, "segment"),
        plural(report.records, "record"),
        report.record_bytes,
        report.last_seq
    );
    let file_name = |file: &Path| {
        file.file_name().map_or_else(
            || file.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        )
    };
    match &report.tail {
        Tail::Clean => format!("# tail: clean; {totals}"),
        Tail::Zeros {
            file,
            offset,
            bytes,
        } => format!(
            "# tail: {bytes} zero bytes at offset {offset} of {} (the end of the log); {totals}",
            file_name(file)
        ),
        Tail::Torn {
            file,
            offset,
            bytes,
            reason,
            may_be_acknowledged,
        } => format!(
            "# tail: torn: {bytes} bytes at offset {offset} of {} ({}){}, which the next append truncates; {totals}",
            file_name(file),
            escape(reason.as_bytes()),
            if *may_be_acknowledged {
                "; it may have been an acknowledged record (one flipped bit would make it valid)"
            } else {
                ""
            }
        ),
        other => format!(
            "# tail: {}; {totals}",
            escape(format!("{other:?}").as_bytes())
        ),
    }
}
