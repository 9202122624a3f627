//! Exhaustive crash states: every fault point of every small workload,
//! and every outcome the disk's fault model allows there, each distinct
//! state run and judged once.
//!
//! For an [`Exhaustible`] scenario (its workloads of up to K operations
//! from a fixed alphabet, and a run of one on a disk it is given), each
//! workload is explored alone. The fault points come from a first run
//! with no fault (its power loss after the last operation is the `End`
//! point): power fails during each counted disk operation of the run up to
//! that power loss (`Crash`), and each write and sync among them fails
//! instead (`Fail`), after which the run goes on to its power loss at the
//! end. At each point the outcomes are enumerated depth first by the
//! disk's [`CrashScript`]: a run with some choices records every decision
//! and how many options it had, and the next run increments the last
//! decision that has an option left ([`CrashScript::next_choices`]).
//!
//! A state is checked once: at each scripted power loss the explorer's
//! hook hashes the disk ([`SimVfs::image_digest`]) and ends the run if the
//! same image was reached before at the same point with the same failure
//! decisions, which is everything that can differ between two runs of one
//! workload up to there (the operations before it are the same and the
//! crash outcomes are in the image). A duplicate also skips every outcome
//! that only later decisions tell apart.
//!
//! With recovery crashes on, each point (the end and the failures too,
//! whose first power loss is the one after the last operation) is
//! enumerated again for r = 1, 2, ... with a second scripted power loss
//! during the r-th counted operation after the first, until r passes every
//! recovery's end; a state whose second power loss struck outside
//! recovery is not counted.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use durlog_vfs::{CrashScript, FaultKind, SimVfs, TraceKind};

use crate::{Violation, panic_message};

/// How the message of a violation that is a panic begins (its step is
/// unknown: a replay shows where it struck).
pub const PANIC_PREFIX: &str = "panic: ";

/// The default bound on dirty pages decided one by one per power loss.
pub const PAGES_MAX: u32 = 10;

/// Failing workloads whose first violation the summary keeps.
const FAILING_WORKLOADS_KEPT: usize = 10;

/// Called after each power loss of a run with whether it struck during a
/// recovery, once the disk holds what it left and before anything is
/// reopened; `false` ends the run there with no verdict.
pub type PowerLossHook<'a> = Box<dyn FnMut(&SimVfs, bool) -> bool + 'a>;

/// A scenario whose small workloads can be explored exhaustively.
pub trait Exhaustible: Sync {
    /// One workload: a short list of operations, written and read back as
    /// text in state ids (`Pal`).
    type Workload: Clone + fmt::Display + FromStr<Err = String> + Send + Sync;

    /// The command that replays a state (`durlog-sim`).
    fn command(&self) -> &str;

    /// Options of the runs, as flags with a leading space each ("" for
    /// none), for replay commands.
    fn flags(&self) -> String;

    /// Every workload of 1 to `ops` operations, in a fixed order.
    fn workloads(&self, ops: u32) -> Vec<Self::Workload>;

    /// Runs `workload` on `disk` (fresh, carrying the state's script),
    /// calling `on_power_loss` after each power loss. Returns the verdict
    /// and, with `trace`, the readable trace.
    fn run_workload(
        &self,
        workload: &Self::Workload,
        disk: SimVfs,
        trace: bool,
        on_power_loss: Option<PowerLossHook<'_>>,
    ) -> (Option<Violation>, Vec<String>);

    /// Where a violation at `step` of `workload` struck, for the summary
    /// (say, "operation 2 (Purge)"; "" to say nothing more).
    fn describe_step(&self, _workload: &Self::Workload, _step: usize) -> String {
        String::new()
    }

    /// The summary's first lines: what the workloads are.
    fn describe(&self, ops: u32) -> String;
}

/// Where the fault of a state strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultPoint {
    /// Power fails during this counted disk operation (1-based).
    Crash(u64),
    /// This counted operation (a write or a sync) fails.
    Fail(u64),
    /// Nothing fails until the power loss after the last operation.
    End,
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultPoint::Crash(op) => write!(f, "c{op}"),
            FaultPoint::Fail(op) => write!(f, "f{op}"),
            FaultPoint::End => f.write_str("end"),
        }
    }
}

