//! The next segment, prepared ahead of its roll: renamed into place, never
//! read as part of the log, removed by Open, inside the quota, and safe at
//! a crash anywhere in the roll.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Op, Recorder, TEST_LIMIT, clock, event, within};
use durlog::format::NEXT_SEGMENT_NAME;
use durlog::vfs::{FaultConfig, FaultKind, SimVfs, TraceKind, Vfs};
use durlog::{Expected, Log, NextSegment, Options, Tuning, recovery};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIR: &str = "/db";

fn next_path() -> PathBuf {
    Path::new(DIR).join(NEXT_SEGMENT_NAME)
}

fn tuning(chunk: u64) -> Tuning {
    Tuning::default().with(|tuning| {
        tuning.preallocate_after_bytes = 0;
        tuning.preallocate_chunk_bytes = chunk;
        tuning.next_segment = NextSegment::OnCall;
    })
}

fn options(segment_bytes: u64, max_bytes: u64) -> Options {
    Options {
        segment_bytes,
        max_bytes,
        ..clock(3)
    }
}

fn segments(vfs: &SimVfs) -> Vec<PathBuf> {
    vfs.list_dir(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|entry| entry.name.ends_with(".log"))
        .map(|entry| Path::new(DIR).join(entry.name))
        .collect()
}

/// Appends 100-byte events until the log wants its next segment and
/// prepares it; returns the version reached.
fn fill_until_prepared(log: &Log) -> u64 {
    let mut version = log.version("s");
    loop {
        version = log
            .append("s", Expected::Exact(version), &[event("t", &[7; 100])])
            .unwrap();
        if log.prepare_next_segment().unwrap() {
            return version;
        }
        assert!(version < 1000, "the log never wanted its next segment");
    }
}

#[test]
fn a_roll_renames_the_prepared_segment() {
    let vfs = SimVfs::new(1);
    let log = Log::open_tuned(vfs.clone(), DIR, options(4096, 0), tuning(3000)).unwrap();
    let mut version = fill_until_prepared(&log);
    // Half a segment of records, and not before.
    let size = log.size();
    assert!(
        (2048..2048 + 200).contains(&size),
        "prepared at {size} bytes"
    );
    assert_eq!(vfs.file_contents(&next_path()), Some(vec![0; 3000]));
    assert!(
        !log.prepare_next_segment().unwrap(),
        "a second file for the same roll"
    );

    vfs.clear_trace();
    while segments(&vfs).len() == 1 {
        version = log
            .append("s", Expected::Exact(version), &[event("t", &[8; 100])])
            .unwrap();
    }
    let kinds: Vec<TraceKind> = vfs.trace().iter().map(|event| event.kind).collect();
    assert!(kinds.contains(&TraceKind::Rename), "{kinds:?}");
    assert!(!kinds.contains(&TraceKind::Create), "{kinds:?}");
    assert_eq!(log.stats().segments_prepared, 1);
    assert_eq!(log.stats().segments_created, 2);
    assert!(vfs.file_contents(&next_path()).is_none());
    // The roll appended over the zeros, which stay after the records.
    let new_segment = vfs.file_contents(&segments(&vfs)[1]).unwrap();
    assert_eq!(new_segment.len(), 3000);
    assert!(new_segment[200..].iter().all(|&byte| byte == 0));

    drop(log);
    vfs.crash();
    let log = Log::open_with_vfs(vfs.clone(), DIR, options(4096, 0)).unwrap();
    assert_eq!(log.version("s"), version);
    let events = log.read("s", 1, 10_000).unwrap();
    assert_eq!(events.len() as u64, version);
    assert!(events.iter().all(|event| event.data.len() == 100));
}

/// The roll's order: the old segment cut and synced, the rename, the
/// directory synced, and only then the first record written and synced.
#[test]
fn a_prepared_roll_syncs_the_directory_before_its_first_record() {
    let vfs = SimVfs::new(5);
    let recorder = Recorder::new(std::sync::Arc::new(vfs.clone()));
    let log = Log::open_tuned(recorder.clone(), DIR, options(4096, 0), tuning(1024)).unwrap();
    let version = fill_until_prepared(&log);
    while log.size() + 146 <= 4096 {
        log.append("s", Expected::Any, &[event("t", &[9; 100])])
            .unwrap();
    }
    let old = segments(&vfs)[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let old_len = log.size();
    recorder.clear();
    let acked = log
        .append("s", Expected::Any, &[event("t", &[5; 100])])
        .unwrap();
    assert!(acked > version);
    let new = segments(&vfs)[1]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        recorder.ops(),
        vec![
            Op::SetLen {
                file: old.clone(),
                len: old_len
            },
            Op::SyncData(old),
            Op::Rename {
                from: NEXT_SEGMENT_NAME.into(),
                to: new.clone()
            },
            Op::SyncDir("db".into()),
            Op::Write {
                file: new.clone(),
                offset: 0,
                len: 146
            },
            Op::SyncData(new),
        ]
    );
}

