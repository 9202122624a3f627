//! The worked example with full control (`examples/pointer_store_scenario.rs`)
//! under the testbed: the
//! right update protocol passes a campaign and every crash state of short
//! workloads; each classic bug of Pillai et al. (OSDI '14) is found by
//! both, shrunk to a run that replays it, and its exhaustive state replays
//! it too. With the example's scenario, the testbed's own promises: the
//! summary is the same for any number of threads and for any split into
//! shards, the determinism check passes it and catches a scenario that
//! leaks hash order, and a mark no seed reaches is flagged.

#[path = "../examples/pointer_store_scenario.rs"]
mod pointer_store;

use std::collections::HashSet;

use durlog_testbed::explore::{
    ExhaustOptions, ExhaustProgress, PAGES_MAX, StateId, replay, run_exhaust,
};
use durlog_testbed::shard::{ShardReport, merge};
use durlog_testbed::shrink::shrink;
use durlog_testbed::{Outcome, Progress, Scenario, run_campaign, run_caught, shard_seeds};
use pointer_store::{Bug, PointerScenario};

const BUGS: [Bug; 4] = [
    Bug::RenameUnsynced,
    Bug::NoDirFsync,
    Bug::InPlace,
    Bug::AppendUnsynced,
];

fn exhaust(
    scenario: &PointerScenario,
    ops: u32,
    fail_fast: bool,
) -> durlog_testbed::explore::ExhaustSummary<pointer_store::Ops> {
    let options = ExhaustOptions {
        ops,
        pages_max: PAGES_MAX,
        recovery_crashes: true,
        fail_fast,
        share: Default::default(),
    };
    run_exhaust(scenario, options, 2, &ExhaustProgress::default())
}

#[test]
fn the_right_protocol_passes_seeds_and_every_crash_state() {
    let scenario = PointerScenario::new(Bug::None);
    let seeds: Vec<u64> = (0..5000).collect();
    let (summary, _) = run_campaign(&scenario, &seeds, 2, &Progress::default(), false);
    assert!(
        summary.violations.is_empty(),
        "{summary}\n{:?}",
        summary.violations
    );
    assert!(summary.tally.acked > 10_000, "{summary}");
    let states = exhaust(&scenario, 3, false);
    assert_eq!(states.violations, 0, "{states}\n{:?}", states.kept);
    assert!(states.states > 1000, "{states}");
}

#[test]
fn each_protocol_bug_is_found_shrunk_and_exhausted() {
    for bug in BUGS {
        let scenario = PointerScenario::new(bug);
        let seeds: Vec<u64> = (0..200).collect();
        let (summary, _) = run_campaign(&scenario, &seeds, 2, &Progress::default(), true);
        let (seed, violation) = summary
            .violations
            .first()
            .cloned()
            .unwrap_or_else(|| panic!("{bug:?} not found"));
        let shrunk = shrink(&scenario, seed, violation.step);
        assert!(
            shrunk.kept() <= 3,
            "{bug:?}: {} actions left",
            shrunk.kept()
        );
        assert!(
            shrunk.outcome.violation.is_some(),
            "{bug:?}: the shrunk run fails"
        );
        let again = scenario.run(&shrunk.plan, Some(&shrunk.keep), false);
        assert!(again.violation.is_some(), "{bug:?}: the shrunk run replays");
        assert!(shrunk.repro(&scenario, seed).contains("--keep"), "{bug:?}");

        let states = exhaust(&scenario, 2, true);
        let (id, violation, _, _) = states
            .kept
            .first()
            .cloned()
            .unwrap_or_else(|| panic!("{bug:?}: no crash state breaks it"));
        let parsed: StateId<pointer_store::Ops> = id.to_string().parse().unwrap();
        let (replayed, _, misfit) = replay(&scenario, &parsed, PAGES_MAX);
        assert!(!misfit);
        assert_eq!(replayed, Some(violation), "{bug:?}: {id} replays");
        let (right, _, _) = replay(&PointerScenario::new(Bug::None), &parsed, PAGES_MAX);
        assert_eq!(right, None, "{bug:?}: {id} passes with the right protocol");
    }
}

