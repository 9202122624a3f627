//! The checkers, run after every instant of simulated time on what the
//! probes recorded since the last instant and on each node's metrics:
//!
//! - **Election safety**: every leader was elected by a quorum of every
//!   configuration of its membership (the votes granted to it, as the
//!   network carried them, and its own). openraft 0.9's leader ids are
//!   (term, node): a node may grant a vote to a higher node id in the term
//!   it already voted in, so two leaders of one term are legal; their
//!   entries differ in log id, and log matching keeps them apart.
//! - **Log matching**: two entries with the same index and log id carry the
//!   same payload, and the entries before them have the same log id (each
//!   appended entry checked against every earlier one with its id).
//! - **Leader completeness**: a node seen leading for the first time in a
//!   term holds every entry known committed (applied anywhere) past its
//!   purge point.
//! - **State-machine safety**: every application of index `i`, by any
//!   node, is of the same entry; a node applies indexes in order; the
//!   response is the one a replay of the committed prefix gives.
//! - **Durability**: after a restart, a node's log holds every entry it
//!   claimed durable (its store's append returned), or its purge point
//!   covers it; nothing a returned truncation removed came back; its vote
//!   did not go back.
//! - **Restart**: a node's state machine, after a restart or a snapshot
//!   install, holds exactly the replay of the committed prefix it claims.
//!
//! The committed log itself (the first application of each index) is the
//! model the client history is checked against (`history.rs`).

use std::collections::BTreeMap;

use durlog_raft::events::{Applied as MachineState, EventResponse};
use openraft::{EntryPayload, LogId, Vote};

use crate::probe::{EntryKey, MachineEvent, ProbeState};

/// A property broken, in words that name the node, the index and the ids.
pub type Violation = String;

/// The committed prefix replayed: each index's response and the streams'
/// versions after it.
#[derive(Debug, Default)]
pub struct Model {
    /// The first application seen of each index.
    pub committed: BTreeMap<u64, EntryKey>,
    /// Replayed responses by index (contiguous from the first index).
    pub responses: BTreeMap<u64, EventResponse>,
    /// Versions after each replayed index.
    pub versions: BTreeMap<u64, BTreeMap<String, u64>>,
    replayed: MachineState,
    /// Client operation -> the index it committed at.
    pub op_index: BTreeMap<u64, u64>,
    pending: BTreeMap<u64, openraft::Entry<crate::config::SimConfig>>,
}

impl Model {
    /// Adds the committed entry at its index (first sighting) and replays
    /// as far as the committed prefix is contiguous.
    fn commit(&mut self, applied: &crate::probe::Applied) -> Result<(), Violation> {
        let index = applied.key.log_id.index;
        if let Some(known) = self.committed.get(&index) {
            if known.log_id != applied.key.log_id || known.payload != applied.key.payload {
                return Err(format!(
                    "state-machine safety: index {index} applied as {} here, as {} before",
                    applied.key.log_id, known.log_id
                ));
            }
            return Ok(());
        }
        if let Some(op) = applied.key.op
            && let Some(&other) = self.op_index.get(&op)
        {
            return Err(format!(
                "client write op {op} committed twice: at index {other} and at {index}"
            ));
        }
        if let Some(op) = applied.key.op {
            self.op_index.insert(op, index);
        }
        self.committed.insert(index, applied.key);
        self.pending.insert(index, applied.entry.clone());
        self.replay();
        Ok(())
    }

    fn next_to_replay(&self) -> u64 {
        self.replayed.last_applied.map_or(0, |id| id.index + 1)
    }

    fn replay(&mut self) {
        loop {
            let next = self.next_to_replay();
            let Some(entry) = self.pending.remove(&next) else {
                return;
            };
            let response = self.replayed.apply(entry);
            self.responses.insert(next, response);
            self.versions.insert(next, self.replayed.versions.clone());
        }
    }

    /// The streams' versions once the committed prefix up to `index` is
    /// applied, if the replay got there.
    pub fn versions_at(&self, index: Option<u64>) -> Option<BTreeMap<String, u64>> {
        match index {
            None => Some(BTreeMap::new()),
            Some(index) => self.versions.get(&index).cloned(),
        }
    }
}

