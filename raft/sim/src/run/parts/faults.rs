//! What the faults did to the run: the power losses armed and not yet
//! fired, the store errors each node's process already answered for, the
//! nodes whose disks lost durable bytes (the f budget of the liveness
//! phase), and the excuse once a node's amnesia put the run outside
//! Raft's model.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub(in crate::run) struct Faults {
    /// Power losses armed: node -> how long it stays down.
    armed: BTreeMap<u64, u64>,
    /// Store errors seen per node: a new one ends the process.
    errors_seen: BTreeMap<u64, u64>,
    /// Nodes whose disk was damaged at rest, by the harness or by the
    /// disk's own faults.
    damaged: BTreeSet<u64>,
    /// Set once a node's amnesia is excused (see `act.rs`).
    excused: Option<String>,
}

/// How long a node stays down after a power loss nothing armed (one in
/// recovery, after the armed one fired).
const UNARMED_DOWN_MS: u64 = 100;

impl Faults {
    /// Arms a power loss of `node` for `down_ms`; false if one is armed
    /// already (the disk counts down one crash at a time).
    pub(in crate::run) fn arm_power_loss(&mut self, node: u64, down_ms: u64) -> bool {
        if self.armed.contains_key(&node) {
            return false;
        }
        self.armed.insert(node, down_ms);
        true
    }

    /// Node `id` lost power: how long it stays down.
    pub(in crate::run) fn power_lost(&mut self, id: u64) -> u64 {
        self.armed.remove(&id).unwrap_or(UNARMED_DOWN_MS)
    }

    /// The liveness phase: no power loss fires any more.
    pub(in crate::run) fn disarm_all(&mut self) {
        self.armed.clear();
    }

    /// Whether node `id`'s process saw store errors it did not answer for
    /// yet (`errors`: how many its probe counted in all).
    pub(in crate::run) fn new_errors(&self, id: u64, errors: u64) -> bool {
        errors > self.errors_seen.get(&id).copied().unwrap_or(0)
    }

    /// Node `id` answered for its first `errors` store errors (its process
    /// exited, or a new one started).
    pub(in crate::run) fn errors_answered(&mut self, id: u64, errors: u64) {
        self.errors_seen.insert(id, errors);
    }

    pub(in crate::run) fn damage(&mut self, id: u64) {
        self.damaged.insert(id);
    }

    pub(in crate::run) fn any_damaged(&self) -> bool {
        !self.damaged.is_empty()
    }

    pub(in crate::run) fn is_damaged(&self, id: u64) -> bool {
        self.damaged.contains(&id)
    }

    /// Puts the run outside Raft's model; the first excuse is the one kept.
    pub(in crate::run) fn excuse(&mut self, excuse: String) {
        self.excused.get_or_insert(excuse);
    }

    pub(in crate::run) fn excused(&self) -> Option<&str> {
        self.excused.as_deref()
    }

    pub(in crate::run) fn is_excused(&self) -> bool {
        self.excused.is_some()
    }
}
