//! Whole runs: a few seeds run twice in one process give the same digest
//! and no violation; the executor keeps its order; a checker fed a broken
//! history says so. Seeds are printed on failure.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use durlog_raft_sim::exec::{Executor, HARNESS};
use durlog_raft_sim::plan::{FaultClass, Plan};
use durlog_raft_sim::run;
use durlog_raft_sim::runtime::{SimInstant, Sleep, spawn};

#[test]
fn seeds_repeat_their_digest_and_pass() {
    for seed in 0..8 {
        let plan = Plan::draw(seed);
        let first = run(&plan, None, false);
        let second = run(&plan, None, false);
        assert_eq!(
            first.digest, second.digest,
            "seed {seed}: the digest changed"
        );
        assert_eq!(first.violation, None, "seed {seed}");
        assert!(
            first.tally.get("runs") == 1 && first.simulated_ns > 0,
            "seed {seed}"
        );
    }
}

#[test]
fn a_fault_class_switched_off_leaves_no_trace_of_it() {
    for seed in 0..40 {
        let drawn = Plan::draw(seed);
        let plan = drawn
            .without(FaultClass::Kill)
            .without(FaultClass::Partition);
        // The actions stay (a keep mask names the same ones), but are off.
        assert_eq!(plan.steps, drawn.steps, "seed {seed}");
        let on = |class| {
            plan.steps
                .iter()
                .any(|step| step.action.fault_class() == Some(class) && step.action.is_on(&plan))
        };
        assert!(
            !on(FaultClass::Kill) && !on(FaultClass::Partition),
            "seed {seed}"
        );
        let outcome = run(&plan, None, false);
        assert_eq!(outcome.tally.get("kills"), 0, "seed {seed}");
        assert_eq!(outcome.tally.get("partitions"), 0, "seed {seed}");
    }
}

#[test]
fn the_executor_runs_in_wake_order_and_fires_timers_in_set_order() {
    let exec = Executor::new(1);
    let _entered = exec.enter();
    let order = Arc::new(Mutex::new(Vec::new()));
    for (name, delay_ms) in [("late", 5u64), ("early-a", 1), ("early-b", 1), ("now", 0)] {
        let order = Arc::clone(&order);
        exec.spawn_as(HARNESS, async move {
            Sleep::new(Duration::from_millis(delay_ms)).await;
            let now = <SimInstant as openraft::Instant>::now();
            order.lock().unwrap().push((name, now.0 / 1_000_000));
        });
    }
    while exec.poll_one().is_some() {}
    while exec.advance(u64::MAX) {
        while exec.poll_one().is_some() {}
    }
    let expected = [("now", 0), ("early-a", 1), ("early-b", 1), ("late", 5)];
    assert_eq!(*order.lock().unwrap(), expected);
}

#[test]
fn a_killed_owner_loses_every_task_it_spawned() {
    let exec = Executor::new(2);
    let _entered = exec.enter();
    let outcome = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&outcome);
    exec.spawn_as(7, async move {
        // A child inherits owner 7; the harness awaits it.
        let child = spawn(async {
            Sleep::new(Duration::from_millis(10)).await;
        });
        let _ = child.await;
    });
    exec.spawn_as(HARNESS, async move {
        let handle = spawn(async {
            Sleep::new(Duration::from_millis(1)).await;
            42
        });
        *seen.lock().unwrap() = Some(handle.await);
    });
    while exec.poll_one().is_some() {}
    assert_eq!(exec.task_count(7), 2, "the task and its child");
    assert_eq!(exec.kill(7), 2);
    assert_eq!(exec.task_count(7), 0);
    while exec.advance(u64::MAX) {
        while exec.poll_one().is_some() {}
    }
    assert_eq!(*outcome.lock().unwrap(), Some(Ok(42)));
}
