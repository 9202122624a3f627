//! `durlog-sim exhaust`: every crash state of every small workload, each
//! checked by the same runner and oracle as `run` (SPEC section 13).
//!
//! Seeds sample crash states; for workloads of up to K operations from a
//! fixed alphabet (`workload.rs`) this enumerates them. For each workload,
//! each counted disk operation is a crash point and each write and sync a
//! failure point (`explore.rs`), and at each, every outcome the fault
//! model allows (the simulated disk takes its decisions from a
//! `CrashScript`, which `explore.rs` walks depth first): each subset of
//! the unsynced pages up to a bound, each directory entry made or removed
//! since the last directory sync kept or lost, each unsynced size change
//! kept or undone, the interrupted write torn at each sector, a failed
//! sync that drops its dirty pages or not. After each distinct state the
//! runner reopens the log and the oracle judges it, exactly as in `run`;
//! and each recovery is crashed too, at each of its operations, with
//! every outcome of that crash. SPEC section 13 asks for that at K's last
//! level; doing it at every level costs 7% more at K = 3 and makes the
//! states of K a superset of those of K - 1, so the K at which a bug is
//! first found is well defined.
//!
//! Workloads are spread over threads; each is explored by one thread
//! alone and the reports are summed in workload order, so stdout is the
//! same for the same arguments (timing goes to stderr).

mod explore;
mod workload;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

pub use explore::{ExploreOptions, PANIC_PREFIX, WorkloadReport, explore, prepared_disk};
pub use workload::{FaultPoint, Op, QUOTA_BYTES, SEGMENT_BYTES, Setting, StateId, Workload};

use durlog_vfs::SECTOR_BYTES;

use crate::run::{SeedResult, Violation, run_plan_on};

/// The default bound on dirty pages decided one by one per power loss.
pub const PAGES_MAX: u32 = 10;

/// What `exhaust` was asked to do.
#[derive(Clone, Copy, Debug)]
pub struct ExhaustOptions {
    /// Workloads of 1 to this many operations.
    pub ops: u32,
    pub pages_max: u32,
    /// Crash each recovery too, at each of its operations.
    pub recovery_crashes: bool,
    pub fail_fast: bool,
    /// Plant a failure in the oracle's model at the end of every workload
    /// that acknowledged something, to show failures are reported and
    /// replayed.
    pub canary: bool,
}

/// Live counts for a progress display.
#[derive(Debug, Default)]
pub struct ExhaustProgress {
    pub workloads_done: AtomicU64,
    pub states: AtomicU64,
    pub violations: AtomicU64,
}

/// What an exhaustive check found, summed in workload order.
#[derive(Clone, Debug, Default)]
pub struct ExhaustSummary {
    pub options: Option<ExhaustOptionsShown>,
    /// Workloads explored (all of them unless it failed fast).
    pub workloads: u64,
    pub crash_points: u64,
    pub failure_points: u64,
    pub runs: u64,
    pub states: u64,
    pub recovery_states: u64,
    pub pages_joined: u64,
    pub images: u64,
    pub violations: u64,
    /// Workloads with a violation.
    pub failing_workloads: u64,
    /// The first violation of each of the first failing workloads, in
    /// workload order, each with the states checked before it in that
    /// order.
    pub kept: Vec<(StateId, Violation, u64)>,
}

/// Failing workloads whose first violation the summary keeps.
const FAILING_WORKLOADS_KEPT: usize = 10;

/// The options as the summary prints them.
#[derive(Clone, Copy, Debug)]
pub struct ExhaustOptionsShown {
    pub ops: u32,
    pub pages_max: u32,
    pub recovery_crashes: bool,
}

/// Explores every workload of `options.ops` operations or fewer on `jobs`
/// threads.
pub fn run_exhaust(
    options: ExhaustOptions,
    jobs: usize,
    progress: &ExhaustProgress,
) -> ExhaustSummary {
    let workloads = Workload::all(options.ops);
    let reports: Mutex<Vec<Option<WorkloadReport>>> = Mutex::new(vec![None; workloads.len()]);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                // Taken in order, and each one taken is finished, so with
                // --fail-fast every workload before the first failing one
                // is complete.
                while !stop.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(workload) = workloads.get(index) else {
                        break;
                    };
                    let explore_options = ExploreOptions {
                        pages_max: options.pages_max,
                        recovery_crashes: options.recovery_crashes,
                        fail_fast: options.fail_fast,
                        canary: options.canary,
                    };
                    let report = explore(workload, explore_options);
                    progress.states.fetch_add(report.states, Ordering::Relaxed);
                    progress.workloads_done.fetch_add(1, Ordering::Relaxed);
                    if report.violations > 0 {
                        progress
                            .violations
                            .fetch_add(report.violations, Ordering::Relaxed);
                        if options.fail_fast {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    reports.lock().unwrap()[index] = Some(report);
                }
            });
        }
    });
    let reports = reports.into_inner().unwrap();
    summarize(options, &reports)
}

