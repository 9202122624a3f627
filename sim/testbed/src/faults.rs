//! Which faults a check injects: presets with one-line meanings, each a
//! promise a store may or may not make.
//!
//! The simulated disk's fault model is documented on
//! [`durlog_vfs::sim`]; a preset picks kinds from it. Every run of a check
//! draws its own weights for the kinds of its preset (swarm testing: each
//! kind but the power loss itself on in half the seeds, at a weight drawn
//! from a spread), unless [`Faults::fixed`] asks for each kind's default
//! weight in every run. A store that does not checksum its data cannot
//! tell a flipped bit from a value, so [`Faults::crash_only`] injects
//! nothing it could not survive by ordering its writes and syncs right; a
//! failure under it is a bug, not a fault the design never claimed to
//! survive.

use std::fmt;

use durlog_vfs::{FaultConfig, FaultKind};
use rand_chacha::ChaCha8Rng;

/// A fault preset: the kinds a run may inject, and how their weights are
/// drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Faults {
    kinds: Vec<FaultKind>,
    swarm: bool,
}

/// What a power loss does to what was not yet synced: lost pages, torn
/// writes, lost directory entries, undone size changes.
const CRASH: [FaultKind; 5] = [
    FaultKind::Crash,
    FaultKind::LostUnsyncedPages,
    FaultKind::TornWrite,
    FaultKind::LostDirEntry,
    FaultKind::UnsyncedSizeChange,
];

impl Faults {
    /// Power loss, and what it does to unsynced data (pages lost in any
    /// subset, writes torn at any byte, directory entries and size changes
    /// not yet synced lost): what every store must survive.
    pub fn crash_only() -> Faults {
        Faults::of(&CRASH)
    }

    /// [`Faults::crash_only`], and syncs that fail with EIO and may drop
    /// the dirty pages they were to write (Linux's fsync behaviour): what a
    /// store must survive if it returns errors rather than panicking.
    pub fn crash_and_fsync_errors() -> Faults {
        let mut kinds = CRASH.to_vec();
        kinds.push(FaultKind::FailedFsync);
        Faults::of(&kinds)
    }

    /// Every fault the disk has: the above, short writes, a full disk
    /// (ENOSPC), a write misdirected to another offset, bits flipped at
    /// rest and on read, reads that fail: for a store that checksums what
    /// it reads and refuses what it cannot trust.
    pub fn all() -> Faults {
        Faults::of(FaultKind::ALL)
    }

    /// No fault and no power loss: the store's logic alone.
    pub fn none() -> Faults {
        Faults::of(&[])
    }

    /// Exactly these kinds.
    pub fn of(kinds: &[FaultKind]) -> Faults {
        let mut kinds = kinds.to_vec();
        kinds.sort();
        kinds.dedup();
        Faults { kinds, swarm: true }
    }

    /// This preset with `kind` too.
    pub fn with(self, kind: FaultKind) -> Faults {
        let mut kinds = self.kinds;
        kinds.push(kind);
        Faults::of(&kinds).swarmed(self.swarm)
    }

    /// This preset without `kind`.
    pub fn without(self, kind: FaultKind) -> Faults {
        let kinds: Vec<FaultKind> = self.kinds.into_iter().filter(|&k| k != kind).collect();
        Faults::of(&kinds).swarmed(self.swarm)
    }

    /// Each kind at its default weight in every run, instead of weights
    /// drawn per run.
    pub fn fixed(self) -> Faults {
        self.swarmed(false)
    }

    fn swarmed(mut self, swarm: bool) -> Faults {
        self.swarm = swarm;
        self
    }

    /// The kinds, in [`FaultKind::ALL`] order.
    pub fn kinds(&self) -> &[FaultKind] {
        &self.kinds
    }

    /// Whether runs draw their own weights.
    pub fn is_swarm(&self) -> bool {
        self.swarm
    }

    /// The configuration of one run. Every kind's draw is made whatever the
    /// preset, and the preset applied after, so that limiting a run to
    /// fewer kinds (a shrink does) leaves the others' weights as they were.
    /// A power loss is never swarmed away: it is what a check is for.
    pub fn draw(&self, rng: &mut ChaCha8Rng) -> FaultConfig {
        let drawn = FaultConfig::swarm_opt_in(rng);
        let mut config = FaultConfig::none();
        for &kind in &self.kinds {
            let weight = if !self.swarm || kind == FaultKind::Crash {
                kind.default_weight()
            } else {
                drawn.weight(kind)
            };
            config.set(kind, weight);
        }
        config
    }
}

impl Default for Faults {
    /// [`Faults::crash_only`].
    fn default() -> Faults {
        Faults::crash_only()
    }
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kinds.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.kinds.iter().map(|kind| kind.name()).collect();
        write!(f, "{}", names.join(","))?;
        if !self.swarm {
            f.write_str(" (fixed weights)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_smaller_preset_keeps_the_weights_of_the_kinds_it_keeps() {
        for seed in 0..200 {
            let all = Faults::all().draw(&mut ChaCha8Rng::seed_from_u64(seed));
            let crash = Faults::crash_only().draw(&mut ChaCha8Rng::seed_from_u64(seed));
            assert!(crash.is_enabled(FaultKind::Crash), "seed {seed}");
            for kind in crash.enabled() {
                assert_eq!(crash.weight(kind), all.weight(kind), "seed {seed} {kind}");
            }
            assert!(crash.enabled().iter().all(|kind| CRASH.contains(kind)));
        }
    }

    #[test]
    fn fixed_weights_are_the_defaults() {
        let config = Faults::crash_and_fsync_errors()
            .fixed()
            .draw(&mut ChaCha8Rng::seed_from_u64(1));
        assert_eq!(config.enabled().len(), 6);
        assert_eq!(config.weight(FaultKind::FailedFsync), 0.01);
    }
}
