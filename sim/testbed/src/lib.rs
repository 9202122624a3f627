//! durlog-testbed: a deterministic simulation testbed for storage code.
//!
//! Write a [`Scenario`] for the code under test: a plan drawn from a seed
//! (the faults the simulated disk may inject, and a list of actions), and
//! a run of the plan (or of a subsequence of its actions) on a
//! [`durlog_vfs::SimVfs`] that checks every outcome against a model and
//! returns a [`Violation`] or none, a digest of its trace and a
//! [`Tally`] of what it did. On that trait the testbed gives, for any
//! scenario:
//!
//! - [`campaign`]: a range of seeds over threads (`--jobs`) and machines
//!   (`--shard I/N`), `--fail-fast`, progress on stderr and a summary in
//!   seed order, whose digest is the same for any split;
//! - [`shard`]: a shard's report (JSON) and `merge`, which prints exactly
//!   what one machine running the whole range prints;
//! - [`shrink`]: a failing run cut to the fewest actions and faults that
//!   still fail, and the command that replays it;
//! - [`explore`]: every crash state of small workloads, through the
//!   disk's [`durlog_vfs::CrashScript`];
//! - [`seeds`]: named sub-seeds, so that adding a part to a run never
//!   shifts the randomness of another;
//! - a determinism check ([`campaign::check_determinism`]): each seed run
//!   twice and the digests compared;
//! - coverage marks ([`durlog_vfs::mark!`], [`Scenario::marks`]): points
//!   of the code under test that a campaign counts, whose zeros the
//!   summary flags;
//! - [`cli`]: the command-line arguments and commands (`run`, `merge`,
//!   `repro`, `exhaust`) a scenario's binary is made of.
//!
//! Nothing in a run may depend on the wall clock, on threads or on hash
//! order: everything comes from the seed. The testbed only runs each seed
//! on one thread and folds the results in seed order.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub mod campaign;
pub mod cli;
pub mod explore;
pub mod seeds;
pub mod shard;
pub mod shrink;

pub use campaign::{Progress, Summary, run_campaign};
pub use seeds::{SubSeeds, fold_digests, mix, shard_seeds};

/// A scenario: how one seed's run of the code under test is drawn, run and
/// judged.
///
/// `run` must be deterministic in its arguments: the same plan and mask
/// give the same outcome, digest and trace on any machine and thread.
pub trait Scenario: Sync {
    /// Everything a seed's run does, drawn before it starts: a list of
    /// actions (so that a subsequence of them can run) and the faults.
    type Plan: Clone + Send + Sync;
    /// What a run counts, summed over a campaign.
    type Tally: Tally;
    /// A kind of fault a plan may enable, switched off one at a time by a
    /// shrink.
    type Fault: Copy + Eq + fmt::Debug + fmt::Display + Send + Sync;

    /// The command that runs this scenario (`durlog-sim`): repro lines
    /// start with it.
    fn command(&self) -> &str;

    /// The options this scenario was made with, but the faults, as
    /// command-line flags, each with a leading space ("" for the
    /// defaults). With [`Scenario::fault_flags`] of `None` before them,
    /// they say which campaign ran: a merge refuses to mix two.
    fn flags(&self) -> String;

    /// The plan of `seed`.
    fn draw(&self, seed: u64) -> Self::Plan;

    /// How many actions `plan` has.
    fn actions(&self, plan: &Self::Plan) -> usize;

    /// The faults `plan` enables.
    fn faults(&self, plan: &Self::Plan) -> Vec<Self::Fault>;

    /// `plan` with `fault` switched off, and its actions unchanged.
    fn without_fault(&self, plan: &Self::Plan, fault: Self::Fault) -> Self::Plan;

    /// Runs the actions of `plan` that `keep` selects (all if `None`),
    /// with a person-readable trace if `trace`.
    fn run(&self, plan: &Self::Plan, keep: Option<&[bool]>, trace: bool) -> Outcome<Self::Tally>;

    /// The flags that limit the faults to `faults` (a shrink's result), or
    /// with `None` to those this scenario was made with ("" for no limit),
    /// each with a leading space.
    fn fault_flags(&self, faults: Option<&[Self::Fault]>) -> String;

    /// Every option as flags: the faults', then the others'.
    fn all_flags(&self) -> String {
        format!("{}{}", self.fault_flags(None), self.flags())
    }

    /// The command that replays `seed` of this scenario.
    fn repro(&self, seed: u64) -> String {
        format!("{} repro --seed {seed}{}", self.command(), self.all_flags())
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

    /// The coverage marks this scenario expects its campaigns to reach
    /// (marks in the code under test and in the scenario itself): the
    /// summary lists each with its count and flags those no seed reached.
    fn marks(&self) -> &[&'static str] {
        &[]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Marks(pub std::collections::BTreeMap<String, u64>);

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