/// An entry as first seen: its payload, and the log id before it.
type FirstSeen = (u64, Option<LogId<u64>>);

/// Per node, what the checkers remember between instants.
#[derive(Debug, Default)]
struct Seen {
    last_applied: Option<u64>,
}

/// Every checker's state.
#[derive(Debug, Default)]
pub struct Checker {
    pub model: Model,
    /// Every (term, node) seen leading.
    pub leaders: std::collections::BTreeSet<(u64, u64)>,
    /// (index, log id) -> (payload, previous log id if known).
    entries: BTreeMap<(u64, LogId<u64>), FirstSeen>,
    seen: BTreeMap<u64, Seen>,
}

impl Checker {
    /// Election safety and leader completeness for `node`, which metrics
    /// show leading in `term` with `configs` as its membership, elected by
    /// `grants`. Returns true if it is new as that leader.
    pub fn leader(
        &mut self,
        node: u64,
        term: u64,
        configs: &[std::collections::BTreeSet<u64>],
        grants: &std::collections::BTreeSet<u64>,
        probe: &ProbeState,
    ) -> Result<bool, Violation> {
        if !self.leaders.insert((term, node)) {
            return Ok(false);
        }
        for config in configs {
            let votes = config
                .iter()
                .filter(|&&voter| voter == node || grants.contains(&voter))
                .count();
            // A single-voter configuration elects itself.
            if votes * 2 <= config.len() {
                return Err(format!(
                    "election safety: node {node} leads in term {term} with the votes of \
                     {grants:?} (and its own), not a majority of {config:?}"
                ));
            }
        }
        let after_purged = probe.last_purged.map_or(0, |id| id.index + 1);
        for (&index, committed) in self.model.committed.range(after_purged..) {
            match probe.log.get(&index) {
                Some(held) if held.log_id == committed.log_id => {}
                held => {
                    return Err(format!(
                        "leader completeness: node {node}, leading in term {term}, holds {:?} at \
                         index {index}, where {} was committed",
                        held.map(|key| key.log_id),
                        committed.log_id
                    ));
                }
            }
        }
        Ok(true)
    }

