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
//! as `read` applies them. A writer in another
//! process shares no memory with this one, so following reads the segment
//! files themselves from where the catch-up ended, record by record, each
//! one checked (CRC, seq, batch) before it is printed, and applies the
//! same rules itself: the same `Filter` (`Filter::keeps_stream`,
//! `keeps_type`), and with `--apply-metadata` the metadata and deletions
//! of `durlog.streams`, read again whenever records came in, through
//! `StreamEntry::shows`. A record
//! none of whose events pass is skipped; one some of whose events pass is
//! printed with those alone. A record shows once it is whole in its file:
//! its writer syncs it right after, and a record that a crash then tears
//! (never acknowledged) may have been printed.
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

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use durlog::format::{STREAMS_FILE_NAME, StreamEntry, decode_streams};
use durlog::vfs::{OpenMode, PosixVfs, Vfs, read_exact_at};
use durlog::{
    Commit, Event, Filter, Log, MAX_NAME_BYTES, decode_batch, parse_record, segment_name,
};

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

/// Bytes following reads at a time.
const POLL_READ_BYTES: u64 = 256 << 10;

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
    let mut follower = Follower::new(args.dir, next);
    loop {
        let commits = follower
            .poll()
            .map_err(|error| CliError::log(args.dir, durlog::Error::Io(error)))?;
        if commits.is_empty() {
            std::thread::sleep(FOLLOW_POLL);
            continue;
        }
        // History needs no table; metadata applied reads it again each
        // time records came in, for what changed since.
        let streams = match filter.applies_metadata() {
            true => read_stream_table(args.dir)?,
            false => BTreeMap::new(),
        };
        let commits = keep_shown(commits, &filter, &streams, system_now());
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

/// The table of stream metadata and deletions in `dir` (empty if the log
/// has none). It is replaced whole by a rename, so a read sees one table
/// or the next, never a mix; a damaged one is an error naming it, as
/// `Log::open` refuses it.
fn read_stream_table(dir: &Path) -> Result<BTreeMap<String, StreamEntry>, CliError> {
    let path = dir.join(STREAMS_FILE_NAME);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(error) => return Err(CliError::log(dir, durlog::Error::Io(error))),
    };
    decode_streams(&bytes).map_err(|error| CliError::Damaged {
        file: path,
        reason: format!("the table of stream metadata is damaged ({error})"),
    })
}

/// What a reader of the whole log keeps of `commits` (records that just
/// appeared, in seq order): the events `filter` passes that their stream's
/// entry in `streams` shows, as the engine's `read_all_filtered` keeps
/// them; a record left with none is dropped. A stream's version is its
/// newest record's here: nothing in the files is newer.
fn keep_shown(
    commits: Vec<Commit>,
    filter: &Filter,
    streams: &BTreeMap<String, StreamEntry>,
    now: i64,
) -> Vec<Commit> {
    let mut versions: BTreeMap<&str, u64> = BTreeMap::new();
    for commit in &commits {
        let last = commit.first_version + commit.events.len() as u64 - 1;
        versions.insert(&commit.stream, last);
    }
    let versions: BTreeMap<String, u64> = versions
        .into_iter()
        .map(|(stream, version)| (stream.to_owned(), version))
        .collect();
    commits
        .into_iter()
        .filter(|commit| filter.keeps_stream(&commit.stream))
        .filter_map(|mut commit| {
            let entry = streams.get(&commit.stream);
            let version = versions[&commit.stream];
            commit.events.retain(|event| {
                filter.keeps_type(&event.event_type)
                    && entry.is_none_or(|entry| entry.shows(version, event.version, event.at, now))
            });
            (!commit.events.is_empty()).then_some(commit)
        })
        .collect()
}

/// The host's clock in unix nanoseconds, as the engine's default clock.
fn system_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

/// Reads new records straight from the segment files: the one holding
/// seq `next`, from where the last record read ended, then the next
/// segment once one named for `next` appears.
struct Follower {
    dir: PathBuf,
    next: u64,
    /// The segment being read (its first seq) and the offset to read at.
    segment: Option<(u64, u64)>,
}

impl Follower {
    fn new(dir: &Path, next: u64) -> Follower {
        Follower {
            dir: dir.to_path_buf(),
            next,
            segment: None,
        }
    }

    /// The records that are whole in the files now, from `next` on.
    fn poll(&mut self) -> io::Result<Vec<Commit>> {
        if self.segment.is_none() {
            self.segment = self.locate()?;
        }
        let Some((first_seq, offset)) = self.segment else {
            return Ok(Vec::new());
        };
        let path = self.dir.join(segment_name(first_seq));
        let file = PosixVfs.open(&path, OpenMode::ReadOnly)?;
        let remaining = file.len()?.saturating_sub(offset);
        // A preallocated zero tail is not read whole at every poll: a
        // chunk, or the one record the chunk starts, if that is longer.
        let mut want = remaining.min(POLL_READ_BYTES);
        let mut bytes = vec![0; want as usize];
        read_exact_at(file.as_ref(), &mut bytes, offset)?;
        if let Some(len) = durlog::format::Header::peek(&bytes).map(|header| header.record_len())
            && len > want
            && len <= remaining
        {
            want = len;
            bytes.resize(want as usize, 0);
            read_exact_at(file.as_ref(), &mut bytes, offset)?;
        }
        let mut commits = Vec::new();
        let mut at = 0;
        while let Some((commit, used)) = next_commit(&bytes[at..], self.next) {
            at += used;
            self.next += 1;
            commits.push(commit);
        }
        self.segment = Some((first_seq, offset + at as u64));
        if commits.is_empty() && self.dir.join(segment_name(self.next)).exists() {
            // The writer rolled: the next record is in a segment of its own.
            self.segment = Some((self.next, 0));
        }
        Ok(commits)
    }

    /// The segment holding `next` and the offset of that record, by
    /// scanning the segment from its start; `None` while no segment does.
    fn locate(&self) -> io::Result<Option<(u64, u64)>> {
        let mut firsts: Vec<u64> = PosixVfs
            .list_dir(&self.dir)?
            .into_iter()
            .filter_map(|entry| durlog::format::parse_segment_name(&entry.name))
            .filter(|&first| first <= self.next)
            .collect();
        firsts.sort_unstable();
        let Some(&first) = firsts.last() else {
            return Ok(None);
        };
        let path = self.dir.join(segment_name(first));
        let bytes = std::fs::read(&path)?;
        let (mut at, mut seq) = (0, first);
        while seq < self.next {
            let Ok(record) = parse_record(&bytes[at..]) else {
                return Ok(None);
            };
            at += record.len;
            seq += 1;
        }
        Ok(Some((first, at as u64)))
    }
}

/// The record with `seq` at the front of `bytes` and the bytes it takes,
/// if it is whole and valid.
fn next_commit(bytes: &[u8], seq: u64) -> Option<(Commit, usize)> {
    let record = parse_record(bytes).ok()?;
    if record.seq != seq {
        return None;
    }
    let batch = decode_batch(record.payload).ok()?;
    let commit = Commit {
        seq,
        stream: batch.stream,
        first_version: batch.first_version,
        events: batch.events,
    };
    Some((commit, record.len))
}
