//! The real-process kill loop: `durlog append` is fed lines, and killed
//! with SIGKILL at a seeded random instant; after each kill the log is
//! reopened and every version the process printed must be there with its
//! line, versions dense from 1.
//!
//! A printed version is a promise: `append` prints it only after the
//! `fdatasync` covering it returned. The process runs one append at a time
//! and prints before it starts the next, so after a kill the stream holds
//! exactly the printed versions, plus at most one more (an append that was
//! written, or even synced, but not yet printed), whose data must then be
//! its line, whole. The directory is shared by all rounds, so each round
//! also starts with recovery of the previous round's crash (a torn tail is
//! truncated by the next `append`), and 32 KiB segments make kills land in
//! segment rolls too.
//!
//! This kills a process, not the machine: the page cache survives, so it
//! proves the sync protocol and recovery against real kernel behaviour, not
//! power loss (the simulator in `sim/` covers that).
//!
//! - `DURLOG_KILL_LOOPS=1000 cargo test -p durlog-cli --test kill_loop --
//!   --nocapture` runs 1,000 rounds instead of 30, with progress every 100
//!   (3 min 45 s in a debug build on 2 busy cores; 30 rounds take 2 s).
//! - `DURLOG_KILL_SEED=N` replays a seed: the lines and the kill instants
//!   repeat, the process's timing does not, so a failure may need a few runs.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{DURLOG, TEST_LIMIT, exit_code, run, within};
use durlog::Log;
use durlog::vfs::PosixVfs;
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const LOOPS_DEFAULT: u64 = 30;
/// Lines offered to each process: more than it can append before the
/// latest kill instant (appends take 125 us at best here), so nearly every
/// round ends in a kill; one that ends first is checked all the same.
const LINES_PER_ROUND: usize = 500;
const LINE_BYTES_MAX: usize = 300;
const SEGMENT_BYTES: &str = "32768";
/// The latest kill instant after the start of the process.
const KILL_DELAY_MAX_US: u64 = 30_000;
/// Kill after this many printed versions at most (the other strategy).
const KILL_AFTER_VERSIONS_MAX: usize = 100;
const SIGKILL: i32 = 9;
/// Every this many rounds (and after the last) all the stream's data is
/// compared with the model; the other rounds compare the versions since the
/// previous round, and the version count. Reading the whole history every
/// round would make 1,000 rounds quadratic.
const FULL_CHECK_EVERY_ROUNDS: u64 = 25;
/// The time limit per round, for many rounds (at least [`TEST_LIMIT`] in
/// all): a round takes 16 ms alone, 225 ms in a debug build on 2 busy cores.
const ROUND_LIMIT: Duration = Duration::from_secs(2);

/// Prints the seed if the test panics (the assertion messages carry it too).
struct SeedReport(u64);

impl Drop for SeedReport {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "kill loop failed: reproduce with DURLOG_KILL_SEED={}",
                self.0
            );
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
    )
}

#[test]
fn acknowledged_versions_survive_sigkill_at_random_instants() {
    let seed = env_u64("DURLOG_KILL_SEED").unwrap_or_else(rand::random);
    let loops = env_u64("DURLOG_KILL_LOOPS").unwrap_or(LOOPS_DEFAULT);
    let limit = TEST_LIMIT.max(ROUND_LIMIT * u32::try_from(loops).unwrap_or(u32::MAX));
    within(
        "acknowledged_versions_survive_sigkill_at_random_instants",
        limit,
        move || kill_loop(seed, loops),
    );
}