    /// Log matching for the entries `node` appended since the last look.
    pub fn appended(&mut self, node: u64, probe: &mut ProbeState) -> Result<(), Violation> {
        for (key, prev) in std::mem::take(&mut probe.new_entries) {
            let index = key.log_id.index;
            match self.entries.get_mut(&(index, key.log_id)) {
                None => {
                    self.entries
                        .insert((index, key.log_id), (key.payload, prev));
                }
                Some((payload, known_prev)) => {
                    if *payload != key.payload {
                        return Err(format!(
                            "log matching: node {node} holds another payload for {} at index {index}",
                            key.log_id
                        ));
                    }
                    match (known_prev.as_ref(), prev) {
                        (Some(known), Some(prev)) if *known != prev => {
                            return Err(format!(
                                "log matching: node {node} holds {prev} before {} at index {index}, \
                                 another node {known}",
                                key.log_id
                            ));
                        }
                        (None, Some(prev)) => *known_prev = Some(prev),
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// State-machine safety for what `node`'s state machine did since the
    /// last look, in order; returns how many entries were applied.
    pub fn applied(&mut self, node: u64, probe: &mut ProbeState) -> Result<u64, Violation> {
        let mut count = 0;
        for event in std::mem::take(&mut probe.machine) {
            match event {
                MachineEvent::Installed(meta, state) => self.installed(node, &meta, &state)?,
                MachineEvent::Applied(applied) => {
                    count += 1;
                    self.applied_one(node, &applied)?;
                }
            }
        }
        Ok(count)
    }

    fn installed(
        &mut self,
        node: u64,
        meta: &openraft::SnapshotMeta<u64, openraft::BasicNode>,
        state: &MachineState,
    ) -> Result<(), Violation> {
        let index = meta.last_log_id.map(|id| id.index);
        let seen = self.seen.entry(node).or_default();
        if index < seen.last_applied {
            return Err(format!(
                "state-machine safety: node {node} installed a snapshot at {index:?} over \
                 applied {:?}",
                seen.last_applied
            ));
        }
        seen.last_applied = index;
        match self.model.versions_at(index) {
            Some(expected) if expected != state.versions => Err(format!(
                "snapshot install: node {node}'s state at {index:?} is {:?}, the committed \
                 prefix gives {expected:?}",
                state.versions
            )),
            _ => Ok(()),
        }
    }

    fn applied_one(&mut self, node: u64, applied: &crate::probe::Applied) -> Result<(), Violation> {
        let index = applied.key.log_id.index;
        let seen = self.seen.entry(node).or_default();
        let expected_next = seen.last_applied.map_or(0, |last| last + 1);
        if index != expected_next {
            return Err(format!(
                "state-machine safety: node {node} applied index {index} after {:?}",
                seen.last_applied
            ));
        }
        seen.last_applied = Some(index);
        self.model.commit(applied)?;
        match self.model.responses.get(&index) {
            Some(expected)
                if *expected != applied.response
                    && !matches!(applied.entry.payload, EntryPayload::Membership(_)) =>
            {
                Err(format!(
                    "state-machine safety: node {node} answered {:?} at index {index}, the \
                     replay {expected:?}",
                    applied.response
                ))
            }
            _ => Ok(()),
        }
    }

    /// After `node` restarted: its recovered log (in `probe`, just reset)
    /// against what it claimed before (`claims`, `vote`), and its state
    /// machine (`state`) against the committed prefix.
    pub fn restarted(
        &mut self,
        node: u64,
        probe: &ProbeState,
        claims: &BTreeMap<u64, LogId<u64>>,
        removed: &BTreeMap<u64, LogId<u64>>,
        vote: Option<Vote<u64>>,
        state: &MachineState,
    ) -> Result<(), Violation> {
        let purged = probe.last_purged.map(|id| id.index);
        for (&index, &log_id) in claims {
            if Some(index) <= purged {
                continue;
            }
            let held = probe.log.get(&index).map(|key| key.log_id);
            if held != Some(log_id) {
                return Err(format!(
                    "durability: node {node} claimed {log_id} durable at index {index}, its \
                     recovered log holds {held:?} (purged up to {purged:?})"
                ));
            }
        }
        for (&index, &log_id) in removed {
            if probe
                .log
                .get(&index)
                .is_some_and(|key| key.log_id == log_id)
            {
                return Err(format!(
                    "durability: node {node}'s truncation removed {log_id} at index {index} and \
                     returned, but its recovered log holds it again"
                ));
            }
        }
        if let Some(vote) = vote
            && !probe.vote.is_some_and(|recovered| recovered >= vote)
        {
            return Err(format!(
                "durability: node {node} saved vote {vote}, recovered {:?}",
                probe.vote
            ));
        }
        let index = state.last_applied.map(|id| id.index);
        self.seen.entry(node).or_default().last_applied = index;
        if let Some(expected) = self.model.versions_at(index)
            && expected != state.versions
        {
            return Err(format!(
                "restart: node {node}'s state machine at {index:?} holds {:?}, the committed \
                 prefix gives {expected:?}",
                state.versions
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::Checker;
    use crate::probe::ProbeState;

    #[test]
    fn a_leader_without_a_quorum_of_votes_is_a_violation() {
        let mut checker = Checker::default();
        let config: BTreeSet<u64> = [1, 2, 3].into_iter().collect();
        let probe = ProbeState::default();
        let alone = checker.leader(
            1,
            4,
            std::slice::from_ref(&config),
            &BTreeSet::new(),
            &probe,
        );
        assert!(alone.is_err_and(|why| why.contains("election safety")));
        let granted: BTreeSet<u64> = [3].into_iter().collect();
        let elected = checker.leader(2, 5, std::slice::from_ref(&config), &granted, &probe);
        assert_eq!(elected, Ok(true));
        assert_eq!(checker.leader(2, 5, &[config], &granted, &probe), Ok(false));
    }
}
