//! One run of a store's plan: the operations, the power losses, the
//! reboots and reopenings, and the model states the store may be in.

use std::fmt::Write as _;

use durlog_vfs::{FaultEvent, FaultKind, SimVfs};

use super::{Failure, Model, Open, PowerLoss, Step, Store, StorePlan, short};
use crate::explore::{LossFacts, PowerLossHook};
use crate::fs::Fs;
use crate::scenario::{Counts, Outcome, Violation};

/// Model states kept at most; a run with more in doubt at once ends
/// without a verdict (counted), never with a false alarm.
const STATES_MAX: usize = 4096;

/// Refusals for injected faults in a row after which a run ends.
const REFUSALS_MAX: usize = 3;

/// Openings tried after one power loss before a run ends: each that
/// fails for an injected fault (a failed sync, a read error) is tried
/// again, and a power loss during one starts another.
const OPENINGS_MAX: usize = 20;

/// Runs the steps of `plan` that `keep` selects on `vfs`, then (if power
/// losses are on) a last power loss and check. With `hook`, each power
/// loss is reported as [`PowerLossHook`] says (the explorer's use).
pub(super) fn run_plan<S: Store>(
    open: &Open<S>,
    vfs: SimVfs,
    plan: &StorePlan<<S::Model as Model>::Op>,
    keep: Option<&[bool]>,
    trace: bool,
    hook: Option<PowerLossHook<'_>>,
) -> Outcome<Counts> {
    vfs.set_trace_recording(trace);
    let mut runner = Runner {
        open,
        fs: Fs::from(vfs.clone()),
        vfs,
        store: None,
        states: vec![S::Model::default()],
        in_doubt: Vec::new(),
        crashes: hook.is_some() || plan.faults.is_enabled(FaultKind::Crash),
        flip_weight: plan.faults.weight(FaultKind::BitFlipAtRest),
        hook,
        counts: Counts::default(),
        trace: trace.then(Vec::new),
        fault_mark: 0,
    };
    let verdict = runner.run(plan.steps(), keep);
    let violation = match verdict {
        Err(Stop::Violation(violation)) => Some(violation),
        Ok(()) | Err(Stop::End) => None,
    };
    match &violation {
        Some(violation) => runner.note(&format!("  VIOLATION: {}", violation.message)),
        None => runner.note("  passed"),
    }
    Outcome {
        violation,
        digest: runner.vfs.trace_digest(),
        tally: runner.counts,
        trace: runner.trace.unwrap_or_default(),
    }
}

/// Why a run stopped early.
enum Stop {
    Violation(Violation),
    /// No verdict: the hook ended the run, or an excused refusal left
    /// nothing more to check.
    End,
}

type Verdict = Result<(), Stop>;

struct Runner<'a, S: Store> {
    open: &'a Open<S>,
    vfs: SimVfs,
    fs: Fs,
    store: Option<S>,
    /// The model states the store may be in.
    states: Vec<S::Model>,
    /// The operations in doubt since the states were last decided, with
    /// their steps, for messages.
    in_doubt: Vec<String>,
    /// Whether power losses are on (the plan's faults, or a script's).
    crashes: bool,
    flip_weight: f64,
    hook: Option<PowerLossHook<'a>>,
    counts: Counts,
    trace: Option<Vec<String>>,
    /// The fault log's length at the last check: faults after it can
    /// excuse the next refusal.
    fault_mark: usize,
}