/// The body of [`acknowledged_versions_survive_sigkill_at_random_instants`]:
/// `loops` rounds from `seed`.
fn kill_loop(seed: u64, loops: u64) {
    let _report = SeedReport(seed);
    eprintln!("kill loop: seed={seed} loops={loops}");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut state = LoopState {
        rng: ChaCha8Rng::seed_from_u64(seed),
        seed,
        lines: Vec::new(),
        tally: Tally::default(),
    };
    let started = Instant::now();
    for round in 0..loops {
        let full_check = (round + 1) % FULL_CHECK_EVERY_ROUNDS == 0 || round + 1 == loops;
        state.round(dir.path(), round, full_check);
        if (round + 1) % 100 == 0 {
            eprintln!(
                "kill loop: {} rounds in {:.2?}",
                round + 1,
                started.elapsed()
            );
        }
    }
    let tally = &state.tally;
    eprintln!(
        "kill loop: seed={seed}: {loops} rounds in {:.2?}: {} killed, {} finished first; {} versions acknowledged, \
         {} written but unprinted at the kill, {} torn tails seen by verify, {} segments",
        started.elapsed(),
        tally.killed,
        tally.finished,
        state.lines.len() as u64 - tally.unprinted_present,
        tally.unprinted_present,
        tally.torn_tails,
        common::segment_files(dir.path()).len()
    );
}

#[derive(Default)]
struct Tally {
    killed: u64,
    finished: u64,
    unprinted_present: u64,
    torn_tails: u64,
}

struct LoopState {
    rng: ChaCha8Rng,
    seed: u64,
    /// The model: the line of every version found in the log so far.
    lines: Vec<Vec<u8>>,
    tally: Tally,
}

/// How a round picks its kill instant.
#[derive(Debug)]
enum KillAt {
    /// This long after the spawn: lands anywhere, start-up and recovery too.
    Delay(Duration),
    /// Right after this many versions were printed, plus a short spin:
    /// lands inside an append.
    AfterVersions(usize, Duration),
}

impl LoopState {
    fn round(&mut self, dir: &Path, round: u64, full_check: bool) {
        let context = format!("seed={} round={round}", self.seed);
        let lines: Vec<Vec<u8>> = (0..LINES_PER_ROUND)
            .map(|_| random_line(&mut self.rng))
            .collect();
        let kill_at = if self.rng.random_bool(0.5) {
            KillAt::Delay(Duration::from_micros(
                self.rng.random_range(0..KILL_DELAY_MAX_US),
            ))
        } else {
            KillAt::AfterVersions(
                self.rng.random_range(0..KILL_AFTER_VERSIONS_MAX),
                Duration::from_micros(self.rng.random_range(0..400)),
            )
        };

        let (status, printed, stderr) = append_and_kill(dir, &lines, &kill_at);
        match status.signal() {
            Some(SIGKILL) => self.tally.killed += 1,
            None if status.success() => self.tally.finished += 1,
            _ => panic!("{context}: durlog append failed on its own: {status:?}; stderr: {stderr}"),
        }

        // Every printed version, in order, continuing the stream.
        let base = self.lines.len() as u64;
        let expected: Vec<u64> = (base + 1..=base + printed.len() as u64).collect();
        assert_eq!(
            printed, expected,
            "{context}: printed versions are not dense after {base} ({kill_at:?})"
        );

        // What a fresh open finds.
        let log = Log::open_read_only(PosixVfs, dir).unwrap_or_else(|error| {
            panic!("{context}: reopen after the kill failed: {error}; stderr: {stderr}")
        });
        let version = log.version("s");
        let last_printed = base + printed.len() as u64;
        assert!(
            version == last_printed || version == last_printed + 1,
            "{context}: the stream is at version {version} after the kill, but {last_printed} were printed \
             and only one more append can have been in flight ({kill_at:?})"
        );
        let found_now = (version - base) as usize;
        self.tally.unprinted_present += version - last_printed;
        self.lines.extend(lines.into_iter().take(found_now));
        let from = if full_check { 1 } else { base + 1 };
        let events = log
            .read("s", from, usize::MAX)
            .unwrap_or_else(|error| panic!("{context}: read failed: {error}"));
        assert_eq!(
            events.len() as u64,
            (version + 1).saturating_sub(from),
            "{context}: read from {from} returned a different count than the version {version} implies"
        );
        for (event, line) in events.iter().zip(&self.lines[from as usize - 1..]) {
            assert_eq!(
                event.data, *line,
                "{context}: version {} holds other data than its line",
                event.version
            );
            assert_eq!(
                event.event_type, "line",
                "{context}: version {}",
                event.version
            );
        }
        // A kill before the first acknowledged append leaves no stream at all.
        let streams: &[&str] = if version == 0 { &[] } else { &["s"] };
        assert_eq!(log.streams(""), streams, "{context}");
        drop(log);

        // `verify` sees the same log: clean, or a torn tail (never damage).
        let verdict = run([Path::new("verify"), dir]);
        match exit_code(&verdict) {
            0 => {}
            1 => self.tally.torn_tails += 1,
            code => panic!(
                "{context}: verify exited {code}: {}",
                common::stderr(&verdict)
            ),
        }
    }
}

