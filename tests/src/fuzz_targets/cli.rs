//! The `cli` target: the `durlog` command's library (`durlog_cli`), which
//! is where the command's untrusted input goes, on a real directory (on
//! tmpfs, `/dev/shm`, where there is one, so a sync costs microseconds).
//!
//! Two kinds of input:
//! - `Append`: arbitrary bytes on stdin, in two runs of `append::run` (the
//!   second reopens the log), with any stream name and event type. Each run
//!   prints exactly the versions 1.., one per line; then `verify` finds the
//!   directory clean, `read` (text and JSON, with any `--from` and
//!   `--limit`) gives back every line's bytes exactly, `streams` lists the
//!   stream, and `dump` prints one line per append.
//! - `Inspect`: a damaged or odd directory (see [`super::layout`]); the
//!   read-only commands `verify`, `dump`, `streams` and `read` must agree
//!   with the engine's scan (`verify`'s exit code follows fsck), keep one
//!   record or event to a line, name the directory in their errors, and
//!   change no byte.
//!
//! What is not fuzzed: clap's parsing of the argument vector. The `Cli`
//! type and its parse live in the binary (`cli/src/main.rs`), which no
//! library can reach; moving them into `durlog_cli` (a `parse_args(argv)`
//! returning the command or clap's error) would let this target feed it
//! arbitrary argument vectors too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arbitrary::Arbitrary;
use durlog::vfs::PosixVfs;
use durlog::{Error, Log, Options, Tail};
use durlog_cli::append::{self, AppendArgs, DEFAULT_EVENT_TYPE};
use durlog_cli::escape::{escape, unescape};
use durlog_cli::inspect::{self, DUMP_HEADER, ReadArgs, ReadFormat};
use durlog_cli::verify;
use serde_json::Value;

use super::layout::{DirSpec, Entry};