impl<S: Store> Runner<'_, S> {
    fn run(&mut self, steps: &[Step<<S::Model as Model>::Op>], keep: Option<&[bool]>) -> Verdict {
        self.note("open the store on an empty disk");
        self.reopen(0, "opening on an empty disk", None)?;
        for (index, step) in steps.iter().enumerate() {
            if keep.is_some_and(|keep| !keep[index]) {
                continue;
            }
            self.counts.bump(Counts::CYCLES);
            match step {
                Step::Apply { op, power_loss } => self.apply(index, op, *power_loss)?,
                Step::PowerLoss(power_loss) if self.crashes => {
                    self.note(&format!("step {index}: power loss"));
                    self.vfs.halt();
                    self.power_loss(index, *power_loss, true)?;
                }
                Step::PowerLoss(_) => self.note(&format!("step {index}: power loss (off)")),
                Step::Restart => {
                    self.note(&format!("step {index}: restart the store"));
                    self.counts.bump("restarts");
                    self.store = None;
                    self.reopen(index, "the restart", None)?;
                }
            }
        }
        let end = steps.len();
        if self.crashes {
            self.note(&format!("step {end}: power loss at the end"));
            self.vfs.halt();
            let last = PowerLoss {
                during: 0,
                recovery: None,
                flip: u32::MAX,
            };
            self.power_loss(end, last, false)?;
        }
        Ok(())
    }

    fn apply(
        &mut self,
        index: usize,
        op: &<S::Model as Model>::Op,
        power_loss: Option<PowerLoss>,
    ) -> Verdict {
        let power_loss = power_loss.filter(|_| self.crashes && self.hook.is_none());
        if let Some(power_loss) = power_loss {
            self.vfs.crash_after_ops(u64::from(power_loss.during));
        }
        let text = short(&format!("{op:?}"));
        self.note(&format!("step {index}: apply {text}"));
        let store = self.store.as_mut().expect("a store is open between steps");
        let result = store.apply(op);
        self.vfs.crash_after_ops(0);
        if self.vfs.is_halted() {
            self.note("  cut by a power loss");
            self.counts.bump("ops cut by a power loss");
            self.doubt(index, op, "cut by a power loss")?;
            let power_loss = power_loss.unwrap_or(PowerLoss {
                during: 0,
                recovery: None,
                flip: u32::MAX,
            });
            return self.power_loss(index, power_loss, false);
        }
        match result {
            Ok(()) => {
                self.note("  acknowledged");
                self.counts.bump("ops acknowledged");
                self.states.iter_mut().for_each(|state| state.apply(op));
                dedup(&mut self.states);
            }
            Err(error) => {
                self.note(&format!("  failed: {error}"));
                self.counts.bump("ops failed");
                self.doubt(index, op, &format!("failed: {error}"))?;
            }
        }
        self.check(index, &format!("step {index} ({text})"))
    }

    /// `op` may or may not have happened: every state, with it and without.
    fn doubt(&mut self, index: usize, op: &<S::Model as Model>::Op, why: &str) -> Verdict {
        let text = short(&format!("{op:?}"));
        self.in_doubt.push(format!("step {index} {text} ({why})"));
        let applied: Vec<S::Model> = (self.states.iter().cloned())
            .map(|mut state| {
                state.apply(op);
                state
            })
            .collect();
        self.states.extend(applied);
        dedup(&mut self.states);
        if self.states.len() > STATES_MAX {
            self.counts.bump("runs ended: too many states in doubt");
            self.note("  too many model states in doubt: the run ends");
            return Err(Stop::End);
        }
        Ok(())
    }

    /// After the power has failed: reports it, flips a bit at rest if the
    /// roll says so (between operations only), reboots, reopens and checks,
    /// deciding the states.
    fn power_loss(&mut self, index: usize, power_loss: PowerLoss, between: bool) -> Verdict {
        self.store = None;
        self.counts.bump("power losses");
        if let Some(hook) = self.hook.as_mut()
            && !hook(&self.vfs, LossFacts::new(false))
        {
            return Err(Stop::End);
        }
        let roll = f64::from(power_loss.flip) / f64::from(u32::MAX);
        if between
            && roll < self.flip_weight
            && let Some(damage) = self.vfs.flip_random_bit_at_rest()
        {
            self.counts.bump("bits flipped at rest");
            self.note(&format!("  a bit flipped at rest: {damage}"));
        }
        let recovery = power_loss.recovery.filter(|_| self.hook.is_none());
        self.reopen(index, "the power loss", recovery)
    }

    /// Opens the store (again) and checks it; after a power loss the check
    /// decides the states. A power loss during the opening or its check
    /// (armed by `recovery`, or scripted) reboots and opens again.
    fn reopen(&mut self, index: usize, after: &str, recovery: Option<u32>) -> Verdict {
        let decide = self.vfs.is_halted();
        let mut refusals = 0;
        for opening in 0..OPENINGS_MAX {
            if self.vfs.is_halted() {
                if opening > 0 {
                    self.counts.bump("power losses during recovery");
                    self.note("  power loss during recovery");
                    if let Some(hook) = self.hook.as_mut()
                        && !hook(&self.vfs, LossFacts::new(true))
                    {
                        return Err(Stop::End);
                    }
                }
                self.vfs.reboot();
            }
            if opening == 0
                && let Some(during) = recovery
            {
                self.vfs.crash_after_ops(u64::from(during));
            }
            // The explorer crashes a recovery at its operations only.
            self.vfs.set_recovering(true);
            let opened = (self.open)(self.fs.clone());
            let checked = opened.map(|mut store| (check_all(&mut store, &self.states), store));
            self.vfs.set_recovering(false);
            if self.hook.is_none() {
                self.vfs.crash_after_ops(0);
            }
            if self.vfs.is_halted() {
                continue;
            }
            match checked {
                Ok((Ok(passed), store)) => {
                    if decide {
                        self.decide(passed);
                    }
                    self.store = Some(store);
                    self.fault_mark = self.vfs.fault_log_len();
                    self.note(&format!("  opened and checked: {}", self.states_text()));
                    return Ok(());
                }
                Ok((Err(failure), _)) => {
                    let what = format!("the check after {after} at step {index}");
                    refusals += 1;
                    self.refused(index, &what, failure, refusals)?;
                }
                Err(error) => {
                    let what = format!("opening after {after} at step {index}");
                    refusals += 1;
                    self.refused(index, &what, Failure::Io(error), refusals)?;
                }
            }
        }
        self.counts.bump("runs ended: the store would not open");
        self.note("  the store did not open: the run ends");
        Err(Stop::End)
    }

    /// A check between steps: against every state, deciding nothing.
    fn check(&mut self, index: usize, after: &str) -> Verdict {
        let store = self.store.as_mut().expect("a store is open between steps");
        match check_all(store, &self.states) {
            Ok(_) => {
                self.fault_mark = self.vfs.fault_log_len();
                Ok(())
            }
            Err(Failure::Io(error)) if self.excuse().is_some() => {
                let excuse = self.excuse().unwrap_or_default();
                self.counts.bump("checks refused for an injected fault");
                self.note(&format!(
                    "  the check failed ({error}), excused by {excuse}: restart"
                ));
                self.store = None;
                self.reopen(index, "a refused check", None)
            }
            Err(failure) => {
                Err(self.violation(index, &format!("the check after {after}"), failure))
            }
        }
    }

    /// A store that would not open, or whose check failed, after a power
    /// loss: excused (and tried again, up to a bound) only by a fault.
    fn refused(&mut self, index: usize, what: &str, failure: Failure, refusals: usize) -> Verdict {
        let excuse = match &failure {
            Failure::Io(_) => self.excuse(),
            Failure::Mismatch(_) => None,
        };
        let Some(excuse) = excuse else {
            return Err(self.violation(index, what, failure));
        };
        self.counts.bump("refusals excused by an injected fault");
        self.note(&format!("  {what}: {failure}; excused by {excuse}"));
        if !self.vfs.damage().is_empty() {
            self.counts.bump("runs ended by a refusal after damage");
            return Err(Stop::End);
        }
        if refusals >= REFUSALS_MAX {
            self.counts
                .bump("runs ended by refusals for injected faults");
            return Err(Stop::End);
        }
        Ok(())
    }

    /// The injected fault that explains an error: damage to durable bytes
    /// (ever), or a failed sync, write or read since the last check.
    fn excuse(&self) -> Option<String> {
        if let Some(damage) = self.vfs.damage().first() {
            return Some(format!("damage the disk did: {damage}"));
        }
        let transient = [
            FaultKind::FailedFsync,
            FaultKind::ShortWrite,
            FaultKind::NoSpace,
            FaultKind::ReadError,
            FaultKind::BitFlipOnRead,
        ];
        (self.vfs.fault_log_since(self.fault_mark).iter())
            .find(|event| transient.contains(&event.kind))
            .map(describe_fault)
    }

    fn decide(&mut self, passed: Vec<usize>) {
        let kept: Vec<S::Model> = passed.iter().map(|&i| self.states[i].clone()).collect();
        self.states = kept;
        self.in_doubt.clear();
    }

    fn violation(&self, index: usize, what: &str, failure: Failure) -> Stop {
        let mut message = format!("{what}: {failure}");
        if self.states.len() > 1 {
            let _ = write!(
                message,
                " (against each of the {} states the model allows; in doubt: {})",
                self.states.len(),
                self.in_doubt.join(", ")
            );
        }
        if let Some(damage) = self.vfs.damage().first() {
            let _ = write!(message, " (the disk damaged durable bytes: {damage})");
        }
        Stop::Violation(Violation {
            step: index,
            message,
        })
    }

    fn states_text(&self) -> String {
        match self.states.len() {
            1 => short(&format!("{:?}", self.states[0])),
            n => format!("{n} states possible"),
        }
    }

    /// A trace line, after the disk operations since the last one.
    fn note(&mut self, line: &str) {
        let Some(trace) = self.trace.as_mut() else {
            return;
        };
        trace.extend((self.vfs.trace().iter()).map(|event| format!("    disk: {event}")));
        self.vfs.clear_trace();
        trace.push(line.to_string());
    }
}

/// The indices of the states `store` passes, or the failure against the
/// first state if it passes none.
fn check_all<S: Store>(store: &mut S, states: &[S::Model]) -> Result<Vec<usize>, Failure> {
    let mut first = None;
    let mut passed = Vec::new();
    for (index, state) in states.iter().enumerate() {
        match store.check(state) {
            Ok(()) => passed.push(index),
            Err(failure) => {
                first.get_or_insert(failure);
            }
        }
    }
    match first {
        Some(failure) if passed.is_empty() => Err(failure),
        _ => Ok(passed),
    }
}

fn dedup<M: PartialEq>(states: &mut Vec<M>) {
    let mut kept: Vec<M> = Vec::with_capacity(states.len());
    for state in states.drain(..) {
        if !kept.contains(&state) {
            kept.push(state);
        }
    }
    *states = kept;
}

fn describe_fault(event: &FaultEvent) -> String {
    format!(
        "the disk's {} on {} (bytes {}..{}, at disk operation {})",
        event.kind,
        event.path.display(),
        event.offset,
        event.offset + event.len,
        event.op
    )
}
