//! `durlog-sim exhaust`: every crash state of the small workloads passes
//! on the engine, the count of states does not depend on threads, a
//! failure is reported with a state that replays it exactly, and each
//! K's states include those of K - 1.

use std::process::Command;

use durlog_sim::exhaust::{DurlogWorkloads, FaultPoint, StateId, Workload, WorkloadOptions};
use durlog_testbed::explore::{
    ExhaustOptions, ExhaustProgress, ExploreOptions, Share, explore, replay, replay_command,
    run_exhaust,
};

type State = StateId<Workload>;

const PLAIN: DurlogWorkloads = DurlogWorkloads {
    options: WorkloadOptions { canary: false },
};
const CANARY: DurlogWorkloads = DurlogWorkloads {
    options: WorkloadOptions { canary: true },
};

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_durlog-sim"))
}

fn explore_options() -> ExploreOptions {
    sharing(Share::AcrossPoints)
}

fn sharing(share: Share) -> ExploreOptions {
    ExploreOptions {
        pages_max: durlog_sim::exhaust::PAGES_MAX,
        recovery_crashes: true,
        fail_fast: false,
        share,
    }
}

fn workload(text: &str) -> Workload {
    text.parse().unwrap()
}

/// Every workload of one operation in every setting, every crash and
/// failure point, every outcome, every recovery crashed, each state judged
/// at each point that reaches it: nothing wrong.
#[test]
fn every_state_of_one_operation_passes() {
    let options = ExhaustOptions {
        ops: 1,
        pages_max: durlog_sim::exhaust::PAGES_MAX,
        recovery_crashes: true,
        fail_fast: false,
        share: Share::EachPoint,
    };
    let summary = run_exhaust(&PLAIN, options, 2, &ExhaustProgress::default());
    assert_eq!(summary.violations, 0, "{summary}\n{:?}", summary.kept);
    assert_eq!(summary.workloads, 32);
    // Every workload crashes at least in its Open (create the directory,
    // lock, sync the directory) and in its end's recovery.
    assert!(summary.crash_points >= 3 * 32, "{summary}");
    assert!(summary.failure_points > 0, "{summary}");
    assert!(summary.recovery_states > 0, "{summary}");
    assert!(summary.states >= 5000, "{summary}");
    assert!(summary.states <= summary.runs, "{summary}");
}

/// Workloads of three operations that roll, purge, truncate, reopen and
/// meet the quota exactly, in two settings each: nothing wrong.
#[test]
fn states_of_rolls_purges_truncations_and_an_exact_quota_pass() {
    for text in ["Palp", "Calt", "Raqo", "Zlat"] {
        let report = explore(&PLAIN, &workload(text), explore_options());
        assert_eq!(report.violations, 0, "{text}: {:?}", report.first_violation);
        assert!(report.states > 100, "{text}: {} states", report.states);
    }
}

/// A state reached at two fault points with the same disk and the same
/// runner digest is judged once: with `Share::Verify` every state runs
/// anyway and each that matched one judged before must be judged alike
/// (its verdict, its disk at the end); sharing judges fewer states; and
/// the planted failure is found in the same workloads either way. (With
/// the model left out of the runner digest, verify reported 28 of the
/// 288 workloads of `--ops 2` judged unlike.)
#[test]
fn states_shared_across_fault_points_are_judged_alike() {
    for text in ["Palp", "Calt", "Raqo", "Zlat", "Ptoa"] {
        let verified = explore(&PLAIN, &workload(text), sharing(Share::Verify));
        let (verdict, states) = (&verified.first_violation, verified.states);
        assert_eq!(verified.violations, 0, "{text}: {verdict:?}");
        let shared = explore(&PLAIN, &workload(text), sharing(Share::AcrossPoints));
        assert_eq!(shared.violations, 0, "{text}: {:?}", shared.first_violation);
        assert!(shared.shared > 0, "{text}: nothing shared");
        assert!(
            shared.states < states,
            "{text}: {} of {states}",
            shared.states
        );
    }
    for text in ["Paa", "Plq", "Pao", "Cat", "Zlr"] {
        let found = |share| explore(&CANARY, &workload(text), sharing(share)).violations > 0;
        assert_eq!(
            found(Share::AcrossPoints),
            found(Share::EachPoint),
            "{text}"
        );
    }
}

