//! The simple form: a store, its model, and nothing about crashes.
//!
//! The user says what the store is: a [`Model`] (a plain value, the
//! operations it takes and what each does to it) and a [`Store`] (open on
//! a file system, apply one operation, check what it holds against a state
//! of the model). The testbed owns everything else, as a [`Scenario`]
//! ([`StoreScenario`]): it draws workloads, arms power losses during
//! operations and between them, reboots the disk, reopens the store,
//! crashes the reopening too, and keeps the bookkeeping that is easiest to
//! get wrong: which operations were acknowledged, and which may or may not
//! have happened (cut by a power loss, or failed), as the set of model
//! states the store may be in.
//!
//! That set starts as the model's default. An acknowledged operation
//! applies to every state in it; an operation in doubt adds, for every
//! state, the state with it applied (equal states are kept once). After a
//! power loss the disk holds only what is durable, so the states the
//! reopened store's check rejects are dropped: what it holds then is
//! decided. A check between power losses must pass against some state
//! but decides nothing, since what was not synced may still be lost.
//!
//! An error from the store (opening, or reading in its check) is a
//! violation, unless the disk injected a fault that explains it: a failed
//! sync, write or read since the last check, or damage to durable bytes
//! (a bit flipped at rest, a misdirected write), which the store is right
//! to refuse. Wrong contents are never excused.

pub(crate) mod exhaust;
mod run;

use std::fmt;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use durlog_vfs::FaultConfig;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

pub use exhaust::Letters;

use crate::faults::Faults;
use crate::fs::Fs;
use crate::options::FaultList;
use crate::scenario::{Counts, Outcome, Scenario};
use crate::seeds::SubSeeds;

/// What a store should hold, as a plain value: the operations it takes,
/// how a workload draws them, and what each does.
pub trait Model: Clone + Default + PartialEq + fmt::Debug {
    /// One operation of a workload.
    type Op: Clone + fmt::Debug + Send + Sync;

    /// Draws one operation.
    fn draw(rng: &mut Gen) -> Self::Op;

    /// The state after `op`.
    fn apply(&mut self, op: &Self::Op);
}

/// The store under test, opened on a file system ([`Fs`]) by the function
/// a check is made with.
pub trait Store {
    type Model: Model;

    /// Applies `op`: `Ok` only once it is durable. An error leaves it in
    /// doubt: it may or may not have happened.
    fn apply(&mut self, op: &<Self::Model as Model>::Op) -> io::Result<()>;

    /// Reads the store back and compares it with `model`: a
    /// [`Failure::Mismatch`] if it holds something else, an I/O error if
    /// it cannot read (`?` on an `io::Error` gives one).
    fn check(&mut self, model: &Self::Model) -> Checked;
}

/// What a check returns.
pub type Checked = Result<(), Failure>;

/// Why a check failed.
#[derive(Debug)]
pub enum Failure {
    /// The store holds something else than the model state: never excused.
    Mismatch(String),
    /// The store could not read: excused only by a fault the disk injected.
    Io(io::Error),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Mismatch(message) => f.write_str(message),
            Failure::Io(error) => write!(f, "I/O error: {error}"),
        }
    }
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Failure {
        Failure::Io(error)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Mismatch(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::Mismatch(message.to_string())
    }
}

/// `Ok` if `found` is `expected`, else a mismatch naming `what` and both.
pub fn expect_eq<T: PartialEq + fmt::Debug>(
    found: T,
    expected: T,
    what: impl fmt::Display,
) -> Checked {
    if found == expected {
        Ok(())
    } else {
        let (found, expected) = (format!("{found:?}"), format!("{expected:?}"));
        Err(Failure::Mismatch(format!(
            "{what}: found {}, expected {}",
            short(&found),
            short(&expected)
        )))
    }
}

/// The randomness a workload draws its operations from: one seeded
/// ChaCha8 stream, the same on every machine.
pub struct Gen {
    rng: ChaCha8Rng,
}

impl Gen {
    pub(crate) fn new(rng: ChaCha8Rng) -> Gen {
        Gen { rng }
    }