#[test]
fn open_removes_a_prepared_segment_and_readers_ignore_it() {
    let vfs = SimVfs::new(2);
    let log = Log::open_tuned(vfs.clone(), DIR, options(4096, 0), tuning(1024)).unwrap();
    let version = fill_until_prepared(&log);
    let last_seq = log.last_seq();
    drop(log);
    assert!(vfs.file_contents(&next_path()).is_some());

    let report = recovery::verify(&vfs, Path::new(DIR)).unwrap();
    assert_eq!(report.last_seq, last_seq);
    let reader = Log::open_read_only(vfs.clone(), DIR).unwrap();
    assert_eq!(reader.version("s"), version);
    drop(reader);
    assert!(
        vfs.file_contents(&next_path()).is_some(),
        "a read-only open changed the directory"
    );

    let log = Log::open_with_vfs(vfs.clone(), DIR, options(4096, 0)).unwrap();
    assert!(vfs.file_contents(&next_path()).is_none());
    // Durably: a crash right after Open does not bring it back.
    drop(log);
    vfs.crash();
    assert!(vfs.file_contents(&next_path()).is_none());
    let log = Log::open_with_vfs(vfs.clone(), DIR, options(4096, 0)).unwrap();
    assert_eq!(log.version("s"), version);
}

/// Whatever the sizes, the quota, and when preparation runs, all files in
/// the directory together never pass the quota (SPEC 2.4), and every
/// append the quota allows is accepted as without preparation.
#[test]
fn prepared_segments_keep_the_quota() {
    let mut prepared = 0;
    for seed in 0..300u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let segment_bytes = rng.random_range(256..4096);
        let max_bytes = rng.random_range(1024..16384);
        let chunk = rng.random_range(1..8192);
        let vfs = SimVfs::new(seed);
        let plain = SimVfs::new(seed);
        let log = Log::open_tuned(
            vfs.clone(),
            DIR,
            options(segment_bytes, max_bytes),
            tuning(chunk),
        )
        .unwrap();
        let without = Log::open_tuned(
            plain.clone(),
            DIR,
            options(segment_bytes, max_bytes),
            tuning(chunk).with(|tuning| {
                tuning.next_segment = NextSegment::CreateAtRoll;
            }),
        )
        .unwrap();
        for step in 0..200 {
            let len = rng.random_range(0..300);
            let outcome = log.append("s", Expected::Any, &[event("t", &vec![1; len])]);
            let reference = without.append("s", Expected::Any, &[event("t", &vec![1; len])]);
            assert_eq!(
                outcome.is_ok(),
                reference.is_ok(),
                "seed {seed} step {step}: {outcome:?} against {reference:?}"
            );
            if rng.random_bool(0.5) && log.prepare_next_segment().unwrap() {
                prepared += 1;
            }
            let on_disk: u64 = vfs
                .files()
                .iter()
                .map(|path| vfs.file_contents(path).unwrap().len() as u64)
                .sum();
            assert!(
                on_disk <= max_bytes,
                "seed {seed} step {step}: {on_disk} bytes on disk, quota {max_bytes}"
            );
        }
    }
    assert!(prepared > 300, "only {prepared} segments prepared");
}

