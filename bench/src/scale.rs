//! Open time and resident memory against log size (issue 34's figures):
//! logs of each `--events` count (10^6, 10^7, 10^8 by default) of
//! one-event records, opened in a fresh process with the page cache
//! emptied of the log's files first (cold) and then after a full read
//! (warm), rounds alternating (results/scale.md). Each log is opened
//! reading every record, then given its index files
//! (`Log::write_index_files`) and opened trusting them
//! (`Tuning::open_trusts_index_files`), the four kinds of open taken in
//! turn within each round.
//!
//! "Cold" evicts each segment's pages with `posix_fadvise(DONTNEED)` after
//! an `fdatasync`, which needs no privilege; the disk's own cache (of the
//! virtual machine's host, here) is not reached, so a cold figure is an
//! upper bound on the read speed of the disk itself.

use std::fmt::Write as _;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};

use crate::engine::{self, Shape};

/// Streams the events go round-robin over: enough that the per-stream
/// tables are not what is measured, few enough that a stream holds many
/// events.
const STREAMS: u64 = 1_000;

/// The shape of the log of `events` events of `data_bytes`.
pub fn shape(events: u64, data_bytes: usize) -> Shape {
    Shape {
        events,
        streams: STREAMS,
        data_bytes,
        segment_bytes: durlog::DEFAULT_SEGMENT_BYTES,
    }
}

/// What one open in a fresh process measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Opened {
    pub cold: bool,
    pub seconds: f64,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub records: u64,
    pub record_bytes: u64,
    pub segments: usize,
}

/// How a child opens the log.
#[derive(Clone, Copy, Debug)]
pub struct Open {
    /// The log's pages evicted first.
    pub cold: bool,
    /// Trusting its index files.
    pub trust: bool,
}

/// The child's side: evict the log's pages if cold, then open it and
/// report time and memory. The log stays open until RSS is read.
pub fn child(dir: &Path, shape: Shape, open: Open) -> Result<Opened> {
    if open.cold {
        evict(dir)?;
    }
    let tuning = durlog::Tuning::default().with(|tuning| {
        tuning.open_trusts_index_files = open.trust;
    });
    let rss_before_kib = engine::rss_kib()?;
    let start = Instant::now();
    let log = durlog::Log::open_tuned(
        durlog::vfs::PosixVfs,
        dir,
        durlog::Options::default(),
        tuning,
    )
    .with_context(|| format!("opening {}", dir.display()))?;
    let seconds = start.elapsed().as_secs_f64();
    let rss_after_kib = engine::rss_kib()?;
    let report = log.recovery().clone();
    ensure!(
        report.records == shape.events,
        "open of {} found {} records, expected {}",
        dir.display(),
        report.records,
        shape.events
    );
    let sealed = report.segments.saturating_sub(1);
    ensure!(
        !open.trust || report.index_files_trusted == sealed,
        "a trusting open of {} took {} of {sealed} sealed segments from index files",
        dir.display(),
        report.index_files_trusted
    );
    drop(log);
    Ok(Opened {
        cold: open.cold,
        seconds,
        rss_before_kib,
        rss_after_kib,
        records: report.records,
        record_bytes: report.record_bytes,
        segments: report.segments,
    })
}

/// Drops the page cache's copy of every file in `dir`.
fn evict(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if !path.is_file() {
            continue;
        }
        let file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        file.sync_data()?;
        // SAFETY: a plain syscall on a descriptor this function owns.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        ensure!(rc == 0, "posix_fadvise on {}: error {rc}", path.display());
    }
    Ok(())
}

