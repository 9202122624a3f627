//! Retention and truncation: what a retention policy that purges
//! continuously costs the writers (rounds with and without it alternate,
//! so both see the same disk weather), and how long one purge of 1,000
//! segments takes, and a truncation back across them.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use durlog::{Event, Expected, Log, Options, Retention};

use crate::engine::{self, Shape};

/// Segments small enough that the retention runs often: a roll every
/// 1,700 or so 100 B appends.
const SEGMENT_BYTES: u64 = 256 << 10;

/// The retention keeps this many bytes: four segments.
const KEEP_BYTES: u64 = 4 * SEGMENT_BYTES;

/// What one round of appends measured.
struct Round {
    appends_per_s: f64,
    purges: u64,
    size_max: u64,
}

/// `writers` threads append 100 B events for `seconds`, with or without
/// the retention.
fn appends(dir: &Path, writers: usize, retention: bool, seconds: f64) -> Result<Round> {
    let _ = std::fs::remove_dir_all(dir);
    let options = Options {
        segment_bytes: SEGMENT_BYTES,
        ..Options::default()
    };
    let log = Arc::new(Log::open(dir, options)?);
    if retention {
        log.set_retention(Retention::default().with(|retention| {
            retention.max_bytes = Some(KEEP_BYTES);
        }));
    }
    let deadline = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let counts: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|writer| {
                let log = Arc::clone(&log);
                scope.spawn(move || {
                    let stream = format!("w{writer}");
                    let events = [Event::new("bench", vec![0xA5; 100])];
                    let (mut done, mut size_max) = (0, 0);
                    while start.elapsed() < deadline {
                        log.append(&stream, Expected::Any, &events).expect("append");
                        done += 1;
                        if done % 256 == 0 {
                            size_max = size_max.max(log.size());
                        }
                    }
                    (done, size_max)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("writer"))
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let stats = log.stats();
    ensure!(
        !retention || stats.purges > 0,
        "the retention never purged: make the run longer"
    );
    Ok(Round {
        appends_per_s: counts.iter().map(|(done, _)| *done).sum::<u64>() as f64 / elapsed,
        purges: stats.purges,
        size_max: counts.iter().map(|(_, size)| *size).max().unwrap_or(0),
    })
}

/// One purge of 1,000 segments of a generated log (1,000 streams, so the
/// state file lists 1,000 versions), a truncation to the middle of the
/// segment left, and the Open after both.
fn purge_thousand(dir: &Path, out: &mut String) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    let record_bytes = engine::encoded_record_bytes(100) as u64;
    let per_segment = SEGMENT_BYTES / 4 / record_bytes;
    let shape = Shape {
        events: per_segment * 1001,
        streams: 1000,
        data_bytes: 100,
        segment_bytes: SEGMENT_BYTES / 4,
    };
    engine::generate(dir, shape)?;
    let log = Log::open(dir, Options::default())?;
    let segments = std::fs::read_dir(dir)?
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|entry| entry.file_name().to_string_lossy().ends_with(".log"))
        })
        .count();
    let last_seq = log.last_seq();
    let started = Instant::now();
    let first = log.purge_before(last_seq)?;
    let purge_s = started.elapsed().as_secs_f64();
    let purged = first - 1;
    let started = Instant::now();
    log.truncate_after(first + (last_seq - first) / 2)?;
    let truncate_s = started.elapsed().as_secs_f64();
    drop(log);
    let started = Instant::now();
    let reopened = Log::open(dir, Options::default())?;
    let open_s = started.elapsed().as_secs_f64();
    ensure!(reopened.first_seq() == first, "the purge survives a reopen");
    writeln!(
        out,
        "| {segments} segments of {} KiB, {} streams | {:.1} ms ({} segments, {purged} records) | {:.2} ms | {:.2} ms |",
        (SEGMENT_BYTES / 4) >> 10,
        shape.streams,
        purge_s * 1e3,
        segments - 1,
        truncate_s * 1e3,
        open_s * 1e3
    )?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// Runs everything and returns the markdown of results/retention.md.
pub fn run(data: &Path, rounds: usize, seconds: f64) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "### Appends with a retention that purges continuously (100 B events, {} KiB segments, keep {} KiB), alternating rounds\n",
        SEGMENT_BYTES >> 10,
        KEEP_BYTES >> 10
    )?;
    writeln!(
        out,
        "| writers | round | no retention, appends/s | retention, appends/s | ratio | purges | largest size() seen |\n|---|---|---|---|---|---|---|"
    )?;
    for writers in [1, 32] {
        for round in 0..rounds {
            let without = appends(&data.join("appends"), writers, false, seconds)?;
            let with = appends(&data.join("appends"), writers, true, seconds)?;
            writeln!(
                out,
                "| {writers} | {round} | {:.0} | {:.0} | {:.3} | {} | {:.1} MiB |",
                without.appends_per_s,
                with.appends_per_s,
                with.appends_per_s / without.appends_per_s,
                with.purges,
                with.size_max as f64 / f64::from(1 << 20)
            )?;
            eprintln!("retention: {writers} writers, round {round} done");
        }
    }
    let _ = std::fs::remove_dir_all(data.join("appends"));
    writeln!(
        out,
        "\n### One purge of 1,000 segments, a truncation, and the Open after (page cache)\n"
    )?;
    writeln!(
        out,
        "| log | purge_before(last seq) | truncate_after(middle of the last segment) | Open after |\n|---|---|---|---|"
    )?;
    for _ in 0..rounds {
        purge_thousand(&data.join("purge"), &mut out)?;
    }
    Ok(out)
}
