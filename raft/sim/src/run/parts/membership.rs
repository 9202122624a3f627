//! The membership as the harness last asked for it (what the nodes hold
//! is in their metrics), and whether the cluster's `initialize` was
//! taken.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use openraft::{BasicNode, Raft};

use crate::config::SimConfig;
use crate::exec::{Executor, HARNESS};

const NS_PER_MS: u64 = 1_000_000;

/// How long the operator waits for an `initialize` to be taken before
/// asking again.
const INITIALIZE_RETRY_NS: u64 = 200 * NS_PER_MS;

/// Voters a removal leaves at least: one fault keeps a quorum.
const VOTERS_MIN: usize = 3;

pub(in crate::run) struct Membership {
    voters: Vec<u64>,
    learners: Vec<u64>,
    /// Set by the `initialize` task once one was taken (or refused as done
    /// already).
    initialized: Arc<AtomicBool>,
    /// When the harness last asked for an `initialize`.
    initialize_asked_ns: u64,
}

impl Membership {
    /// Voters 1 to `voters`, not yet initialized.
    pub(in crate::run) fn new(voters: u64) -> Membership {
        Membership {
            voters: (1..=voters).collect(),
            learners: Vec::new(),
            initialized: Arc::default(),
            initialize_asked_ns: 0,
        }
    }

    pub(in crate::run) fn voters(&self) -> &[u64] {
        &self.voters
    }

    /// Whether the harness ever made `id` a voter or a learner.
    pub(in crate::run) fn knows(&self, id: u64) -> bool {
        self.voters.contains(&id) || self.learners.contains(&id)
    }

    pub(in crate::run) fn add_learner(&mut self, id: u64) {
        self.learners.push(id);
    }

    /// Makes learner `id` a voter; false if it is no learner.
    pub(in crate::run) fn promote(&mut self, id: u64) -> bool {
        if !self.learners.contains(&id) {
            return false;
        }
        self.learners.retain(|&learner| learner != id);
        self.voters.push(id);
        true
    }

    /// Removes voter `id`; false if it is no voter or too few would stay.
    pub(in crate::run) fn remove_voter(&mut self, id: u64) -> bool {
        if !self.voters.contains(&id) || self.voters.len() <= VOTERS_MIN {
            return false;
        }
        self.voters.retain(|&voter| voter != id);
        true
    }

    /// Whether more of the voters' disks were damaged than f of them
    /// allows (removals and promotions change f).
    pub(in crate::run) fn damaged_beyond_f(&self, is_damaged: impl Fn(u64) -> bool) -> bool {
        let damaged = self.voters.iter().filter(|&&id| is_damaged(id)).count();
        damaged > (self.voters.len() - 1) / 2
    }

    /// The voters as each configuration of a view, for a cluster with no
    /// node running to hold one.
    pub(in crate::run) fn as_view(&self) -> Vec<BTreeSet<u64>> {
        vec![self.voters.iter().copied().collect()]
    }

    /// Asks `raft` to initialize the cluster with every voter.
    pub(in crate::run) fn initialize(&self, exec: &Executor, raft: Raft<SimConfig>) {
        let members: BTreeMap<u64, BasicNode> = self
            .voters
            .iter()
            .map(|&id| (id, BasicNode::default()))
            .collect();
        let initialized = self.initialized.clone();
        exec.spawn_as(HARNESS, async move {
            let done = match raft.initialize(members).await {
                Ok(()) => true,
                // NotAllowed: some node holds a membership already.
                Err(openraft::error::RaftError::APIError(_)) => true,
                Err(_) => false,
            };
            if done {
                initialized.store(true, Ordering::Relaxed);
            }
        });
    }

    /// Whether the operator asks for an `initialize` again at `now_ns`:
    /// none was taken yet, and the last ask is old enough.
    pub(in crate::run) fn initialize_due(&mut self, now_ns: u64) -> bool {
        if self.initialized.load(Ordering::Relaxed)
            || now_ns < self.initialize_asked_ns + INITIALIZE_RETRY_NS
        {
            return false;
        }
        self.initialize_asked_ns = now_ns;
        true
    }
}
