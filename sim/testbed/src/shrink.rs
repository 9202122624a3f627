//! Shrinking a failing run to the fewest actions and faults that still
//! fail: drop the actions after the failure, then delta-debug the rest
//! (remove halves, quarters, ... single actions, keeping each removal that
//! still fails), then switch off each fault that is not needed.

use crate::options::flags_text;
use crate::{Outcome, Scenario, run_caught};

/// Runs a shrink may spend.
const RUNS_MAX: usize = 2000;

/// A smaller run that still fails.
pub struct Shrunk<S: Scenario> {
    /// The options of the shrunk run: the scenario's, with runs limited
    /// to the faults left on.
    pub options: S::Options,
    /// The plan the seed draws under those options.
    pub plan: S::Plan,
    /// Which of the plan's actions to run.
    pub keep: Vec<bool>,
    /// The faults left on.
    pub faults: Vec<S::Fault>,
    /// The run of what is left, with its readable trace.
    pub outcome: Outcome<S::Tally>,
    /// Runs the shrink made.
    pub runs: usize,
}

impl<S: Scenario> Shrunk<S> {
    /// How many actions are left.
    pub fn kept(&self) -> usize {
        self.keep.iter().filter(|&&kept| kept).count()
    }

    /// The command that replays the shrunk run: its options are those the
    /// shrink ran, so it replays exactly what the shrink saw fail.
    pub fn repro(&self, scenario: &S, seed: u64) -> String {
        format!(
            "{} repro --seed {seed}{} --keep {}",
            scenario.command(),
            flags_text(&self.options),
            keep_ranges(&self.keep)
        )
    }
}

/// Shrinks the run of `seed`, whose first run failed at `failing_step`.
/// Faults are switched off through the options ([`Scenario::limit_faults`])
/// and the seed drawn again, so that what the shrink ends with is what
/// its options replay.
pub fn shrink<S: Scenario>(scenario: &S, seed: u64, failing_step: usize) -> Shrunk<S> {
    let mut runs = 0;
    let mut fails = |scenario: &S, plan: &S::Plan, keep: &[bool]| {
        runs += 1;
        runs <= RUNS_MAX
            && run_caught(scenario, plan, Some(keep), false)
                .0
                .violation
                .is_some()
    };
    let mut current = scenario.with_options(scenario.options().clone());
    let mut plan = current.draw(seed);
    let steps = current.actions(&plan);
    let mut keep: Vec<bool> = (0..steps).map(|step| step <= failing_step).collect();
    let mut chunk = steps.div_ceil(2).max(1);
    loop {
        let mut start = 0;
        while start < steps {
            let end = (start + chunk).min(steps);
            if keep[start..end].iter().any(|&kept| kept) {
                let mut candidate = keep.clone();
                candidate[start..end]
                    .iter_mut()
                    .for_each(|kept| *kept = false);
                if fails(&current, &plan, &candidate) {
                    keep = candidate;
                }
            }
            start = end;
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    for fault in current.faults(&plan) {
        let rest: Vec<S::Fault> = (current.faults(&plan).into_iter())
            .filter(|&other| other != fault)
            .collect();
        let candidate = current.with_options(current.limit_faults(&rest));
        let candidate_plan = candidate.draw(seed);
        // A scenario whose actions depend on its faults cannot shrink them
        // this way: the steps kept would mean other actions.
        if candidate.actions(&candidate_plan) == steps && fails(&candidate, &candidate_plan, &keep)
        {
            current = candidate;
            plan = candidate_plan;
        }
    }
    let faults = current.faults(&plan);
    let options = current.limit_faults(&faults);
    let current = current.with_options(options.clone());
    let plan = current.draw(seed);
    let (outcome, _) = run_caught(&current, &plan, Some(&keep), true);
    Shrunk {
        options,
        plan,
        keep,
        faults,
        outcome,
        runs,
    }
}

/// The kept action indices as ranges: `0-3,7,9-12`.
pub fn keep_ranges(keep: &[bool]) -> String {
    let mut ranges = Vec::new();
    let mut step = 0;
    while step < keep.len() {
        if !keep[step] {
            step += 1;
            continue;
        }
        let start = step;
        while step + 1 < keep.len() && keep[step + 1] {
            step += 1;
        }
        ranges.push(if start == step {
            start.to_string()
        } else {
            format!("{start}-{step}")
        });
        step += 1;
    }
    ranges.join(",")
}

/// Parses [`keep_ranges`]'s format into a mask of `steps` actions.
pub fn parse_keep(text: &str, steps: usize) -> Result<Vec<bool>, String> {
    let mut keep = vec![false; steps];
    for part in text.split(',').filter(|part| !part.is_empty()) {
        let (start, end) = match part.split_once('-') {
            Some((start, end)) => (start, end),
            None => (part, part),
        };
        let parse = |text: &str| {
            text.trim()
                .parse::<usize>()
                .map_err(|_| format!("--keep: {part:?} is not a step or a range of steps"))
        };
        let (start, end) = (parse(start)?, parse(end)?);
        if start > end || end >= steps {
            return Err(format!(
                "--keep: {part:?} is outside the plan's steps 0..{steps}"
            ));
        }
        keep[start..=end].iter_mut().for_each(|kept| *kept = true);
    }
    Ok(keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_ranges_round_trip() {
        let keep = [true, true, false, true, false, false, true, true, true];
        let text = keep_ranges(&keep);
        assert_eq!(text, "0-1,3,6-8");
        assert_eq!(parse_keep(&text, keep.len()).unwrap(), keep);
        assert!(parse_keep("3-1", 9).is_err());
        assert!(parse_keep("9", 9).is_err());
        assert!(parse_keep("x", 9).is_err());
    }
}