/// A power loss at every counted operation of a roll into a prepared
/// segment, with lost directory entries on: the acknowledged appends
/// survive, the failed one is whole or absent, and the log goes on.
#[test]
fn a_crash_anywhere_in_a_prepared_roll_keeps_every_acknowledged_append() {
    let mut renames_interrupted = 0;
    for seed in 0..120u64 {
        let faults = FaultConfig::only(&[
            FaultKind::LostDirEntry,
            FaultKind::LostUnsyncedPages,
            FaultKind::UnsyncedSizeChange,
        ]);
        let vfs = SimVfs::with_faults(seed, faults);
        let log = Log::open_tuned(vfs.clone(), DIR, options(4096, 0), tuning(1024)).unwrap();
        let mut version = fill_until_prepared(&log);
        // Up to the append that rolls (records of 146 bytes).
        while log.size() + 146 <= 4096 {
            version = log
                .append("s", Expected::Exact(version), &[event("t", &[9; 100])])
                .unwrap();
        }
        vfs.clear_trace();
        vfs.crash_after_ops(1 + seed % 6);
        let outcome = log.append("s", Expected::Exact(version), &[event("t", &[5; 100])]);
        assert!(
            vfs.is_halted(),
            "seed {seed}: the roll took fewer operations"
        );
        let trace = vfs.trace();
        if trace
            .iter()
            .any(|event| event.kind == TraceKind::Rename && !event.ok)
        {
            renames_interrupted += 1;
        }
        drop(log);
        vfs.reboot();
        let log = Log::open_with_vfs(vfs.clone(), DIR, options(4096, 0)).unwrap();
        let recovered = log.version("s");
        match outcome {
            Ok(acked) => assert_eq!(recovered, acked, "seed {seed}"),
            Err(_) => assert!(
                recovered == version || recovered == version + 1,
                "seed {seed}: {recovered} after {version}"
            ),
        }
        assert_eq!(log.read("s", 1, 10_000).unwrap().len() as u64, recovered);
        assert!(vfs.file_contents(&next_path()).is_none(), "seed {seed}");
        assert_eq!(
            log.append("s", Expected::Exact(recovered), &[event("t", b"on")])
                .unwrap(),
            recovered + 1
        );
    }
    assert!(renames_interrupted > 0, "no crash hit a rename");
}

/// On a real disk the log's own thread prepares the file, and the roll
/// uses it.
#[test]
fn a_background_thread_prepares_on_a_real_disk() {
    within(
        "a_background_thread_prepares_on_a_real_disk",
        TEST_LIMIT,
        || {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("log");
            let log = Log::open(
                &dir,
                Options {
                    segment_bytes: 128 << 10,
                    ..clock(1)
                },
            )
            .unwrap();
            let data = vec![3; 4000];
            let mut version = 0;
            while log.size() < 64 << 10 {
                version = log
                    .append("s", Expected::Exact(version), &[event("t", &data)])
                    .unwrap();
            }
            version = log
                .append("s", Expected::Exact(version), &[event("t", &data)])
                .unwrap();
            // The thread runs on its own time: wait for its file, boundedly.
            let next = dir.join(NEXT_SEGMENT_NAME);
            let mut waited = 0;
            while !(next.exists() && std::fs::metadata(&next).unwrap().len() > 0) {
                assert!(waited < 1000, "no next segment after 10 s");
                std::thread::sleep(Duration::from_millis(10));
                waited += 1;
            }
            while log.stats().segments_created < 2 {
                version = log
                    .append("s", Expected::Exact(version), &[event("t", &data)])
                    .unwrap();
            }
            assert_eq!(log.stats().segments_prepared, 1);
            log.close().unwrap();
            let log = Log::open(&dir, Options::default()).unwrap();
            assert_eq!(log.read("s", 1, 1000).unwrap().len() as u64, version);
            assert!(!next.exists());
        },
    );
}

