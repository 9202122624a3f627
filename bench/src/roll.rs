//! What a segment roll costs the append that triggers it, with the next
//! segment created at the roll and prepared ahead in the background.
//!
//! One writer appends through several rolls of small segments; each
//! append's latency is timed, and the appends that rolled are told apart
//! by the log's `segments_created` counter. The two ways alternate round by
//! round, so they see the same disk weather.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Result, ensure};
use durlog::vfs::PosixVfs;
use durlog::{Event, Expected, Log, NextSegment, Options, Tuning};

/// Segments of 4 MiB: with 4 KiB events, a roll every ~1,000 appends.
const SEGMENT_BYTES: u64 = 4 << 20;
/// Appends right after a roll that count as its aftermath: with 4 KiB
/// events they cover the new segment's first 64 KiB, which a created file
/// grows into (no preallocation yet) and a prepared one overwrites.
const AFTER_ROLL: usize = 16;

#[derive(Default)]
struct Latencies {
    all: Vec<u64>,
    rolls: Vec<u64>,
    after_roll: Vec<u64>,
    seconds: f64,
    prepared: u64,
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn mean(values: &[u64]) -> u64 {
    if values.is_empty() {
        0
    } else {
        values.iter().sum::<u64>() / values.len() as u64
    }
}

fn one_round(dir: &Path, mode: NextSegment, size: usize, rolls: u64) -> Result<Latencies> {
    let log = Log::open_tuned(
        PosixVfs,
        dir,
        Options {
            segment_bytes: SEGMENT_BYTES,
            ..Options::default()
        },
        Tuning::default().with(|tuning| {
            tuning.next_segment = mode;
        }),
    )?;
    let events = [Event::new("bench", vec![0x5a; size])];
    let mut out = Latencies::default();
    let mut since_roll = usize::MAX;
    let mut created = log.stats().segments_created;
    let started = Instant::now();
    while created < rolls + 1 {
        let at = Instant::now();
        log.append("s", Expected::Any, &events)?;
        let ns = at.elapsed().as_nanos() as u64;
        let now = log.stats().segments_created;
        out.all.push(ns);
        if now != created && created > 0 {
            out.rolls.push(ns);
            since_roll = 0;
        } else if since_roll < AFTER_ROLL {
            out.after_roll.push(ns);
            since_roll += 1;
        }
        created = now;
    }
    out.seconds = started.elapsed().as_secs_f64();
    out.prepared = log.stats().segments_prepared;
    log.close()?;
    Ok(out)
}

/// Runs `rounds` rounds of each way at `size`-byte events through `rolls`
/// rolls; returns a markdown table.
pub fn run(data: &Path, size: usize, rounds: usize, rolls: u64) -> Result<String> {
    let modes = [
        ("created at the roll", NextSegment::CreateAtRoll),
        ("prepared ahead", NextSegment::Background),
    ];
    let mut merged: Vec<Latencies> = modes.iter().map(|_| Latencies::default()).collect();
    for round in 0..rounds {
        for (index, (name, mode)) in modes.iter().enumerate() {
            let dir = data.join(format!("roll-{round}-{index}"));
            let result = one_round(&dir, *mode, size, rolls)?;
            std::fs::remove_dir_all(&dir)?;
            eprintln!(
                "round {round} {name}: {} appends in {:.2} s, {} rolls, {} prepared",
                result.all.len(),
                result.seconds,
                result.rolls.len(),
                result.prepared
            );
            if *mode == NextSegment::Background {
                ensure!(
                    result.prepared > 0,
                    "no roll used a prepared segment: the thread never finished in time"
                );
            }
            let total = &mut merged[index];
            total.all.extend(result.all);
            total.rolls.extend(result.rolls);
            total.after_roll.extend(result.after_roll);
            total.seconds += result.seconds;
            total.prepared += result.prepared;
        }
    }
    let us = |ns: u64| format!("{:.0}", ns as f64 / 1000.0);
    let mut table = format!(
        "One writer, {size} B events, {} MiB segments, {rounds} rounds of {rolls} rolls each, alternating. Latency in us.\n\n",
        SEGMENT_BYTES >> 20
    );
    table.push_str("| next segment | appends/s | p50 | p99 | p99.9 | max | rolling append: mean | max | next 16 appends: mean | rolls into a prepared file |\n");
    table.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for ((name, _), latencies) in modes.iter().zip(&mut merged) {
        latencies.all.sort_unstable();
        latencies.rolls.sort_unstable();
        let all = &latencies.all;
        writeln!(
            table,
            "| {name} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} of {} |",
            all.len() as f64 / latencies.seconds,
            us(quantile(all, 0.5)),
            us(quantile(all, 0.99)),
            us(quantile(all, 0.999)),
            us(all.last().copied().unwrap_or(0)),
            us(mean(&latencies.rolls)),
            us(latencies.rolls.last().copied().unwrap_or(0)),
            us(mean(&latencies.after_roll)),
            latencies.prepared,
            latencies.rolls.len(),
        )?;
    }
    Ok(table)
}
