//! Campaigns: a list of seeds run on threads, each seed alone on one
//! thread, the results added up in seed order. The number of threads
//! changes only the speed, never a byte of the summary.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::seeds::fold_digests;
use crate::{Marks, Scenario, Tally, Violation, run_caught};

/// Live counts for a progress display, and the stop switch.
#[derive(Debug, Default)]
pub struct Progress {
    pub seeds_done: AtomicU64,
    pub cycles: AtomicU64,
    pub violations: AtomicU64,
    /// Set to stop taking new seeds (`--fail-fast` sets it at the first
    /// violation).
    pub stop: AtomicBool,
}

/// What a campaign found, added up in seed order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary<T> {
    pub seeds: u64,
    pub tally: T,
    pub marks: Marks,
    /// The marks the scenario expects (for the zeros).
    pub expected_marks: Vec<String>,
    /// The trace digests of all seeds, folded in seed order.
    pub digest: u64,
    /// Failing seeds, in seed order.
    pub violations: Vec<(u64, Violation)>,
}

impl<T: Tally> Summary<T> {
    /// An empty summary for `scenario`'s campaigns.
    pub fn new<S: Scenario<Tally = T>>(scenario: &S) -> Summary<T> {
        Summary {
            expected_marks: scenario
                .marks()
                .iter()
                .map(|name| name.to_string())
                .collect(),
            ..Summary::default()
        }
    }

    /// Adds one seed's (or one shard's) results.
    pub fn add(&mut self, seeds: u64, tally: &T, marks: &Marks) {
        self.seeds += seeds;
        self.tally.add(tally);
        self.marks.add(marks);
    }

    /// Expected marks that no seed reached.
    pub fn marks_missed(&self) -> Vec<&str> {
        self.expected_marks
            .iter()
            .filter(|name| self.marks.count(name) == 0)
            .map(String::as_str)
            .collect()
    }

    fn write_marks(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unexpected = self
            .marks
            .0
            .keys()
            .filter(|name| !self.expected_marks.contains(name));
        let names: Vec<&String> = self.expected_marks.iter().chain(unexpected).collect();
        if names.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "marks (points of the code reached; a zero was never reached):"
        )?;
        let width = names.iter().map(|name| name.len()).max().unwrap_or(0);
        for name in names {
            let count = self.marks.count(name);
            let flag = if count == 0 { "  <- NEVER REACHED" } else { "" };
            writeln!(f, "  {name:<width$} {count:>10}{flag}")?;
        }
        Ok(())
    }
}

impl<T: Tally> fmt::Display for Summary<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seeds       {}", self.seeds)?;
        self.tally.write(f)?;
        self.write_marks(f)?;
        writeln!(f, "violations  {}", self.violations.len())?;
        write!(f, "digest      {:016x}", self.digest)
    }
}

/// Runs `seeds` of `scenario` on `jobs` threads; returns the summary and
/// each seed's trace digest, in the order of `seeds` (0 for a seed that
/// `fail_fast` left out): what a shard report keeps, so that a merge can
/// fold a whole range's digest exactly.
pub fn run_campaign<S: Scenario>(
    scenario: &S,
    seeds: &[u64],
    jobs: usize,
    progress: &Progress,
    fail_fast: bool,
) -> (Summary<S::Tally>, Vec<u64>) {
    let next = AtomicUsize::new(0);
    let digests = Mutex::new(vec![0u64; seeds.len()]);
    let summary = Mutex::new(Summary::new(scenario));
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while !progress.stop.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&seed) = seeds.get(index) else { break };
                    let plan = scenario.draw(seed);
                    let (outcome, marks) = run_caught(scenario, &plan, None, false);
                    progress
                        .cycles
                        .fetch_add(outcome.tally.cycles(), Ordering::Relaxed);
                    progress.seeds_done.fetch_add(1, Ordering::Relaxed);
                    digests.lock().unwrap()[index] = outcome.digest;
                    let mut summary = summary.lock().unwrap();
                    summary.add(1, &outcome.tally, &marks);
                    if let Some(violation) = outcome.violation {
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

/// A seed whose two runs differed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    pub seed: u64,
    /// The digests of the first and the second run.
    pub digests: (u64, u64),
    /// Whether the tallies (or the verdicts) differed too.
    pub tally_differs: bool,
}

/// Runs every seed twice, the second time in another order (so that each
/// runs after other seeds, on whichever thread: per-thread state such as
/// hash-map keys has moved on), and compares the digests, tallies and
/// verdicts: what a scenario that leaks the clock, thread scheduling or
/// hash order into a run fails.
pub fn check_determinism<S: Scenario>(
    scenario: &S,
    seeds: &[u64],
    jobs: usize,
    progress: &Progress,
) -> Vec<Divergence> {
    let first = outcomes(scenario, seeds, jobs, progress);
    let mut rotated = seeds.to_vec();
    rotated.rotate_left(seeds.len() / 2);
    let again = outcomes(scenario, &rotated, jobs, progress);
    let second: BTreeMap<u64, _> = rotated.into_iter().zip(again).collect();
    let mut divergences: Vec<Divergence> = seeds
        .iter()
        .zip(&first)
        .filter_map(|(seed, one)| {
            let other = &second[seed];
            let tally_differs = one.1 != other.1 || one.2 != other.2;
            (one.0 != other.0 || tally_differs).then_some(Divergence {
                seed: *seed,
                digests: (one.0, other.0),
                tally_differs,
            })
        })
        .collect();
    divergences.sort_by_key(|divergence| divergence.seed);
    divergences
}

/// Each seed's digest, tally and verdict, in the order of `seeds`.
fn outcomes<S: Scenario>(
    scenario: &S,
    seeds: &[u64],
    jobs: usize,
    progress: &Progress,
) -> Vec<(u64, S::Tally, Option<Violation>)> {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(vec![None; seeds.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&seed) = seeds.get(index) else { break };
                    let (outcome, _) = run_caught(scenario, &scenario.draw(seed), None, false);
                    progress.seeds_done.fetch_add(1, Ordering::Relaxed);
                    results.lock().unwrap()[index] =
                        Some((outcome.digest, outcome.tally, outcome.violation));
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|result| result.expect("every seed ran"))
        .collect()
}