/// Bytes of a stream name, event type or prefix, at most.
pub const NAME_BYTES_MAX: usize = 64;
/// Bytes of one run's stdin, at most.
pub const STDIN_BYTES_MAX: usize = 1024;
/// Lines of one run's stdin, at most (each is an append and a sync).
pub const LINES_MAX: usize = 32;

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum CliInput {
    Append(AppendInput),
    Inspect(InspectInput),
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct AppendInput {
    /// The stream (lossy UTF-8, up to `NAME_BYTES_MAX` bytes).
    pub stream: Vec<u8>,
    /// `--type`; none is the default, `line`.
    pub event_type: Option<Vec<u8>>,
    /// `--segment-bytes`: 0 (the default) or 64 + this % 1024.
    pub segment_bytes: u16,
    /// Stdin of the first run.
    pub first: Vec<u8>,
    /// Stdin of the second run.
    pub second: Vec<u8>,
    /// `read --from`.
    pub from: u8,
    /// `read --limit`.
    pub limit: Option<u8>,
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct InspectInput {
    pub dir: DirSpec,
    /// The prefix `streams` is given.
    pub prefix: Vec<u8>,
}

pub fn check(input: &CliInput) {
    match input {
        CliInput::Append(input) => check_append(input),
        CliInput::Inspect(input) => check_inspect(input),
    }
}

/// A scratch directory, on tmpfs if there is one.
fn scratch() -> tempfile::TempDir {
    let builder = tempfile::Builder::new().prefix("durlog-fuzz-cli-").clone();
    builder
        .tempdir_in("/dev/shm")
        .or_else(|_| builder.tempdir())
        .expect("creating a scratch directory")
}

/// `bytes` as a name: lossy UTF-8, cut to `NAME_BYTES_MAX` bytes at a char
/// boundary.
fn name(bytes: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    let mut cut = text.len().min(NAME_BYTES_MAX);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text
}

/// At most `STDIN_BYTES_MAX` bytes and `LINES_MAX` lines of `bytes`.
fn bounded_stdin(bytes: &[u8]) -> &[u8] {
    let bytes = &bytes[..bytes.len().min(STDIN_BYTES_MAX)];
    match bytes
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'\n')
        .nth(LINES_MAX - 1)
    {
        Some((at, _)) => &bytes[..=at],
        None => bytes,
    }
}

/// The lines `append` makes events of: split at line feeds, which are not
/// part of them; a last line without one counts too.
fn lines(stdin: &[u8]) -> Vec<&[u8]> {
    let mut lines: Vec<&[u8]> = stdin.split(|&byte| byte == b'\n').collect();
    if lines.last() == Some(&&b""[..]) {
        lines.pop();
    }
    lines
}

fn text(output: Vec<u8>, what: &str) -> String {
    String::from_utf8(output)
        .unwrap_or_else(|error| panic!("{what} printed invalid UTF-8: {error}"))
}

fn check_append(input: &AppendInput) {
    let root = scratch();
    let dir = root.path().join("log");
    let stream = name(&input.stream);
    let event_type = input
        .event_type
        .as_deref()
        .map_or_else(|| DEFAULT_EVENT_TYPE.to_owned(), name);
    let args = AppendArgs {
        dir: &dir,
        stream: &stream,
        event_type: &event_type,
        expected: durlog::Expected::Any,
    };
    let options = Options {
        segment_bytes: match input.segment_bytes {
            0 => 0,
            bytes => 64 + u64::from(bytes) % 1024,
        },
        ..Options::default()
    };
    let mut appended: Vec<&[u8]> = Vec::new();
    if stream.is_empty() {
        // A stream needs a name: refused, named, before anything is read.
        let stdin = bounded_stdin(&input.first);
        let (mut output, mut notes) = (Vec::new(), Vec::new());
        let refused = append::run(&args, options, &mut &stdin[..], &mut output, &mut notes);
        let error = refused.expect_err("an append to the stream named \"\"");
        assert!(
            error.one_line().contains("needs a name"),
            "{}",
            error.one_line()
        );
        assert!(output.is_empty(), "a refused append printed versions");
        return;
    }
    for stdin in [bounded_stdin(&input.first), bounded_stdin(&input.second)] {
        let (mut output, mut notes) = (Vec::new(), Vec::new());
        let count = append::run(
            &args,
            options.clone(),
            &mut &stdin[..],
            &mut output,
            &mut notes,
        )
        .unwrap_or_else(|error| panic!("append failed: {}", error.one_line()));
        let lines = lines(stdin);
        assert_eq!(
            count,
            lines.len() as u64,
            "append made {count} events of {} lines",
            lines.len()
        );
        let versions: String = (appended.len() + 1..=appended.len() + lines.len())
            .map(|version| format!("{version}\n"))
            .collect();
        assert_eq!(
            text(output, "append"),
            versions,
            "append printed other versions"
        );
        assert!(
            notes.is_empty(),
            "append noted a torn tail in a clean log: {}",
            text(notes, "append")
        );
        appended.extend(lines);
    }

    let verdict = verify::run(&dir);
    assert_eq!(
        verdict.exit_code,
        verify::EXIT_CLEAN,
        "verify after append: {}",
        verdict.message
    );
    check_read(input, &dir, &stream, &event_type, &appended);

    let mut output = Vec::new();
    inspect::streams(&dir, "", &mut output)
        .unwrap_or_else(|error| panic!("streams: {}", error.one_line()));
    let listed = if appended.is_empty() {
        String::new()
    } else {
        format!("{}\n", escape(stream.as_bytes()))
    };
    assert_eq!(
        text(output, "streams"),
        listed,
        "streams lists other streams"
    );

    let mut output = Vec::new();
    inspect::dump(&dir, &mut output).unwrap_or_else(|error| panic!("dump: {}", error.one_line()));
    let output = text(output, "dump");
    let dumped: Vec<&str> = output.lines().collect();
    assert_eq!(
        dumped.len(),
        appended.len() + 2,
        "dump printed another count of lines:\n{output}"
    );
    assert!(
        dumped[dumped.len() - 1].starts_with("# tail: clean"),
        "dump: {output}"
    );
}

/// `read` of the appended stream, as text and as JSON lines, gives back the
/// lines that `--from` and `--limit` select, byte for byte.
fn check_read(input: &AppendInput, dir: &Path, stream: &str, event_type: &str, appended: &[&[u8]]) {
    let from = u64::from(input.from);
    let limit = input.limit.map(u64::from);
    let skip = from.max(1) as usize - 1;
    let want: Vec<(usize, &[u8])> = appended
        .iter()
        .enumerate()
        .skip(skip)
        .take(limit.map_or(usize::MAX, |limit| limit as usize))
        .map(|(index, line)| (index + 1, *line))
        .collect();
    for format in [ReadFormat::Text, ReadFormat::Json] {
        let args = ReadArgs {
            dir,
            stream,
            from,
            limit,
            format,
        };
        let mut output = Vec::new();
        inspect::read(&args, &mut output)
            .unwrap_or_else(|error| panic!("read: {}", error.one_line()));
        let output = text(output, "read");
        let got: Vec<&str> = output.lines().collect();
        assert_eq!(
            got.len(),
            want.len(),
            "read {format:?} printed {} lines, {} events selected:\n{output}",
            got.len(),
            want.len()
        );
        for (line, (version, data)) in got.iter().zip(&want) {
            let (read_version, read_type, read_data) = match format {
                ReadFormat::Text => parse_text(line),
                ReadFormat::Json => parse_json(line),
            };
            assert_eq!(
                (read_version, read_type.as_slice(), read_data.as_slice()),
                (*version as u64, event_type.as_bytes(), *data),
                "read {format:?} printed {line:?}"
            );
        }
    }
}

/// Version, type and data of a line of `read`'s text output.
fn parse_text(line: &str) -> (u64, Vec<u8>, Vec<u8>) {
    let fields: Vec<&str> = line.split('\t').collect();
    let [version, event_type, at, data] = fields[..] else {
        panic!("read printed {} fields, not 4: {line:?}", fields.len());
    };
    assert!(
        at.ends_with('Z') && at.len() == 30,
        "read printed the time {at:?}"
    );
    let unescaped = |field: &str| {
        unescape(field).unwrap_or_else(|error| panic!("read printed {line:?}: {error}"))
    };
    (
        version
            .parse()
            .unwrap_or_else(|_| panic!("read printed the version {version:?}")),
        unescaped(event_type),
        unescaped(data),
    )
}

/// Version, type and data of a line of `read --json`.
fn parse_json(line: &str) -> (u64, Vec<u8>, Vec<u8>) {
    let value: Value = serde_json::from_str(line)
        .unwrap_or_else(|error| panic!("read --json printed {line:?}: {error}"));
    let version = value["version"].as_u64().expect("a version");
    let event_type = value["type"].as_str().expect("a type").as_bytes().to_vec();
    let data = match (value.get("data"), value.get("data_hex")) {
        (Some(Value::String(data)), None) => data.as_bytes().to_vec(),
        (None, Some(Value::String(hex))) => (0..hex.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).expect("hex digits"))
            .collect(),
        _ => panic!("read --json printed neither data nor data_hex: {line:?}"),
    };
    (version, event_type, data)
}

