//! A writer process and a projection in another process, each killed with
//! SIGKILL at seeded random instants and started again: the projection
//! must apply every acknowledged event exactly once.
//!
//! The writer is `durlog append` (it prints a version only after the
//! fdatasync covering it returned). The projection is this test binary run
//! again as [`projection_process`]: it follows the log's directory with
//! `durlog::Follower` and keeps the README's exactly-once pattern, the
//! seq of the last record applied kept in its own output. Its output is a
//! file of lines `SEQ VERSION DATA`, appended and synced a poll at a time;
//! when it starts it cuts a line the kill left unfinished and follows from
//! the seq after the last whole line. So a record is applied when its line
//! is whole, and its position is that line: the two cannot disagree.
//!
//! At the end both are killed, the projection catches up in this process,
//! and its lines must be the log's records exactly: every seq from 1 once,
//! in order, with its version and data; every version the writer printed
//! among them.
//!
//! - `DURLOG_FOLLOW_KILLS=100 cargo test -p durlog-cli --test
//!   follow_kill_loop -- --nocapture` kills 100 times instead of 20.
//! - `DURLOG_KILL_SEED=N` replays a seed's choices (which process, when);
//!   the processes' timing does not repeat.

mod common;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{DURLOG, TEST_LIMIT, within};
use durlog::vfs::PosixVfs;
use durlog::{Follower, Log};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const KILLS_DEFAULT: u64 = 20;
/// Where the projection process finds its log and its output.
const PROJECTION_ENV: &str = "DURLOG_PROJECTION";
const SEGMENT_BYTES: &str = "16384";
/// The longest pause between kills.
const PAUSE_MAX_MS: u64 = 150;
/// Lines offered to each writer: more than it appends before its kill.
const LINES_PER_WRITER: usize = 5_000;

/// Not a test of its own: the projection, when this binary is started
/// again by [`a_projection_in_another_process_applies_each_event_once`]
/// with `DURLOG_PROJECTION=LOG_DIR:OUTPUT` set. It runs until killed.
#[test]
fn projection_process() {
    let Ok(paths) = std::env::var(PROJECTION_ENV) else {
        return;
    };
    let (log, output) = paths.split_once(':').expect("LOG_DIR:OUTPUT");
    project(Path::new(log), Path::new(output), || false);
}

#[test]
fn a_projection_in_another_process_applies_each_event_once() {
    let seed = env_u64("DURLOG_KILL_SEED").unwrap_or_else(rand::random);
    let kills = env_u64("DURLOG_FOLLOW_KILLS").unwrap_or(KILLS_DEFAULT);
    let limit = TEST_LIMIT.max(Duration::from_secs(kills));
    within(
        "a_projection_in_another_process_applies_each_event_once",
        limit,
        move || kill_loop(seed, kills),
    );
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
    )
}

/// The projection: applies what the follower hands over to `output`,
/// exactly once, until `stop` says so once it has caught up.
fn project(log: &Path, output: &Path, stop: impl Fn() -> bool) {
    let (mut file, next) = resume(output);
    let mut follower = Follower::new(PosixVfs, log, next);
    loop {
        let commits = match follower.poll() {
            Ok(commits) => commits,
            // The writer has not made the directory yet.
            Err(durlog::Error::Io(error)) if error.kind() == std::io::ErrorKind::NotFound => {
                Vec::new()
            }
            Err(error) => panic!("the follower of {} failed: {error}", log.display()),
        };
        if commits.is_empty() {
            if stop() {
                return;
            }
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        let mut lines = Vec::new();
        for commit in &commits {
            for event in &commit.events {
                lines.extend_from_slice(format!("{} {} ", commit.seq, event.version).as_bytes());
                lines.extend_from_slice(&event.data);
                lines.push(b'\n');
            }
        }
        file.write_all(&lines).expect("write the projection");
        file.sync_data().expect("sync the projection");
    }
}

/// The projection's output, opened for appending with an unfinished last
/// line cut off, and the seq to follow from: the one after its last line.
fn resume(output: &Path) -> (File, u64) {
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(output)
        .expect("open the projection");
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).expect("read the projection");
    let whole = bytes
        .iter()
        .rposition(|&byte| byte == b'\n')
        .map_or(0, |at| at + 1);
    if whole < bytes.len() {
        file.set_len(whole as u64).expect("cut the unfinished line");
        file.sync_data().expect("sync the cut");
    }
    let next = parse(&bytes[..whole]).last().map_or(1, |line| line.seq + 1);
    (file, next)
}

/// One line of the projection.
#[derive(Debug, PartialEq)]
struct Applied {
    seq: u64,
    version: u64,
    data: Vec<u8>,
}

fn parse(bytes: &[u8]) -> Vec<Applied> {
    (bytes.split(|&byte| byte == b'\n'))
        .filter(|line| !line.is_empty())
        .map(|line| {
            let mut fields = line.splitn(3, |&byte| byte == b' ');
            let mut number = || {
                let field = fields.next().expect("a field");
                std::str::from_utf8(field).unwrap().parse::<u64>().unwrap()
            };
            let (seq, version) = (number(), number());
            let data = fields.next().expect("the data").to_vec();
            Applied { seq, version, data }
        })
        .collect()
}

