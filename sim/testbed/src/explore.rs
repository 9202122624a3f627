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
//! Across the fault points of a workload, a state is judged once too
//! (`share.rs`, [`Share`]): a scenario whose hook is told a digest of its
//! runner at each power loss (the step it was at, its model, the evidence
//! its excuses may cite: everything outside the disk that the rest of the
//! run depends on) lets the explorer end a run whose images and runner
//! digests, loss by loss, match a state judged at another point. A crash
//! during a write and one during the sync after it often leave the same
//! disk and the same model. [`Share::Verify`] runs every state anyway and
//! demands that matching states are judged alike.
//!
//! With recovery crashes on, each distinct state at a first power loss (a
//! family: per point, or across points where states are shared) is run
//! again for r = 1, 2, ... with a second scripted power loss during the
//! r-th counted operation after the first, its first loss's choices held
//! and every outcome of the second enumerated, until r passes the end of
//! its recovery; a state whose second power loss struck outside recovery
//! is not counted. (Until 2026-12-07 the choices of the first loss were
//! enumerated again for each r, and the run after a family's first was
//! taken for a duplicate at that loss: only the first outcome of each
//! recovery crash was checked.)

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use durlog_vfs::{CrashScript, FaultKind, SimVfs, TraceKind};

use crate::options::Options;
use crate::{Violation, panic_message};

mod share;
mod state;
mod summary;

pub use share::Share;
use share::{FamilyKey, Judged, SharedKey, judged_unlike};
pub use state::{FaultPoint, StateId};
pub use summary::{
    ExhaustOptions, ExhaustProgress, ExhaustSummary, replay, replay_command, run_exhaust,
};

/// How the message of a violation that is a panic begins (its step is
/// unknown: a replay shows where it struck).
pub const PANIC_PREFIX: &str = "panic: ";

/// The default bound on dirty pages decided one by one per power loss.
pub const PAGES_MAX: u32 = 10;

/// Called after each power loss of a run, once the disk holds what it left
/// and before anything is reopened; `false` ends the run there with no
/// verdict.
pub type PowerLossHook<'a> = Box<dyn FnMut(&SimVfs, LossFacts<'_>) -> bool + 'a>;

/// What a power loss tells the explorer besides the disk.
#[derive(Clone, Copy)]
pub struct LossFacts<'a> {
    /// It struck during a recovery.
    pub in_recovery: bool,
    /// A digest of everything outside the disk's image that the rest of
    /// the run depends on (the step it was at, the scenario's model, the
    /// evidence its excuses may cite), if the scenario can give one: runs
    /// that agree on it and on the images are judged once across fault
    /// points ([`Share`]). `None` keeps the state to its own point. Asked
    /// for only where a state is new at its point.
    pub runner: &'a dyn Fn() -> Option<u64>,
}

impl LossFacts<'static> {
    /// A power loss with no runner digest.
    pub fn new(in_recovery: bool) -> LossFacts<'static> {
        LossFacts {
            in_recovery,
            runner: &|| None,
        }
    }
}

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
    pub share: Share,
}

/// What exploring one workload found.
#[derive(Clone, Debug)]
pub struct WorkloadReport<W> {
    pub crash_points: u64,
    pub failure_points: u64,
    /// Runs made, duplicates cut short included.
    pub runs: u64,
    /// Of which ended at a state judged at another fault point.
    pub shared: u64,
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
            shared: 0,
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
        judged: BTreeMap::new(),
        families: Vec::new(),
        family_keys: BTreeSet::new(),
    };
    let points = explorer.fault_points();
    for &point in &points {
        if explorer.done() {
            break;
        }
        explorer.enumerate(point);
    }
    if options.recovery_crashes {
        for family in std::mem::take(&mut explorer.families) {
            explorer.crash_recovery(&family);
        }
    }
    explorer.report
}

