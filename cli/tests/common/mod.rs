//! Helpers shared by the CLI's integration tests: running the real `durlog`
//! binary, writing logs with a fixed clock through the library, damaging
//! them, and snapshotting every byte of a directory.
//!
//! The tests live in `cli/tests/` rather than the workspace's `tests/`
//! package because only here does Cargo build the `durlog` binary for them
//! and hand over its path (`CARGO_BIN_EXE_durlog`).

#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use durlog::vfs::PosixVfs;
use durlog::{Clock, Event, Expected, Log, Options};

/// The `durlog` binary Cargo built for this test run.
pub const DURLOG: &str = env!("CARGO_BIN_EXE_durlog");

/// A `durlog` command with `args`.
pub fn durlog<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(DURLOG);
    command.args(args);
    command
}

/// Runs `durlog args` with `stdin` as its input and returns what it did.
pub fn run_with_input<I, S>(args: I, stdin: &[u8]) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut child = durlog(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn durlog");
    let mut input = child.stdin.take().expect("stdin is piped");
    input.write_all(stdin).expect("write durlog's stdin");
    drop(input);
    child.wait_with_output().expect("wait for durlog")
}

/// Runs `durlog args` with no input.
pub fn run<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    run_with_input(args, b"")
}

/// The process's exit code; panics (with its stderr) if a signal ended it.
pub fn exit_code(output: &Output) -> i32 {
    output.status.code().unwrap_or_else(|| {
        panic!(
            "durlog was killed by a signal: {:?}; stderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// Asserts `output` failed with `code` and exactly one line on stderr that
/// contains every one of `needles`; returns that line.
pub fn assert_one_line_error(output: &Output, code: i32, needles: &[&str]) -> String {
    let stderr = stderr(output);
    assert_eq!(exit_code(output), code, "exit code; stderr: {stderr}");
    assert!(
        stderr.ends_with('\n'),
        "stderr does not end with a line feed: {stderr:?}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "stderr is not one line: {stderr:?}"
    );
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "stderr {stderr:?} does not name {needle:?}"
        );
    }
    stderr.trim_end().to_owned()
}

/// A clock that returns `times` in order, one per append (the log reads
/// the clock once per append), and panics when they run out.
pub fn fixed_clock(times: &[i64]) -> Clock {
    let times = times.to_vec();
    let next = AtomicUsize::new(0);
    Arc::new(move || {
        let at = next.fetch_add(1, Ordering::SeqCst);
        *times
            .get(at)
            .expect("the test's fixed clock ran out of times")
    })
}

/// One append of a test log: stream, then (type, data) per event.
pub type Append<'a> = (&'a str, &'a [(&'a str, &'a [u8])]);

/// Writes `appends` into a log in `dir` with segments of `segment_bytes`,
/// each append at the matching time of `times`.
pub fn write_log(dir: &Path, segment_bytes: u64, times: &[i64], appends: &[Append<'_>]) {
    assert_eq!(times.len(), appends.len(), "one time per append");
    let options = Options {
        segment_bytes,
        now: Some(fixed_clock(times)),
        ..Options::default()
    };
    // No thread of the log's own: the bytes must not depend on its timing.
    let log = Log::open_with_vfs(PosixVfs, dir, options).expect("open the test log");
    for (stream, events) in appends {
        let events: Vec<Event> = events
            .iter()
            .map(|(kind, data)| Event::new(*kind, *data))
            .collect();
        log.append(stream, Expected::Any, &events)
            .expect("append to the test log");
    }
    log.close().expect("close the test log");
}

/// A log with three segments (records of 48 to 60 bytes, 128-byte
/// segments): the segments are returned in order.
pub fn write_three_segment_log(dir: &Path) -> Vec<PathBuf> {
    let appends: Vec<Append<'_>> = vec![
        ("s", &[("T", b"hi")]),
        ("s", &[("t", b"one")]),
        ("other", &[("t", b"two")]),
        ("s", &[("t", b"three")]),
        ("other", &[("t", b"four")]),
        ("s", &[("t", b"five")]),
    ];
    let times: Vec<i64> = (0..appends.len() as i64).collect();
    write_log(dir, 128, &times, &appends);
    let segments = segment_files(dir);
    assert_eq!(segments.len(), 3, "the test log should span three segments");
    segments
}

/// The segment files of `dir`, in name (= seq) order.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list the log directory")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    files.sort();
    files
}

/// Flips one bit of the byte at `offset` of `file`.
pub fn flip_bit(file: &Path, offset: usize) {
    let mut bytes = std::fs::read(file).expect("read the file to damage");
    bytes[offset] ^= 0x10;
    std::fs::write(file, bytes).expect("write the damaged file");
}

/// Appends `bytes` to `file` (a torn tail, when they are not a record).
pub fn append_bytes(file: &Path, bytes: &[u8]) {
    let mut handle = std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .expect("open for append");
    handle.write_all(bytes).expect("append bytes");
}

/// Every entry under `root` (directories too, as `None`) with its bytes, so
/// a test can prove a command changed nothing.
pub fn snapshot_tree(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut tree = BTreeMap::new();
    if !root.exists() {
        return tree;
    }
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("list a directory") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                tree.insert(path.clone(), None);
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read a file");
                tree.insert(path, Some(bytes));
            }
        }
    }
    tree
}