/// A line of 0 to LINE_BYTES_MAX random bytes, any but a line feed.
fn random_line(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut line = vec![0; rng.random_range(0..=LINE_BYTES_MAX)];
    rng.fill_bytes(&mut line);
    for byte in &mut line {
        if *byte == b'\n' {
            *byte = b'n';
        }
    }
    line
}

/// Spawns `durlog append DIR s`, feeds it `lines`, kills it (SIGKILL) at
/// `kill_at`, and returns how it ended, the versions it printed (whole
/// lines only), and its stderr.
fn append_and_kill(
    dir: &Path,
    lines: &[Vec<u8>],
    kill_at: &KillAt,
) -> (ExitStatus, Vec<u64>, String) {
    let mut child = Command::new(DURLOG)
        .args([
            Path::new("append"),
            dir,
            Path::new("s"),
            Path::new("--segment-bytes"),
            Path::new(SEGMENT_BYTES),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn durlog append");
    let writer = feed(&mut child, lines);
    let (versions, reader) = watch_versions(&mut child);
    let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
    let stderr_reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });

    let mut printed = Vec::new();
    match kill_at {
        KillAt::Delay(delay) => thread::sleep(*delay),
        KillAt::AfterVersions(count, spin) => {
            let deadline = Instant::now() + Duration::from_secs(10);
            while printed.len() < *count {
                match versions.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(version) => printed.push(version),
                    Err(RecvTimeoutError::Disconnected) => break,
                    Err(RecvTimeoutError::Timeout) => panic!(
                        "durlog append printed only {} versions in 10 s",
                        printed.len()
                    ),
                }
            }
            let spin_until = Instant::now() + *spin;
            while Instant::now() < spin_until {
                std::hint::spin_loop();
            }
        }
    }
    // SIGKILL on Unix; an error only means it already exited.
    let _ = child.kill();
    let status = child.wait().expect("wait for durlog append");
    reader.join().expect("stdout reader");
    printed.extend(versions.iter());
    let _ = writer.join();
    let stderr = stderr_reader.join().expect("stderr reader");
    (status, printed, stderr)
}

/// Writes every line to the child's stdin on a thread; errors (the child
/// is dead) end it.
fn feed(child: &mut Child, lines: &[Vec<u8>]) -> JoinHandle<()> {
    let mut input = Vec::with_capacity(lines.iter().map(|line| line.len() + 1).sum());
    for line in lines {
        input.extend_from_slice(line);
        input.push(b'\n');
    }
    let mut stdin = child.stdin.take().expect("stdin is piped");
    thread::spawn(move || {
        let _ = stdin.write_all(&input);
    })
}

/// Reads the child's stdout on a thread and sends each whole line, parsed
/// as a version. A line cut by the kill (no line feed) is no promise.
fn watch_versions(child: &mut Child) -> (Receiver<u64>, JoinHandle<()>) {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (sender, receiver) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if !line.ends_with('\n') => return,
                Ok(_) => {
                    let version = line
                        .trim_end()
                        .parse()
                        .unwrap_or_else(|_| panic!("not a version: {line:?}"));
                    if sender.send(version).is_err() {
                        return;
                    }
                }
            }
        }
    });
    (receiver, reader)
}