/// One state, exactly: the workload, the fault point, the crash during
/// the recovery after the first power loss (the n-th counted operation
/// after it), and the choices of every scripted decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateId<W> {
    pub workload: W,
    pub point: FaultPoint,
    pub recovery_crash: Option<u64>,
    pub choices: Vec<u32>,
}

/// `Pal:c7:r2:0.1.1` (workload : fault point : recovery crash or `-` :
/// choices or `-`).
impl<W: fmt::Display> fmt::Display for StateId<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:", self.workload, self.point)?;
        match self.recovery_crash {
            Some(op) => write!(f, "r{op}:")?,
            None => f.write_str("-:")?,
        }
        if self.choices.is_empty() {
            return f.write_str("-");
        }
        let choices: Vec<String> = self.choices.iter().map(u32::to_string).collect();
        f.write_str(&choices.join("."))
    }
}

impl<W: FromStr<Err = String>> FromStr for StateId<W> {
    type Err = String;

    fn from_str(text: &str) -> Result<StateId<W>, String> {
        let bad = |what: &str| format!("{text:?}: {what} (expected e.g. Pal:c7:r2:0.1.1)");
        let parts: Vec<&str> = text.trim().split(':').collect();
        let [ops, point, recovery, choices] = parts[..] else {
            return Err(bad("not four fields separated by ':'"));
        };
        let workload: W = ops.parse()?;
        let number = |digits: &str| digits.parse::<u64>().ok().filter(|&op| op > 0);
        let point = match (point, point.get(..1), point.get(1..)) {
            ("end", ..) => FaultPoint::End,
            (_, Some("c"), Some(op)) => FaultPoint::Crash(number(op).ok_or_else(|| bad("c0"))?),
            (_, Some("f"), Some(op)) => FaultPoint::Fail(number(op).ok_or_else(|| bad("f0"))?),
            _ => return Err(bad("the fault point is not cN, fN or end")),
        };
        let recovery_crash = match recovery {
            "-" => None,
            _ => Some(
                recovery
                    .strip_prefix('r')
                    .and_then(number)
                    .ok_or_else(|| bad("the recovery crash is not rN or -"))?,
            ),
        };
        let choices = match choices {
            "-" => Vec::new(),
            _ => choices
                .split('.')
                .map(|choice| choice.parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|_| bad("the choices are not numbers separated by '.'"))?,
        };
        Ok(StateId {
            workload,
            point,
            recovery_crash,
            choices,
        })
    }
}

/// How one workload is explored.
#[derive(Clone, Copy, Debug)]
pub struct ExploreOptions {
    /// Dirty pages decided one by one per power loss (`CrashScript`).
    pub pages_max: u32,
    /// Crash each recovery too, at each of its operations.
    pub recovery_crashes: bool,
    /// Stop at the first violation.
    pub fail_fast: bool,
}

/// What exploring one workload found.
#[derive(Clone, Debug)]
pub struct WorkloadReport<W> {
    pub crash_points: u64,
    pub failure_points: u64,
    /// Runs made, duplicates cut short included.
    pub runs: u64,
    /// Distinct states checked.
    pub states: u64,
    /// Of which with a power loss during recovery too.
    pub recovery_states: u64,
    /// Scripted power losses with more dirty pages than `pages_max`.
    pub pages_joined: u64,
    /// Distinct disk images after a scripted power loss.
    pub images: BTreeSet<u128>,
    pub violations: u64,
    /// The first violation, with the states checked before it.
    pub first_violation: Option<(StateId<W>, Violation, u64)>,
}

impl<W> Default for WorkloadReport<W> {
    fn default() -> Self {
        WorkloadReport {
            crash_points: 0,
            failure_points: 0,
            runs: 0,
            states: 0,
            recovery_states: 0,
            pages_joined: 0,
            images: BTreeSet::new(),
            violations: 0,
            first_violation: None,
        }
    }
}

