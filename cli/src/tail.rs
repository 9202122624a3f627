//! `durlog tail`: every event of the whole log in commit order, one per
//! line, from a seq on; with `--follow`, then every new one as it appears.
//!
//! Read-only, like `read`: the log's records come through
//! `Log::open_read_only` and `Log::read_all`. A writer in another process
//! shares no memory with this one, so following reads the segment files
//! themselves from where the catch-up ended, record by record, each one
//! checked (CRC, seq, batch) before it is printed. A record shows once it
//! is whole in its file: its writer syncs it right after, and a record
//! that a crash then tears (never acknowledged) may have been printed.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use durlog::vfs::{OpenMode, PosixVfs, Vfs, read_exact_at};
use durlog::{Commit, Event, Log, decode_batch, parse_record, segment_name};

use crate::error::CliError;
use crate::escape::escape;
use crate::inspect::ReadFormat;
use crate::time::rfc3339_nanos;

/// Records asked of the log at a time while catching up.
const PAGE_RECORDS: usize = 1024;

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
    pub format: ReadFormat,
}

/// `durlog tail`: prints every event from seq `from` on; without
/// `--follow`, stops at the end of the log.
pub fn run(args: &TailArgs<'_>, output: &mut dyn Write) -> Result<(), CliError> {
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
            .read_all(next, PAGE_RECORDS)
            .map_err(|error| CliError::log(args.dir, error))?;
        let Some(last) = commits.last() else { break };
        next = last.seq + 1;
        print_commits(args, &commits, output)?;
    }
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
        print_commits(args, &commits, output)?;
    }
}

fn print_commits(
    args: &TailArgs<'_>,
    commits: &[Commit],
    output: &mut dyn Write,
) -> Result<(), CliError> {
    let mut buffered = io::BufWriter::new(output);
    for commit in commits {
        if !commit.stream.starts_with(args.streams) {
            continue;
        }
        for event in &commit.events {
            match args.format {
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