/// The summary (digest included) is the same for any number of threads,
/// and shards merged print what one run prints.
#[test]
fn threads_and_shards_change_nothing() {
    let scenario = PointerScenario::new(Bug::NoDirFsync);
    let seeds: Vec<u64> = (0..300).collect();
    let (one, digests) = run_campaign(&scenario, &seeds, 1, &Progress::default(), false);
    let (three, _) = run_campaign(&scenario, &seeds, 3, &Progress::default(), false);
    assert_eq!(one.to_string(), three.to_string());
    assert!(!one.violations.is_empty(), "the bug fails seeds");
    assert_eq!(digests.len(), seeds.len());
    let reports: Vec<(String, ShardReport<_>)> = (0..4)
        .map(|index| {
            let shard: Vec<u64> = shard_seeds(0..300, index, 4).collect();
            let (summary, digests) =
                run_campaign(&scenario, &shard, 2, &Progress::default(), false);
            let report = ShardReport::new(&scenario, "0", 0..300, (index, 4), &summary, &digests);
            let back = ShardReport::from_json(&report.to_json()).unwrap();
            assert_eq!(back, report);
            (format!("shard-{index}.json"), back)
        })
        .collect();
    let merged = merge(&reports).unwrap();
    assert_eq!(merged.summary.to_string(), one.to_string());
    assert_eq!(merged.summary.violations, one.violations);
    let gap = merge(&reports[..3]).unwrap_err();
    assert!(gap.contains("gap") && gap.contains("3/4"), "{gap}");
}

/// A scenario whose digest takes a hash set's iteration order, which
/// differs between runs in one process: the determinism check names it;
/// the example itself passes.
struct Leaky(PointerScenario);

impl Scenario for Leaky {
    type Options = <PointerScenario as Scenario>::Options;
    type Plan = <PointerScenario as Scenario>::Plan;
    type Tally = <PointerScenario as Scenario>::Tally;
    type Fault = <PointerScenario as Scenario>::Fault;
    fn command(&self) -> &str {
        "leaky"
    }
    fn options(&self) -> &Self::Options {
        self.0.options()
    }
    fn with_options(&self, options: Self::Options) -> Leaky {
        Leaky(self.0.with_options(options))
    }
    fn limit_faults(&self, faults: &[Self::Fault]) -> Self::Options {
        self.0.limit_faults(faults)
    }
    fn draw(&self, seed: u64) -> Self::Plan {
        self.0.draw(seed)
    }
    fn actions(&self, plan: &Self::Plan) -> usize {
        self.0.actions(plan)
    }
    fn faults(&self, plan: &Self::Plan) -> Vec<Self::Fault> {
        self.0.faults(plan)
    }
    fn run(&self, plan: &Self::Plan, keep: Option<&[bool]>, trace: bool) -> Outcome<Self::Tally> {
        let mut outcome = self.0.run(plan, keep, trace);
        let names: HashSet<u64> = (0..16).collect();
        let first = names.iter().next().copied().unwrap_or_default();
        outcome.digest ^= first;
        outcome
    }
}

#[test]
fn the_determinism_check_passes_the_example_and_catches_a_leak() {
    let seeds: Vec<u64> = (0..64).collect();
    let progress = Progress::default();
    let scenario = PointerScenario::new(Bug::None);
    let clean = durlog_testbed::campaign::check_determinism(&scenario, &seeds, 2, &progress);
    assert!(clean.is_empty(), "{clean:?}");
    let leaky = durlog_testbed::campaign::check_determinism(&Leaky(scenario), &seeds, 2, &progress);
    assert!(
        !leaky.is_empty(),
        "hash order leaked into 64 seeds' digests unseen"
    );
}

/// A mark the campaign reached is counted; one it never reached shows as
/// a zero, flagged.
#[test]
fn marks_are_counted_and_zeros_flagged() {
    let scenario = PointerScenario::new(Bug::None);
    let seeds: Vec<u64> = (0..2000).collect();
    let (summary, _) = run_campaign(&scenario, &seeds, 2, &Progress::default(), false);
    assert!(
        summary
            .marks
            .count("pointer store: a pointer a crash left removed")
            > 0,
        "{summary}"
    );
    assert!(summary.marks_missed().is_empty(), "{summary}");
    let mut missing = summary.clone();
    missing.expected_marks.push("never".into());
    assert_eq!(missing.marks_missed(), ["never"]);
    assert!(missing.to_string().contains("never"), "{missing}");
    assert!(missing.to_string().contains("NEVER REACHED"), "{missing}");
    // A run's marks are its own: none leak from one run into the next.
    let plan = (0..2000)
        .map(|seed| scenario.draw(seed))
        .find(|plan| run_caught(&scenario, plan, None, false).1.0.is_empty())
        .expect("a seed that reaches no mark");
    assert!(run_caught(&scenario, &plan, None, false).1.0.is_empty());
}
