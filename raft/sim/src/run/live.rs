//! The liveness phase: the faults stop, the network heals, every node that
//! is down restarts (one whose Open refuses stays down); within the plan's
//! bound of simulated time a leader must be elected, a new write committed
//! and every running member must apply the same entries. A run that does
//! not is a failure, unless more voters' disks refused than a majority
//! allows (outside Raft's model), which the excuse names.

use durlog::vfs::FaultConfig;
use openraft::ServerState;

use super::{Cluster, NS_PER_MS};
use crate::check::Violation;
use crate::history::Outcome;
use crate::node::Status;

/// How often the phase looks.
const LOOK_MS: u64 = 10;

impl Cluster<'_> {
    pub(super) fn liveness(&mut self) -> Result<(), Violation> {
        self.stop_faults()?;
        let started = self.exec.now_ns();
        let deadline = started + self.plan.liveness_ms * NS_PER_MS;
        let result = self.converge(deadline);
        let took_ms = (self.exec.now_ns() - started) / NS_PER_MS;
        self.count_unfinished_repairs();
        // f of the voters the harness last asked for (removals and
        // promotions change it), counting the damaged among them.
        let beyond_f = self
            .membership
            .damaged_beyond_f(|id| self.faults.is_damaged(id));
        if beyond_f {
            self.tally.bump("runs-damage-beyond-f");
            if result.is_err() {
                self.tally.bump("liveness-lost-beyond-f");
            }
        } else if self.faults.any_damaged() {
            self.tally.bump("runs-damage-within-f");
            if result.is_err() {
                self.tally.bump("liveness-lost-within-f");
                // Why, for the summary: a refusal (raft.meta, the state
                // machine's snapshot), a node repairing, or neither.
                let why = match self.liveness_excuse() {
                    Some(excuse) if excuse.contains("never formed") => "never-formed",
                    Some(excuse) if excuse.contains("repairing") => "repairing",
                    Some(_) => "refused",
                    None => "other",
                };
                self.tally.bump(&format!("liveness-lost-within-f-{why}"));
            }
        }
        match result {
            Ok(()) => {
                self.tally.bump("liveness-phases-passed");
                self.tally.add("liveness-ms", took_ms);
                self.trace
                    .note(0, format_args!("liveness: converged in {took_ms} ms"));
            }
            Err(why) => match self.liveness_excuse() {
                Some(excuse) => {
                    self.tally.bump("liveness-excused");
                    self.trace
                        .note(0, format_args!("liveness lost ({why}), excused: {excuse}"));
                    if self.faults.is_excused() {
                        return Ok(());
                    }
                    return self.clients.check(&self.checker.model, false);
                }
                None if self.faults.is_excused() => {
                    self.tally.bump("liveness-excused");
                    return Ok(());
                }
                None => {
                    return Err(format!(
                        "liveness: {why} within {} ms of the faults stopping; {}",
                        self.plan.liveness_ms,
                        self.describe_nodes()
                    ));
                }
            },
        }
        if self.faults.is_excused() {
            return Ok(());
        }
        self.clients.check(&self.checker.model, true)
    }

    /// Ends every fault and restarts every node that is down.
    fn stop_faults(&mut self) -> Result<(), Violation> {
        self.net.heal();
        self.net.quiet_down();
        self.faults.disarm_all();
        for node in self.nodes.values_mut() {
            node.vfs.crash_after_ops(0);
            node.faults = FaultConfig::none();
            node.vfs.set_faults(FaultConfig::none());
        }
        let down: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, node)| node.boots > 0 && matches!(node.status, Status::Down))
            .map(|(&id, _)| id)
            .collect();
        self.timers.clear();
        for id in down {
            self.tally.bump("restarts");
            self.start(id)?;
        }
        self.trace
            .note(0, "faults stop; network healed; every node restarted");
        Ok(())
    }

    /// Waits for a leader, a committed write, and every running member at
    /// the leader's applied index.
    fn converge(&mut self, deadline: u64) -> Result<(), String> {
        let mut write: Option<u64> = None;
        loop {
            if self.exec.now_ns() >= deadline {
                return Err(match write {
                    None => "no leader elected, or no write acknowledged".to_owned(),
                    Some(_) => "the members did not apply the same entries".to_owned(),
                });
            }
            let next = self.exec.now_ns() + LOOK_MS * NS_PER_MS;
            self.run_until(next)
                .map_err(|violation| format!("violation: {violation}"))?;
            let Some(leader) = self.leader() else {
                continue;
            };
            match write {
                None => write = Some(self.liveness_write(leader)),
                Some(op) => match self.clients.outcome(op) {
                    Outcome::Pending => {}
                    Outcome::Written { .. } if self.members_agree(leader) => return Ok(()),
                    Outcome::Written { .. } => {}
                    _ => write = None,
                },
            }
        }
    }

    fn liveness_write(&mut self, leader: u64) -> u64 {
        let op = self.clients.next_op();
        self.write(99, 0, false, leader);
        op
    }

    /// True if every running member applied exactly the leader's last
    /// applied entry.
    fn members_agree(&self, leader: u64) -> bool {
        let Some(raft) = self.nodes[&leader].raft() else {
            return false;
        };
        let (members, last_applied) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            if metrics.state != ServerState::Leader {
                return false;
            }
            let members: Vec<u64> = metrics
                .membership_config
                .nodes()
                .map(|(&id, _)| id)
                .collect();
            (members, metrics.last_applied)
        };
        members
            .iter()
            .all(|id| match self.nodes.get(id).and_then(|node| node.raft()) {
                None => true,
                Some(node) => node.metrics().borrow().last_applied == last_applied,
            })
    }

    /// Each node's state in a few words, for a liveness failure.
    fn describe_nodes(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|(&id, node)| match &node.status {
                Status::Up(raft) => {
                    let metrics = raft.metrics().borrow().clone();
                    format!(
                        "n{id}: {:?} term {} applied {:?} last {:?} purged {:?} {:?}, {} tasks, members {:?}",
                        metrics.state,
                        metrics.current_term,
                        metrics.last_applied.map(|id| id.index),
                        metrics.last_log_index,
                        metrics.purged.map(|id| id.index),
                        metrics.running_state,
                        self.exec.task_count(id),
                        metrics.membership_config.membership().get_joint_config()
                    )
                }
                Status::Down => format!("n{id}: down"),
                Status::Refused(why) => format!("n{id}: refused ({why})"),
            })
            .collect();
        nodes.join("; ")
    }

    /// The fault outside Raft's model that explains a lost liveness: more
    /// voters' disks refused than a majority allows, in some configuration
    /// of the membership (a joint one needs a majority of each).
    fn liveness_excuse(&self) -> Option<String> {
        let running = self
            .nodes
            .values()
            .filter_map(|node| node.raft())
            .map(|raft| raft.metrics().borrow().clone())
            .max_by_key(|metrics| metrics.membership_config.log_id().map(|id| id.index));
        let formed = running.as_ref().is_some_and(|metrics| {
            metrics
                .membership_config
                .membership()
                .voter_ids()
                .next()
                .is_some()
        });
        if !formed {
            let lost: Vec<String> = self
                .nodes
                .iter()
                .filter_map(|(id, node)| match &node.status {
                    Status::Refused(why) => Some(format!("node {id}: {why}")),
                    // Its damaged log held the membership: no node has it
                    // to send back.
                    Status::Up(_) if node.is_repairing() => {
                        Some(format!("node {id}: repairing, its damaged log held it"))
                    }
                    _ => None,
                })
                .collect();
            if !lost.is_empty() {
                return Some(format!(
                    "the cluster never formed: no running node holds a membership, and the disks \
                     that could have held it refused to open: {}",
                    lost.join("; ")
                ));
            }
        }
        // Each running node's view of the membership (a candidate needs a
        // majority of each configuration of its own view); with no node
        // running, the voters the harness last asked for.
        let mut views: Vec<Vec<std::collections::BTreeSet<u64>>> = self
            .nodes
            .values()
            .filter_map(|node| node.raft())
            .map(|raft| raft.metrics().borrow().membership_config.clone())
            .map(|config| config.membership().get_joint_config().clone())
            .filter(|configs| configs.iter().any(|voters| !voters.is_empty()))
            .collect();
        drop(running);
        if views.is_empty() {
            views.push(self.membership.as_view());
        }
        // A repairing node grants no vote (durlog_raft::repair): as lost
        // to an election as one that refused to open.
        let refused = |id: &u64| match self.nodes.get(id) {
            Some(node) if node.is_repairing() => Some(format!("node {id}: repairing")),
            Some(node) => match &node.status {
                Status::Refused(why) => Some(format!("node {id}: {why}")),
                _ => None,
            },
            None => None,
        };
        let lost_in = |configs: &Vec<std::collections::BTreeSet<u64>>| {
            configs.iter().find_map(|voters| {
                let lost: Vec<String> = voters.iter().filter_map(refused).collect();
                (lost.len() * 2 >= voters.len()).then(|| {
                    format!(
                        "{} of the {} voters {voters:?} refused to open: {}",
                        lost.len(),
                        voters.len(),
                        lost.join("; ")
                    )
                })
            })
        };
        // Excused if a configuration some running node holds lost a
        // majority: with its membership in doubt (two views after a change
        // that not every node saw), the views it rules can no longer elect,
        // and a candidate of the other view needs the votes of nodes whose
        // logs are ahead of its own.
        views.iter().find_map(lost_in)
    }
}
