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

use durlog_vfs::{CrashScript, FaultKind, SimVfs, TraceKind};

use crate::options::Options;
use crate::{Violation, panic_message};

mod state;
mod summary;

pub use state::{FaultPoint, StateId};
pub use summary::{
    ExhaustOptions, ExhaustProgress, ExhaustSummary, replay, replay_command, run_exhaust,
};

/// How the message of a violation that is a panic begins (its step is
/// unknown: a replay shows where it struck).
pub const PANIC_PREFIX: &str = "panic: ";

/// The default bound on dirty pages decided one by one per power loss.
pub const PAGES_MAX: u32 = 10;

/// Called after each power loss of a run with whether it struck during a
/// recovery, once the disk holds what it left and before anything is
/// reopened; `false` ends the run there with no verdict.
pub type PowerLossHook<'a> = Box<dyn FnMut(&SimVfs, bool) -> bool + 'a>;

/// A scenario whose small workloads can be explored exhaustively.
pub trait Exhaustible: Sync {
    /// One workload: a short list of operations, written and read back as
    /// text in state ids (`Pal`).
    type Workload: Clone + fmt::Display + FromStr<Err = String> + Send + Sync;

    /// The options of the runs, written into replay commands as flags
    /// ([`crate::options`]).
    type Options: Options;

    /// The command that replays a state (`durlog-sim`).
    fn command(&self) -> &str;

    /// The options this explorer was made with.
    fn options(&self) -> &Self::Options;

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
