//! What can go wrong: the kinds of fault [`SimVfs`](super::SimVfs) injects,
//! the per-run configuration that enables and weights them, and the record of
//! damage done to data that was already durable.
//!
//! A weight is a probability in `[0, 1]`; 0 means the fault is off. What one
//! draw decides differs per kind and is stated on each [`FaultKind`] variant.

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::str::FromStr;

use rand::{Rng, RngExt};

/// One kind of fault. The doc of each variant says what its weight is the
/// probability of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// At a crash, each unsynced dirty 4 KiB page survives with this
    /// probability, independently of the others (when off: none survives).
    LostUnsyncedPages,
    /// A crash fired by `crash_after_ops` during a `write_at` leaves a prefix
    /// of the write in the page cache with this probability (cut at a
    /// 512-byte sector boundary or at any byte, and half the time followed
    /// by up to one sector of garbage); otherwise (and when off) nothing of
    /// that write reaches the cache.
    TornWrite,
    /// At a crash, each create or remove not yet made durable by `sync_dir`
    /// takes effect with this probability (when off: creates vanish and
    /// removes are undone).
    LostDirEntry,
    /// At a crash, a file size not yet made durable by a sync (a truncate,
    /// an extension, an append) survives with this probability (when off:
    /// the durable size is restored).
    UnsyncedSizeChange,
    /// Advisory: the simulator's chance per run to call
    /// `SimVfs::flip_random_bit_at_rest`. `SimVfs` never fires it by itself.
    BitFlipAtRest,
    /// Each `read_at` that returns bytes flips one of them with this
    /// probability. The disk is not changed.
    BitFlipOnRead,
    /// Each `sync_data`, `sync_all` and `sync_dir` fails with EIO with this
    /// probability. Half the time a failed file sync also drops the dirty
    /// pages: they turn clean without becoming durable, so a later sync
    /// "succeeds" and a crash still loses them (Linux's fsync behaviour).
    FailedFsync,
    /// Each `write_at` writes a strict prefix (possibly empty) and fails with
    /// EIO, with this probability.
    ShortWrite,
    /// Each `write_at` fails with ENOSPC after writing nothing or a prefix,
    /// with this probability.
    NoSpace,
    /// Each `write_at` lands whole at another sector-aligned offset of the
    /// same file and returns `Ok`, with this probability; at most once in a
    /// `SimVfs`'s lifetime. Recorded in `SimVfs::damage`.
    MisdirectedWrite,
    /// Advisory: the simulator's chance per operation to crash. `SimVfs`
    /// counts every power loss under this kind but never crashes by itself.
    Crash,
    /// Each `read_at`, and each `open` of an existing file (read-only or
    /// read-write), fails with EIO with this probability, before it reads
    /// or opens anything; the disk is unchanged and a retry may succeed (a
    /// failing sector, a flaky cable). Opt-in: [`FaultConfig::all`] and
    /// [`FaultConfig::swarm`] leave it off, so that configurations drawn
    /// before it existed draw the same; [`FaultConfig::swarm_opt_in`]
    /// draws it too.
    ReadError,
    /// Each `write_at` whose length of bytes right after it are zeros
    /// inside the file (a preallocated tail) lands there a second time, the
    /// same bytes, and returns `Ok`, with this probability; at most once in
    /// a `SimVfs`'s lifetime: a write the device ran twice (a retried
    /// append, a duplicated write). The copy overwrites only zeros, so it
    /// is not listed in `SimVfs::damage`: a log must take it for the stale
    /// garbage it is. Opt-in, like `ReadError`.
    DuplicatedWrite,
}