#[derive(Debug, Default)]
struct Tally {
    writer_kills: u64,
    projection_kills: u64,
    printed: Vec<u64>,
}

fn kill_loop(seed: u64, kills: u64) {
    eprintln!("follow kill loop: seed={seed} kills={kills}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let output = dir.path().join("projection.txt");
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut lines_fed = 0;
    let mut writer = Writer::spawn(&log, &mut lines_fed);
    let mut projection = spawn_projection(&log, &output);
    for _ in 0..kills {
        thread::sleep(Duration::from_millis(rng.random_range(0..PAUSE_MAX_MS)));
        if rng.random_bool(0.5) {
            tally.printed.extend(writer.kill());
            tally.writer_kills += 1;
            writer = Writer::spawn(&log, &mut lines_fed);
        } else {
            kill(&mut projection);
            tally.projection_kills += 1;
            projection = spawn_projection(&log, &output);
        }
    }
    tally.printed.extend(writer.kill());
    kill(&mut projection);
    let during = std::fs::read(&output).map_or(0, |bytes| parse(&bytes).len());
    // Caught up: the follower has read every record the log holds.
    let last_seq = Log::open_read_only(PosixVfs, &log)
        .expect("open the log")
        .last_seq();
    project(&log, &output, || {
        let bytes = std::fs::read(&output).expect("read the projection");
        parse(&bytes)
            .last()
            .is_some_and(|line| line.seq >= last_seq)
            || last_seq == 0
    });
    check(&log, &output, &tally, seed);
    eprintln!(
        "follow kill loop: seed={seed}: {} kills ({} of the writer, {} of the projection) in {:.2?}; \
         {last_seq} records, {} applied while the loop ran, every one exactly once",
        kills,
        tally.writer_kills,
        tally.projection_kills,
        started.elapsed(),
        during
    );
    assert!(
        during > 0,
        "seed={seed}: the projection applied nothing while the loop ran"
    );
}

/// The projection's lines are the log's records, each once, in order, and
/// every version the writer printed is among them.
fn check(log: &Path, output: &Path, tally: &Tally, seed: u64) {
    let log = Log::open_read_only(PosixVfs, log).expect("open the log");
    let records = log.read_all(1, usize::MAX).expect("read the log");
    let want: Vec<Applied> = (records.iter())
        .flat_map(|commit| {
            (commit.events.iter()).map(|event| Applied {
                seq: commit.seq,
                version: event.version,
                data: event.data.clone(),
            })
        })
        .collect();
    let got = parse(&std::fs::read(output).expect("read the projection"));
    if let Some(at) = (0..want.len().min(got.len())).find(|&at| want[at] != got[at]) {
        panic!(
            "seed={seed}: line {} of the projection is {:?}, the log's record there {:?} (a record missed or applied twice)",
            at + 1,
            got[at],
            want[at]
        );
    }
    assert_eq!(
        got.len(),
        want.len(),
        "seed={seed}: lines against the log's events"
    );
    let versions = log.version("s");
    for version in &tally.printed {
        assert!(
            *version <= versions,
            "seed={seed}: version {version} was printed, the log holds {versions}"
        );
    }
}

/// `durlog append LOG s`, fed numbered lines, its printed versions read.
struct Writer {
    child: Child,
    versions: Receiver<u64>,
    reader: JoinHandle<()>,
    feeder: JoinHandle<()>,
}

impl Writer {
    fn spawn(log: &Path, lines_fed: &mut u64) -> Writer {
        let mut child = Command::new(DURLOG)
            .args([Path::new("append"), log, Path::new("s")])
            .args(["--segment-bytes", SEGMENT_BYTES])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn durlog append");
        let mut input = Vec::new();
        for line in *lines_fed..*lines_fed + LINES_PER_WRITER as u64 {
            input.extend_from_slice(format!("event {line}\n").as_bytes());
        }
        *lines_fed += LINES_PER_WRITER as u64;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let feeder = thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, versions) = mpsc::channel();
        let reader = thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { return };
                if let Some(version) = std::str::from_utf8(&line).ok().and_then(|v| v.parse().ok())
                {
                    let _ = sender.send(version);
                }
            }
        });
        Writer {
            child,
            versions,
            reader,
            feeder,
        }
    }

    /// SIGKILL; the versions it printed, whole lines only.
    fn kill(mut self) -> Vec<u64> {
        kill(&mut self.child);
        let _ = self.feeder.join();
        self.reader.join().expect("the writer's stdout reader");
        self.versions.try_iter().collect()
    }
}

fn spawn_projection(log: &Path, output: &Path) -> Child {
    let paths: PathBuf = format!("{}:{}", log.display(), output.display()).into();
    Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "projection_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PROJECTION_ENV, paths)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the projection")
}

/// SIGKILL (an error only means it had exited: a projection that failed
/// is caught by the final check).
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}
