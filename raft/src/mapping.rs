//! Log index ↔ durlog seq: one record per Raft entry, so the two advance
//! together, and one [`Anchor`] says where they meet.
//!
//! A fresh store has the anchor (seq 1, index 0): entry `i` is record
//! `i + 1`. durlog's seqs are dense and never skip, but Raft's indexes may,
//! at a point where the log holds no entry: a purge past the last entry
//! (openraft does one after installing a snapshot) leaves the next entry at
//! `purged + 1` while the next record is still `last_seq + 1`, and a log
//! with no entry may receive its first at any index (openraft's storage
//! suite does so). Only then does the anchor move, to (`last_seq + 1`, the
//! next entry's index); every record before it is purged in Raft's eyes, so
//! no entry is read through an old anchor again. A truncation never moves
//! it: it removes the records after some seq, and openraft never truncates
//! a purged entry, so the records it keeps and the ones appended after it
//! keep their places.
//!
//! The anchor is kept in `raft.meta` (see `meta`), saved whenever it
//! moves: by the purge that moves it, in the same file write, or before
//! the first record of an append that starts a log past its end. Records
//! before the anchor hold no readable entry; Open checks the last record's
//! entry against it.

use serde::{Deserialize, Serialize};

/// The record `seq` holds the entry of index `index`; later records hold
/// the following indexes, one each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// A durlog seq (1-based).
    pub seq: u64,
    /// The Raft log index of the entry in that record.
    pub index: u64,
}

impl Default for Anchor {
    fn default() -> Anchor {
        Anchor { seq: 1, index: 0 }
    }
}

impl Anchor {
    /// The seq of the record holding entry `index`. Asserts that the entry
    /// is at or after the anchor: the store never asks for one before it
    /// (those are purged).
    pub fn seq_of(self, index: u64) -> u64 {
        assert!(
            index >= self.index,
            "index {index} is before the anchor {self:?}: it was purged"
        );
        self.seq + (index - self.index)
    }

    /// The index of the entry in record `seq`, if the record is at or after
    /// the anchor (records before it were purged with their indexes).
    pub fn index_of(self, seq: u64) -> Option<u64> {
        seq.checked_sub(self.seq).map(|offset| self.index + offset)
    }

    /// The anchor of a log whose last record is `last_seq` and whose next
    /// entry, in the next record, has index `next_index`.
    pub fn next(last_seq: u64, next_index: u64) -> Anchor {
        Anchor {
            seq: last_seq + 1,
            index: next_index,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Anchor;

    #[test]
    fn a_fresh_anchor_puts_index_zero_in_seq_one() {
        let anchor = Anchor::default();
        assert_eq!(anchor.seq_of(0), 1);
        assert_eq!(anchor.seq_of(9), 10);
        assert_eq!(anchor.index_of(1), Some(0));
        assert_eq!(anchor.index_of(0), None);
    }

    #[test]
    fn a_purge_past_the_end_skips_indexes_but_not_seqs() {
        // Records 1..=3 hold indexes 0..=2; a purge up to index 9.
        let anchor = Anchor::next(3, 10);
        assert_eq!(anchor.seq_of(10), 4);
        assert_eq!(anchor.index_of(4), Some(10));
        assert_eq!(anchor.index_of(3), None, "purged records have no index");
    }

    #[test]
    #[should_panic(expected = "before the anchor")]
    fn asking_for_a_purged_index_is_a_bug() {
        Anchor::next(3, 10).seq_of(5);
    }
}