/// Explores `workload` of `scenario`.
pub fn explore<E: Exhaustible>(
    scenario: &E,
    workload: &E::Workload,
    options: ExploreOptions,
) -> WorkloadReport<E::Workload> {
    let mut explorer = Explorer {
        scenario,
        workload,
        options,
        report: WorkloadReport::default(),
    };
    let mut points = explorer.fault_points();
    for &point in &points {
        if explorer.done() {
            break;
        }
        explorer.enumerate(point, None, &mut BTreeSet::new());
    }
    if options.recovery_crashes {
        points.push(FaultPoint::End);
        for point in points {
            // The states whose recovery ended before the operation tried.
            let mut recovered = BTreeSet::new();
            for after in 1.. {
                if explorer.done() {
                    break;
                }
                let states = explorer.report.recovery_states;
                explorer.enumerate(point, Some(after), &mut recovered);
                if explorer.report.recovery_states == states {
                    break; // past the end of every recovery
                }
            }
        }
    }
    explorer.report
}

/// A state before its recovery: the failure decisions taken and the
/// image the first scripted power loss left.
type FirstLoss = (Vec<u32>, u128);

struct Explorer<'w, E: Exhaustible> {
    scenario: &'w E,
    workload: &'w E::Workload,
    options: ExploreOptions,
    report: WorkloadReport<E::Workload>,
}

/// What the hook saw of one run.
#[derive(Default)]
struct Seen {
    power_losses: u32,
    /// Counted operations before the first power loss.
    ops_before_loss: Option<u64>,
    /// The state at the first scripted power loss.
    first: Option<FirstLoss>,
    /// The run was ended at a state checked before.
    duplicate: bool,
    /// The second scripted power loss struck outside recovery.
    outside_recovery: bool,
}

impl<E: Exhaustible> Explorer<'_, E> {
    fn done(&self) -> bool {
        self.options.fail_fast && self.report.violations > 0
    }

    /// The `End` point's outcomes, and from its first run the crash points
    /// (every counted operation before its power loss) and failure points
    /// (the writes and syncs among them), in operation order.
    fn fault_points(&mut self) -> Vec<FaultPoint> {
        let (ops, before) = self.enumerate(FaultPoint::End, None, &mut BTreeSet::new());
        let mut points = Vec::new();
        for (index, kind) in ops.iter().take(before as usize).enumerate() {
            let op = index as u64 + 1;
            points.push(FaultPoint::Crash(op));
            self.report.crash_points += 1;
            if matches!(
                kind,
                TraceKind::Write | TraceKind::SyncData | TraceKind::SyncAll | TraceKind::SyncDir
            ) {
                points.push(FaultPoint::Fail(op));
                self.report.failure_points += 1;
            }
        }
        points
    }

    /// Every outcome at `point`, with a recovery crash `after` operations
    /// after the first power loss, if any (`recovered`: the states whose
    /// recovery ended before, skipped; this adds those it finds). Returns
    /// the kinds of the counted operations of its first run and how many
    /// came before its first power loss.
    fn enumerate(
        &mut self,
        point: FaultPoint,
        after: Option<u64>,
        recovered: &mut BTreeSet<FirstLoss>,
    ) -> (Vec<TraceKind>, u64) {
        let mut checked = BTreeSet::new();
        let mut choices = Vec::new();
        let mut first_run = None;
        loop {
            let id = StateId {
                workload: self.workload.clone(),
                point,
                recovery_crash: after,
                choices,
            };
            let (violation, script, seen) = self.run(&id, &mut checked, recovered);
            self.report.runs += 1;
            self.report.pages_joined += u64::from(script.pages_joined);
            if first_run.is_none() {
                let before = seen.ops_before_loss.unwrap_or(script.ops.len() as u64);
                first_run = Some((script.ops.clone(), before));
            }
            let reached_recovery = seen.power_losses >= 2 && !seen.outside_recovery;
            if after.is_some()
                && !seen.duplicate
                && !reached_recovery
                && let Some(first) = seen.first
            {
                recovered.insert(first);
            }
            if !seen.duplicate && (after.is_none() || reached_recovery) {
                self.report.states += 1;
                self.report.recovery_states += u64::from(after.is_some());
            }
            if let Some(violation) = violation {
                self.report.violations += 1;
                let before = self.report.states.saturating_sub(1);
                self.report
                    .first_violation
                    .get_or_insert((id, violation, before));
                if self.options.fail_fast {
                    break;
                }
            }
            match CrashScript::next_choices(&script.decisions) {
                Some(next) => choices = next,
                None => break,
            }
        }
        first_run.unwrap_or_default()
    }

    /// Runs one state, ending it at a scripted power loss whose state is
    /// in `checked` (and adding those it checks), or at a first power loss
    /// in `recovered`.
    fn run(
        &mut self,
        id: &StateId<E::Workload>,
        checked: &mut BTreeSet<(Vec<u32>, Vec<u128>)>,
        recovered: &BTreeSet<FirstLoss>,
    ) -> (Option<Violation>, CrashScript, Seen) {
        let (vfs, scripted) = prepared_disk(id, self.options.pages_max);
        let mut seen = Seen::default();
        let mut images = Vec::new();
        let images_found = &mut self.report.images;
        let hook = |vfs: &SimVfs, in_recovery: bool| {
            seen.power_losses += 1;
            if seen.power_losses == 1 {
                seen.ops_before_loss = Some(vfs.op_count());
            }
            if seen.power_losses > scripted {
                return true;
            }
            if seen.power_losses == 2 && !in_recovery {
                seen.outside_recovery = true;
                return false;
            }
            let image = vfs.image_digest();
            images_found.insert(image);
            images.push(image);
            let script = vfs.crash_script().expect("the disk has a script");
            let failures = failure_decisions(&script);
            if seen.power_losses == 1 {
                let first = (failures.clone(), image);
                if recovered.contains(&first) {
                    seen.duplicate = true;
                    return false;
                }
                seen.first = Some(first);
            }
            seen.duplicate = !checked.insert((failures, images.clone()));
            !seen.duplicate
        };
        // A panic in the code under test is a violation like any other:
        // reported with its state, and the enumeration goes on from the
        // decisions taken before it.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.scenario
                .run_workload(&id.workload, vfs.clone(), false, Some(Box::new(hook)))
        }));
        let violation = match run {
            Ok((violation, _)) => violation,
            Err(panic) => Some(Violation {
                step: 0,
                message: format!("{PANIC_PREFIX}{}", panic_message(&*panic)),
            }),
        };
        let script = vfs.crash_script().expect("the disk has a script");
        (violation, script, seen)
    }
}