struct Explorer<'w, E: Exhaustible> {
    scenario: &'w E,
    workload: &'w E::Workload,
    options: ExploreOptions,
    report: WorkloadReport<E::Workload>,
    /// The states judged so far at any point, by what the rest of their
    /// runs depend on.
    judged: BTreeMap<SharedKey, Judged<E::Workload>>,
    /// The distinct states at a first power loss, in the order found:
    /// each one's recovery is crashed at each of its operations.
    families: Vec<Family>,
    family_keys: BTreeSet<FamilyKey>,
}

/// A state at the first power loss, whose recovery is crashed later: the
/// fault point and the choices that reach it.
struct Family {
    point: FaultPoint,
    choices: Vec<u32>,
    /// The counted operations of its recovery, if the scenario said which
    /// operations were recovering ([`SimVfs::set_recovering`]) and one
    /// after it was not.
    recovery_ops: Option<u64>,
}

/// What the hook saw of one run.
#[derive(Default)]
struct Seen {
    power_losses: u32,
    /// Counted operations before the first power loss.
    ops_before_loss: Option<u64>,
    /// The run was ended at a state checked before at its point.
    duplicate: bool,
    /// The second scripted power loss struck outside recovery.
    outside_recovery: bool,
    /// The run was ended at a state judged at another point.
    shared: bool,
    /// The states this run was the first to reach.
    first_of: Vec<SharedKey>,
    /// With [`Share::Verify`], the states judged before that it reached.
    met: Vec<SharedKey>,
}

impl Seen {
    fn reached_recovery(&self) -> bool {
        self.power_losses >= 2 && !self.outside_recovery
    }

    /// A distinct state to count: one that reached its last scripted
    /// power loss, for the first time.
    fn is_new_state(&self, scripted: u32) -> bool {
        !self.duplicate && !self.shared && self.power_losses >= scripted && !self.outside_recovery
    }
}

