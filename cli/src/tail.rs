//! `durlog tail`: every event of the whole log in commit order, one per
//! line, from a seq on; with `--follow`, then every new one as it appears;
//! with `--consumer NAME`, from after NAME's recorded position, recording
//! it as it prints.
//!
//! Without `--consumer` it is read-only, like `read`: the log's records
//! come through `Log::open_read_only` and `Log::read_all_filtered`, with
//! the engine's [`Filter`] (`--streams`, `--types`). The whole log is
//! history, every event until a purge removes its segment; with
//! `--apply-metadata`, each stream's metadata and deletion are applied,
//! as `read` applies them. A writer in another process shares no memory
//! with this one, so following goes on from where the catch-up ended with
//! the engine's [`Follower`], which reads the segment files themselves,
//! checks each record (CRC, seq, batch) and applies the same `Filter`. A
//! record shows once it is whole in its file: its writer syncs it right
//! after, and a record that a power loss then takes back (never
//! acknowledged) may have been printed.
//!
//! With `--consumer NAME` it is a writer (a consumer's position is
//! recorded in `durlog.consumers`, which only the writer may replace): it
//! opens the log with `Log::open`, so while another writer has the log it
//! fails at once with `Error::Locked`, prints nothing and records nothing;
//! and it cannot follow (no other process could append while it held the
//! lock: clap refuses `--consumer` with `--follow`). It prints the records
//! after NAME's position (`Log::consumer_position`, the first record kept
//! if none) in pages of `--record-every` matching records (1,024 by
//! default); after each page is written and flushed to standard output it
//! records the page's last seq (`Log::record_consumer_position`, durable
//! before it returns), and at the end the log's last seq (the records
//! after the last page matched nothing). At least once: a crash (kill,
//! power loss) replays at most the records printed since the last
//! recorded position, that is at most one page, `--record-every` records
//! (each with its events that pass the filter).

use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use durlog::vfs::PosixVfs;
use durlog::{Commit, Event, Filter, Follower, Log, MAX_NAME_BYTES};

use crate::error::CliError;
use crate::escape::escape;
use crate::inspect::ReadFormat;
use crate::retention::open_existing;
use crate::time::rfc3339_nanos;

/// Records asked of the log at a time while catching up.
const PAGE_RECORDS: usize = 1024;

/// Records `--consumer` prints between two recordings of its position,
/// unless told otherwise: the most a crash replays. A recording costs a
/// file write, two syncs and a rename (about a millisecond on a real
/// disk), next to microseconds for printing a record.
pub const RECORD_EVERY_DEFAULT: usize = 1024;

/// The most `--record-every` takes: a page is held in memory whole.
pub const RECORD_EVERY_MAX: u64 = 1 << 20;

/// How long following waits before looking at the files again.
const FOLLOW_POLL: Duration = Duration::from_millis(20);

/// What `tail` prints.
#[derive(Clone, Debug)]
pub struct TailArgs<'a> {
    pub dir: &'a Path,
    /// The first seq printed (0 and 1 both mean the first record kept).
    pub from: u64,
    /// Keep printing new records until interrupted.
    pub follow: bool,
    /// Only events of streams starting with this.
    pub streams: &'a str,
    /// Only events whose type starts with this.
    pub types: &'a str,
    /// Each stream's metadata and deletion applied (else history).
    pub apply_metadata: bool,
    /// Start after this consumer's position and record it as it prints.
    pub consumer: Option<&'a str>,
    /// With `consumer`: records printed between two recordings.
    pub record_every: usize,
    pub format: ReadFormat,
}

impl TailArgs<'_> {
    /// The engine's filter for `--streams` and `--types`.
    pub fn filter(&self) -> Filter {
        let mut filter = Filter::all();
        if !self.streams.is_empty() {
            filter = filter.stream_prefix(self.streams);
        }
        if !self.types.is_empty() {
            filter = filter.event_type_prefix(self.types);
        }
        if self.apply_metadata {
            filter = filter.applying_metadata();
        }
        filter
    }
}

