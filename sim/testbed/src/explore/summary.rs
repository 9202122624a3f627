//! Every workload of a scenario explored on threads, summed in workload
//! order; one state run again.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::{
    Exhaustible, ExploreOptions, PAGES_MAX, PANIC_PREFIX, Share, StateId, WorkloadReport, explore,
    prepared_disk,
};
use crate::Violation;

/// Failing workloads whose first violation the summary keeps.
const FAILING_WORKLOADS_KEPT: usize = 10;

/// What an exhaustive check was asked to do.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExhaustOptions {
    /// Workloads of 1 to this many operations.
    pub ops: u32,
    pub pages_max: u32,
    /// Crash each recovery too, at each of its operations.
    pub recovery_crashes: bool,
    pub fail_fast: bool,
    pub share: Share,
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
pub struct ExhaustSummary<W> {
    /// The scenario's description of its workloads.
    pub header: String,
    pub options: ExhaustOptions,
    /// Workloads explored (all of them unless it failed fast).
    pub workloads: u64,
    pub crash_points: u64,
    pub failure_points: u64,
    pub runs: u64,
    /// Runs ended at a state judged at another fault point.
    pub shared: u64,
    pub states: u64,
    pub recovery_states: u64,
    pub pages_joined: u64,
    pub images: u64,
    pub violations: u64,
    /// Workloads with a violation.
    pub failing_workloads: u64,
    /// The first violation of each of the first failing workloads, in
    /// workload order, each with where it struck and the states checked
    /// before it in that order.
    pub kept: Vec<(StateId<W>, Violation, String, u64)>,
}

/// Explores every workload of `options.ops` operations or fewer on `jobs`
/// threads. Each workload is explored by one thread alone and the reports
/// are summed in workload order, so the summary is the same for any `jobs`.
pub fn run_exhaust<E: Exhaustible>(
    scenario: &E,
    options: ExhaustOptions,
    jobs: usize,
    progress: &ExhaustProgress,
) -> ExhaustSummary<E::Workload> {
    let workloads = scenario.workloads(options.ops);
    let reports: Mutex<Vec<Option<WorkloadReport<E::Workload>>>> =
        Mutex::new((0..workloads.len()).map(|_| None).collect());
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
                        share: options.share,
                    };
                    let report = explore(scenario, workload, explore_options);
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
    summarize(scenario, options, &reports)
}

/// Sums the reports in workload order, up to the first missing one (a
/// fail-fast run leaves the later ones out).
fn summarize<E: Exhaustible>(
    scenario: &E,
    options: ExhaustOptions,
    reports: &[Option<WorkloadReport<E::Workload>>],
) -> ExhaustSummary<E::Workload> {
    let mut summary = ExhaustSummary {
        header: scenario.describe(options.ops),
        options,
        workloads: 0,
        crash_points: 0,
        failure_points: 0,
        runs: 0,
        shared: 0,
        states: 0,
        recovery_states: 0,
        pages_joined: 0,
        images: 0,
        violations: 0,
        failing_workloads: 0,
        kept: Vec::new(),
    };
    let mut images = BTreeSet::new();
    for report in reports.iter().map_while(Option::as_ref) {
        summary.workloads += 1;
        summary.crash_points += report.crash_points;
        summary.failure_points += report.failure_points;
        summary.runs += report.runs;
        summary.shared += report.shared;
        summary.pages_joined += report.pages_joined;
        summary.violations += report.violations;
        if let Some((id, violation, before)) = &report.first_violation {
            summary.failing_workloads += 1;
            if summary.kept.len() < FAILING_WORKLOADS_KEPT {
                let before = summary.states + before;
                let at = if violation.message.starts_with(PANIC_PREFIX) {
                    "a panic (its replay shows where)".to_string()
                } else {
                    match scenario.describe_step(&id.workload, violation.step) {
                        what if what.is_empty() => format!("at step {}", violation.step),
                        what => format!("at step {} ({what})", violation.step),
                    }
                };
                summary
                    .kept
                    .push((id.clone(), violation.clone(), at, before));
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

impl<W> fmt::Display for ExhaustSummary<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.header)?;
        writeln!(
            f,
            "outcomes    each subset of up to {} dirty pages per power loss (more: the rest kept or lost together, {} power losses), each unsynced directory entry and size change kept or undone, the interrupted write torn at each {}-byte sector (clean or with a garbage sector), a failed write cut at each sector, a failed sync dropping its pages or not",
            self.options.pages_max,
            self.pages_joined,
            durlog_vfs::SECTOR_BYTES
        )?;
        if self.options.recovery_crashes {
            writeln!(
                f,
                "recovery    the recovery after each state crashed at each of its operations too"
            )?;
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
        match self.options.share {
            Share::EachPoint => writeln!(
                f,
                "sharing     none: a state is judged again at each fault point that reaches it"
            )?,
            Share::AcrossPoints => writeln!(
                f,
                "sharing     {} runs ended at a state judged at another fault point of their workload (the same images and runner digests; a scenario that gives none shares nothing)",
                self.shared
            )?,
            Share::Verify => writeln!(
                f,
                "sharing     verified: every state that matched one judged at another fault point was judged alike"
            )?,
        }
        write!(
            f,
            "violations  {} in {} workloads",
            self.violations, self.failing_workloads
        )
    }
}

/// Runs one state again, with its readable trace: the verdict, the trace,
/// and whether its choices did not fit the run (made by another build).
pub fn replay<E: Exhaustible>(
    scenario: &E,
    id: &StateId<E::Workload>,
    pages_max: u32,
) -> (Option<Violation>, Vec<String>, bool) {
    let (vfs, _) = prepared_disk(id, pages_max);
    let (violation, trace) = scenario.run_workload(&id.workload, vfs.clone(), true, None);
    let misfit = vfs.crash_script().is_some_and(|script| script.misfit);
    (violation, trace, misfit)
}

/// The command that replays `id`.
pub fn replay_command<E: Exhaustible>(
    scenario: &E,
    id: &StateId<E::Workload>,
    pages_max: u32,
) -> String {
    let mut command = format!("{} exhaust --replay {id}", scenario.command());
    if pages_max != PAGES_MAX {
        command.push_str(&format!(" --pages-max {pages_max}"));
    }
    command.push_str(&crate::options::flags_text(scenario.options()));
    command
}
