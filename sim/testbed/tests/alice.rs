//! The simple form (`check`, a `Model` and a `Store`) on the pointer store
//! of `examples/pointer_store.rs`: the right protocol passes seeds and
//! every crash state of short workloads; each update-protocol bug of
//! Pillai et al. (OSDI '14) is found, shrunk, and replayed by the exact
//! variables its failure prints; a failing seed is saved and runs first
//! next time; an unreached mark fails the check; and every shrunk repro a
//! campaign prints fails when run.

#[path = "../examples/pointer_store.rs"]
mod pointer_store;

use std::time::Instant;

use durlog_testbed::options::{self, NoOptions};
use durlog_testbed::shrink::{parse_keep, shrink};
use durlog_testbed::{
    Faults, Progress, Scenario, StoreOptions, StoreScenario, check, run_campaign, run_caught,
};
use pointer_store::{Bug, PointerStore};

const BUGS: [Bug; 4] = [
    Bug::RenameUnsynced,
    Bug::NoDirFsync,
    Bug::InPlace,
    Bug::AppendUnsynced,
];

const MARK: &str = "pointer store: a pointer a crash left removed";

#[test]
fn the_right_protocol_passes_seeds_and_every_crash_state() {
    let report = check(|fs| PointerStore::open(fs, Bug::None))
        .seeds(0..3000)
        .faults(pointer_store::faults())
        .marks(&[MARK])
        .without_regressions()
        .run();
    assert!(report.counts.get("ops acknowledged") > 20_000, "{report:?}");
    assert!(report.counts.get("power losses") > 10_000, "{report:?}");
    assert!(report.counts.get("ops failed") > 0, "{report:?}");
    let states = check(|fs| PointerStore::open(fs, Bug::None))
        .without_regressions()
        .exhaust(3);
    assert_eq!(states.violations, 0, "{states}");
    assert!(states.states > 500, "{states}");
}

#[test]
fn each_bug_is_found_shrunk_and_replayed_by_what_it_prints() {
    for bug in BUGS {
        let started = Instant::now();
        let store = check(move |fs| PointerStore::open(fs, bug))
            .seeds(0..300)
            .faults(Faults::crash_only())
            .without_regressions();
        let failure = store.try_run().expect_err(&format!("{bug:?} is not found"));
        eprintln!(
            "{bug:?}: found in {:.2} s\n{failure}\n",
            started.elapsed().as_secs_f64()
        );
        let (kept, steps) = failure.shrunk_steps.expect("a shrunk run");
        assert!(
            kept <= 3,
            "{bug:?}: {kept} of {steps} steps left\n{failure}"
        );
        for variable in ["DURLOG_TESTBED_SEED=", "DURLOG_TESTBED_KEEP=", "cargo test"] {
            assert!(failure.to_string().contains(variable), "{failure}");
        }
        let replayed = store
            .try_replay(&failure)
            .expect_err(&format!("{bug:?}: the shrunk replay passes\n{failure}"));
        assert!(replayed.to_string().contains("failed"), "{replayed}");

        let exhausted = store.try_exhaust(3).expect_err(&format!(
            "{bug:?}: no crash state of 3 operations breaks it"
        ));
        assert!(exhausted.to_string().contains("DURLOG_TESTBED_STATE="));
        store
            .try_replay(&exhausted)
            .expect_err(&format!("{bug:?}: the state's replay passes\n{exhausted}"));
        let right = check(|fs| PointerStore::open(fs, Bug::None)).without_regressions();
        right
            .try_replay(&exhausted)
            .unwrap_or_else(|error| panic!("the right protocol fails {exhausted}: {error}"));
    }
}

