//! Helpers shared by the CLI's integration tests: running the real `durlog`
//! binary, writing logs with a fixed clock through the library, damaging
//! them, and snapshotting every byte of a directory.
//!
//! The tests live in `cli/tests/` rather than the workspace's `tests/`
//! package because only here does Cargo build the `durlog` binary for them
//! and hand over its path (`CARGO_BIN_EXE_durlog`).

#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

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

/// How long one `durlog` command may run before the test kills it and
/// fails. Each command of these tests takes milliseconds (the slowest,
/// `append` of a few lines, under 20 ms); a minute leaves room for a
/// loaded machine and still ends a hang well before anyone gives up.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// How long a test that runs threads or processes of its own may take (see
/// [`within`]). The slowest of them with default settings, the busy writer
/// of `cli_lock` and the kill loop, take 0.5 to 3 s; a minute leaves room
/// for a loaded machine.
pub const TEST_LIMIT: Duration = Duration::from_secs(60);

/// Runs `durlog args` with `stdin` as its input and returns what it did;
/// fails the test if it runs longer than [`COMMAND_LIMIT`].
pub fn run_with_input<I, S>(args: I, stdin: &[u8]) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    run_with_input_within(args, stdin, COMMAND_LIMIT)
}

/// [`run_with_input`] with a time limit of the caller's.
pub fn run_with_input_within<I, S>(args: I, stdin: &[u8], limit: Duration) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = durlog(args);
    let what = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn durlog");
    let mut input = child.stdin.take().expect("stdin is piped");
    let stdin = stdin.to_vec();
    // On a thread, so a child that never reads cannot hold the test past
    // its limit. A child may also exit before it reads (an error at open):
    // the write then fails, which is no failure of the test; what the child
    // printed and its exit code say what happened.
    let writer = thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let output = wait_with_output_within(child, &what, limit);
    writer.join().expect("the thread writing durlog's stdin");
    output
}

/// Reads all of `pipe` on a thread of its own.
fn read_on_thread(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// `Child::wait_with_output`, for at most `limit`: a child still running
/// then is killed (SIGKILL) and the test fails naming `what`.
/// `wait_with_output` has no limit, and `cargo test` none per test, so a
/// hung child would hang the whole run without a name.
pub fn wait_with_output_within(mut child: Child, what: &str, limit: Duration) -> Output {
    drop(child.stdin.take());
    let stdout = child.stdout.take().map(read_on_thread);
    let stderr = child.stderr.take().map(read_on_thread);
    let status = wait_within(&mut child, what, limit);
    let collect = |reader: Option<JoinHandle<Vec<u8>>>| {
        reader.map_or_else(Vec::new, |reader| {
            reader.join().expect("the thread reading a pipe")
        })
    };
    Output {
        status,
        stdout: collect(stdout),
        stderr: collect(stderr),
    }
}

/// `Child::wait`, for at most `limit`: a child still running then is
/// killed (SIGKILL) and the test fails naming `what`.
pub fn wait_within(child: &mut Child, what: &str, limit: Duration) -> ExitStatus {
    let started = Instant::now();
    // Polled: std has no wait with a timeout. Short pauses first, as most
    // commands end within milliseconds.
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait().expect("poll a child process") {
            return status;
        }
        if started.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} was still running after {limit:?}: killed it (hung?)");
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Runs `body` on a thread of its own and returns what it returns, or
/// fails the test, naming `name` and `limit`, if it has not finished within
/// `limit`. `cargo test` has no time limit per test: a test whose threads
/// or processes hang would hang the run, and no line would say which test
/// it was. On a timeout the hung thread is left behind; the harness ends
/// the process once every test has finished. A panic in `body` is the
/// test's own and goes on unchanged.
pub fn within<T: Send + 'static>(
    name: &str,
    limit: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (finished, finished_in_time) = mpsc::channel();
    let body = thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let result = body();
            let _ = finished.send(());
            result
        })
        .expect("spawn the test's thread");
    match finished_in_time.recv_timeout(limit) {
        // Disconnected: the body panicked; join hands over its panic.
        Ok(()) | Err(RecvTimeoutError::Disconnected) => body
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(RecvTimeoutError::Timeout) => panic!(
            "test {name} did not finish within its limit of {limit:?}: a hang? (its thread is left running)"
        ),
    }
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