impl<E: Exhaustible> Explorer<'_, E> {
    fn done(&self) -> bool {
        self.options.fail_fast && self.report.violations > 0
    }

    /// The `End` point's outcomes, and from its first run the crash points
    /// (every counted operation before its power loss) and failure points
    /// (the writes and syncs among them), in operation order.
    fn fault_points(&mut self) -> Vec<FaultPoint> {
        let (ops, before) = self.enumerate(FaultPoint::End);
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

    /// Every outcome at `point`, with no recovery crash. Returns the kinds
    /// of the counted operations of its first run and how many came before
    /// its power loss.
    fn enumerate(&mut self, point: FaultPoint) -> (Vec<TraceKind>, u64) {
        let mut checked = BTreeSet::new();
        let mut choices = Vec::new();
        let mut first_run = None;
        loop {
            let id = StateId {
                workload: self.workload.clone(),
                point,
                recovery_crash: None,
                choices,
            };
            let (script, seen) = self.run_and_count(&id, &mut checked, None);
            if first_run.is_none() {
                let before = seen.ops_before_loss.unwrap_or(script.ops.len() as u64);
                first_run = Some((script.ops.clone(), before));
            }
            if self.done() {
                break;
            }
            match CrashScript::next_choices(&script.decisions) {
                Some(next) => choices = next,
                None => break,
            }
        }
        first_run.unwrap_or_default()
    }

    /// Every outcome of a power loss during each operation of `family`'s
    /// recovery: up to where the scenario said it ended, or until a power
    /// loss strikes after it. With [`Share::Verify`] each is run until
    /// then, and the end the scenario said must be the end found.
    fn crash_recovery(&mut self, family: &Family) {
        let verify = self.options.share == Share::Verify;
        for after in 1.. {
            if self.done() {
                return;
            }
            let said_past = family.recovery_ops.is_some_and(|ops| after > ops);
            if said_past && !verify {
                return;
            }
            let reached = self.enumerate_recovery(family, after);
            if verify && family.recovery_ops.is_some() && reached == said_past {
                let message = format!(
                    "the recovery after the first power loss took {} counted operations by the scenario's word (SimVfs::set_recovering), but a power loss during operation {after} after it struck {} recovery",
                    family.recovery_ops.unwrap_or_default(),
                    if reached { "during" } else { "outside" },
                );
                let id = StateId {
                    workload: self.workload.clone(),
                    point: family.point,
                    recovery_crash: Some(after),
                    choices: family.choices.clone(),
                };
                self.violation(&id, Violation { step: 0, message });
            }
            if !reached {
                return; // past the end of this recovery
            }
        }
    }

    /// Every outcome of a power loss during the `after`-th counted
    /// operation after `family`'s first power loss, the first loss's
    /// choices held. Returns whether that operation was one of the
    /// recovery's (else the recovery had ended, and no state is counted).
    fn enumerate_recovery(&mut self, family: &Family, after: u64) -> bool {
        let mut checked = BTreeSet::new();
        let mut choices = family.choices.clone();
        let held = family.choices.len();
        loop {
            let id = StateId {
                workload: self.workload.clone(),
                point: family.point,
                recovery_crash: Some(after),
                choices,
            };
            let (script, seen) = self.run_and_count(&id, &mut checked, Some(held));
            if !seen.reached_recovery() {
                return false;
            }
            if self.done() {
                return true;
            }
            match CrashScript::next_choices(&script.decisions) {
                Some(next) if next.len() > held && next[..held] == family.choices[..] => {
                    choices = next;
                }
                _ => return true,
            }
        }
    }

    /// Runs one state and counts what came of it.
    fn run_and_count(
        &mut self,
        id: &StateId<E::Workload>,
        checked: &mut BTreeSet<(Vec<u32>, Vec<u128>)>,
        held: Option<usize>,
    ) -> (CrashScript, Seen) {
        let scripted = 1 + u32::from(id.recovery_crash.is_some());
        let (violation, script, seen) = self.run(id, checked, held);
        self.report.runs += 1;
        self.report.pages_joined += u64::from(script.pages_joined);
        self.report.shared += u64::from(seen.shared);
        if seen.is_new_state(scripted) {
            self.report.states += 1;
            self.report.recovery_states += u64::from(id.recovery_crash.is_some());
        }
        if let Some(violation) = violation {
            self.violation(id, violation);
        }
        (script, seen)
    }

    fn violation(&mut self, id: &StateId<E::Workload>, violation: Violation) {
        self.report.violations += 1;
        let before = self.report.states.saturating_sub(1);
        self.report
            .first_violation
            .get_or_insert((id.clone(), violation, before));
    }

    /// The key of a state at its first power loss, for the families.
    fn family_key(
        &self,
        point: FaultPoint,
        failures: Vec<u32>,
        image: u128,
        runner: Option<u64>,
    ) -> FamilyKey {
        match (self.options.share, runner) {
            (Share::AcrossPoints, Some(runner)) => FamilyKey::Shared(image, runner),
            _ => FamilyKey::AtPoint(point, failures, image),
        }
    }

    /// Runs one state, ending it at a scripted power loss whose state is
    /// in `checked` (and adding those it checks) or was judged at another
    /// point. With `held` (the first loss's choices, held while a recovery
    /// crash is enumerated) the first loss is not looked up: it is the
    /// family's.
    fn run(
        &mut self,
        id: &StateId<E::Workload>,
        checked: &mut BTreeSet<(Vec<u32>, Vec<u128>)>,
        held: Option<usize>,
    ) -> (Option<Violation>, CrashScript, Seen) {
        let (vfs, scripted) = prepared_disk(id, self.options.pages_max);
        let share = self.options.share;
        let mut seen = Seen::default();
        let mut images = Vec::new();
        let mut losses = Vec::new();
        let mut found = None;
        let images_found = &mut self.report.images;
        let judged = &self.judged;
        let hook = |vfs: &SimVfs, loss: LossFacts<'_>| {
            seen.power_losses += 1;
            if seen.power_losses == 1 {
                seen.ops_before_loss = Some(vfs.op_count());
            }
            if seen.power_losses > scripted {
                return true;
            }
            if seen.power_losses == 2 && !loss.in_recovery {
                seen.outside_recovery = true;
                return false;
            }
            let image = vfs.image_digest();
            images_found.insert(image);
            images.push(image);
            let script = vfs.crash_script().expect("the disk has a script");
            let failures = failure_decisions(&script);
            let first_held = seen.power_losses == 1 && held.is_some();
            if !first_held {
                seen.duplicate = !checked.insert((failures.clone(), images.clone()));
                if seen.duplicate {
                    return false;
                }
            }
            // Asked for only here: most power losses are duplicates.
            let runner = (share != Share::EachPoint).then(loss.runner).flatten();
            if seen.power_losses == 1 && held.is_none() {
                let choices = script.decisions.iter().map(|decision| decision.taken);
                found = Some((failures, image, runner, choices.collect()));
            }
            if share == Share::EachPoint {
                return true;
            }
            losses.push(runner.map(|runner| (image, runner)));
            let Some(losses) = losses.iter().copied().collect::<Option<Vec<_>>>() else {
                return true;
            };
            let key = SharedKey {
                recovery_crash: id.recovery_crash.filter(|_| seen.power_losses < scripted),
                losses,
            };
            match judged.get(&key) {
                None => seen.first_of.push(key),
                Some(_) if share == Share::Verify => seen.met.push(key),
                Some(_) if first_held => {}
                Some(_) => {
                    seen.shared = true;
                    return false;
                }
            }
            true
        };
        // A panic in the code under test is a violation like any other:
        // reported with its state, and the enumeration goes on from the
        // decisions taken before it.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.scenario
                .run_workload(&id.workload, vfs.clone(), false, Some(Box::new(hook)))
        }));
        let mut violation = match run {
            Ok((violation, _)) => violation,
            Err(panic) => Some(Violation {
                step: 0,
                message: format!("{PANIC_PREFIX}{}", panic_message(&*panic)),
            }),
        };
        let script = vfs.crash_script().expect("the disk has a script");
        if let Some((failures, image, runner, choices)) = found {
            let key = self.family_key(id.point, failures, image, runner);
            if self.family_keys.insert(key) {
                let before = seen.ops_before_loss.unwrap_or(u64::MAX) as usize;
                // Up to the next power loss: the recovery after it is
                // another.
                let next_loss = script.losses_at.get(1).map(|&op| op as usize);
                let after_loss = (script
                    .recovering
                    .get(before..next_loss.unwrap_or(usize::MAX)))
                .or_else(|| script.recovering.get(before..))
                .unwrap_or_default();
                let recovering = after_loss.iter().take_while(|&&recovering| recovering);
                let recovery_ops = recovering.count();
                self.families.push(Family {
                    point: id.point,
                    choices,
                    // Unknown if the scenario never says it recovers, or if
                    // the run failed while recovering.
                    recovery_ops: (script.recovering.contains(&true)
                        && (recovery_ops < after_loss.len() || violation.is_none()))
                    .then_some(recovery_ops as u64),
                });
            }
        }
        let verdict = (share == Share::Verify).then(|| (violation.clone(), vfs.image_digest()));
        let unlike = judged_unlike(
            &self.judged,
            &seen.met,
            seen.reached_recovery(),
            verdict.as_ref(),
        );
        if let Some(unlike) = unlike {
            violation.get_or_insert(unlike);
        }
        for key in std::mem::take(&mut seen.first_of) {
            let last = key.recovery_crash.is_none();
            let judged = Judged {
                id: id.clone(),
                reached: seen.reached_recovery(),
                verdict: verdict.clone().filter(|_| last),
            };
            self.judged.insert(key, judged);
        }
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