#[test]
fn a_failing_seed_is_saved_and_runs_first_the_next_time() {
    let dir = tempfile::tempdir().unwrap();
    let buggy = || {
        check(|fs| PointerStore::open(fs, Bug::NoDirFsync))
            .name("saved")
            .regressions_in(dir.path())
    };
    let panic = std::panic::catch_unwind(|| buggy().seeds(0..100).run()).unwrap_err();
    let text = durlog_testbed::panic_message(&*panic);
    let file = dir.path().join("saved.txt");
    assert!(
        text.contains(&format!("saved to {}", file.display())),
        "{text}"
    );
    let saved = std::fs::read_to_string(&file).unwrap();
    let seed_line = saved
        .lines()
        .find(|line| line.starts_with("seed "))
        .unwrap();
    let seed: u64 = seed_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    // No seeds of its own: the saved one runs, and fails again.
    let again = buggy().seeds(0..0).try_run().unwrap_err();
    assert_eq!(again.seed, Some(seed), "{again}");
    // Saved once, however often it fails.
    let _ = std::panic::catch_unwind(|| buggy().seeds(0..0).run());
    let lines = std::fs::read_to_string(&file).unwrap();
    assert_eq!(lines.matches(seed_line).count(), 1, "{lines}");
    // The right protocol passes the saved seed.
    check(|fs| PointerStore::open(fs, Bug::None))
        .name("saved")
        .regressions_in(dir.path())
        .seeds(0..0)
        .run();
}

#[test]
fn a_mark_no_seed_reaches_fails_the_check() {
    let failure = check(|fs| PointerStore::open(fs, Bug::None))
        .seeds(0..20)
        .marks(&[MARK, "pointer store: never"])
        .without_regressions()
        .try_run()
        .unwrap_err();
    assert!(failure.to_string().contains("never reached"), "{failure}");
    assert!(
        failure.to_string().contains("pointer store: never"),
        "{failure}"
    );
    assert!(!failure.to_string().contains(MARK), "{failure}");
}

/// Every violation of a campaign over the planted bugs, shrunk; its repro
/// line as printed, parsed back and run: it fails.
#[test]
fn every_shrunk_repro_of_a_campaign_fails_when_run() {
    let mut replayed = 0;
    for bug in BUGS {
        let scenario = StoreScenario::new(
            "pointer_store",
            move |fs| PointerStore::open(fs, bug),
            Faults::all(),
        );
        let seeds: Vec<u64> = (0..120).collect();
        let (summary, _) = run_campaign(&scenario, &seeds, 2, &Progress::default(), false);
        assert!(!summary.violations.is_empty(), "{bug:?}");
        for (seed, violation) in summary.violations.iter().take(25) {
            let shrunk = shrink(&scenario, *seed, violation.step);
            let line = shrunk.repro(&scenario, *seed);
            let (failed, digest, faults) = replay_line(&scenario, &line);
            assert!(
                failed,
                "{bug:?}: `{line}` passes; the shrink saw {:?}",
                shrunk.outcome.violation
            );
            // Exactly the run the shrink ended with: its faults, its trace.
            assert_eq!(faults, shrunk.faults, "{bug:?}: `{line}`");
            assert_eq!(digest, shrunk.outcome.digest, "{bug:?}: `{line}`");
            replayed += 1;
        }
    }
    eprintln!("{replayed} shrunk repro lines replayed, each failing");
    assert!(replayed >= 40, "{replayed}");
}

/// Runs a printed `... repro --seed S [flags] --keep K` line: whether it
/// fails, its trace digest and the faults it ran with.
fn replay_line<S: Scenario>(scenario: &S, line: &str) -> (bool, u64, Vec<S::Fault>) {
    let words: Vec<String> = line
        .split_once(" repro ")
        .expect("a repro line")
        .1
        .split_whitespace()
        .map(String::from)
        .collect();
    let seed: u64 = words[1].parse().expect("--seed S");
    let keep_at = words
        .iter()
        .position(|word| word == "--keep")
        .expect("--keep");
    let flags = &words[2..keep_at];
    let scenario = scenario.with_options(options::parse(flags).expect("the flags parse"));
    let plan = scenario.draw(seed);
    let keep = parse_keep(&words[keep_at + 1], scenario.actions(&plan)).unwrap();
    let (outcome, _) = run_caught(&scenario, &plan, Some(&keep), false);
    let faults = scenario.faults(&plan);
    (outcome.violation.is_some(), outcome.digest, faults)
}

#[test]
fn the_options_of_a_store_round_trip() {
    let cases = [
        StoreOptions::default(),
        StoreOptions {
            faults: Some("crash,torn-write".parse().unwrap()),
            fixed_weights: true,
            steps: Some(7),
        },
        StoreOptions {
            faults: Some("none".parse().unwrap()),
            ..StoreOptions::default()
        },
    ];
    for case in &cases {
        options::check_round_trip(case).unwrap();
    }
    options::check_round_trip(&NoOptions {}).unwrap();
}
