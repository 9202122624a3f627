//! The command line of `durlog`, parsed with clap. Kept in the library so
//! the argument parser itself can be fuzzed (`fuzz/fuzz_targets/cli.rs`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::append::DEFAULT_EVENT_TYPE;
use crate::metadata::Setting;
use crate::tail::{RECORD_EVERY_DEFAULT, RECORD_EVERY_MAX};

const AFTER_HELP: &str = "\
Only `append`, `purge`, `truncate`, `delete`, `metadata` with an option and
`tail --consumer` write, one at a time per log (each takes the log's lock).
`read`, `tail`, `dump`, `streams`, `metadata` alone and `verify` never
create, truncate or sync anything: a torn tail stays in place until the
next writer (which opens the log and truncates it).

Exit codes: 0 on success; 1 on an error, with one line on stderr naming the
path (and the offset where there is one). `verify` follows fsck instead:
0 clean, 1 torn tail, 4 corruption, 8 operational error, 16 usage error.";

/// Crash-safe segmented event log: append, read, dump, verify.
#[derive(Debug, Parser)]
#[command(name = "durlog", version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Append each line of stdin to STREAM as one event; print each new
    /// version once it is durable.
    ///
    /// A line is the bytes up to a line feed (not included; a carriage
    /// return is kept), any bytes at all. Each line is its own append
    /// (expected version: `--expected` for the first, then the version the
    /// line before made), and its version is printed on its own line
    /// and flushed only after the append returned, that is after the
    /// fdatasync that covers it: a printed version survives a crash. The
    /// directory is created if missing; a torn tail left by a crash is
    /// truncated first (noted on stderr).
    Append {
        /// The log directory.
        dir: PathBuf,
        /// The stream to append to.
        stream: String,
        /// The type of every event.
        #[arg(long = "type", value_name = "T", default_value = DEFAULT_EVENT_TYPE)]
        event_type: String,
        /// The version STREAM must be at before the first line: a number
        /// (0: no stream yet), `no-stream`, `exists` or `any`. On a
        /// mismatch nothing is appended and the command fails naming the
        /// stream's version; each later line must follow the one before.
        #[arg(long, value_name = "V", default_value = "any", value_parser = crate::append::parse_expected)]
        expected: durlog::Expected,
        /// Size limit of a segment file in bytes; 0 means the default (64 MiB).
        #[arg(long, value_name = "BYTES", default_value_t = 0)]
        segment_bytes: u64,
    },
    /// Remove the oldest records: every sealed segment all of whose
    /// records have a seq below SEQ. A writer, like `append`: it fails at
    /// once while another writer has the log.
    ///
    /// Only whole segments go, oldest first, and never the last one (the
    /// one appends go to), so records below SEQ may stay. Prints one line
    /// once the purge is durable: the segments, records and bytes removed,
    /// and the first seq the log keeps. The streams keep their versions:
    /// a stream's next event continues after its purged ones, and `read`
    /// of a purged version fails naming the first version kept. A torn
    /// tail is truncated first, as by `append`; a missing directory is an
    /// error.
    Purge {
        /// The log directory.
        dir: PathBuf,
        /// Remove the segments whose records all have a seq below SEQ.
        #[arg(long, value_name = "SEQ")]
        before: u64,
    },
    /// Remove every record with a seq above SEQ; the streams they held go
    /// back to their earlier versions. A writer, like `append`.
    ///
    /// Prints one line once the truncation is durable: the records and
    /// bytes removed and the last seq kept. SEQ at or past the last seq
    /// changes nothing; SEQ below the first seq kept minus one (that is,
    /// back into records a purge removed) is refused.
    Truncate {
        /// The log directory.
        dir: PathBuf,
        /// Keep the records up to this seq (0 keeps none).
        #[arg(long, value_name = "SEQ")]
        after: u64,
    },
    /// Print STREAM's events, one per line. Read-only.
    ///
    /// Each line is: version TAB type TAB at TAB data. `at` is RFC 3339 in
    /// UTC with nine fraction digits (2024-05-01T12:00:00.123456789Z).
    /// Type and data are escaped so an event stays on one line: backslash
    /// as \\, tab as \t, line feed as \n, carriage return as \r, any other
    /// control character and any byte that is not valid UTF-8 as \xNN (two
    /// lowercase hex digits, one per byte); other text is printed as is.
    ///
    /// With --json, each line is one JSON object:
    /// {"version":1,"type":"T","at":"1970-01-01T00:00:00.000000000Z","at_unix_nanos":0,"data":"hi"}.
    /// When the data is not valid UTF-8, "data" is replaced by "data_hex",
    /// the bytes in lowercase hex. An event's id, metadata and content type
    /// follow where it has them: "id" (32 lowercase hex digits),
    /// "metadata" (or "metadata_hex", as the data) and "content_type".
    ///
    /// An unknown stream prints nothing and exits 0.
    Read {
        /// The log directory.
        dir: PathBuf,
        /// The stream to read.
        stream: String,
        /// First version to print (versions start at 1).
        #[arg(long, value_name = "N", default_value_t = 1)]
        from: u64,
        /// Print at most N events.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Print JSON lines instead of tab-separated text.
        #[arg(long)]
        json: bool,
    },
    /// Print every event of the whole log in commit order, from a seq on;
    /// with --follow, keep printing new ones until interrupted. Read-only,
    /// but for --consumer.
    ///
    /// One line per event: seq, stream, version, type, at and data,
    /// separated by tabs (the `read` format with seq and stream in front);
    /// --json prints JSON lines instead. Following reads the segment files
    /// as a writer in another process fills them: a record shows once it
    /// is whole in its file. --streams and --types keep the events whose
    /// stream and type start with their prefixes (both must hold): a record
    /// none of whose events pass is skipped, one with some is printed with
    /// those. Each stream's metadata and deletion are honoured
    /// (`durlog metadata`, `durlog delete`).
    ///
    /// With --consumer NAME: starts after NAME's recorded position (the
    /// first record kept if it has none; --from can only start later) and
    /// records it as it prints, at least once: after every --record-every
    /// printed records (1024), once their lines are flushed to stdout, the
    /// last one's seq; at the end, the log's last seq. A crash replays at
    /// most the records printed since the last recording (--record-every).
    /// Recording writes the log, so --consumer is a writer like `append`:
    /// while another writer has the log it fails at once, printing and
    /// recording nothing; and it cannot --follow.
    Tail {
        /// The log directory.
        dir: PathBuf,
        /// First seq to print (seqs start at 1; 1 means the first record
        /// the log keeps, after a purge too).
        #[arg(long, value_name = "SEQ", default_value_t = 1)]
        from: u64,
        /// Keep printing new events until interrupted.
        #[arg(long, conflicts_with = "consumer")]
        follow: bool,
        /// Only events of streams whose name starts with PREFIX.
        #[arg(long, value_name = "PREFIX", default_value = "")]
        streams: String,
        /// Only events whose type starts with PREFIX.
        #[arg(long, value_name = "PREFIX", default_value = "")]
        types: String,
        /// Only the events each stream's metadata and deletion show, as
        /// `read` shows them. Without it the whole log is history: every
        /// event until a purge removes its segment.
        #[arg(long)]
        apply_metadata: bool,
        /// Start after NAME's recorded position and record it as it prints.
        #[arg(long, value_name = "NAME")]
        consumer: Option<String>,
        /// With --consumer: record the position after every N printed
        /// records (the most a crash replays).
        #[arg(
            long,
            value_name = "N",
            default_value_t = RECORD_EVERY_DEFAULT,
            value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=RECORD_EVERY_MAX),
            requires = "consumer"
        )]
        record_every: usize,
        /// Print JSON lines instead of tab-separated text.
        #[arg(long)]
        json: bool,
    },
    /// Delete STREAM: it reads as empty and `streams` leaves it out. A
    /// writer, like `append`.
    ///
    /// Soft (the default): its version stays, and a later append continues
    /// its versions and shows from there. --hard: for good; every later
    /// append to it fails. No space is reclaimed but by purges, as for
    /// every record. Prints one line once the deletion is durable.
    Delete {
        /// The log directory.
        dir: PathBuf,
        /// The stream to delete (it need not exist yet).
        stream: String,
        /// Delete for good: the stream takes no more events.
        #[arg(long)]
        hard: bool,
    },
    /// Show STREAM's metadata, or change it: only its newest --max-count
    /// events are read, none older than --max-age seconds, none below
    /// version --truncate-before.
    ///
    /// Every reader honours it at once (`read`, `tail`, subscriptions);
    /// nothing is removed from the segments (purges reclaim space, as for
    /// every record). An option given replaces that field; `none` clears
    /// it; a field left out keeps its value. With an option it is a writer,
    /// like `append`, and prints one line once the change is durable;
    /// without, it only prints the stream's metadata and deletion,
    /// read-only.
    Metadata {
        /// The log directory.
        dir: PathBuf,
        /// The stream.
        stream: String,
        /// Only the newest N events are read (or `none`).
        #[arg(long, value_name = "N", value_parser = Setting::parse)]
        max_count: Option<Setting>,
        /// Events older than SECS seconds are not read (or `none`).
        #[arg(long, value_name = "SECS", value_parser = Setting::parse)]
        max_age: Option<Setting>,
        /// Versions below V are not read (or `none`).
        #[arg(long, value_name = "V", value_parser = Setting::parse)]
        truncate_before: Option<Setting>,
    },
    /// Print every record: file, offset, seq, length, stream, versions,
    /// types; then the tail state. Read-only.
    ///
    /// Tab-separated, after a header line starting with '#': the segment
    /// file name, the record's offset in it, its seq, its length in bytes
    /// (16-byte header included), its stream, its first..last version, and
    /// the distinct event types in order of first appearance, separated by
    /// commas. Names are escaped as in `read` (a comma in a type as \x2c).
    /// The last line, starting with "# tail:", says how the last segment
    /// ends (clean, zero bytes, or a torn tail) and totals the log.
    ///
    /// A log that was purged or truncated has a state file (durlog.state):
    /// lines starting with "# state:" after the header say what it holds
    /// (the first seq kept, a truncation under way, and each stream's
    /// purged versions). A log without one prints none. So do the tables:
    /// "# streams:" lines for durlog.streams (each stream's metadata and
    /// deletion), "# consumers:" lines for durlog.consumers (each
    /// consumer's position).
    Dump {
        /// The log directory.
        dir: PathBuf,
    },
    /// Check every record as opening the log would, without changing a
    /// byte; exit like fsck.
    ///
    /// Exit codes: 0 clean (zero bytes after the last record are the end of
    /// the log, clean); 1 a torn tail the next `append` would truncate (an
    /// append that was never acknowledged); 4 corruption the log would
    /// refuse to open (acknowledged data or the directory's structure is
    /// damaged); 8 an operational error (missing directory, permission);
    /// 16 a usage error. Prints one line: on stdout when clean, else on
    /// stderr, naming the file and offset and, for a torn tail, its bytes.
    /// After a purge the line names the first seq kept, and it says when a
    /// purge or truncation that a crash interrupted has files left for the
    /// next writer to remove. It counts the entries of the tables
    /// (durlog.streams, durlog.consumers) when the log has them; a damaged
    /// one is corruption (4).
    Verify {
        /// The log directory.
        dir: PathBuf,
    },
    /// Print the names of the streams that start with PREFIX, sorted, one
    /// per line (escaped as in `read`). Read-only.
    Streams {
        /// The log directory.
        dir: PathBuf,
        /// Only names that start with this.
        #[arg(default_value = "")]
        prefix: String,
    },
}