/// Sums the reports in workload order, up to the first missing one (a
/// fail-fast run leaves the later ones out).
fn summarize(options: ExhaustOptions, reports: &[Option<WorkloadReport>]) -> ExhaustSummary {
    let mut summary = ExhaustSummary {
        options: Some(ExhaustOptionsShown {
            ops: options.ops,
            pages_max: options.pages_max,
            recovery_crashes: options.recovery_crashes,
        }),
        ..ExhaustSummary::default()
    };
    let mut images = BTreeSet::new();
    for report in reports.iter().map_while(Option::as_ref) {
        summary.workloads += 1;
        summary.crash_points += report.crash_points;
        summary.failure_points += report.failure_points;
        summary.runs += report.runs;
        summary.pages_joined += report.pages_joined;
        summary.violations += report.violations;
        if let Some((id, violation, before)) = &report.first_violation {
            summary.failing_workloads += 1;
            if summary.kept.len() < FAILING_WORKLOADS_KEPT {
                let before = summary.states + before;
                summary.kept.push((id.clone(), violation.clone(), before));
            }
        }
        summary.states += report.states;
        summary.recovery_states += report.recovery_states;
        images.extend(report.images.iter().copied());
        if options.fail_fast && report.violations > 0 {
            break;
        }
    }
    summary.images = images.len() as u64;
    summary
}

impl fmt::Display for ExhaustSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(options) = self.options {
            writeln!(
                f,
                "exhaust --ops {}: every workload of 1 to {} of the {} operations {} in {} settings ({}), segments of {SEGMENT_BYTES} bytes, quota {QUOTA_BYTES}",
                options.ops,
                options.ops,
                Op::ALL.len(),
                Op::ALL.iter().map(|op| op.letter()).collect::<String>(),
                Setting::ALL.len(),
                Setting::ALL
                    .iter()
                    .map(|setting| setting.letter())
                    .collect::<String>(),
            )?;
            writeln!(
                f,
                "outcomes    each subset of up to {} dirty pages per power loss (more: the rest kept or lost together, {} power losses), each unsynced directory entry and size change kept or undone, the interrupted write torn at each {SECTOR_BYTES}-byte sector (clean or with a garbage sector), a failed write cut at each sector, a failed sync dropping its pages or not",
                options.pages_max, self.pages_joined
            )?;
            if options.recovery_crashes {
                writeln!(
                    f,
                    "recovery    the recovery after each state crashed at each of its operations too"
                )?;
            }
        }
        writeln!(f, "workloads   {}", self.workloads)?;
        writeln!(
            f,
            "points      {} crash points, {} failure points (a write or sync that fails), {} ends",
            self.crash_points, self.failure_points, self.workloads
        )?;
        writeln!(
            f,
            "states      {} distinct states checked ({} with a crash during recovery), {} runs, {} distinct disk images",
            self.states, self.recovery_states, self.runs, self.images
        )?;
        write!(
            f,
            "violations  {} in {} workloads",
            self.violations, self.failing_workloads
        )
    }
}

/// Runs one state again, with its readable trace; true if its choices did
/// not fit the run (made by another build).
pub fn replay(id: &StateId, pages_max: u32, canary: bool) -> (SeedResult, bool) {
    let (vfs, _) = prepared_disk(id, pages_max);
    let plan = id.workload.plan(canary);
    let result = run_plan_on(&plan, vfs.clone(), None, true, None);
    let misfit = vfs.crash_script().is_some_and(|script| script.misfit);
    (result, misfit)
}

/// The command that replays `id`.
pub fn replay_command(id: &StateId, pages_max: u32, canary: bool) -> String {
    let mut command = format!("durlog-sim exhaust --replay {id}");
    if pages_max != PAGES_MAX {
        command.push_str(&format!(" --pages-max {pages_max}"));
    }
    if canary {
        command.push_str(" --canary");
    }
    command
}