    /// A number in `0..n`.
    ///
    /// # Panics
    /// If `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.rng.random_range(0..n)
    }

    /// A number in `range`.
    pub fn range(&mut self, range: Range<u64>) -> u64 {
        self.rng.random_range(range)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.rng.random()).collect()
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.rng.random_range(0..items.len())]
    }

    /// The RNG itself, for the `rand` crate's methods
    /// (`durlog_testbed::rand::RngExt`).
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }
}

/// How a store is opened: the function a check is made with.
pub type Open<S> = dyn Fn(Fs) -> io::Result<S> + Send + Sync;

/// The options of a store's campaigns.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreOptions {
    /// Only these faults (a comma list of kinds, or `none`); default: the
    /// check's preset.
    #[arg(long)]
    pub faults: Option<FaultList>,
    /// Each fault at its default weight in every run, instead of weights
    /// drawn per run.
    #[arg(long)]
    pub fixed_weights: bool,
    /// Workload steps per seed; default: drawn per seed.
    #[arg(long)]
    pub steps: Option<u32>,
}

/// A store and its model as a [`Scenario`]: what `check` runs, and what a
/// store's own binary ([`crate::cli::store_main`]) runs.
pub struct StoreScenario<S: Store> {
    open: Arc<Open<S>>,
    command: String,
    preset: Faults,
    steps: Range<u32>,
    alphabet: Option<Vec<<S::Model as Model>::Op>>,
    options: StoreOptions,
}

impl<S: Store> StoreScenario<S> {
    /// The scenario of the store `open` opens, with `preset`'s faults;
    /// `command` starts its repro lines.
    pub fn new(
        command: &str,
        open: impl Fn(Fs) -> io::Result<S> + Send + Sync + 'static,
        preset: Faults,
    ) -> StoreScenario<S> {
        StoreScenario {
            open: Arc::new(open),
            command: command.to_string(),
            preset,
            steps: STEPS_DEFAULT,
            alphabet: None,
            options: StoreOptions::default(),
        }
    }

    /// The operations exhaustive workloads are made of (default: two
    /// distinct operations the model draws).
    pub fn with_alphabet(mut self, ops: Vec<<S::Model as Model>::Op>) -> StoreScenario<S> {
        assert!(
            (1..=26).contains(&ops.len()),
            "an alphabet of 1 to 26 operations"
        );
        self.alphabet = Some(ops);
        self
    }

    /// The explorer of this store's short workloads.
    pub(crate) fn workloads(&self) -> exhaust::StoreWorkloads<S> {
        exhaust::StoreWorkloads {
            open: Arc::clone(&self.open),
            command: self.command.clone(),
            alphabet: (self.alphabet.clone()).unwrap_or_else(default_alphabet::<S>),
            options: self.options.clone(),
        }
    }

    /// Workloads of a number of steps drawn from `steps`.
    pub fn with_steps(mut self, steps: Range<u32>) -> StoreScenario<S> {
        assert!(!steps.is_empty(), "steps {steps:?}: an empty range");
        self.steps = steps;
        self
    }

    /// The faults runs may inject: the options' list, else the preset.
    pub fn faults_allowed(&self) -> Faults {
        let kinds = (self.options.faults.as_ref()).map_or(self.preset.kinds(), |list| &list.0);
        let faults = Faults::of(kinds);
        if self.options.fixed_weights || !self.preset.is_swarm() {
            faults.fixed()
        } else {
            faults
        }
    }
}

/// Steps per workload unless a check says otherwise.
const STEPS_DEFAULT: Range<u32> = 5..40;

/// One seed's run, drawn before it starts.
#[derive(Clone, Debug)]
pub struct StorePlan<Op> {
    disk_seed: u64,
    faults: FaultConfig,
    steps: Vec<Step<Op>>,
}

/// One step of a workload.
#[derive(Clone, Debug, PartialEq)]
pub enum Step<Op> {
    /// Apply `op`; with a power loss, the power fails during its
    /// `power_loss.during`-th counted disk operation (if it has that many).
    Apply {
        op: Op,
        power_loss: Option<PowerLoss>,
    },
    /// The power fails between operations.
    PowerLoss(PowerLoss),
    /// The store is dropped and opened again on the same disk (a process
    /// restart: the page cache survives).
    Restart,
}

/// A power loss, as drawn: where it strikes, whether the recovery after
/// it loses power too, and the roll that decides a bit flip at rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PowerLoss {
    pub during: u32,
    /// Power fails again during this counted operation of the recovery.
    pub recovery: Option<u32>,
    /// A bit is flipped at rest after a power loss between operations if
    /// `flip / 2^32` is below the bit-flip weight.
    pub flip: u32,
}

