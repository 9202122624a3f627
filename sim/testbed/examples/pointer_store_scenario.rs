//! The pointer store of `pointer_store.rs` tested with full control: the
//! same store, with the crash loop, the acknowledged-versus-in-doubt
//! bookkeeping, the plan and the explorer's workloads written by hand on
//! the testbed's [`Scenario`] and [`Exhaustible`] traits. `pointer_store.rs`
//! says the same on the simple form in a few lines; this is what the
//! simple form is built of, for a system it does not fit.
//! `tests/pointer_store.rs` runs the testbed's machinery on it.
//!
//! ```sh
//! cargo run -p durlog-testbed --example pointer_store_scenario -- run --seeds 0..2000 --bug no-dir-fsync
//! ```

#[path = "pointer_store.rs"]
#[allow(dead_code)]
mod simple;

use std::fmt;
use std::io;
use std::process::ExitCode;
use std::str::FromStr;

use durlog_testbed::explore::{Exhaustible, LossFacts, PowerLossHook};
use durlog_testbed::fs::Fs;
use durlog_testbed::options::FaultList;
use durlog_testbed::{Outcome, Scenario, Tally, Violation, cli};
use durlog_vfs::{FaultConfig, FaultKind, SimVfs};
use rand::RngExt;
use serde::{Deserialize, Serialize};

pub use simple::Bug;
use simple::PointerStore as Store;

// ---- The model, and one run of a plan ----

/// The store promises crash consistency (after a power loss, the last
/// value `set` acknowledged, or one in flight then), not to outlive bit
/// rot: the faults are those of a crash, a failing sync and a full disk.
const FAULTS: [FaultKind; 8] = [
    FaultKind::LostUnsyncedPages,
    FaultKind::TornWrite,
    FaultKind::LostDirEntry,
    FaultKind::UnsyncedSizeChange,
    FaultKind::FailedFsync,
    FaultKind::ShortWrite,
    FaultKind::NoSpace,
    FaultKind::Crash,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `set` a value of `len` bytes, the power failing during its `crash`-th
    /// disk operation if that is not 0.
    Set {
        len: u8,
        crash: u8,
    },
    Get,
    PowerLoss,
}

/// What the store must hold: the last value acknowledged, and those whose
/// `set` failed or was cut by a power loss (any may have landed).
#[derive(Default)]
struct Model {
    acked: Option<Vec<u8>>,
    in_doubt: Vec<Vec<u8>>,
}

impl Model {
    /// Checks what a `get` returned. Right after a power loss everything
    /// the disk holds is durable, so the sets in doubt are decided then;
    /// a value read back before that (a set whose last sync failed) may
    /// still be lost.
    fn check(
        &mut self,
        found: io::Result<Option<Vec<u8>>>,
        after_power_loss: bool,
        step: usize,
    ) -> Result<(), Violation> {
        let found = found.map_err(|error| violation(step, format!("get failed: {error}")))?;
        if found != self.acked
            && !self
                .in_doubt
                .iter()
                .any(|value| found.as_ref() == Some(value))
        {
            let message = format!("get returned {found:?}, acknowledged {:?}", self.acked);
            return Err(violation(step, message));
        }
        if after_power_loss {
            self.acked = found;
            self.in_doubt.clear();
        }
        Ok(())
    }
}

fn violation(step: usize, message: String) -> Violation {
    Violation { step, message }
}

/// Runs `actions` on `vfs`; `on_power_loss` is told of each power loss
/// (and may end the run there), with whether it struck while the store
/// was being opened and read back.
fn run_actions(
    vfs: &SimVfs,
    bug: Bug,
    actions: &[Action],
    tally: &mut Counts,
    mut on_power_loss: Option<PowerLossHook<'_>>,
) -> Result<(), Violation> {
    let open = || Store::open(Fs::from(vfs.clone()), bug);
    let mut model = Model::default();
    let mut store = open();
    for (step, &action) in actions.iter().enumerate() {
        if let Ok(opened) = &store {
            match action {
                Action::Set { len, crash } => {
                    let value: Vec<u8> = (0..=len).map(|i| i.wrapping_mul(31) ^ len).collect();
                    vfs.crash_after_ops(u64::from(crash));
                    if opened.set(&value).is_ok() {
                        tally.acked += 1;
                        model.acked = Some(value);
                        model.in_doubt.clear();
                    } else {
                        tally.failed += 1;
                        model.in_doubt.push(value);
                    }
                    vfs.crash_after_ops(0);
                }
                Action::Get => model.check(opened.get(), false, step)?,
                Action::PowerLoss => vfs.halt(),
            }
        }
        // After a power loss (during the action, or as the action), or a
        // store that did not open: power back on, open, read back.
        let mut in_recovery = false;
        for _ in 0..50 {
            if !vfs.is_halted() && store.is_ok() {
                break;
            }
            if vfs.is_halted() {
                tally.power_losses += 1;
                if !on_power_loss
                    .as_mut()
                    .is_none_or(|hook| hook(vfs, LossFacts::new(in_recovery)))
                {
                    return Ok(());
                }
                vfs.reboot();
            }
            in_recovery = true;
            store = open();
            if let Ok(opened) = &store {
                let found = opened.get();
                if !vfs.is_halted() {
                    model.check(found, true, step)?;
                }
            }
        }
        if let Err(error) = &store {
            return Err(violation(step, format!("the store does not open: {error}")));
        }
    }
    Ok(())
}

