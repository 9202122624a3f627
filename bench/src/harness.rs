//! The multi-threaded throughput harness shared by every system measured.
//!
//! A run gives each of `threads` threads its own writer closure (one
//! durable append per call), lines them up on a barrier, lets them run for
//! a warm-up, then counts, for `duration`, the calls that both started and
//! finished inside the measured window, recording each call's latency.
//! Throughput is counted calls over the measured wall time.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// One durable append per call; `Err` stops the run.
pub type Writer<'a> = Box<dyn FnMut() -> Result<()> + Send + 'a>;

/// Something that hands out one writer per thread.
pub trait System: Sync {
    /// The writer of thread `id` (0-based), appending `payload_bytes` each call.
    fn writer(&self, id: usize, payload_bytes: usize) -> Result<Writer<'_>>;
}

/// What one run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    /// Completed calls per second of the measured window.
    pub ops_per_s: f64,
    /// Median and 99th percentile latency of one call, microseconds.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Calls counted.
    pub ops: u64,
    /// durlog only: mean appends per group commit, and median sync time
    /// (power-of-two bucket upper bound, microseconds), over the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub appends_per_group: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_p50_us: Option<f64>,
}

const WARMING: u8 = 0;
const MEASURING: u8 = 1;
const STOPPED: u8 = 2;

/// Runs `system` with `threads` writers; see the module doc.
pub fn run(
    system: &dyn System,
    threads: usize,
    payload_bytes: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<Sample> {
    let phase = AtomicU8::new(WARMING);
    let barrier = Barrier::new(threads + 1);
    let (elapsed, outcomes) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|id| {
                let (phase, barrier) = (&phase, &barrier);
                scope.spawn(move || -> Result<(Histogram<u64>, u64)> {
                    let writer = system.writer(id, payload_bytes);
                    barrier.wait();
                    let outcome = writer.and_then(|writer| drive(writer, phase));
                    if outcome.is_err() {
                        phase.store(STOPPED, Ordering::SeqCst);
                    }
                    outcome
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(warmup);
        let start = Instant::now();
        // A failing writer stops the run early; its error is reported below.
        let _ = phase.compare_exchange(WARMING, MEASURING, Ordering::SeqCst, Ordering::SeqCst);
        while start.elapsed() < duration && phase.load(Ordering::SeqCst) == MEASURING {
            std::thread::sleep(Duration::from_millis(5).min(duration));
        }
        phase.store(STOPPED, Ordering::SeqCst);
        let elapsed = start.elapsed();
        let outcomes: Vec<_> = handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .map_err(|_| anyhow!("a writer thread panicked"))?
            })
            .collect();
        (elapsed, outcomes)
    });
    let mut histogram = new_histogram();
    let mut ops = 0;
    for outcome in outcomes {
        let (thread_histogram, thread_ops) = outcome?;
        histogram
            .add(&thread_histogram)
            .context("merging histograms")?;
        ops += thread_ops;
    }
    Ok(Sample {
        ops_per_s: ops as f64 / elapsed.as_secs_f64(),
        p50_us: histogram.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: histogram.value_at_quantile(0.99) as f64 / 1e3,
        ops,
        ..Sample::default()
    })
}

fn drive(mut writer: Writer<'_>, phase: &AtomicU8) -> Result<(Histogram<u64>, u64)> {
    let mut histogram = new_histogram();
    let mut ops = 0;
    loop {
        let before = phase.load(Ordering::Relaxed);
        if before == STOPPED {
            return Ok((histogram, ops));
        }
        let start = Instant::now();
        writer()?;
        let nanos = start.elapsed().as_nanos() as u64;
        if before == MEASURING && phase.load(Ordering::Relaxed) == MEASURING {
            histogram.saturating_record(nanos.max(1));
            ops += 1;
        }
    }
}

/// Latencies from 1 ns to 100 s at 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// Median, and spread = (max - min) / median, of some rounds.
pub fn median_spread(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = if sorted.len() % 2 == 1 {
        sorted[sorted.len() / 2]
    } else {
        (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
    };
    let spread = (sorted[sorted.len() - 1] - sorted[0]) / median;
    (median, spread)
}