/// A Vfs whose writes to the next segment's file wait at a gate.
#[derive(Debug)]
struct Gated {
    inner: SimVfs,
    gate: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

#[derive(Debug)]
struct GatedFile {
    inner: Box<dyn durlog::vfs::VfsFile>,
    gate: Option<std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>>,
}

impl Vfs for Gated {
    fn open(
        &self,
        path: &Path,
        mode: durlog::vfs::OpenMode,
    ) -> std::io::Result<Box<dyn durlog::vfs::VfsFile>> {
        let inner = self.inner.open(path, mode)?;
        let gated = path.ends_with(NEXT_SEGMENT_NAME);
        Ok(Box::new(GatedFile {
            inner,
            gate: gated.then(|| std::sync::Arc::clone(&self.gate)),
        }))
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<durlog::vfs::DirEntry>> {
        self.inner.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn lock_file(&self, path: &Path) -> std::io::Result<Box<dyn durlog::vfs::FileLock>> {
        self.inner.lock_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
}

impl durlog::vfs::VfsFile for GatedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if let Some(gate) = &self.gate {
            let (open, opened) = &**gate;
            let mut open = open.lock().unwrap();
            while !*open {
                open = opened.wait(open).unwrap();
            }
        }
        self.inner.write_at(buf, offset)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.inner.sync_all()
    }
}

/// A roll that comes while the next segment is still being written waits
/// for it and uses it: a second file would take quota room the first one
/// holds.
#[test]
fn a_roll_waits_for_a_preparation_under_way() {
    within(
        "a_roll_waits_for_a_preparation_under_way",
        TEST_LIMIT,
        || {
            let gate =
                std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
            let vfs = SimVfs::new(4);
            let gated = Gated {
                inner: vfs.clone(),
                gate: std::sync::Arc::clone(&gate),
            };
            let log = std::sync::Arc::new(
                Log::open_tuned(
                    gated,
                    DIR,
                    options(4096, 0),
                    tuning(1024).with(|tuning| {
                        tuning.next_segment = NextSegment::Background;
                    }),
                )
                .unwrap(),
            );
            let mut version = 0;
            while log.size() + 146 <= 4096 {
                version = log
                    .append("s", Expected::Exact(version), &[event("t", &[9; 100])])
                    .unwrap();
            }
            // Once its file exists the thread is held at the gate, mid-preparation.
            let mut waited = 0;
            while vfs.file_contents(&next_path()).is_none() {
                assert!(waited < 1000, "no preparation started after 10 s");
                std::thread::sleep(Duration::from_millis(10));
                waited += 1;
            }
            // This append must roll.
            let rolling = {
                let log = std::sync::Arc::clone(&log);
                std::thread::spawn(move || {
                    log.append("s", Expected::Exact(version), &[event("t", &[5; 100])])
                })
            };
            // No event says the append has reached the wait: give it time
            // to go ahead if it would. This cannot fail a roll that
            // waits (it cannot finish before the gate opens); a roll that
            // did not wait would finish in microseconds.
            std::thread::sleep(Duration::from_millis(100));
            let went_ahead = rolling.is_finished();
            // Open the gate before any assertion: dropping the log joins the thread.
            let (open, opened) = &*gate;
            *open.lock().unwrap() = true;
            opened.notify_all();
            assert!(
                !went_ahead,
                "the roll went ahead while the next segment was being prepared"
            );
            assert_eq!(rolling.join().unwrap().unwrap(), version + 1);
            assert_eq!(log.stats().segments_prepared, 1);
            assert_eq!(segments(&vfs).len(), 2);
        },
    );
}

/// A Vfs written before `rename` and `lock_file` existed: the trait's
/// defaults refuse both (the log then opens without a lock, and warns).
#[derive(Debug)]
struct NoRename(SimVfs);

impl Vfs for NoRename {
    fn open(
        &self,
        path: &Path,
        mode: durlog::vfs::OpenMode,
    ) -> std::io::Result<Box<dyn durlog::vfs::VfsFile>> {
        self.0.open(path, mode)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<durlog::vfs::DirEntry>> {
        self.0.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.0.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.0.sync_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.0.remove_file(path)
    }
}

/// On a Vfs that cannot rename, the first roll removes the prepared file
/// and creates its segment, and the log prepares no more.
#[test]
fn a_vfs_without_rename_gets_created_segments() {
    let vfs = SimVfs::new(6);
    let log = Log::open_tuned(NoRename(vfs.clone()), DIR, options(4096, 0), tuning(1024)).unwrap();
    let mut version = fill_until_prepared(&log);
    for _ in 0..200 {
        version = log
            .append("s", Expected::Exact(version), &[event("t", &[9; 100])])
            .unwrap();
        assert!(!log.prepare_next_segment().unwrap());
    }
    assert!(segments(&vfs).len() > 2);
    assert_eq!(log.stats().segments_prepared, 0);
    assert!(vfs.file_contents(&next_path()).is_none());
    drop(log);
    let log = Log::open_with_vfs(vfs.clone(), DIR, options(4096, 0)).unwrap();
    assert_eq!(log.version("s"), version);
}

/// The child side of [`killed_while_preparing_keeps_every_printed_version`]:
/// appends 4,000-byte events to stream `s` for ever, printing each version
/// once `append` returned it.
fn kill_child(dir: &Path) -> ! {
    use std::io::Write as _;
    let log = Log::open(
        dir,
        Options {
            segment_bytes: 64 << 10,
            ..Options::default()
        },
    )
    .unwrap();
    let mut out = std::io::stdout().lock();
    let mut version = log.version("s");
    loop {
        let data = kill_event_data(version + 1);
        version = log
            .append("s", Expected::Exact(version), &[event("t", &data)])
            .unwrap();
        writeln!(out, "acked {version}").unwrap();
        out.flush().unwrap();
    }
}

fn kill_event_data(version: u64) -> Vec<u8> {
    let mut data = vec![(version % 251) as u8; 4000];
    data[..8].copy_from_slice(&version.to_le_bytes());
    data
}

/// Real processes on a real disk, killed with SIGKILL after a seeded number
/// of printed versions: 64 KiB segments roll every 16 appends and the log's
/// thread prepares the next one every 8, so kills land in preparations,
/// renames and rolls. Every printed version survives, at most one more
/// exists, and each event holds its bytes. `DURLOG_PREPARE_KILLS=N` runs N
/// rounds (default 20); `DURLOG_PREPARE_KILL_SEED=S` replays the kill
/// points (the processes' timing differs from run to run).
#[test]
fn killed_while_preparing_keeps_every_printed_version() {
    // The child runs this very test, and never returns: it stays outside
    // the time limit (its parent kills it).
    if let Some(dir) = std::env::var_os("DURLOG_PREPARE_CHILD_DIR") {
        kill_child(Path::new(&dir));
    }
    let rounds: u64 = std::env::var("DURLOG_PREPARE_KILLS")
        .map(|text| text.parse().expect("a number"))
        .unwrap_or(20);
    // A round takes under 10 ms here: allow a second each.
    let limit = TEST_LIMIT.max(Duration::from_secs(rounds));
    within(
        "killed_while_preparing_keeps_every_printed_version",
        limit,
        move || killed_while_preparing(rounds),
    );
}

/// The parent side of [`killed_while_preparing_keeps_every_printed_version`]:
/// `rounds` children, each killed.
fn killed_while_preparing(rounds: u64) {
    use std::io::BufRead as _;
    let seed = std::env::var("DURLOG_PREPARE_KILL_SEED")
        .map(|text| text.parse().expect("a number"))
        .unwrap_or_else(|_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let next = dir.join(NEXT_SEGMENT_NAME);
    let mut printed = 0;
    let mut prepared_seen = 0;
    // Where a kill lands is the scheduler's choice: go on past `rounds`
    // (up to 5 times as many) until one came with a prepared file there.
    let mut round = 0;
    while round < rounds || (prepared_seen == 0 && round < rounds * 5) {
        round += 1;
        let context = format!("seed {seed} round {round}");
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "killed_while_preparing_keeps_every_printed_version",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("DURLOG_PREPARE_CHILD_DIR", &dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let kill_after = rng.random_range(1..=40);
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        while seen < kill_after {
            let line = lines.next().expect("the child printed").unwrap();
            if let Some(version) = line.strip_prefix("acked ") {
                printed = version.parse().unwrap();
                seen += 1;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Looked at once the child is dead, not before the kill: its roll
        // may rename the file between a look and the kill, and a kill
        // would count as landing beside a prepared file that was gone.
        if next.exists() {
            prepared_seen += 1;
        }
        // Lines already in the pipe were printed before the kill.
        for line in lines {
            if let Some(version) = line.unwrap().strip_prefix("acked ") {
                printed = version.parse().unwrap();
            }
        }
        let log = Log::open_with_vfs(
            durlog::vfs::PosixVfs,
            &dir,
            Options {
                segment_bytes: 64 << 10,
                ..Options::default()
            },
        )
        .unwrap_or_else(|error| panic!("{context}: reopen: {error}"));
        let version = log.version("s");
        assert!(
            version == printed || version == printed + 1,
            "{context}: version {version} after {printed} printed"
        );
        let from = printed.saturating_sub(20).max(1);
        for event in log.read("s", from, usize::MAX).unwrap() {
            assert_eq!(event.data, kill_event_data(event.version), "{context}");
        }
        assert!(!next.exists(), "{context}: Open left the prepared file");
        printed = version;
    }
    eprintln!(
        "seed {seed}: {round} kills, {printed} versions, {prepared_seen} kills with a prepared file present"
    );
    assert!(
        printed > rounds,
        "seed {seed}: only {printed} versions in {rounds} rounds"
    );
    assert!(
        prepared_seen > 0,
        "seed {seed}: no kill came while a prepared file existed"
    );
}
