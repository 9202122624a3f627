//! durlog-sim: the deterministic crash simulator of durlog, a
//! [`durlog_testbed::Scenario`].
//!
//! One run is one seed. From it come the faults the simulated disk may
//! inject (a random subset with random weights: swarm testing) and a
//! workload of appends from several simulated clients, group commits,
//! reads, subscriptions, purges and truncations, power losses (between
//! operations, during any disk operation of a commit, a purge, a
//! truncation or recovery, and at the failpoint between write and sync),
//! process restarts and quota changes ([`plan`]). The engine runs on a
//! `SimVfs`, driven step by step through the same `Log::submit` /
//! `Log::commit_next_group` state machine that threads use, and an oracle
//! checks after every step and every reopen that every acknowledged event
//! reads back exactly, that an unacknowledged append is whole or absent,
//! that versions stay dense and that an outcome departing from the model
//! is accepted only where a fault the disk really injected explains it
//! ([`run`]).
//!
//! Nothing in a run depends on the wall clock, on threads or on hash order:
//! the same seed and options give the same trace digest on every machine.
//! Campaigns, shard reports and `merge`, shrinking and the determinism
//! check are the testbed's, for this scenario ([`DurlogSim`]); so is the
//! exhaustive explorer, which [`exhaust`] gives every workload of a few
//! operations (SPEC section 13).

pub mod exhaust;
mod golden;
mod model;
pub mod plan;
mod report;
pub mod run;

use durlog_testbed::{Outcome, Scenario};
use durlog_vfs::FaultKind;

pub use plan::{Plan, RunOptions};
pub use report::{Counters, CrashPoint, Excuse, Recovery, SeedResult, Tally, Violation};
pub use run::{PowerLossHook, run_plan, run_plan_on};

/// The command and its version, as reports and repro lines name them.
pub const COMMAND: &str = "durlog-sim";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// durlog's `Log` on the simulated disk, as a testbed scenario.
#[derive(Clone, Debug, Default)]
pub struct DurlogSim {
    pub options: RunOptions,
}

/// The coverage marks of the engine (`durlog_vfs::mark!` in engine/src),
/// which a campaign should reach; a test checks the list against the code.
pub const MARKS: &[&str] = &[
    "group: a group of several appends",
    "group: an append refused against an earlier member of its group",
    "writer: zeros preallocated with a group",
    "writer: a roll renames the prepared segment",
    "writer: records written again without zeros for want of room",
    "writer: a failed group cut back",
    "writer: a cut-back that fails poisons the log",
    "recovery: a header across a page boundary taken as the write's own",
    "recovery: an older seq at the damage passed over",
    "subscribe: a follower's next bytes were not its records",
    "retention: a decided change poisoned by a later step",
];

impl Scenario for DurlogSim {
    type Plan = Plan;
    type Tally = Tally;
    type Fault = FaultKind;

    fn command(&self) -> &str {
        COMMAND
    }

    fn flags(&self) -> String {
        let mut flags = String::new();
        if let Some(steps) = self.options.steps {
            flags.push_str(&format!(" --steps {steps}"));
        }
        if self.options.canary {
            flags.push_str(" --canary");
        }
        flags
    }

    fn fault_flags(&self, faults: Option<&[FaultKind]>) -> String {
        let Some(faults) = faults.or(self.options.faults.as_deref()) else {
            return String::new();
        };
        let names: Vec<&str> = faults.iter().map(|kind| kind.name()).collect();
        if names.is_empty() {
            " --faults none".to_string()
        } else {
            format!(" --faults {}", names.join(","))
        }
    }

    fn draw(&self, seed: u64) -> Plan {
        Plan::draw(seed, &self.options)
    }

    fn actions(&self, plan: &Plan) -> usize {
        plan.actions.len()
    }

    fn faults(&self, plan: &Plan) -> Vec<FaultKind> {
        plan.faults.enabled()
    }

    fn without_fault(&self, plan: &Plan, fault: FaultKind) -> Plan {
        let mut plan = plan.clone();
        plan.faults.set(fault, 0.0);
        plan
    }

    fn describe_faults(&self, plan: &Plan) -> String {
        plan.faults.to_string()
    }

    fn run(&self, plan: &Plan, keep: Option<&[bool]>, trace: bool) -> Outcome<Tally> {
        let result = run_plan(plan, keep, trace);
        Outcome {
            tally: result.tally(),
            violation: result.violation,
            digest: result.digest,
            trace: result.trace,
        }
    }

    fn marks(&self) -> &[&'static str] {
        MARKS
    }
}

/// The scenario a report's options (`--faults`, `--steps`, `--canary`, as
/// [`Scenario::all_flags`] wrote them) describe.
pub fn scenario_of_flags(flags: &str) -> Result<DurlogSim, String> {
    let mut options = RunOptions::default();
    let mut words = flags.split_whitespace();
    while let Some(word) = words.next() {
        match word {
            "--faults" => {
                let list = words.next().ok_or("--faults without a list")?;
                options.faults = Some(if list == "none" {
                    Vec::new()
                } else {
                    list.split(',')
                        .map(|name| name.parse::<FaultKind>().map_err(|error| error.to_string()))
                        .collect::<Result<_, _>>()?
                });
            }
            "--steps" => {
                let steps = words.next().ok_or("--steps without a number")?;
                options.steps = Some(steps.parse().map_err(|_| format!("--steps {steps}"))?);
            }
            "--canary" => options.canary = true,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(DurlogSim { options })
}
