//! The cluster simulation as a testbed [`Scenario`]: campaigns, shard
//! reports and their merge, shrinking and the determinism check are the
//! testbed's (`durlog-testbed`); a plan, a run and a tally are this
//! crate's.

use std::fmt;

use durlog_testbed::{Outcome, Scenario, Violation};

use crate::plan::{FaultClass, Plan};
use crate::tally::Tally;

/// The scenario, with the fault classes switched off on the command line.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub off: Vec<FaultClass>,
}

impl Cluster {
    /// The scenario of `--off` flags as [`Scenario::fault_flags`] writes
    /// them (for `merge`).
    pub fn of_flags(flags: &str) -> Result<Cluster, String> {
        let mut words = flags.split_whitespace();
        let mut off = Vec::new();
        while let Some(word) = words.next() {
            match (word, words.next()) {
                ("--off", Some(list)) => off.extend(parse_classes(list)?),
                _ => return Err(format!("flags {flags:?}: expected --off CLASSES")),
            }
        }
        Ok(Cluster { off })
    }
}

/// Fault classes, comma-separated.
pub fn parse_classes(text: &str) -> Result<Vec<FaultClass>, String> {
    text.split(',')
        .filter(|name| !name.is_empty())
        .map(|name| {
            FaultClass::parse(name).ok_or_else(|| {
                let names: Vec<&str> = FaultClass::ALL.iter().map(|class| class.name()).collect();
                format!("fault class {name:?}: expected one of {}", names.join(", "))
            })
        })
        .collect()
}

impl durlog_testbed::Tally for Tally {
    fn add(&mut self, other: &Self) {
        self.merge(other);
    }

    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

fn flags_of(off: &[FaultClass]) -> String {
    if off.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = off.iter().map(|class| class.name()).collect();
    format!(" --off {}", names.join(","))
}

impl Scenario for Cluster {
    type Plan = Plan;
    type Tally = Tally;
    type Fault = FaultClass;

    fn command(&self) -> &str {
        "cargo run --release -p durlog-raft-sim --"
    }

    fn flags(&self) -> String {
        String::new()
    }

    fn draw(&self, seed: u64) -> Plan {
        self.off
            .iter()
            .fold(Plan::draw(seed), |plan, &class| plan.without(class))
    }

    fn actions(&self, plan: &Plan) -> usize {
        plan.steps.len()
    }

    fn faults(&self, plan: &Plan) -> Vec<FaultClass> {
        plan.classes.iter().copied().collect()
    }

    fn without_fault(&self, plan: &Plan, fault: FaultClass) -> Plan {
        plan.without(fault)
    }

    fn run(&self, plan: &Plan, keep: Option<&[bool]>, trace: bool) -> Outcome<Tally> {
        let outcome = crate::run(plan, keep, trace);
        Outcome {
            violation: outcome.violation.map(|message| Violation {
                step: outcome.step,
                message,
            }),
            digest: outcome.digest,
            tally: outcome.tally,
            trace: outcome.trace,
        }
    }

    fn fault_flags(&self, faults: Option<&[FaultClass]>) -> String {
        match faults {
            None => flags_of(&self.off),
            // Only `faults` on: every other class off.
            Some(on) => {
                let off: Vec<FaultClass> = FaultClass::ALL
                    .iter()
                    .copied()
                    .filter(|class| !on.contains(class))
                    .collect();
                flags_of(&off)
            }
        }
    }
}
