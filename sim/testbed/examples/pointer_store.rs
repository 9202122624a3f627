//! A worked example of testing your own storage code with the testbed: a
//! store of one value, its model, its scenario, and the update-protocol
//! bugs of Pillai et al., "All File Systems Are Not Created Equal" (OSDI
//! '14) as variants the testbed finds.
//!
//! The store appends each value to `values.log`, then points `current` at
//! it: the pointer (offset, length, checksum of the value, checksum of the
//! pointer) is written to `current.tmp`, synced, renamed over `current`,
//! and the directory synced. Only then does `set` return `Ok`.
//!
//! ```sh
//! cargo run -p durlog-testbed --example pointer_store -- run --seeds 0..2000
//! cargo run -p durlog-testbed --example pointer_store -- run --seeds 0..2000 --bug no-dir-fsync
//! cargo run -p durlog-testbed --example pointer_store -- exhaust --ops 3 --bug in-place
//! ```

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;

use durlog_testbed::explore::{Exhaustible, PowerLossHook};
use durlog_testbed::{Outcome, Scenario, Tally, Violation, cli};
use durlog_vfs::{FaultConfig, FaultKind, OpenMode, SimVfs, Vfs, read_exact_at};
use rand::RngExt;
use serde::{Deserialize, Serialize};

// ---- The store under test ----

/// The update protocol, right or with one of the classic bugs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Bug {
    #[default]
    None,
    /// The new pointer renamed into place before it is synced.
    RenameUnsynced,
    /// No directory sync after the rename.
    NoDirFsync,
    /// The pointer overwritten in place instead of renamed.
    InPlace,
    /// The value appended but not synced before the pointer names it.
    AppendUnsynced,
}

pub struct Store {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    bug: Bug,
    /// A file this store created may not have a durable name yet (its
    /// directory sync failed): sync the directory before relying on it.
    created_unsynced: std::cell::Cell<bool>,
}

impl Store {
    pub fn open(vfs: Arc<dyn Vfs>, dir: &Path, bug: Bug) -> io::Result<Store> {
        vfs.create_dir_all(dir)?;
        let created_unsynced = false.into();
        Ok(Store {
            vfs,
            dir: dir.to_path_buf(),
            bug,
            created_unsynced,
        })
    }

    pub fn set(&self, value: &[u8]) -> io::Result<()> {
        let log = self.open_or_create("values.log")?;
        let offset = log.len()?;
        log.write_at(value, offset)?;
        if self.bug != Bug::AppendUnsynced {
            log.sync_data()?;
        }
        let check = checksum(value);
        let mut pointer = [offset, value.len() as u64, check]
            .map(u64::to_le_bytes)
            .concat();
        pointer.extend_from_slice(&checksum(&pointer).to_le_bytes());
        if self.bug == Bug::InPlace {
            let current = self.open_or_create("current")?;
            current.write_at(&pointer, 0)?;
            return current.sync_data();
        }
        let temp = self.dir.join("current.tmp");
        let _ = self.vfs.remove_file(&temp);
        let file = self.vfs.open(&temp, OpenMode::CreateNew)?;
        file.write_at(&pointer, 0)?;
        if self.bug != Bug::RenameUnsynced {
            file.sync_data()?;
        }
        self.vfs.rename(&temp, &self.dir.join("current"))?;
        if self.bug != Bug::NoDirFsync {
            self.vfs.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// The value last set, `None` if none was; an error if the store's
    /// files do not hold a valid one.
    pub fn get(&self) -> io::Result<Option<Vec<u8>>> {
        let file = match self.vfs.open(&self.dir.join("current"), OpenMode::ReadOnly) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            opened => opened?,
        };
        let mut pointer = [0u8; 32];
        read_exact_at(file.as_ref(), &mut pointer, 0)?;
        let field = |at: usize| u64::from_le_bytes(pointer[at..at + 8].try_into().unwrap());
        let damaged = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        if checksum(&pointer[..24]) != field(24) {
            return Err(damaged("current: the pointer is damaged"));
        }
        let log = self
            .vfs
            .open(&self.dir.join("values.log"), OpenMode::ReadOnly)?;
        let mut value = vec![0u8; field(8) as usize];
        read_exact_at(log.as_ref(), &mut value, field(0))?;
        if checksum(&value) != field(16) {
            return Err(damaged(
                "values.log: the value the pointer names is damaged",
            ));
        }
        Ok(Some(value))
    }

    fn open_or_create(&self, name: &str) -> io::Result<Box<dyn durlog_vfs::VfsFile>> {
        let path = self.dir.join(name);
        let file = match self.vfs.open(&path, OpenMode::ReadWrite) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                self.created_unsynced.set(true);
                self.vfs.open(&path, OpenMode::CreateNew)?
            }
            opened => opened?,
        };
        // Also after an earlier sync failed: the testbed found a power
        // loss keeping the pointer and losing the log's name (seed 11539).
        if self.created_unsynced.get() {
            durlog_vfs::mark!("pointer store: a new file's name synced");
            self.vfs.sync_dir(&self.dir)?;
            self.created_unsynced.set(false);
        }
        Ok(file)
    }
}

