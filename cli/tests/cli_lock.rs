//! One writer per log (SPEC 9), with real `durlog` processes: a second
//! `durlog append` on a directory that another holds fails at once, with
//! one line naming the directory, and changes nothing; a writer killed with
//! SIGKILL leaves the log to the next one at once (the kernel drops its
//! lock) with every version it printed; the read-only commands take no
//! lock, so they work beside a writer, idle or busy, and change nothing.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{
    TEST_LIMIT, assert_one_line_error, durlog, exit_code, run, run_with_input_within,
    snapshot_tree, stdout, wait_within, within,
};

/// How long a command that must not wait for the lock may take: a refused
/// writer, or the writer after a kill. Both take milliseconds; the limit
/// only keeps a hang from stalling the run.
const PROMPT_LIMIT: Duration = Duration::from_secs(30);
/// How long the test waits for a running writer's next version.
const VERSION_LIMIT: Duration = Duration::from_secs(30);
const SIGKILL: i32 = 9;
/// Small segments, so that a burst of appends rolls: kills and reads then
/// meet rolls too.
const SMALL_SEGMENT_BYTES: &str = "4096";

/// The data of the line the tests send as version `version`.
fn line(version: u64) -> String {
    format!("line {version}")
}

/// A `durlog append DIR s` running beside the test, reading lines from a
/// pipe the test holds open, its printed versions collected on a thread.
struct Writer {
    child: Child,
    stdin: Option<ChildStdin>,
    versions: Receiver<u64>,
    stderr: Option<JoinHandle<String>>,
}

impl Writer {
    fn start(dir: &Path, options: &[&str]) -> Writer {
        let mut child = durlog([Path::new("append"), dir, Path::new("s")])
            .args(options)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn durlog append");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, versions) = mpsc::channel();
        // Ends at the end of the output, when the process has exited. A
        // line cut by a kill (no line feed) is no promise, and is dropped.
        thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            loop {
                line.clear();
                match stdout.read_line(&mut line) {
                    Ok(_) if line.ends_with('\n') => {}
                    _ => return,
                }
                let version = line
                    .trim_end()
                    .parse()
                    .unwrap_or_else(|_| panic!("not a version: {line:?}"));
                if sender.send(version).is_err() {
                    return;
                }
            }
        });
        let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
        let stderr = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text);
            text
        });
        Writer {
            stdin: child.stdin.take(),
            child,
            versions,
            stderr: Some(stderr),
        }
    }

    /// Sends `lines`, each ending in a line feed, without waiting.
    fn send(&mut self, lines: impl IntoIterator<Item = String>) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        let mut input = Vec::new();
        for line in lines {
            input.extend_from_slice(line.as_bytes());
            input.push(b'\n');
        }
        stdin
            .write_all(&input)
            .expect("write durlog append's stdin");
        stdin.flush().expect("flush durlog append's stdin");
    }

    /// The next version the writer prints.
    fn next_version(&self) -> u64 {
        match self.versions.recv_timeout(VERSION_LIMIT) {
            Ok(version) => version,
            Err(RecvTimeoutError::Timeout) => {
                panic!("durlog append printed no version in {VERSION_LIMIT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("durlog append closed its output before the version was printed")
            }
        }
    }

    /// Every version printed so far and not yet taken, without waiting.
    fn versions_so_far(&self) -> Vec<u64> {
        let mut versions = Vec::new();
        loop {
            match self.versions.try_recv() {
                Ok(version) => versions.push(version),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return versions,
            }
        }
    }

    /// Appends `line` and returns the version printed for it, which says
    /// that it is durable.
    fn append(&mut self, line: String) -> u64 {
        self.send([line]);
        self.next_version()
    }

    /// Ends the input, waits for the exit, and returns it with the versions
    /// printed and not yet taken, and everything on stderr.
    fn finish(mut self) -> (ExitStatus, Vec<u64>, String) {
        drop(self.stdin.take());
        let status = wait_within(
            &mut self.child,
            "durlog append, after the end of its input",
            PROMPT_LIMIT,
        );
        self.remains(status)
    }

    /// Kills the writer (SIGKILL) wherever it is, and returns how it ended,
    /// the versions it printed and the test has not taken yet (the whole
    /// lines in the pipe: each was printed before the kill, so each is a
    /// promise), and everything on stderr.
    fn kill(mut self) -> (ExitStatus, Vec<u64>, String) {
        self.child.kill().expect("kill durlog append");
        let status = wait_within(&mut self.child, "durlog append, killed", PROMPT_LIMIT);
        self.remains(status)
    }

    fn remains(&mut self, status: ExitStatus) -> (ExitStatus, Vec<u64>, String) {
        // The process is gone, so its output ends: the reader thread sends
        // what is left and hangs up.
        let versions = self.versions.iter().collect();
        let stderr = self
            .stderr
            .take()
            .expect("stderr is read once")
            .join()
            .expect("the thread reading stderr");
        (status, versions, stderr)
    }
}

