//! What runs counted: faults, coverage marks, outcomes. A tally is a map
//! from a name to a count, serde-serializable and addable, so that a
//! campaign sums its seeds' tallies in any order to the same total.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Marks a campaign expects to reach: a zero is flagged in the summary.
pub const COVERAGE: &[&str] = &[
    "elections",
    "leader-changes",
    "leader-change-with-uncommitted-tail",
    "truncations-of-a-conflicting-suffix",
    "snapshots-built",
    "snapshots-installed",
    "purges",
    "votes-granted",
    "votes-refused",
    "partitions",
    "kills",
    "power-losses",
    "power-loss-in-append",
    "power-loss-in-save-vote",
    "power-loss-in-truncate",
    "power-loss-in-purge",
    "power-loss-in-snapshot",
    "power-loss-in-recovery",
    "storage-errors",
    "restarts",
    "open-refused",
    "learners-added",
    "learners-promoted",
    "voters-removed",
    "client-writes-acked",
    "client-writes-rejected-by-version",
    "linearizable-reads",
    "liveness-phases-passed",
    "repairs-reach-checked",
];

/// Counts by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub counts: BTreeMap<String, u64>,
}

impl Tally {
    pub fn add(&mut self, name: &str, count: u64) {
        if count > 0 {
            *self.counts.entry(name.to_owned()).or_default() += count;
        }
    }

    pub fn bump(&mut self, name: &str) {
        self.add(name, 1);
    }

    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Tally) {
        for (name, count) in &other.counts {
            self.add(name, *count);
        }
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "coverage (a zero is flagged):")?;
        for name in COVERAGE {
            let count = self.get(name);
            let flag = if count == 0 { "   <-- ZERO" } else { "" };
            writeln!(f, "  {name:<40} {count:>10}{flag}")?;
        }
        writeln!(f, "counts:")?;
        for (name, count) in &self.counts {
            if !COVERAGE.contains(&name.as_str()) {
                writeln!(f, "  {name:<40} {count:>10}")?;
            }
        }
        Ok(())
    }
}
