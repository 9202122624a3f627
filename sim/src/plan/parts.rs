//! Where each part of a seed's plan draws its randomness.

use durlog_testbed::{SubSeeds, mix};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Where each part of a seed's plan draws its randomness: the workload and
/// the disk's faults from the seed's own ChaCha8 stream, the other parts
/// each from a sub-seed of its own, so that drawing more for one part (or
/// adding one) shifts no other. The parts below keep the derivations they
/// had before the testbed named sub-seeds (the seeds of
/// `corpus/sim-seeds.txt` and every campaign's digest depend on them, and
/// the test `sub_seeds_are_pinned` holds them); a part added from now on
/// takes [`Parts::named`].
#[derive(Clone, Copy, Debug)]
pub struct Parts {
    seed: u64,
}

impl Parts {
    pub fn new(seed: u64) -> Parts {
        Parts { seed }
    }

    /// The stream of the workload, the fault configuration, the tuning,
    /// and first of all the disk's own seed.
    pub fn plan_rng(self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.seed)
    }

    /// Whether `--canary` plants its failure in this seed (1 in 100), and
    /// before which step (of `steps`).
    pub fn canary(self, steps: u32) -> Option<usize> {
        mix(self.seed)
            .is_multiple_of(100)
            .then(|| (mix(self.seed ^ 1) % u64::from(steps.max(1))) as usize)
    }

    /// Who prepares the next segment, and how often.
    pub fn next_segment(self) -> u64 {
        mix(self.seed ^ 2)
    }

    /// The group window.
    pub fn group_window(self) -> u64 {
        mix(self.seed ^ 3)
    }

    /// The purges, truncations and retention policy.
    pub fn changes_rng(self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(mix(self.seed ^ 4))
    }

    /// A part added after these: its own named sub-seed.
    pub fn named(self, name: &str) -> u64 {
        SubSeeds::new(self.seed).named(name)
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::Parts;

    /// Every part's derivation pinned for seed 42: a change to one would
    /// move every seed's plan, and corpus/sim-seeds.txt with them.
    #[test]
    fn sub_seeds_are_pinned() {
        let parts = Parts::new(42);
        assert_eq!(parts.plan_rng().next_u64(), PLAN_FIRST);
        assert_eq!(parts.next_segment(), NEXT_SEGMENT);
        assert_eq!(parts.group_window(), GROUP_WINDOW);
        assert_eq!(parts.changes_rng().next_u64(), CHANGES_FIRST);
        // The disk of the followers' positions.
        assert_eq!(parts.named("consumer-disk"), CONSUMER_DISK);
        // Seed 29 is the first with a canary (README's example).
        assert_eq!(Parts::new(29).canary(1000), Some(CANARY_STEP));
        assert_eq!(parts.canary(1000), None);
    }

    // The first draw of the plan's stream is the disk's seed.
    const PLAN_FIRST: u64 = 0xae90_bfb5_395d_5ba1;
    const NEXT_SEGMENT: u64 = 0x369e_ae0b_0ca1_9112;
    const GROUP_WINDOW: u64 = 0x118e_846e_a93b_c949;
    const CHANGES_FIRST: u64 = 0xf560_fd8a_17d6_9e05;
    const CANARY_STEP: usize = 796;
    const CONSUMER_DISK: u64 = 0x7135_15ba_40ea_392c;
}