// ---- The scenario: plans drawn from seeds ----

#[derive(Clone, Debug)]
pub struct Plan {
    disk_seed: u64,
    faults: FaultConfig,
    actions: Vec<Action>,
}

/// What a run counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub acked: u64,
    pub failed: u64,
    pub power_losses: u64,
}

impl Tally for Counts {
    fn add(&mut self, other: &Counts) {
        self.acked += other.acked;
        self.failed += other.failed;
        self.power_losses += other.power_losses;
    }

    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sets        {} acknowledged, {} failed",
            self.acked, self.failed
        )?;
        writeln!(f, "crashes     {} power losses", self.power_losses)
    }
}

/// The scenario's options: its command line, its repro lines' flags and
/// its shard reports' options.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PointerOptions {
    /// Which update protocol.
    #[arg(long, value_enum, default_value = "none")]
    pub bug: Bug,
    /// Only these faults (a shrink's).
    #[arg(long)]
    pub faults: Option<FaultList>,
}

#[derive(Clone, Debug, Default)]
pub struct PointerScenario {
    pub options: PointerOptions,
}

impl PointerScenario {
    pub fn new(bug: Bug) -> PointerScenario {
        PointerScenario {
            options: PointerOptions { bug, faults: None },
        }
    }
}

impl Scenario for PointerScenario {
    type Options = PointerOptions;
    type Plan = Plan;
    type Tally = Counts;
    type Fault = FaultKind;

    fn command(&self) -> &str {
        "pointer_store_scenario"
    }

    fn options(&self) -> &PointerOptions {
        &self.options
    }

    fn with_options(&self, options: PointerOptions) -> PointerScenario {
        PointerScenario { options }
    }

    fn limit_faults(&self, faults: &[FaultKind]) -> PointerOptions {
        PointerOptions {
            faults: Some(FaultList(faults.to_vec())),
            ..self.options.clone()
        }
    }

    fn draw(&self, seed: u64) -> Plan {
        let seeds = durlog_testbed::SubSeeds::new(seed);
        let mut rng = seeds.rng("faults");
        let mut faults = FaultConfig::swarm(&mut rng);
        let allowed = self
            .options
            .faults
            .as_ref()
            .map_or(&FAULTS[..], |list| &list.0);
        for kind in FaultKind::ALL.iter().filter(|kind| !allowed.contains(kind)) {
            faults.set(*kind, 0.0);
        }
        let mut rng = seeds.rng("workload");
        let actions = (0..rng.random_range(5..40))
            .map(|_| match rng.random_range(0..10) {
                0..6 => Action::Set {
                    len: rng.random_range(0..200),
                    crash: if rng.random_bool(0.3) {
                        rng.random_range(1..8)
                    } else {
                        0
                    },
                },
                6..8 => Action::Get,
                _ => Action::PowerLoss,
            })
            .collect();
        Plan {
            disk_seed: seeds.named("disk"),
            faults,
            actions,
        }
    }

    fn actions(&self, plan: &Plan) -> usize {
        plan.actions.len()
    }

    fn faults(&self, plan: &Plan) -> Vec<FaultKind> {
        plan.faults.enabled()
    }

