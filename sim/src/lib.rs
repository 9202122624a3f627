//! durlog-sim: the deterministic crash simulator of durlog.
//!
//! One run is one seed. From it come the faults the simulated disk may
//! inject (a random subset with random weights: swarm testing) and a
//! workload of appends from several simulated clients, group commits,
//! reads, power losses (between operations, during any disk operation of a
//! commit or of recovery, and at the failpoint between write and sync),
//! process restarts and quota changes. The engine runs on a `SimVfs`,
//! driven step by step through the same `Log::submit` /
//! `Log::commit_next_group` state machine that threads use, and an oracle
//! checks after every step and every reopen that every acknowledged event
//! reads back exactly, that an unacknowledged append is whole or absent,
//! that versions stay dense and that `Corrupt` is only ever reported when
//! a fault damaged that file.
//!
//! Nothing in a run depends on the wall clock, on threads or on hash order:
//! the same seed and options give the same trace digest on every machine.
//! Campaigns spread seeds over threads (`--jobs`) and machines (`--shard`)
//! and aggregate in seed order; a shard's report (`run --report`, module
//! [`shard`]) keeps everything its summary prints and each seed's digest,
//! and `merge` combines the reports of a split range into exactly what one
//! machine running the whole range prints.
//!
//! Seeds sample crash states; [`exhaust`] enumerates them for every
//! workload of a few operations (SPEC section 13): every disk operation as
//! the crash point, every outcome the fault model allows there, each
//! distinct state judged by the same runner and oracle.

pub mod exhaust;
mod golden;
mod model;
pub mod plan;
mod report;
pub mod run;
pub mod shard;
pub mod shrink;

use std::fmt::Write as _;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use plan::{Plan, RunOptions, mix};
pub use report::{Counters, CrashPoint, Recovery, SeedResult, Summary, Violation};
pub use run::{PowerLossHook, run_plan, run_plan_on};
pub use shrink::{Shrunk, keep_ranges, parse_keep, shrink};

/// Runs one seed. A panic in the engine is a violation like any other.
pub fn run_seed(seed: u64, options: &RunOptions) -> SeedResult {
    let plan = Plan::draw(seed, options);
    match std::panic::catch_unwind(|| run_plan(&plan, None, false)) {
        Ok(result) => result,
        Err(panic) => SeedResult {
            seed,
            violation: Some(Violation {
                step: 0,
                message: format!("panic: {}", panic_message(&*panic)),
            }),
            ..SeedResult::default()
        },
    }
}

/// The message of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// The seeds of `range` that shard `index` of `count` takes: every
/// `count`-th, starting at the `index`-th.
pub fn shard_seeds(range: Range<u64>, index: u64, count: u64) -> impl Iterator<Item = u64> {
    range.skip(index as usize).step_by(count.max(1) as usize)
}

/// Live counts for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    pub seeds_done: AtomicU64,
    pub cycles: AtomicU64,
    pub violations: AtomicU64,
    /// Set to stop taking new seeds (`--fail-fast` sets it at the first
    /// violation).
    pub stop: std::sync::atomic::AtomicBool,
}

/// Runs `seeds` on `jobs` threads. Each seed runs alone on one thread, so
/// the threads change only the speed, never a result.
pub fn run_campaign(
    seeds: &[u64],
    jobs: usize,
    options: &RunOptions,
    progress: &Progress,
    fail_fast: bool,
) -> Summary {
    run_campaign_digests(seeds, jobs, options, progress, fail_fast).0
}

/// [`run_campaign`], also returning each seed's trace digest, in the order
/// of `seeds` (0 for a seed `--fail-fast` left out): what a shard report
/// keeps so that `merge` can fold a whole range's digest exactly.
pub fn run_campaign_digests(
    seeds: &[u64],
    jobs: usize,
    options: &RunOptions,
    progress: &Progress,
    fail_fast: bool,
) -> (Summary, Vec<u64>) {
    let next = AtomicUsize::new(0);
    let digests = Mutex::new(vec![0u64; seeds.len()]);
    let summary = Mutex::new(Summary::default());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while !progress.stop.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&seed) = seeds.get(index) else { break };
                    let result = run_seed(seed, options);
                    progress
                        .cycles
                        .fetch_add(result.counters.cycles, Ordering::Relaxed);
                    progress.seeds_done.fetch_add(1, Ordering::Relaxed);
                    digests.lock().unwrap()[index] = result.digest;
                    let mut summary = summary.lock().unwrap();
                    summary.add(&result);
                    if let Some(violation) = result.violation {
                        progress.violations.fetch_add(1, Ordering::Relaxed);
                        progress.stop.store(fail_fast, Ordering::Relaxed);
                        summary.violations.push((seed, violation));
                    }
                }
            });
        }
    });
    let mut summary = summary.into_inner().unwrap();
    summary.violations.sort_by_key(|(seed, _)| *seed);
    let digests = digests.into_inner().unwrap();
    summary.digest = fold_digests(digests.iter().copied());
    (summary, digests)
}

/// A campaign's digest: the seeds' trace digests folded in seed order.
/// The fold is not associative (each step mixes), so a campaign split
/// over shards keeps every seed's digest and `merge` folds them again in
/// seed order (`shard.rs`).
pub fn fold_digests(seed_digests: impl IntoIterator<Item = u64>) -> u64 {
    seed_digests
        .into_iter()
        .fold(0, |digest, seed_digest| mix(digest ^ seed_digest))
}

/// The options as command-line flags, each with a leading space ("" for
/// the defaults): how `run`'s first line and shard reports name them.
pub fn option_flags(options: &RunOptions) -> String {
    repro_command(0, options, None)
        .trim_start_matches("durlog-sim repro --seed 0")
        .to_string()
}

/// The command that replays a seed with these options.
pub fn repro_command(seed: u64, options: &RunOptions, keep: Option<&str>) -> String {
    let mut command = format!("durlog-sim repro --seed {seed}");
    if let Some(faults) = &options.faults {
        let names: Vec<&str> = faults.iter().map(|kind| kind.name()).collect();
        let list = if names.is_empty() {
            "none".to_string()
        } else {
            names.join(",")
        };
        let _ = write!(command, " --faults {list}");
    }
    if let Some(steps) = options.steps {
        let _ = write!(command, " --steps {steps}");
    }
    if options.canary {
        command.push_str(" --canary");
    }
    if let Some(keep) = keep {
        let _ = write!(command, " --keep {keep}");
    }
    command
}
