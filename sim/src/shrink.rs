//! Shrinking a failing run to the fewest actions and faults that still
//! fail: drop the actions after the failure, then delta-debug the rest
//! (remove halves, quarters, ... single actions, keeping each removal that
//! still fails), then switch off each fault that is not needed.

use durlog_vfs::FaultKind;

use crate::plan::Plan;
use crate::run::{SeedResult, run_plan};

/// Runs a shrink may spend.
const RUNS_MAX: usize = 2000;

/// A smaller run that still fails.
pub struct Shrunk {
    /// The plan, with only the needed faults left on.
    pub plan: Plan,
    /// Which of the plan's actions to run.
    pub keep: Vec<bool>,
    /// The faults switched off (for the repro command).
    pub faults_removed: Vec<FaultKind>,
    /// The run of what is left, with its readable trace.
    pub result: SeedResult,
}

/// Shrinks the failing `plan`, whose first run failed at `failing_step`.
pub fn shrink(plan: &Plan, failing_step: usize) -> Shrunk {
    let mut runs = 0;
    let mut fails = |plan: &Plan, keep: &[bool]| {
        runs += 1;
        runs <= RUNS_MAX
            && std::panic::catch_unwind(|| run_plan(plan, Some(keep), false))
                .map_or(true, |result| result.violation.is_some())
    };
    let steps = plan.actions.len();
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
                if fails(plan, &candidate) {
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
    let mut plan = plan.clone();
    let mut faults_removed = Vec::new();
    for kind in plan.faults.enabled() {
        let mut candidate = plan.clone();
        candidate.faults.set(kind, 0.0);
        if fails(&candidate, &keep) {
            plan = candidate;
            faults_removed.push(kind);
        }
    }
    let result =
        std::panic::catch_unwind(|| run_plan(&plan, Some(&keep), true)).unwrap_or_else(|panic| {
            SeedResult {
                seed: plan.seed,
                violation: Some(crate::Violation {
                    step: 0,
                    message: format!("panic: {}", crate::panic_message(&*panic)),
                }),
                ..SeedResult::default()
            }
        });
    Shrunk {
        plan,
        keep,
        faults_removed,
        result,
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