/// Runs the child for `dir` and parses what it measured.
fn open_in_child(dir: &Path, shape: Shape, open: Open) -> Result<Opened> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("scale-child")
        .arg("--log")
        .arg(dir)
        .arg("--events")
        .arg(shape.events.to_string())
        .arg("--sizes")
        .arg(shape.data_bytes.to_string());
    if open.cold {
        command.arg("--cold");
    }
    if open.trust {
        command.arg("--trust");
    }
    let output = command.output()?;
    if !output.status.success() {
        bail!(
            "scale-child failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("scale-child output")
}

/// Generates each log in turn under `data`, gives it its index files,
/// measures `rounds` rounds of cold and warm opens, each reading every
/// record and trusting the index files (all four in turn each round),
/// removes it unless `keep` (for opening it again with `scale-child`),
/// and returns the table.
pub fn run(
    data: &Path,
    counts: &[u64],
    data_bytes: usize,
    rounds: usize,
    keep: bool,
) -> Result<String> {
    let mut table = String::from(
        "| events | log bytes | segments | index bytes | index files written s | open cold s, every record (min-max) | open warm s, every record | open cold s, trusting index files | open warm s, trusting index files | RSS after open MiB (every record / trusting) | bytes/event |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for &events in counts {
        let dir = data.join(format!("scale-{events}"));
        let shape = shape(events, data_bytes);
        let started = Instant::now();
        let bytes = engine::generate(&dir, shape)?;
        eprintln!(
            "scale: wrote {events} records, {bytes} bytes in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let outcome = index(&dir).and_then(|indexed| Ok((indexed, measure(&dir, shape, rounds)?)));
        if !keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let ((index_bytes, index_seconds), [cold, warm, cold_trusting, warm_trusting]) = outcome?;
        let last = warm.last().expect("rounds >= 1");
        let grown = |opened: &Opened| opened.rss_after_kib.saturating_sub(opened.rss_before_kib);
        let trusting = warm_trusting.last().expect("rounds >= 1");
        let row = format!(
            "| {events} | {} | {} | {index_bytes} | {index_seconds:.1} | {} | {} | {} | {} | {:.1} / {:.1} | {:.1} |",
            last.record_bytes,
            last.segments,
            spread(&cold),
            spread(&warm),
            spread(&cold_trusting),
            spread(&warm_trusting),
            grown(last) as f64 / 1024.0,
            grown(trusting) as f64 / 1024.0,
            (grown(last) * 1024) as f64 / events as f64,
        );
        eprintln!("scale: {row}");
        writeln!(table, "{row}")?;
    }
    Ok(table)
}

/// Writes the index files of the log in `dir`: their bytes, and the
/// seconds it took.
fn index(dir: &Path) -> Result<(u64, f64)> {
    let tuning = durlog::Tuning::default().with(|tuning| {
        tuning.index_files = durlog::IndexFiles::OnCall;
    });
    let log = durlog::Log::open_tuned(
        durlog::vfs::PosixVfs,
        dir,
        durlog::Options::default(),
        tuning,
    )?;
    let started = Instant::now();
    let written = log.write_index_files()?;
    let seconds = started.elapsed().as_secs_f64();
    drop(log);
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|ext| ext == "idx") {
            bytes += entry.metadata()?.len();
        }
    }
    eprintln!("scale: {written} index files, {bytes} bytes, in {seconds:.1} s");
    Ok((bytes, seconds))
}

/// `rounds` rounds of the four opens, in turn: cold and warm, reading
/// every record; cold and warm, trusting the index files.
fn measure(dir: &Path, shape: Shape, rounds: usize) -> Result<[Vec<Opened>; 4]> {
    let opens = [(true, false), (false, false), (true, true), (false, true)];
    let mut measured: [Vec<Opened>; 4] = Default::default();
    for round in 0..rounds {
        for (kind, &(cold, trust)) in opens.iter().enumerate() {
            measured[kind].push(open_in_child(dir, shape, Open { cold, trust })?);
        }
        let seconds: Vec<String> = (measured.iter())
            .map(|kind| format!("{:.2}", kind[round].seconds))
            .collect();
        eprintln!(
            "scale: {} events, round {round}: every record cold/warm, trusting cold/warm: {} s",
            shape.events,
            seconds.join(" / ")
        );
    }
    Ok(measured)
}

/// "median (min-max)" of the rounds' open times.
fn spread(rounds: &[Opened]) -> String {
    let mut seconds: Vec<f64> = rounds.iter().map(|round| round.seconds).collect();
    seconds.sort_by(f64::total_cmp);
    let median = seconds[seconds.len() / 2];
    format!(
        "{median:.2} ({:.2}-{:.2})",
        seconds[0],
        seconds[seconds.len() - 1]
    )
}
