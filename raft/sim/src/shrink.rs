//! Shrinking a failing run: drop the later actions, then single actions,
//! then whole fault classes, keeping each change that still fails (any
//! violation counts: a shrink may trade one symptom for another of the
//! same bug). Bounded in runs, so a shrink takes seconds.

use crate::plan::{FaultClass, Plan};
use crate::run::{Outcome, run};

/// Runs a shrink may spend.
const RUNS_MAX: usize = 150;

/// A smaller failing run of the same seed.
#[derive(Debug)]
pub struct Shrunk {
    /// The actions kept (one flag per action of the seed's plan).
    pub keep: Vec<bool>,
    /// Fault classes off (those asked for, and those the shrink removed).
    pub off: Vec<FaultClass>,
    /// The shrunk run, traced.
    pub outcome: Outcome,
}

struct Budget(usize);

impl Budget {
    fn fails(&mut self, plan: &Plan, keep: &[bool]) -> Option<bool> {
        if self.0 == 0 {
            return None;
        }
        self.0 -= 1;
        Some(run(plan, Some(keep), false).violation.is_some())
    }
}

/// Shrinks `plan` (a failing run, with `off` already off).
pub fn shrink(plan: &Plan, off: &[FaultClass]) -> Shrunk {
    let mut budget = Budget(RUNS_MAX);
    let mut plan = plan.clone();
    let mut off = off.to_vec();
    let mut keep = vec![true; plan.steps.len()];
    // Later actions first: a bug shows by some step, and what comes after
    // only adds noise.
    let mut end = keep.len();
    while end > 1 {
        let half = end / 2;
        let mut trial = keep.clone();
        trial[half..].iter_mut().for_each(|kept| *kept = false);
        match budget.fails(&plan, &trial) {
            Some(true) => {
                keep = trial;
                end = half;
            }
            _ => break,
        }
    }
    for index in (0..end).rev() {
        if !keep[index] {
            continue;
        }
        keep[index] = false;
        match budget.fails(&plan, &keep) {
            Some(true) => {}
            Some(false) => keep[index] = true,
            None => {
                keep[index] = true;
                break;
            }
        }
    }
    for &class in FaultClass::ALL {
        if off.contains(&class) || !plan.classes.contains(&class) {
            continue;
        }
        // Switching a class off drops its actions: map the mask onto the
        // remaining ones.
        let trial = plan.without(class);
        let trial_keep: Vec<bool> = plan
            .steps
            .iter()
            .zip(&keep)
            .filter(|(step, _)| step.action.fault_class() != Some(class))
            .map(|(_, &kept)| kept)
            .collect();
        if budget.fails(&trial, &trial_keep) == Some(true) {
            plan = trial;
            keep = trial_keep;
            off.push(class);
        }
    }
    let outcome = run(&plan, Some(&keep), true);
    Shrunk { keep, off, outcome }
}
