//! The full-control form: a [`Scenario`] draws a plan from a seed and runs
//! it, and everything else (campaigns, shards, shrinking, repro lines) is
//! built on those few methods. The simple form ([`crate::Store`]) is one
//! such scenario.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::options::{self, Options};

/// A scenario: how one seed's run of the code under test is drawn, run and
/// judged.
///
/// `run` must be deterministic in its arguments: the same plan and mask
/// give the same outcome, digest and trace on any machine and thread.
pub trait Scenario: Sync + Sized {
    /// Everything the scenario's campaigns are made with, in one typed
    /// form: parsed from the command line, stored in shard reports, and
    /// printed as flags in every repro line ([`crate::options`]).
    type Options: Options;
    /// Everything a seed's run does, drawn before it starts: a list of
    /// actions (so that a subsequence of them can run) and the faults.
    type Plan: Clone + Send + Sync;
    /// What a run counts, summed over a campaign ([`Counts`] if counts by
    /// name will do).
    type Tally: Tally;
    /// A kind of fault a plan may enable, switched off one at a time by a
    /// shrink.
    type Fault: Copy + Eq + fmt::Debug + fmt::Display + Send + Sync;

    /// The command that runs this scenario (`durlog-sim`): repro lines
    /// start with it.
    fn command(&self) -> &str;

    /// The options this scenario was made with.
    fn options(&self) -> &Self::Options;

    /// The same scenario with other options (a report's, a shrink's).
    fn with_options(&self, options: Self::Options) -> Self;

    /// This scenario's options, with runs limited to `faults`: drawing a
    /// seed under them gives the same actions, with only those of the
    /// seed's faults that are in `faults` on. That is how a shrink switches
    /// faults off, so that the options it prints replay exactly what it
    /// ran.
    fn limit_faults(&self, faults: &[Self::Fault]) -> Self::Options;

    /// The plan of `seed`.
    fn draw(&self, seed: u64) -> Self::Plan;

    /// How many actions `plan` has.
    fn actions(&self, plan: &Self::Plan) -> usize;

    /// The faults `plan` enables.
    fn faults(&self, plan: &Self::Plan) -> Vec<Self::Fault>;

    /// Runs the actions of `plan` that `keep` selects (all if `None`),
    /// with a person-readable trace if `trace`.
    fn run(&self, plan: &Self::Plan, keep: Option<&[bool]>, trace: bool) -> Outcome<Self::Tally>;

    /// The command that replays `seed` of this scenario.
    fn repro(&self, seed: u64) -> String {
        format!(
            "{} repro --seed {seed}{}",
            self.command(),
            options::flags_text(self.options())
        )
    }

    /// The faults `plan` enables, for a person (the shrunk run's line).
    fn describe_faults(&self, plan: &Self::Plan) -> String {
        let faults: Vec<String> = self.faults(plan).iter().map(ToString::to_string).collect();
        if faults.is_empty() {
            "none".to_string()
        } else {
            faults.join(",")
        }
    }

    /// The coverage marks this scenario's campaigns must reach (marks in
    /// the code under test and in the scenario itself): the summary lists
    /// each with its count, and a campaign that reaches one of them in no
    /// seed fails.
    fn marks(&self) -> Vec<&'static str> {
        Vec::new()
    }
}

/// The counts of a run, and of a campaign: added up seed by seed in seed
/// order, printed as the body of the summary, and kept in shard reports.
pub trait Tally: Default + Clone + PartialEq + Send + Serialize + DeserializeOwned {
    /// Adds another run's (or shard's) counts.
    fn add(&mut self, other: &Self);

    /// Workload steps run, for the progress line's rate.
    fn cycles(&self) -> u64 {
        0
    }

    /// The summary's body: one line per count, each ending in a newline.
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// A tally of counts by name, for a scenario that needs no other: the
/// count named [`Counts::CYCLES`] is the rate the progress line shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts(pub BTreeMap<String, u64>);

impl Counts {
    /// The name of the count of workload steps.
    pub const CYCLES: &'static str = "steps";

    /// Adds `count` to `name` (a zero adds no line).
    pub fn add(&mut self, name: &str, count: u64) {
        if count > 0 {
            *self.0.entry(name.to_string()).or_default() += count;
        }
    }

    /// Adds one to `name`.
    pub fn bump(&mut self, name: &str) {
        self.add(name, 1);
    }

    /// The count of `name`, 0 if never counted.
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

impl Tally for Counts {
    fn add(&mut self, other: &Counts) {
        for (name, count) in &other.0 {
            Counts::add(self, name, *count);
        }
    }

    fn cycles(&self) -> u64 {
        self.get(Counts::CYCLES)
    }

    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.0.keys().map(String::len).max().unwrap_or(0);
        for (name, count) in &self.0 {
            writeln!(f, "  {name:<width$} {count:>10}")?;
        }
        Ok(())
    }
}

/// What one run reports.
#[derive(Clone, Debug, Default)]
pub struct Outcome<T> {
    pub violation: Option<Violation>,
    /// A digest of everything the run did, the same on any machine for the
    /// same plan: what campaigns compare.
    pub digest: u64,
    pub tally: T,
    /// The person-readable trace, when asked for.
    pub trace: Vec<String>,
}

/// A run broke a rule of the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// The action during which it was found (one past the last for the
    /// final checks).
    pub step: usize,
    pub message: String,
}

/// The message of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Runs `plan` of `scenario`; a panic in the code under test is a
/// violation like any other. Returns the outcome and the marks the run
/// reached.
pub fn run_caught<S: Scenario>(
    scenario: &S,
    plan: &S::Plan,
    keep: Option<&[bool]>,
    trace: bool,
) -> (Outcome<S::Tally>, Marks) {
    durlog_vfs::marks::take();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scenario.run(plan, keep, trace)
    }))
    .unwrap_or_else(|panic| Outcome {
        violation: Some(Violation {
            step: 0,
            message: format!("panic: {}", panic_message(&*panic)),
        }),
        ..Outcome::default()
    });
    let marks = Marks(
        durlog_vfs::marks::take()
            .into_iter()
            .map(|(name, count)| (name.to_string(), count))
            .collect(),
    );
    (outcome, marks)
}

/// Coverage marks reached, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marks(pub BTreeMap<String, u64>);

impl Marks {
    pub fn add(&mut self, other: &Marks) {
        for (name, count) in &other.0 {
            *self.0.entry(name.clone()).or_default() += count;
        }
    }

    pub fn count(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}