impl Drop for Writer {
    /// A test that fails midway leaves no writer running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stream `s` as `durlog read` prints it: (version, data) per event.
fn read_stream(dir: &Path) -> Vec<(u64, String)> {
    let output = run([Path::new("read"), dir, Path::new("s")]);
    assert_eq!(exit_code(&output), 0, "{}", common::stderr(&output));
    assert_eq!(common::stderr(&output), "");
    stdout(&output)
        .lines()
        .map(|text| {
            let fields: Vec<&str> = text.split('\t').collect();
            assert_eq!(fields.len(), 4, "not an event line: {text:?}");
            assert_eq!(fields[1], "line", "{text:?}");
            let version = fields[0].parse().expect("a version");
            (version, fields[3].to_owned())
        })
        .collect()
}

/// (version, line(version)) for every version in `versions`.
fn expected_events(versions: std::ops::RangeInclusive<u64>) -> Vec<(u64, String)> {
    versions.map(|version| (version, line(version))).collect()
}

/// While one `durlog append` holds the log, a second fails at once with
/// exit 1, one line on stderr naming the directory and nothing on stdout,
/// and changes no byte; the first goes on, and every version it printed is
/// there; once it has ended, the log is free again.
#[test]
fn a_second_append_fails_at_once_while_the_first_holds_the_log() {
    within(
        "a_second_append_fails_at_once_while_the_first_holds_the_log",
        TEST_LIMIT,
        || {
            let root = tempfile::tempdir().expect("tempdir");
            let dir = root.path().join("log");
            let mut first = Writer::start(&dir, &[]);
            let printed: Vec<u64> = (1..=3).map(|version| first.append(line(version))).collect();
            assert_eq!(printed, [1, 2, 3]);

            let before = snapshot_tree(&dir);
            let started = Instant::now();
            let second = run_with_input_within(
                [Path::new("append"), &dir, Path::new("s")],
                b"from the second writer\n",
                PROMPT_LIMIT,
            );
            let took = started.elapsed();
            let message = assert_one_line_error(&second, 1, &[&dir.display().to_string()]);
            assert_eq!(
                message,
                format!(
                    "durlog append: log {} is in use by another process or Log",
                    dir.display()
                )
            );
            assert_eq!(stdout(&second), "", "the refused writer printed a version");
            assert_eq!(
                snapshot_tree(&dir),
                before,
                "the refused writer changed the directory"
            );
            eprintln!("the second writer was refused in {took:.2?}: {message}");

            assert_eq!(first.append(line(4)), 4, "the first writer goes on");
            let (status, unread, stderr) = first.finish();
            assert!(status.success(), "the first writer: {status:?}; {stderr}");
            assert!(
                unread.is_empty(),
                "versions printed after the last taken: {unread:?}"
            );
            assert_eq!(stderr, "");
            assert_eq!(read_stream(&dir), expected_events(1..=4));

            let third = run_with_input_within(
                [Path::new("append"), &dir, Path::new("s")],
                format!("{}\n", line(5)).as_bytes(),
                PROMPT_LIMIT,
            );
            assert_eq!(exit_code(&third), 0, "{}", common::stderr(&third));
            assert_eq!(stdout(&third), "5\n");
            assert_eq!(read_stream(&dir), expected_events(1..=5));
        },
    );
}

/// A writer killed with SIGKILL, idle or in the middle of a burst of
/// appends (and of segment rolls), holds the log no more: the next `durlog
/// append` opens it at once and continues after every version the killed
/// one printed (and at most one more it had made durable unprinted).
#[test]
fn a_killed_writer_leaves_the_log_at_once_with_every_printed_version() {
    within(
        "a_killed_writer_leaves_the_log_at_once_with_every_printed_version",
        TEST_LIMIT,
        || {
            let root = tempfile::tempdir().expect("tempdir");
            let dir = root.path().join("log");
            // What the log must hold: (version, data) per event.
            let mut model: Vec<(u64, String)> = Vec::new();
            // Killed while it waits for input, then killed mid-burst.
            for burst in [0, 500] {
                let mut writer = Writer::start(&dir, &["--segment-bytes", SMALL_SEGMENT_BYTES]);
                let first = model.len() as u64 + 1;
                let mut printed: Vec<u64> = (first..first + 3)
                    .map(|version| writer.append(line(version)))
                    .collect();
                if burst > 0 {
                    let next = first + 3;
                    writer.send((next..next + burst).map(line));
                    printed.extend((0..20).map(|_| writer.next_version()));
                }
                let (status, unread, stderr) = writer.kill();
                assert_eq!(status.signal(), Some(SIGKILL), "{status:?}; {stderr}");
                printed.extend(unread);
                let dense: Vec<u64> = (first..first + printed.len() as u64).collect();
                assert_eq!(printed, dense, "printed versions, dense from {first}");
                let last_printed = first + printed.len() as u64 - 1;

                let started = Instant::now();
                let next = run_with_input_within(
                    [Path::new("append"), &dir, Path::new("s")],
                    b"after the kill\n",
                    PROMPT_LIMIT,
                );
                let took = started.elapsed();
                assert_eq!(exit_code(&next), 0, "{}", common::stderr(&next));
                let version: u64 = stdout(&next).trim_end().parse().expect("a version");
                assert!(
                    version == last_printed + 1 || version == last_printed + 2,
                    "after the kill the next append got version {version}, but {last_printed} were printed \
                     and at most one more append was under way"
                );
                eprintln!(
                    "burst of {burst}: killed after printing version {last_printed}; the next writer opened \
                     and appended in {took:.2?}, at version {version}; its stderr: {:?}",
                    common::stderr(&next)
                );
                // The one unprinted append that may have become durable
                // was the next line sent, whole.
                model.extend(expected_events(first..=version - 1));
                model.push((version, "after the kill".to_owned()));
                assert_eq!(read_stream(&dir), model);
                let verdict = run([Path::new("verify"), &dir]);
                assert_eq!(exit_code(&verdict), 0, "{}", common::stderr(&verdict));
            }
        },
    );
}

/// The read-only commands take no lock: beside a writer that holds the log
/// (idle, every append acknowledged) `read`, `dump`, `verify` and `streams`
/// succeed, see every acknowledged event, call the log clean, and change
/// no byte; the writer goes on after them.
#[test]
fn read_only_commands_work_beside_an_idle_writer() {
    within(
        "read_only_commands_work_beside_an_idle_writer",
        TEST_LIMIT,
        || {
            let root = tempfile::tempdir().expect("tempdir");
            let dir = root.path().join("log");
            let mut writer = Writer::start(&dir, &[]);
            assert_eq!(writer.append(line(1)), 1);
            assert_eq!(writer.append(line(2)), 2);
            let before = snapshot_tree(&dir);

            assert_eq!(read_stream(&dir), expected_events(1..=2));
            let dump = run([Path::new("dump"), &dir]);
            assert_eq!(exit_code(&dump), 0, "{}", common::stderr(&dump));
            let records = stdout(&dump)
                .lines()
                .filter(|text| text.starts_with("00000000000000000001.log\t"))
                .count();
            assert_eq!(records, 2, "dump: {}", stdout(&dump));
            let verdict = run([Path::new("verify"), &dir]);
            assert_eq!(exit_code(&verdict), 0, "{}", common::stderr(&verdict));
            let streams = run([Path::new("streams"), &dir]);
            assert_eq!(exit_code(&streams), 0, "{}", common::stderr(&streams));
            assert_eq!(stdout(&streams), "s\n");
            assert_eq!(
                snapshot_tree(&dir),
                before,
                "a read-only command changed the directory"
            );

            assert_eq!(writer.append(line(3)), 3, "the writer goes on");
            let (status, unread, stderr) = writer.finish();
            assert!(status.success(), "{status:?}; {stderr}");
            assert!(
                unread.is_empty(),
                "versions printed after the last taken: {unread:?}"
            );
            assert_eq!(read_stream(&dir), expected_events(1..=3));
        },
    );
}

/// Beside a writer busy with a burst of appends and segment rolls, the
/// read-only commands still work: `read` sees at least every version
/// acknowledged before it started, dense, each with its line; `verify`
/// finds the log clean or a torn tail in the making (exit 1), never
/// damage; `dump` and `streams` succeed. None of them disturbs the writer,
/// which ends with every line appended.
#[test]
fn read_only_commands_work_beside_a_busy_writer() {
    within(
        "read_only_commands_work_beside_a_busy_writer",
        TEST_LIMIT,
        || {
            const LINES: u64 = 2_000;
            let root = tempfile::tempdir().expect("tempdir");
            let dir = root.path().join("log");
            let mut writer = Writer::start(&dir, &["--segment-bytes", SMALL_SEGMENT_BYTES]);
            assert_eq!(writer.append(line(1)), 1);
            writer.send((2..=LINES).map(line));
            let mut acknowledged = 1;
            let mut rounds = 0;
            let mut torn_tails = 0;
            while acknowledged < LINES {
                rounds += 1;
                acknowledged = writer
                    .versions_so_far()
                    .last()
                    .copied()
                    .unwrap_or(acknowledged);
                let events = read_stream(&dir);
                assert!(
                    events.len() as u64 >= acknowledged,
                    "read saw {} events after {acknowledged} were acknowledged",
                    events.len()
                );
                assert_eq!(events, expected_events(1..=events.len() as u64));
                let verdict = run([Path::new("verify"), &dir]);
                match exit_code(&verdict) {
                    0 => {}
                    1 => torn_tails += 1,
                    code => panic!(
                        "verify beside a writer exited {code}: {}{}",
                        stdout(&verdict),
                        common::stderr(&verdict)
                    ),
                }
                for command in ["dump", "streams"] {
                    let output = run([Path::new(command), &dir]);
                    assert_eq!(
                        exit_code(&output),
                        0,
                        "{command}: {}",
                        common::stderr(&output)
                    );
                }
            }
            let (status, unread, stderr) = writer.finish();
            assert!(status.success(), "{status:?}; {stderr}");
            assert!(
                unread.is_empty(),
                "versions printed after the last taken: {unread:?}"
            );
            assert_eq!(stderr, "");
            assert_eq!(read_stream(&dir), expected_events(1..=LINES));
            let verdict = run([Path::new("verify"), &dir]);
            assert_eq!(exit_code(&verdict), 0, "{}", common::stderr(&verdict));
            eprintln!(
                "{rounds} rounds of read, verify, dump and streams beside {LINES} appends; \
                 verify saw {torn_tails} torn tails in the making"
            );
        },
    );
}