/// The canary (the model told of an event the log never had) is found at
/// the first state checked after an acknowledgement, and its state replays
/// to the same violation, and passes without the canary.
#[test]
fn a_planted_failure_is_found_and_its_state_replays_it() {
    let report = explore(&CANARY, &workload("Paa"), explore_options());
    assert!(report.violations > 0);
    let (id, violation, _) = report.first_violation.clone().unwrap();
    let text = id.to_string();
    let parsed: State = text.parse().unwrap();
    assert_eq!(parsed, id);
    let (again, _, misfit) = replay(&CANARY, &parsed, durlog_sim::exhaust::PAGES_MAX);
    assert!(!misfit);
    assert_eq!(again, Some(violation));
    let (clean, trace, _) = replay(&PLAIN, &parsed, durlog_sim::exhaust::PAGES_MAX);
    assert_eq!(clean, None, "{}", trace.join("\n"));
    assert_eq!(
        replay_command(&CANARY, &id, durlog_sim::exhaust::PAGES_MAX),
        format!("durlog-sim exhaust --replay {text} --canary")
    );
}

/// The binary prints the same summary for any number of threads, and a
/// failing state's line carries the command that replays it.
#[test]
fn stdout_is_the_same_for_any_number_of_jobs_and_failures_replay() {
    let exhaust = |args: &[&str]| {
        let output = sim().arg("exhaust").args(args).output().unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        (output.status.code(), stdout)
    };
    let (code, one) = exhaust(&["--ops", "1", "--jobs", "1"]);
    assert_eq!(code, Some(0), "{one}");
    assert_eq!(
        exhaust(&["--ops", "1", "--jobs", "3"]),
        (Some(0), one.clone())
    );
    assert!(one.contains("violations  0 in 0 workloads"), "{one}");

    let (code, failed) = exhaust(&["--ops", "2", "--fail-fast", "--canary"]);
    assert_eq!(code, Some(1), "{failed}");
    let command = failed
        .lines()
        .find_map(|line| line.trim().strip_prefix("reproduce: durlog-sim exhaust "))
        .unwrap_or_else(|| panic!("no reproduction in {failed}"));
    let args: Vec<&str> = command.split(' ').collect();
    let (code, replayed) = exhaust(&args);
    assert_eq!(code, Some(1), "{replayed}");
    assert!(replayed.contains("VIOLATION"), "{replayed}");

    let (code, _) = exhaust(&["--replay", "Pa:x1:-:-"]);
    assert_eq!(code, Some(2));
}

/// Names of states read back as what they name.
#[test]
fn state_names_round_trip() {
    for text in [
        "Pal:c7:r2:0.1.1",
        "Cq:f3:-:2",
        "Zo:end:-:-",
        "Rlpt:end:r1:1",
    ] {
        let id: State = text.parse().unwrap();
        assert_eq!(id.to_string(), text);
    }
    let id: State = "Pal:f12:-:-".parse().unwrap();
    assert_eq!(id.point, FaultPoint::Fail(12));
    for bad in [
        "al:c7:-:-",
        "Pal:c0:-:-",
        "Pal:c7:x:-",
        "Pal:c7:-:a",
        "P:end:-:-",
    ] {
        assert!(bad.parse::<State>().is_err(), "{bad}");
    }
}

/// With recovery crashes at every level, K's workloads include K - 1's,
/// explored alike: a state of a shorter workload is a state of K too.
#[test]
fn the_workloads_of_k_include_those_of_k_minus_one() {
    let one = Workload::all(1);
    let two = Workload::all(2);
    assert_eq!(one.len(), 32);
    assert_eq!(two.len(), 32 + 32 * 8);
    assert_eq!(two[..32], one[..]);
}
