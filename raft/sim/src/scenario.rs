//! The cluster simulation as a testbed [`Scenario`]: campaigns, shard
//! reports and their merge, shrinking and the determinism check are the
//! testbed's (`durlog-testbed`); a plan, a run and a tally are this
//! crate's.

use std::fmt;

use std::str::FromStr;

use durlog_testbed::{Outcome, Scenario, Violation};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::plan::{FaultClass, Plan};
use crate::tally::Tally;

/// The cluster simulation's options: the command line's, the repro lines'
/// flags and the shard reports' options, in one type.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterOptions {
    /// Fault classes switched off, comma-separated (loss, duplicate,
    /// detour, partition, kill, power-loss, disk, read-error, bit-rot).
    #[arg(long, default_value = "")]
    pub off: Classes,
}

/// Fault classes, as one option: `loss,kill` (or `none`, or nothing, for
/// none) on a command line, a list of names in JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classes(pub Vec<FaultClass>);

impl FromStr for Classes {
    type Err = String;

    fn from_str(text: &str) -> Result<Classes, String> {
        if text.trim() == "none" {
            return Ok(Classes(Vec::new()));
        }
        parse_classes(text).map(Classes)
    }
}

impl Serialize for Classes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let names: Vec<&str> = self.0.iter().map(|class| class.name()).collect();
        names.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Classes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Classes, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        parse_classes(&names.join(","))
            .map(Classes)
            .map_err(serde::de::Error::custom)
    }
}

/// The scenario, with the fault classes switched off by its options.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub options: ClusterOptions,
}

/// Fault classes, comma-separated.
pub fn parse_classes(text: &str) -> Result<Vec<FaultClass>, String> {
    text.split(',')
        .filter(|name| !name.is_empty())
        .map(|name| {
            FaultClass::parse(name.trim()).ok_or_else(|| {
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

impl Scenario for Cluster {
    type Options = ClusterOptions;
    type Plan = Plan;
    type Tally = Tally;
    type Fault = FaultClass;

    fn command(&self) -> &str {
        "cargo run --release -p durlog-raft-sim --"
    }

    fn options(&self) -> &ClusterOptions {
        &self.options
    }

    fn with_options(&self, options: ClusterOptions) -> Cluster {
        Cluster { options }
    }

    /// Only `faults` on: every other class off.
    fn limit_faults(&self, faults: &[FaultClass]) -> ClusterOptions {
        let off = (FaultClass::ALL.iter().copied())
            .filter(|class| !faults.contains(class))
            .collect();
        ClusterOptions { off: Classes(off) }
    }

    fn draw(&self, seed: u64) -> Plan {
        (self.options.off.0.iter()).fold(Plan::draw(seed), |plan, &class| plan.without(class))
    }

    fn actions(&self, plan: &Plan) -> usize {
        plan.steps.len()
    }

    fn faults(&self, plan: &Plan) -> Vec<FaultClass> {
        plan.classes.iter().copied().collect()
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
}