/// `durlog tail`: prints every event from seq `from` on (with a consumer,
/// from after its position); without `--follow`, stops at the end of the
/// log. Notes about a recovered torn tail (a consumer opens the log as a
/// writer) go to `notes`.
pub fn run(
    args: &TailArgs<'_>,
    output: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CliError> {
    let filter = args.filter();
    if let Some(name) = args.consumer {
        assert!(!args.follow, "the parser refuses --consumer with --follow");
        return consume(args, name, &filter, output, notes);
    }
    let log =
        Log::open_read_only(PosixVfs, args.dir).map_err(|error| CliError::log(args.dir, error))?;
    // 1 (the default) is the first record the log keeps, also after a
    // purge; a later seq that a purge removed is an error.
    let mut next = match args.from {
        0 | 1 => log.first_seq(),
        from => from,
    };
    loop {
        let commits = log
            .read_all_filtered(next, PAGE_RECORDS, &filter)
            .map_err(|error| CliError::log(args.dir, error))?;
        let Some(last) = commits.last() else { break };
        next = last.seq + 1;
        print_commits(args.format, &commits, output)?;
    }
    // The catch-up read every record up to the last one, also those after
    // the last it printed, which matched nothing.
    next = next.max(log.last_seq() + 1);
    drop(log);
    if !args.follow {
        return Ok(());
    }
    let mut follower = Follower::new(PosixVfs, args.dir, next).with_filter(filter);
    loop {
        let commits = follower
            .poll()
            .map_err(|error| CliError::log(args.dir, error))?;
        if commits.is_empty() {
            std::thread::sleep(FOLLOW_POLL);
            continue;
        }
        print_commits(args.format, &commits, output)?;
    }
}

/// `durlog tail --consumer NAME`: the records after NAME's position, in
/// pages of `record_every`, each page's last seq recorded once the page is
/// printed and flushed; at the end, the log's last seq.
fn consume(
    args: &TailArgs<'_>,
    name: &str,
    filter: &Filter,
    output: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CliError> {
    let dir = args.dir;
    // Checked before anything is printed: the engine would refuse the
    // name only at the first recording, after a page went out.
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        let name = name.to_owned();
        return Err(CliError::log(dir, durlog::Error::ConsumerName { name }));
    }
    let log = open_existing(dir, "tail", notes)?;
    let first_seq = log.first_seq();
    let position = log.consumer_position(name);
    let start = position
        .map_or(first_seq, |seq| seq.saturating_add(1))
        .max(args.from);
    if start < first_seq {
        return Err(CliError::ConsumerBehind {
            dir: dir.to_path_buf(),
            name: name.to_owned(),
            position: position.unwrap_or(0),
            first_seq,
        });
    }
    let record = |seq: u64| {
        log.record_consumer_position(name, seq)
            .map_err(|error| CliError::log(dir, error))
    };
    let mut next = start;
    loop {
        let commits = log
            .read_all_filtered(next, args.record_every.max(1), filter)
            .map_err(|error| CliError::log(dir, error))?;
        let Some(last) = commits.last() else { break };
        next = last.seq + 1;
        print_commits(args.format, &commits, output)?;
        // Only now: every line of the page is out (flushed). A crash
        // before this returns replays this page, no more.
        record(last.seq)?;
    }
    // The records after the last page matched nothing: handled too. No
    // other writer appends while this one holds the lock.
    let end = log.last_seq();
    if end >= start {
        record(end)?;
    }
    log.close().map_err(|error| CliError::log(dir, error))
}

fn print_commits(
    format: ReadFormat,
    commits: &[Commit],
    output: &mut dyn Write,
) -> Result<(), CliError> {
    let mut buffered = io::BufWriter::new(output);
    for commit in commits {
        for event in &commit.events {
            match format {
                ReadFormat::Text => write_text(&mut buffered, commit.seq, event),
                ReadFormat::Json => write_json(&mut buffered, commit.seq, event),
            }
            .map_err(CliError::Output)?;
        }
    }
    buffered.flush().map_err(CliError::Output)
}

/// `seq TAB stream TAB version TAB type TAB at TAB data`, the `read`
/// format with seq and stream in front.
fn write_text(output: &mut dyn Write, seq: u64, event: &Event) -> io::Result<()> {
    writeln!(
        output,
        "{seq}\t{}\t{}\t{}\t{}\t{}",
        escape(event.stream.as_bytes()),
        event.version,
        escape(event.event_type.as_bytes()),
        rfc3339_nanos(event.at),
        escape(&event.data)
    )
}

/// The `read --json` object with `seq` and `stream` in front.
fn write_json(output: &mut dyn Write, seq: u64, event: &Event) -> io::Result<()> {
    let mut line = Vec::new();
    crate::inspect::write_json(&mut line, event)?;
    let json_string = serde_json::to_string(&event.stream).expect("a str always serializes");
    output.write_all(format!("{{\"seq\":{seq},\"stream\":{json_string},").as_bytes())?;
    output.write_all(&line[1..])
}