/// A fresh disk with the script of `id`, and how many of its power losses
/// the script decides.
pub fn prepared_disk<W>(id: &StateId<W>, pages_max: u32) -> (SimVfs, u32) {
    let vfs = SimVfs::new(0);
    let scripted = 1 + u32::from(id.recovery_crash.is_some());
    let (crash_at_ops, fail_at_op) = match id.point {
        FaultPoint::Crash(op) => (vec![op], None),
        FaultPoint::Fail(op) => (Vec::new(), Some(op)),
        FaultPoint::End => (Vec::new(), None),
    };
    vfs.set_crash_script(Some(CrashScript {
        crash_at_ops,
        crash_again_after: id.recovery_crash,
        fail_at_op,
        power_losses: scripted,
        pages_max,
        choices: id.choices.clone(),
        ..CrashScript::default()
    }));
    (vfs, scripted)
}

/// The options taken by the decisions of a failure (not of a crash): they
/// change what the run did before its power loss, so two runs that reach
/// one image are the same only if these agree too.
fn failure_decisions(script: &CrashScript) -> Vec<u32> {
    script
        .decisions
        .iter()
        .filter(|decision| {
            matches!(
                decision.kind,
                FaultKind::ShortWrite | FaultKind::FailedFsync
            )
        })
        .map(|decision| decision.taken)
        .collect()
}

/// What an exhaustive check was asked to do.
#[derive(Clone, Copy, Debug)]
pub struct ExhaustOptions {
    /// Workloads of 1 to this many operations.
    pub ops: u32,
    pub pages_max: u32,
    /// Crash each recovery too, at each of its operations.
    pub recovery_crashes: bool,
    pub fail_fast: bool,
}

/// Live counts for a progress display.
#[derive(Debug, Default)]
pub struct ExhaustProgress {
    pub workloads_done: AtomicU64,
    pub states: AtomicU64,
    pub violations: AtomicU64,
}

/// What an exhaustive check found, summed in workload order.
#[derive(Clone, Debug)]
pub struct ExhaustSummary<W> {
    /// The scenario's description of its workloads.
    pub header: String,
    pub options: ExhaustOptions,
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
    command.push_str(&scenario.flags());
    command
}
