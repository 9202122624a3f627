//! The schedulers every scenario runs under, and the log's setup.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use durlog::vfs::{FaultConfig, SimVfs};
use durlog::{Log, NextSegment, Options, Tuning};
use shuttle::scheduler::{PctScheduler, RandomScheduler};
use shuttle::{Config, MaxSteps, Runner};

pub(crate) const DIR: &str = "/log";

/// Schedules per test and scheduler.
fn iterations() -> usize {
    std::env::var("DURLOG_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
}

/// Runs `test` under PCT (depth 3), then under the random scheduler
/// (`DURLOG_SHUTTLE_SCHEDULER=pct` or `random` runs one only). A schedule
/// longer than 100,000 steps fails: a spin that never ends. Prints the
/// schedules each scheduler ran and their time, also when one fails.
pub(crate) fn check(test: impl Fn() + Send + Sync + 'static) {
    // A failure prints its schedule; this runs that one schedule again.
    if let Ok(schedule) = std::env::var("DURLOG_SHUTTLE_REPLAY") {
        shuttle::replay(test, &schedule);
        return;
    }
    let test = Arc::new(test);
    let mut config = Config::new();
    config.max_steps = MaxSteps::FailAfter(100_000);
    let only = std::env::var("DURLOG_SHUTTLE_SCHEDULER").unwrap_or_default();
    if only != "random" {
        let tally = Tally::new("pct");
        let (test, runs) = (Arc::clone(&test), Arc::clone(&tally.runs));
        let pct = PctScheduler::new(3, iterations());
        Runner::new(pct, config.clone()).run(move || {
            runs.fetch_add(1, Relaxed);
            test();
        });
    }
    if only != "pct" {
        let tally = Tally::new("random");
        let runs = Arc::clone(&tally.runs);
        let random = RandomScheduler::new(iterations());
        Runner::new(random, config).run(move || {
            runs.fetch_add(1, Relaxed);
            test();
        });
    }
}

/// Counts a scheduler's schedules and prints them when dropped, on
/// success or while a failure unwinds.
struct Tally {
    scheduler: &'static str,
    runs: Arc<AtomicUsize>,
    started: Instant,
}

impl Tally {
    fn new(scheduler: &'static str) -> Tally {
        Tally {
            scheduler,
            runs: Arc::new(AtomicUsize::new(0)),
            started: Instant::now(),
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        let runs = self.runs.load(Relaxed);
        let seconds = self.started.elapsed().as_secs_f64();
        let failed = if std::thread::panicking() {
            ", failed"
        } else {
            ""
        };
        eprintln!(
            "{}: {runs} schedules in {seconds:.2} s{failed}",
            self.scheduler
        );
        assert!(
            std::thread::panicking() || runs >= iterations(),
            "shuttle ran {runs} schedules"
        );
    }
}

/// The log's setup for a scenario.
pub(crate) struct Setup {
    pub(crate) faults: FaultConfig,
    pub(crate) segment_bytes: u64,
    pub(crate) max_bytes: u64,
}

pub(crate) fn open(vfs: &SimVfs, setup: &Setup) -> Log {
    let options = Options {
        segment_bytes: setup.segment_bytes,
        max_bytes: setup.max_bytes,
        now: Some(Arc::new(|| 7)),
        failpoint: None,
    };
    let tuning = Tuning::default().with(|tuning| {
        tuning.next_segment = NextSegment::Background;
        tuning.preallocate_after_bytes = 0;
        tuning.preallocate_chunk_bytes = 64;
    });
    Log::open_tuned(vfs.clone(), DIR, options, tuning).expect("open")
}