/// FNV-1a: enough to tell a damaged pointer or value from a whole one.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3)
    })
}

// ---- The model, and one run of a plan ----

const DIR: &str = "/store";

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
    let disk: Arc<dyn Vfs> = Arc::new(vfs.clone());
    let open = || Store::open(Arc::clone(&disk), Path::new(DIR), bug);
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
                    .is_none_or(|hook| hook(vfs, in_recovery))
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

#[derive(Clone, Copy, Debug, Default)]
pub struct PointerStore {
    pub bug: Bug,
}

impl Scenario for PointerStore {
    type Plan = Plan;
    type Tally = Counts;
    type Fault = FaultKind;

    fn command(&self) -> &str {
        "pointer_store"
    }

    fn flags(&self) -> String {
        match self.bug {
            Bug::None => String::new(),
            bug => format!(
                " --bug {}",
                clap::ValueEnum::to_possible_value(&bug).unwrap().get_name()
            ),
        }
    }

    fn draw(&self, seed: u64) -> Plan {
        let seeds = durlog_testbed::SubSeeds::new(seed);
        let mut rng = seeds.rng("faults");
        let mut faults = FaultConfig::swarm(&mut rng);
        for kind in FaultKind::ALL.iter().filter(|kind| !FAULTS.contains(kind)) {
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

    fn without_fault(&self, plan: &Plan, fault: FaultKind) -> Plan {
        let mut plan = plan.clone();
        plan.faults.set(fault, 0.0);
        plan
    }

    fn fault_flags(&self, _faults: Option<&[FaultKind]>) -> String {
        String::new() // a shrunk plan's faults are drawn again from its seed
    }

    fn run(&self, plan: &Plan, keep: Option<&[bool]>, trace: bool) -> Outcome<Counts> {
        let vfs = SimVfs::with_faults(plan.disk_seed, plan.faults.clone());
        vfs.set_trace_recording(trace);
        let actions: Vec<Action> = (plan.actions.iter().enumerate())
            .filter(|(step, _)| keep.is_none_or(|keep| keep[*step]))
            .map(|(_, action)| *action)
            .collect();
        let mut tally = Counts::default();
        let verdict = run_actions(&vfs, self.bug, &actions, &mut tally, None);
        let trace = trace_lines(&actions, &vfs, trace);
        Outcome {
            violation: verdict.err(),
            digest: vfs.trace_digest(),
            tally,
            trace,
        }
    }

    fn marks(&self) -> &[&'static str] {
        &["pointer store: a new file's name synced"]
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

impl Exhaustible for PointerStore {
    type Workload = Ops;

    fn command(&self) -> &str {
        "pointer_store"
    }

    fn flags(&self) -> String {
        Scenario::flags(self)
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
        let verdict = run_actions(&disk, self.bug, &actions, &mut Counts::default(), hook);
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
        #[arg(long, value_enum, default_value = "none")]
        bug: Bug,
    },
    Repro {
        #[command(flatten)]
        repro: cli::ReproArgs,
        #[arg(long, value_enum, default_value = "none")]
        bug: Bug,
    },
    Exhaust {
        #[command(flatten)]
        exhaust: cli::ExhaustArgs,
        #[arg(long, value_enum, default_value = "none")]
        bug: Bug,
    },
}

#[allow(dead_code)] // the tests include this file for its store and scenario
fn main() -> ExitCode {
    match <Command as clap::Parser>::parse() {
        Command::Run { run, bug } => cli::run(&PointerStore { bug }, &run, "0"),
        Command::Repro { repro, bug } => cli::repro(&PointerStore { bug }, &repro),
        Command::Exhaust { exhaust, bug } => cli::exhaust(&PointerStore { bug }, &exhaust),
    }
}