impl<Op> StorePlan<Op> {
    pub fn steps(&self) -> &[Step<Op>] {
        &self.steps
    }

    pub fn faults(&self) -> &FaultConfig {
        &self.faults
    }
}

/// `text`, cut to a line's worth.
pub(crate) fn short(text: &str) -> String {
    const CHARS_MAX: usize = 72;
    let count = text.chars().count();
    if count <= CHARS_MAX {
        return text.to_string();
    }
    let head: String = text.chars().take(CHARS_MAX - 12).collect();
    format!("{head}... ({count} chars)")
}

/// Two distinct operations the model draws (by their `Debug` text), or
/// one if it draws only one.
fn default_alphabet<S: Store>() -> Vec<<S::Model as Model>::Op> {
    let mut rng = Gen::new(SubSeeds::new(0).rng("alphabet"));
    let mut alphabet: Vec<<S::Model as Model>::Op> = Vec::new();
    for _ in 0..64 {
        let op = S::Model::draw(&mut rng);
        if !(alphabet.iter()).any(|known| format!("{known:?}") == format!("{op:?}")) {
            alphabet.push(op);
        }
        if alphabet.len() == 2 {
            break;
        }
    }
    alphabet
}

fn draw_power_loss(rng: &mut ChaCha8Rng) -> PowerLoss {
    PowerLoss {
        during: rng.random_range(1..17),
        recovery: rng.random_bool(0.2).then(|| rng.random_range(1..9)),
        flip: rng.random(),
    }
}

impl<S: Store> Scenario for StoreScenario<S> {
    type Options = StoreOptions;
    type Plan = StorePlan<<S::Model as Model>::Op>;
    type Tally = Counts;
    type Fault = durlog_vfs::FaultKind;

    fn command(&self) -> &str {
        &self.command
    }

    fn options(&self) -> &StoreOptions {
        &self.options
    }

    fn with_options(&self, options: StoreOptions) -> StoreScenario<S> {
        StoreScenario {
            open: Arc::clone(&self.open),
            command: self.command.clone(),
            preset: self.preset.clone(),
            steps: self.steps.clone(),
            alphabet: self.alphabet.clone(),
            options,
        }
    }

    fn limit_faults(&self, faults: &[durlog_vfs::FaultKind]) -> StoreOptions {
        StoreOptions {
            faults: Some(FaultList(faults.to_vec())),
            ..self.options.clone()
        }
    }

    /// The workload and the faults come from sub-seeds of their own, so
    /// that limiting the faults leaves every step as it was.
    fn draw(&self, seed: u64) -> Self::Plan {
        let seeds = SubSeeds::new(seed);
        let faults = self.faults_allowed().draw(&mut seeds.rng("faults"));
        let mut rng = seeds.rng("workload");
        let count = (self.options.steps).unwrap_or_else(|| rng.random_range(self.steps.clone()));
        let mut ops = Gen::new(seeds.rng("ops"));
        let steps = (0..count)
            .map(|_| match rng.random_range(0..100) {
                0..70 => Step::Apply {
                    op: S::Model::draw(&mut ops),
                    power_loss: rng.random_bool(0.3).then(|| draw_power_loss(&mut rng)),
                },
                70..88 => Step::PowerLoss(draw_power_loss(&mut rng)),
                _ => Step::Restart,
            })
            .collect();
        StorePlan {
            disk_seed: seeds.named("disk"),
            faults,
            steps,
        }
    }

    fn actions(&self, plan: &Self::Plan) -> usize {
        plan.steps.len()
    }

    fn faults(&self, plan: &Self::Plan) -> Vec<durlog_vfs::FaultKind> {
        plan.faults.enabled()
    }

    fn describe_faults(&self, plan: &Self::Plan) -> String {
        plan.faults.to_string()
    }

    fn run(&self, plan: &Self::Plan, keep: Option<&[bool]>, trace: bool) -> Outcome<Counts> {
        let vfs = durlog_vfs::SimVfs::with_faults(plan.disk_seed, plan.faults.clone());
        run::run_plan(&*self.open, vfs, plan, keep, trace, None)
    }
}
