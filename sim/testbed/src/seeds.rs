//! Seeds: the one number a run comes from, the sub-seeds of its parts,
//! the shards of a range, and the digest of a campaign.
//!
//! A run draws each part (the disk, the workload, the faults, each node of
//! a cluster) from a sub-seed of its own, named: adding a part, or drawing
//! more from one, never shifts what another draws, so old seeds keep
//! their meaning. [`SubSeeds::named`] hashes the seed with the part's
//! name; a test pins the value of every name a scenario uses, so that a
//! change to a derivation cannot pass unnoticed.

use std::ops::Range;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// SplitMix64's finaliser: a seed-to-seed mix with no state.
pub fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The sub-seeds of one seed's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubSeeds {
    seed: u64,
}

impl SubSeeds {
    pub fn new(seed: u64) -> SubSeeds {
        SubSeeds { seed }
    }

    pub fn seed(self) -> u64 {
        self.seed
    }

    /// The sub-seed of the part called `name`: the seed mixed with the
    /// name's FNV-1a hash, so that parts are independent and a new name
    /// takes nothing from the others.
    pub fn named(self, name: &str) -> u64 {
        mix(self.seed ^ mix(fnv1a(name.as_bytes())))
    }

    /// The sub-seed of part `index` of a family (`node`, 3: the fourth
    /// node's disk), independent of every other name and index.
    pub fn indexed(self, name: &str, index: u64) -> u64 {
        mix(self.named(name) ^ mix(index))
    }

    /// A ChaCha8 RNG for the part called `name`.
    pub fn rng(self, name: &str) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.named(name))
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3)
    })
}

/// The seeds of `range` that shard `index` of `count` takes: every
/// `count`-th, starting at the `index`-th.
pub fn shard_seeds(range: Range<u64>, index: u64, count: u64) -> impl Iterator<Item = u64> {
    range.skip(index as usize).step_by(count.max(1) as usize)
}

/// A campaign's digest: the seeds' trace digests folded in seed order.
/// The fold is not associative (each step mixes), so a campaign split
/// over shards keeps every seed's digest and a merge folds them again in
/// seed order.
pub fn fold_digests(seed_digests: impl IntoIterator<Item = u64>) -> u64 {
    seed_digests
        .into_iter()
        .fold(0, |digest, seed_digest| mix(digest ^ seed_digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64's published outputs for state 0 (the first three values
    /// its generator returns), from which `mix` must not drift.
    #[test]
    fn mix_is_splitmix64() {
        let outputs: Vec<u64> = (1..=3)
            .map(|k| mix(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(k - 1)))
            .collect();
        assert_eq!(
            outputs,
            [
                0xE220_A839_7B1D_CDAF,
                0x6E78_9E6A_A1B9_65F4,
                0x06C4_5D18_8009_454F
            ]
        );
    }

    /// Every derivation pinned (the values from an independent Python
    /// implementation of the same hashes): a change to one moves every
    /// seed's run.
    #[test]
    fn sub_seeds_are_pinned() {
        let seeds = SubSeeds::new(42);
        assert_eq!(fnv1a(b"disk"), 0xCA44_A367_578F_8A84);
        assert_eq!(seeds.named("disk"), 0x9686_152B_3317_B614);
        assert_eq!(seeds.named("workload"), 0x37CF_3324_2036_DD51);
        assert_eq!(seeds.indexed("node", 0), 0x22E1_90C3_6F8C_35FF);
        assert_eq!(seeds.indexed("node", 1), 0xE05E_9C12_32DE_B388);
    }

    #[test]
    fn parts_are_independent() {
        let seeds = SubSeeds::new(7);
        let names = ["disk", "workload", "faults", "network", "clients"];
        let mut values: Vec<u64> = names.iter().map(|name| seeds.named(name)).collect();
        values.extend((0..5).map(|index| seeds.indexed("node", index)));
        let mut unique = values.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), values.len(), "{values:x?}");
        assert_ne!(SubSeeds::new(8).named("disk"), seeds.named("disk"));
    }

    #[test]
    fn shards_take_every_nth_seed() {
        let shard: Vec<u64> = shard_seeds(10..20, 1, 4).collect();
        assert_eq!(shard, [11, 15, 19]);
        let all: Vec<u64> = (0..4)
            .flat_map(|index| shard_seeds(10..20, index, 4))
            .collect();
        assert_eq!(all.len(), 10);
    }
}