    fn run(&self, plan: &Plan, keep: Option<&[bool]>, trace: bool) -> Outcome<Counts> {
        let vfs = SimVfs::with_faults(plan.disk_seed, plan.faults.clone());
        vfs.set_trace_recording(trace);
        let actions: Vec<Action> = (plan.actions.iter().enumerate())
            .filter(|(step, _)| keep.is_none_or(|keep| keep[*step]))
            .map(|(_, action)| *action)
            .collect();
        let mut tally = Counts::default();
        let verdict = run_actions(&vfs, self.options.bug, &actions, &mut tally, None);
        let trace = trace_lines(&actions, &vfs, trace);
        Outcome {
            violation: verdict.err(),
            digest: vfs.trace_digest(),
            tally,
            trace,
        }
    }

    fn marks(&self) -> Vec<&'static str> {
        vec!["pointer store: a pointer a crash left removed"]
    }
}

/// The actions, then the disk's operations and faults, if `wanted`.
fn trace_lines(actions: &[Action], vfs: &SimVfs, wanted: bool) -> Vec<String> {
    if !wanted {
        return Vec::new();
    }
    let mut lines: Vec<String> = actions.iter().map(|action| format!("{action:?}")).collect();
    lines.extend(vfs.trace().iter().map(|event| format!("  disk: {event}")));
    lines
}

// ---- Every crash state of short workloads ----

/// A workload: sets (`s`) and gets (`g`), then a power loss.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ops(Vec<Action>);

impl fmt::Display for Ops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0
            .iter()
            .try_for_each(|action| f.write_str(if *action == Action::Get { "g" } else { "s" }))
    }
}

impl FromStr for Ops {
    type Err = String;
    fn from_str(text: &str) -> Result<Ops, String> {
        let op = |letter| match letter {
            's' => Ok(Action::Set { len: 9, crash: 0 }),
            'g' => Ok(Action::Get),
            _ => Err(format!("{text:?}: workloads are letters s and g")),
        };
        text.chars().map(op).collect::<Result<_, _>>().map(Ops)
    }
}

impl Exhaustible for PointerScenario {
    type Workload = Ops;
    type Options = PointerOptions;

    fn command(&self) -> &str {
        "pointer_store_scenario"
    }

    fn options(&self) -> &PointerOptions {
        &self.options
    }

    fn workloads(&self, ops: u32) -> Vec<Ops> {
        let (mut level, mut all) = (vec![String::new()], Vec::new());
        for _ in 0..ops {
            level = level
                .iter()
                .flat_map(|ops| [ops.clone() + "s", ops.clone() + "g"])
                .collect();
            all.extend(level.iter().map(|text| text.parse().expect("s and g")));
        }
        all
    }

    fn run_workload(
        &self,
        workload: &Ops,
        disk: SimVfs,
        trace: bool,
        hook: Option<PowerLossHook<'_>>,
    ) -> (Option<Violation>, Vec<String>) {
        disk.set_trace_recording(trace);
        let mut actions = workload.0.clone();
        actions.push(Action::PowerLoss);
        let verdict = run_actions(
            &disk,
            self.options.bug,
            &actions,
            &mut Counts::default(),
            hook,
        );
        (verdict.err(), trace_lines(&actions, &disk, trace))
    }

    fn describe_step(&self, workload: &Ops, step: usize) -> String {
        match step < workload.0.len() {
            true => format!("operation {} ({:?})", step + 1, workload.0[step]),
            false => "reading back after the power loss".to_string(),
        }
    }

    fn describe(&self, ops: u32) -> String {
        format!(
            "exhaust --ops {ops}: every workload of 1 to {ops} sets (s) and gets (g), then a power loss"
        )
    }
}

// ---- The binary ----

#[derive(clap::Parser)]
enum Command {
    Run {
        #[command(flatten)]
        run: cli::RunArgs,
        #[command(flatten)]
        options: PointerOptions,
    },
    Merge {
        #[command(flatten)]
        merge: cli::MergeArgs,
    },
    Repro {
        #[command(flatten)]
        repro: cli::ReproArgs,
        #[command(flatten)]
        options: PointerOptions,
    },
    Exhaust {
        #[command(flatten)]
        exhaust: cli::ExhaustArgs,
        #[command(flatten)]
        options: PointerOptions,
    },
}

#[allow(dead_code)] // the tests include this file for its scenario
fn main() -> ExitCode {
    let scenario = |options| PointerScenario { options };
    match <Command as clap::Parser>::parse() {
        Command::Run { run, options } => cli::run(&scenario(options), &run, "0"),
        Command::Merge { merge } => cli::merge(&PointerScenario::default(), &merge),
        Command::Repro { repro, options } => cli::repro(&scenario(options), &repro),
        Command::Exhaust { exhaust, options } => cli::exhaust(&scenario(options), &exhaust),
    }
}
