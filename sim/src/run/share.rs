//! What the rest of a run depends on at a power loss, outside the disk's
//! image: the explorer (`crate::exhaust`) judges two states once when
//! their images and these digests agree, wherever in the workload they
//! were reached, and `exhaust --share verify` demands that such states be
//! judged alike.
//!
//! Leaving a field out would let the explorer skip a state that differs;
//! putting one in that does not matter only costs states judged twice. So
//! each struct is taken apart whole: a field added later does not compile
//! until it is sorted into one kind or the other.

use std::hash::{Hash, Hasher};

use durlog_vfs::SimVfs;

use super::node::Node;
use super::{World, follow};

impl World<'_> {
    /// The digest, or none while subscribers or followers of the files
    /// are in the run (their positions and what they were told are not
    /// digested: such states are judged at their own fault point only).
    pub(super) fn runner_digest(&self) -> Option<u64> {
        let World {
            plan: _,
            node,
            oracle,
            pending,
            busy,
            commits,
            subscribers,
            ended,
            final_reopen,
            result,
            trace: _,
            on_power_loss: _,
            step,
        } = self;
        if !follow::lock(&node.followers).list.is_empty() || !node.twins.is_idle() {
            return None;
        }
        let mut state = Fold::default();
        (step, final_reopen, ended, commits, subscribers).hash(&mut state);
        // The only outcome of the run so far that changes what comes next.
        result.canary_planted.hash(&mut state);
        pending
            .values()
            .for_each(|submitted| submitted.hash(&mut state));
        busy.hash(&mut state);
        node.hash_state(&mut state);
        oracle.hash_judging_state(&mut state);
        Some(state.finish())
    }
}

impl Node {
    /// The node's state apart from the disk's image and the open log
    /// (none at a power loss): the clock, the quota, the directory, and
    /// the disk's record of its damage, which excuses may cite later.
    fn hash_state(&self, state: &mut impl Hasher) {
        let Node {
            vfs,
            log: _,
            clock,
            failpoint_armed,
            max_bytes,
            before_open,
            dir,
            generation,
            followers: _,
            twins: _,
            unsure_index_files,
        } = self;
        clock.ticks().hash(state);
        failpoint_armed
            .load(std::sync::atomic::Ordering::SeqCst)
            .hash(state);
        (max_bytes, before_open, dir, generation).hash(state);
        unsure_index_files.hash(state);
        hash_evidence(vfs, state);
    }
}

/// The disk's damage and duplicated writes: what the oracle's evidence
/// reads from the disk besides its bytes. Where and what, not when (the
/// operation counts differ between fault points that reach one state).
fn hash_evidence(vfs: &SimVfs, state: &mut impl Hasher) {
    for damage in vfs.damage() {
        let durlog_vfs::Damage {
            path,
            offset,
            len,
            intended_offset,
            bit,
            kind,
        } = damage;
        (path, offset, len, intended_offset, bit, kind).hash(state);
    }
    for copy in vfs.duplicated_writes() {
        (&copy.path, copy.offset, copy.len, copy.kind).hash(state);
    }
}

/// A hasher for the digest: words taken round-robin by four lanes, each a
/// bijection of its lane per word (xor, an odd multiply, a rotation), so
/// inputs of one length that differ in one word never meet, and the
/// lanes run side by side. Std's SipHash took 6% of `exhaust`'s time on
/// the model's records alone; no key is needed against inputs that are
/// not chosen by an adversary.
#[derive(Default)]
struct Fold {
    lanes: [u64; 4],
    words: u64,
}

impl Fold {
    fn word(&mut self, word: u64) {
        let lane = &mut self.lanes[(self.words & 3) as usize];
        *lane = step(*lane, word);
        self.words += 1;
    }
}

/// One word into a lane: a bijection of the lane for each word.
fn step(lane: u64, word: u64) -> u64 {
    (lane ^ word)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(29)
}

impl Hasher for Fold {
    fn write(&mut self, bytes: &[u8]) {
        let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        // Whole blocks of four words while the lanes are in step: each
        // lane takes its word, with no index to compute.
        let mut blocks = bytes.chunks_exact(32);
        if self.words & 3 == 0 {
            for block in &mut blocks {
                for (lane, bytes) in self.lanes.iter_mut().zip(block.chunks_exact(8)) {
                    *lane = step(*lane, word(bytes));
                }
                self.words += 4;
            }
        }
        let bytes = if self.words & 3 == 0 {
            blocks.remainder()
        } else {
            bytes
        };
        let mut words = bytes.chunks_exact(8);
        for bytes in &mut words {
            self.word(word(bytes));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            // The count of bytes in the top byte: "ab" is not "ab\0".
            let mut word = [0; 8];
            word[..rest.len()].copy_from_slice(rest);
            word[7] = rest.len() as u8;
            self.word(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.word(value);
    }

    fn finish(&self) -> u64 {
        let mix = durlog_testbed::mix;
        (self.lanes.iter()).fold(mix(self.words), |digest, &lane| mix(digest ^ lane))
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{Hash, Hasher};

    use super::Fold;

    fn digest(value: impl Hash) -> u64 {
        let mut state = Fold::default();
        value.hash(&mut state);
        state.finish()
    }

    /// Values that differ by one byte, by a byte moved, or by a byte more
    /// have distinct digests.
    #[test]
    fn near_values_have_distinct_digests() {
        let base: Vec<u8> = (0..64).collect();
        let mut seen = std::collections::BTreeSet::new();
        assert!(seen.insert(digest(&base)));
        for index in 0..base.len() {
            let mut changed = base.clone();
            changed[index] ^= 1;
            assert!(seen.insert(digest(&changed)), "byte {index} flipped");
            let mut shorter = base.clone();
            shorter.truncate(index);
            assert!(seen.insert(digest(&shorter)), "{index} bytes");
        }
        assert_ne!(digest((1u64, 2u64)), digest((2u64, 1u64)));
        assert_ne!(digest("ab"), digest("ab\0"));
        // Four words at a time is the same as one at a time, in step or
        // not.
        for offset in 0..5 {
            let (mut blocks, mut words) = (Fold::default(), Fold::default());
            for state in [&mut blocks, &mut words] {
                (0..offset).for_each(|word| state.write_u64(word));
            }
            blocks.write(&base);
            base.chunks(8).for_each(|bytes| words.write(bytes));
            assert_eq!(blocks.finish(), words.finish(), "{offset} words before");
        }
        let mut raw = (Fold::default(), Fold::default());
        raw.0.write(b"ab");
        raw.1.write(b"ab\0");
        assert_ne!(raw.0.finish(), raw.1.finish());
    }
}
