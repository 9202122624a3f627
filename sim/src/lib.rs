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

use durlog_testbed::options::FaultList;
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
/// which a campaign must reach, each with the faults of which it needs one
/// allowed (none: it needs no fault); a test checks the list against the
/// code.
pub const MARKS: &[(&str, &[FaultKind])] = &[
    ("group: a group of several appends", &[]),
    (
        "group: an append refused against an earlier member of its group",
        &[],
    ),
    (
        "group: a failed group puts back several refused appends",
        &[
            FaultKind::FailedFsync,
            FaultKind::ShortWrite,
            FaultKind::NoSpace,
            FaultKind::Crash,
        ],
    ),
    ("writer: zeros preallocated with a group", &[]),
    ("writer: a roll renames the prepared segment", &[]),
    (
        "writer: records written again without zeros for want of room",
        &[FaultKind::NoSpace, FaultKind::ShortWrite],
    ),
    ("writer: a failed group cut back", &[]),
    ("writer: a cut-back that fails poisons the log", &[]),
    (
        "index files: a sealed segment read back is refused",
        &[
            FaultKind::BitFlipAtRest,
            FaultKind::BitFlipOnRead,
            FaultKind::MisdirectedWrite,
        ],
    ),
    // Damage at rest never reaches it (Open removes a damaged index
    // file), and a write misdirected onto an index file that a read then
    // needs in the same life is too rare for a campaign of misdirected
    // writes alone (none in 10,000 seeds): a read's flipped bit does it.
    (
        "index files: a read finds a sealed segment's records through its own bytes",
        &[FaultKind::BitFlipOnRead],
    ),
    (
        "recovery: a header across a page boundary taken as the write's own",
        &[FaultKind::MisdirectedWrite],
    ),
    (
        "recovery: an older seq at the damage passed over",
        &[
            FaultKind::LostUnsyncedPages,
            FaultKind::TornWrite,
            FaultKind::UnsyncedSizeChange,
        ],
    ),
    (
        "recovery: a repeated record truncated",
        &[FaultKind::DuplicatedWrite],
    ),
    (
        "subscribe: a follower's next bytes were not its records",
        &[],
    ),
    (
        "subscribe: records read ahead past a truncation dropped",
        &[],
    ),
    ("follower: a segment it had read was purged", &[]),
    ("follower: a record it read was cut", &[]),
    ("retention: a decided change poisoned by a later step", &[]),
    (
        "retention: a segment kept, its newest record unread",
        &[
            FaultKind::ReadError,
            FaultKind::BitFlipOnRead,
            FaultKind::BitFlipAtRest,
            FaultKind::MisdirectedWrite,
        ],
    ),
];

impl Scenario for DurlogSim {
    type Options = RunOptions;
    type Plan = Plan;
    type Tally = Tally;
    type Fault = FaultKind;

    fn command(&self) -> &str {
        COMMAND
    }

    fn options(&self) -> &RunOptions {
        &self.options
    }

    fn with_options(&self, options: RunOptions) -> DurlogSim {
        DurlogSim { options }
    }

    fn limit_faults(&self, faults: &[FaultKind]) -> RunOptions {
        RunOptions {
            faults: Some(FaultList(faults.to_vec())),
            ..self.options.clone()
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

    /// The marks whose faults the options allow.
    fn marks(&self) -> Vec<&'static str> {
        let allowed = |kind: &FaultKind| {
            (self.options.faults.as_ref()).is_none_or(|FaultList(list)| list.contains(kind))
        };
        (MARKS.iter())
            .filter(|(_, needs)| needs.is_empty() || needs.iter().any(allowed))
            .map(|(name, _)| *name)
            .collect()
    }
}