impl FaultKind {
    /// Every kind, in the order `Display` of [`FaultConfig`] lists them.
    pub const ALL: &'static [FaultKind] = &[
        FaultKind::LostUnsyncedPages,
        FaultKind::TornWrite,
        FaultKind::LostDirEntry,
        FaultKind::UnsyncedSizeChange,
        FaultKind::BitFlipAtRest,
        FaultKind::BitFlipOnRead,
        FaultKind::FailedFsync,
        FaultKind::ShortWrite,
        FaultKind::NoSpace,
        FaultKind::MisdirectedWrite,
        FaultKind::Crash,
        FaultKind::ReadError,
        FaultKind::DuplicatedWrite,
    ];

    /// The kinds a caller must ask for by name (or through
    /// [`FaultConfig::swarm_opt_in`]): every other kind is in
    /// [`FaultKind::STANDARD`].
    pub const OPT_IN: &'static [FaultKind] = &[FaultKind::ReadError, FaultKind::DuplicatedWrite];

    /// Every kind but the opt-in ones: what [`FaultConfig::all`] enables
    /// and [`FaultConfig::swarm`] draws, in this order (which fixes the
    /// draws, and so every existing seed's configuration).
    pub const STANDARD: &'static [FaultKind] = &[
        FaultKind::LostUnsyncedPages,
        FaultKind::TornWrite,
        FaultKind::LostDirEntry,
        FaultKind::UnsyncedSizeChange,
        FaultKind::BitFlipAtRest,
        FaultKind::BitFlipOnRead,
        FaultKind::FailedFsync,
        FaultKind::ShortWrite,
        FaultKind::NoSpace,
        FaultKind::MisdirectedWrite,
        FaultKind::Crash,
    ];

    /// The number of kinds.
    pub const COUNT: usize = FaultKind::ALL.len();

    /// The kebab-case name used on command lines and in traces.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::LostUnsyncedPages => "lost-unsynced-pages",
            FaultKind::TornWrite => "torn-write",
            FaultKind::LostDirEntry => "lost-dir-entry",
            FaultKind::UnsyncedSizeChange => "unsynced-size-change",
            FaultKind::BitFlipAtRest => "bit-flip-at-rest",
            FaultKind::BitFlipOnRead => "bit-flip-on-read",
            FaultKind::FailedFsync => "failed-fsync",
            FaultKind::ShortWrite => "short-write",
            FaultKind::NoSpace => "no-space",
            FaultKind::MisdirectedWrite => "misdirected-write",
            FaultKind::Crash => "crash",
            FaultKind::ReadError => "read-error",
            FaultKind::DuplicatedWrite => "duplicated-write",
        }
    }

    /// The weight [`FaultConfig::all`] and [`FaultConfig::only`] give it:
    /// high for the outcomes of a crash (which only matter at crashes), low
    /// for faults drawn on every operation.
    pub fn default_weight(self) -> f64 {
        match self {
            FaultKind::LostUnsyncedPages => 0.5,
            FaultKind::TornWrite => 0.5,
            FaultKind::LostDirEntry => 0.5,
            FaultKind::UnsyncedSizeChange => 0.5,
            FaultKind::BitFlipAtRest => 0.1,
            FaultKind::BitFlipOnRead => 0.001,
            FaultKind::FailedFsync => 0.01,
            FaultKind::ShortWrite => 0.01,
            FaultKind::NoSpace => 0.005,
            FaultKind::MisdirectedWrite => 0.001,
            FaultKind::Crash => 0.01,
            FaultKind::ReadError => 0.002,
            FaultKind::DuplicatedWrite => 0.001,
        }
    }

    /// True for the kinds that can damage data that was already durable or
    /// acknowledged, and are therefore listed by `SimVfs::damage`.
    pub fn damages_durable_data(self) -> bool {
        matches!(self, FaultKind::BitFlipAtRest | FaultKind::MisdirectedWrite)
    }

    /// The weights swarm testing draws from: a crash outcome anywhere in
    /// 5%..95%, a per-operation fault spread over two orders of magnitude.
    /// Listed literally so that `Display` prints them short and every
    /// machine draws the same numbers (no `ln`/`powf`).
    fn swarm_weights(self) -> &'static [f64] {
        const CRASH_OUTCOME: &[f64] = &[0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95];
        const PER_OPERATION: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05];
        const RARE: &[f64] = &[0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005];
        // At most once a run: a higher weight makes it come early enough
        // that recovery meets it in most runs that enable it.
        const ONCE: &[f64] = &[0.001, 0.002, 0.005, 0.01, 0.02, 0.05];
        match self {
            FaultKind::LostUnsyncedPages
            | FaultKind::TornWrite
            | FaultKind::LostDirEntry
            | FaultKind::UnsyncedSizeChange
            | FaultKind::BitFlipAtRest => CRASH_OUTCOME,
            FaultKind::FailedFsync
            | FaultKind::ShortWrite
            | FaultKind::NoSpace
            | FaultKind::Crash => PER_OPERATION,
            FaultKind::BitFlipOnRead | FaultKind::ReadError => RARE,
            FaultKind::MisdirectedWrite | FaultKind::DuplicatedWrite => ONCE,
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = ParseFaultError;

    fn from_str(text: &str) -> Result<FaultKind, ParseFaultError> {
        FaultKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultKind::ALL.iter().map(|kind| kind.name()).collect();
                ParseFaultError(format!(
                    "unknown fault kind {text:?}: expected one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// A fault kind or fault configuration that did not parse; the message says
/// what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseFaultError(String);

impl fmt::Display for ParseFaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for ParseFaultError {}

/// Which faults are on in one run, and how likely each is.
///
/// Only kinds with a weight above 0 are stored, so two configurations that
/// enable the same faults with the same weights compare equal. `Display`
/// prints `torn-write=0.3,failed-fsync=0.02` (or `none`), and `FromStr`
/// reads that back exactly, as well as `all`, `none` and bare names (which
/// take the default weight).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Kind to weight in `(0, 1]`. Prefer [`FaultConfig::set`], which checks
    /// the range and drops zero weights.
    pub weights: BTreeMap<FaultKind, f64>,
}

impl FaultConfig {
    /// Every fault off: a crash leaves exactly the durable state.
    pub fn none() -> FaultConfig {
        FaultConfig::default()
    }

    /// Every fault on at its [`FaultKind::default_weight`], except the
    /// opt-in ones ([`FaultKind::OPT_IN`]).
    pub fn all() -> FaultConfig {
        FaultConfig::only(FaultKind::STANDARD)
    }

    /// Exactly `kinds` on, each at its default weight.
    pub fn only(kinds: &[FaultKind]) -> FaultConfig {
        let mut config = FaultConfig::none();
        for &kind in kinds {
            config.set(kind, kind.default_weight());
        }
        config
    }

    /// Swarm testing: each kind is on with probability 1/2, at a weight
    /// drawn from a spread that suits the kind. Uses only integer draws, so
    /// the same RNG state gives the same configuration on every machine.
    /// The opt-in kinds stay off ([`FaultConfig::swarm_opt_in`] draws
    /// them too).
    pub fn swarm(rng: &mut impl Rng) -> FaultConfig {
        let mut config = FaultConfig::none();
        for &kind in FaultKind::STANDARD {
            let on = rng.random_range(0..2u32) == 1;
            let choices = kind.swarm_weights();
            let weight = choices[rng.random_range(0..choices.len())];
            if on {
                config.set(kind, weight);
            }
        }
        config
    }

    /// [`FaultConfig::swarm`], then each opt-in kind drawn the same way:
    /// the standard kinds get exactly the weights `swarm` gives them from
    /// the same RNG state.
    pub fn swarm_opt_in(rng: &mut impl Rng) -> FaultConfig {
        let mut config = FaultConfig::swarm(rng);
        for &kind in FaultKind::OPT_IN {
            let on = rng.random_range(0..2u32) == 1;
            let choices = kind.swarm_weights();
            let weight = choices[rng.random_range(0..choices.len())];
            if on {
                config.set(kind, weight);
            }
        }
        config
    }

    /// This configuration with `kind` at `weight` (0 turns it off).
    pub fn with(mut self, kind: FaultKind, weight: f64) -> FaultConfig {
        self.set(kind, weight);
        self
    }

    /// Sets `kind` to `weight`; 0 turns it off.
    ///
    /// # Panics
    /// If `weight` is not in `[0, 1]`: a weight is a probability.
    pub fn set(&mut self, kind: FaultKind, weight: f64) {
        assert!(
            (0.0..=1.0).contains(&weight),
            "fault weight {weight} for {kind} is not a probability in [0, 1]"
        );
        if weight == 0.0 {
            self.weights.remove(&kind);
        } else {
            self.weights.insert(kind, weight);
        }
    }

    /// True if `kind` has a weight above 0.
    pub fn is_enabled(&self, kind: FaultKind) -> bool {
        self.weight(kind) > 0.0
    }

    /// The weight of `kind`, 0 when off.
    pub fn weight(&self, kind: FaultKind) -> f64 {
        self.weights.get(&kind).copied().unwrap_or(0.0)
    }

    /// The enabled kinds, in [`FaultKind::ALL`] order.
    pub fn enabled(&self) -> Vec<FaultKind> {
        self.weights.keys().copied().collect()
    }

    /// The weights as an array indexed by kind, for the hot path.
    pub(crate) fn weight_table(&self) -> [f64; FaultKind::COUNT] {
        let mut table = [0.0; FaultKind::COUNT];
        for (&kind, &weight) in &self.weights {
            table[kind.index()] = weight;
        }
        table
    }
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.weights.is_empty() {
            return f.write_str("none");
        }
        for (position, (kind, weight)) in self.weights.iter().enumerate() {
            if position > 0 {
                f.write_str(",")?;
            }
            // `{}` prints the shortest text that parses back to the same f64.
            write!(f, "{kind}={weight}")?;
        }
        Ok(())
    }
}

impl FromStr for FaultConfig {
    type Err = ParseFaultError;

    fn from_str(text: &str) -> Result<FaultConfig, ParseFaultError> {
        let text = text.trim();
        match text {
            "" | "none" => return Ok(FaultConfig::none()),
            "all" => return Ok(FaultConfig::all()),
            _ => {}
        }
        let mut config = FaultConfig::none();
        for item in text.split(',') {
            let item = item.trim();
            let (name, weight) = match item.split_once('=') {
                None => {
                    let kind: FaultKind = item.parse()?;
                    (kind, kind.default_weight())
                }
                Some((name, weight)) => {
                    let kind: FaultKind = name.trim().parse()?;
                    let weight: f64 = weight.trim().parse().map_err(|_| {
                        ParseFaultError(format!("weight {weight:?} of {kind} is not a number"))
                    })?;
                    if !(0.0..=1.0).contains(&weight) {
                        return Err(ParseFaultError(format!(
                            "weight {weight} of {kind} is not a probability in [0, 1]"
                        )));
                    }
                    (kind, weight)
                }
            };
            config.set(name, weight);
        }
        Ok(config)
    }
}

/// A fault that can have damaged data that was already durable (or
/// acknowledged): a simulator excuses a `Corrupt` refusal only if one of
/// these touched the file it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The file, by the name it reports when [`SimVfs::damage`] is called:
    /// its newest visible name, so it follows renames (or its last name,
    /// once it has none).
    ///
    /// [`SimVfs::damage`]: crate::SimVfs::damage
    pub path: PathBuf,
    /// The first byte damaged: the flipped byte, or where a misdirected
    /// write landed.
    pub offset: u64,
    /// How many bytes from `offset` may be damaged (1 for a bit flip).
    pub len: u64,
    /// For a misdirected write, where it was meant to go.
    pub intended_offset: Option<u64>,
    /// For a bit flip, which bit of the byte at `offset` (0 = least
    /// significant).
    pub bit: Option<u8>,
    /// What happened.
    pub kind: FaultKind,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} in {} at offset {} (+{} bytes)",
            self.kind,
            self.path.display(),
            self.offset,
            self.len
        )?;
        if let Some(bit) = self.bit {
            write!(f, ", bit {bit}")?;
        }
        if let Some(intended) = self.intended_offset {
            write!(f, ", meant for offset {intended}")?;
        }
        Ok(())
    }
}

/// The error payload of every error `SimVfs` makes up (as opposed to
/// argument errors such as `NotFound`): lets a caller tell an injected fault
/// from a bug with [`injected_fault`].
#[derive(Debug)]
pub(crate) struct InjectedError {
    pub(crate) fault: FaultKind,
    pub(crate) message: String,
}

impl fmt::Display for InjectedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (injected {})", self.message, self.fault)
    }
}

impl Error for InjectedError {}

pub(crate) fn injected(kind: io::ErrorKind, fault: FaultKind, message: String) -> io::Error {
    io::Error::new(kind, InjectedError { fault, message })
}

/// Which fault caused `error`, if `SimVfs` made it up: `Some(Crash)` for
/// every error from a halted disk or a handle that died in a crash, the
/// injected kind for an injected failure, `None` for anything else (a
/// missing file, a read-only handle, an error of the real file system).
pub fn injected_fault(error: &io::Error) -> Option<FaultKind> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<InjectedError>())
        .map(|inner| inner.fault)
}