/// Every file and directory under `dir`, with the bytes of the files.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("listing the scratch directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path.clone());
                entries.insert(path, None);
            } else {
                let bytes = std::fs::read(&path).expect("reading a scratch file");
                entries.insert(path, Some(bytes));
            }
        }
    }
    entries
}

fn check_inspect(input: &InspectInput) {
    let root = scratch();
    let dir = root.path().join("log");
    std::fs::create_dir(&dir).expect("creating the log directory");
    for (name, entry) in &input.dir.build().entries {
        match entry {
            Entry::File(bytes) => std::fs::write(dir.join(name), bytes),
            Entry::Directory => std::fs::create_dir(dir.join(name)),
        }
        .expect("laying out the log directory");
    }
    let before = snapshot(&dir);
    let scan = durlog::recovery::verify(&PosixVfs, &dir);

    let verdict = verify::run(&dir);
    let expected_code = match &scan {
        Ok(report) => match report.tail {
            Tail::Clean | Tail::Zeros { .. } => verify::EXIT_CLEAN,
            Tail::Torn { .. } => verify::EXIT_TORN_TAIL,
            _ => verify::EXIT_OPERATIONAL,
        },
        Err(Error::Corrupt { .. }) => verify::EXIT_CORRUPT,
        Err(_) => verify::EXIT_OPERATIONAL,
    };
    assert_eq!(
        verdict.exit_code, expected_code,
        "verify's exit code does not match the scan {scan:?}: {}",
        verdict.message
    );
    assert!(
        !verdict.message.contains(['\n', '\r']),
        "verify printed more than a line: {:?}",
        verdict.message
    );

    let mut output = Vec::new();
    let dumped = inspect::dump(&dir, &mut output);
    let output = text(output, "dump");
    check_lines("dump", &output);
    let dumped_lines: Vec<&str> = output.lines().collect();
    assert_eq!(
        dumped_lines.first(),
        Some(&DUMP_HEADER),
        "dump's first line"
    );
    match (&dumped, &scan) {
        (Ok(()), Ok(report)) => {
            assert_eq!(
                dumped_lines.len() as u64,
                report.records + 2,
                "dump printed another count of lines:\n{output}"
            );
            assert!(
                dumped_lines[dumped_lines.len() - 1].starts_with("# tail: "),
                "dump: {output}"
            );
        }
        (Err(error), Err(_)) => check_error("dump", &dir, &error.one_line()),
        (dumped, scan) => panic!("dump gives {dumped:?} where the scan gives {scan:?}"),
    }

    let prefix = name(&input.prefix);
    let mut output = Vec::new();
    let listed = inspect::streams(&dir, &prefix, &mut output);
    let output = text(output, "streams");
    let log = Log::open_read_only(PosixVfs, &dir);
    match (&listed, &log) {
        (Ok(()), Ok(log)) => {
            let names: String = log
                .streams(&prefix)
                .iter()
                .map(|name| format!("{}\n", escape(name.as_bytes())))
                .collect();
            assert_eq!(output, names, "streams lists other streams");
        }
        (Err(error), Err(_)) => check_error("streams", &dir, &error.one_line()),
        (listed, log) => panic!(
            "streams gives {listed:?} where open_read_only gives {:?}",
            log.as_ref().err()
        ),
    }
    assert_eq!(
        log.is_ok(),
        scan.is_ok(),
        "open_read_only and the scan disagree"
    );
    if let Ok(log) = &log {
        for stream in log.streams("") {
            let args = ReadArgs {
                dir: &dir,
                stream: &stream,
                from: 1,
                limit: None,
                format: ReadFormat::Text,
            };
            let mut output = Vec::new();
            inspect::read(&args, &mut output)
                .unwrap_or_else(|error| panic!("read {stream:?}: {}", error.one_line()));
            let output = text(output, "read");
            check_lines("read", &output);
            let versions: Vec<u64> = output.lines().map(|line| parse_text(line).0).collect();
            let want: Vec<u64> = (1..=log.version(&stream)).collect();
            assert_eq!(versions, want, "read {stream:?} printed other versions");
        }
    }
    assert_eq!(
        snapshot(&dir),
        before,
        "a read-only command changed the directory"
    );
}

/// Output is lines, each ending in a line feed, with no carriage return.
fn check_lines(command: &str, output: &str) {
    assert!(
        (output.is_empty() || output.ends_with('\n')) && !output.contains('\r'),
        "{command} printed a broken line: {output:?}"
    );
}

/// A command's error is one line naming the directory.
fn check_error(command: &str, dir: &Path, message: &str) {
    assert!(
        !message.contains(['\n', '\r']) && message.contains(&dir.display().to_string()),
        "{command}'s error is not one line naming {}: {message:?}",
        dir.display()
    );
}
