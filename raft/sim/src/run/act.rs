//! The plan's actions on the cluster, node starts, and the checks after
//! each instant.

use std::collections::{BTreeMap, BTreeSet};

use durlog::vfs::FaultKind;
use openraft::{BasicNode, ChangeMembers, LogId, ServerState};

use super::Cluster;
use super::parts::Later;
use crate::check::Violation;
use crate::excuse;
use crate::exec::HARNESS;
use crate::node::{StartError, Status};
use crate::plan::{Action, Cut};

impl Cluster<'_> {
    /// Opens node `id`'s store and boots it; a refused Open leaves it down
    /// for good (counted); a power loss during recovery is a power loss.
    pub(super) fn start(&mut self, id: u64) -> Result<(), Violation> {
        let held = self.repairs.take_held(id);
        let node = self.nodes.get_mut(&id).expect("node");
        {
            // What the last incarnation did in its last poll is checked
            // before the probe starts anew.
            let mut probe = node.probe.lock();
            if !self.faults.is_excused() {
                self.checker.appended(id, &mut probe)?;
                self.checker.applied(id, &mut probe)?;
            }
            probe.new_entries.clear();
            probe.machine.clear();
            self.faults.errors_answered(id, probe.storage_errors);
            probe.last_error = None;
        }
        let mut claims = std::mem::take(&mut node.probe.lock().claims);
        // A truncation under way when the process died may be done (whole),
        // or not at all.
        let mut removed = std::mem::take(&mut node.probe.lock().removed);
        if let Some(from) = node.probe.lock().truncating.take() {
            claims.split_off(&from);
            removed.split_off(&from);
        }
        let vote = node.probe.lock().vote;
        let first_boot = node.boots == 0;
        // The faults of this Open: a read flip among them explains a
        // refusal of the file it flipped.
        let mark = node.vfs.fault_log_len();
        node.started_mark = mark;
        node.accounted_mark = mark;
        let started = node.start(&self.exec, &self.net, &self.config);
        self.disk_lines(id);
        if let Err(error) = started {
            return self.open_failed(id, error, claims, mark);
        }
        // A read that failed must have failed the Open.
        self.read_errors_accounted(id, None, "the Open succeeded")?;
        self.trace.note(id, "up");
        self.repaired_start(id, &mut claims, held)?;
        let node = &self.nodes[&id];
        let state = node.machine.as_ref().expect("started").applied();
        if !first_boot && !self.faults.is_excused() {
            let probe = node.probe.lock();
            let checked = self
                .checker
                .restarted(id, &probe, &claims, &removed, vote, &state);
            drop(probe);
            if let Err(violation) = checked {
                return self.amnesia(id, violation);
            }
        }
        // What the node claimed outlives this incarnation: every later
        // restart must show it too (not only the next one), and claims made
        // from now on join it.
        let mut probe = self.nodes[&id].probe.lock();
        claims.append(&mut probe.claims);
        probe.claims = claims;
        removed.append(&mut probe.removed);
        probe.removed = removed;
        Ok(())
    }

    /// Node `id`'s Open failed (`mark`: its disk's fault log as it began):
    /// a power loss during recovery is a power loss, an I/O error a faulty
    /// disk's (retried), a refusal damage's (the node stays down). The
    /// claims of the last incarnations stay, except past a refusal.
    fn open_failed(
        &mut self,
        id: u64,
        error: StartError,
        claims: BTreeMap<u64, LogId<u64>>,
        mark: usize,
    ) -> Result<(), Violation> {
        if self.nodes[&id].vfs.is_halted() {
            self.read_errors_accounted(id, Some("then-power-loss"), "")?;
            let node = self.nodes.get_mut(&id).expect("node");
            let why = match error {
                StartError::Io(why) => why,
                StartError::Refused(refusal) => refusal.text,
            };
            node.probe.lock().claims = claims;
            self.trace
                .note(id, format_args!("power lost during recovery: {why}"));
            self.tally.bump("power-loss-in-recovery");
            self.power_lost(id);
            return Ok(());
        }
        self.read_errors_accounted(id, Some("failed-open"), "")?;
        let node = self.nodes.get_mut(&id).expect("node");
        let during_open = node.vfs.fault_log_since(mark);
        match error {
            StartError::Io(why) => {
                let cause =
                    excuse::error_excuse(&why, &node.vfs.damage(), &node.injected, &during_open)?;
                self.tally.bump(&format!("open-failed-io-{cause}"));
                let node = self.nodes.get_mut(&id).expect("node");
                node.probe.lock().claims = claims;
                self.trace
                    .note(id, format_args!("Open failed: {why}; retries in 100 ms"));
                self.tally.bump("open-failed-io");
                self.schedule(100, Later::Restart(id));
            }
            StartError::Refused(refusal) => {
                let (cause, excuse) =
                    refusal.excuse(&node.vfs.damage(), &node.injected, &during_open)?;
                self.trace.note(id, format_args!("Open refused: {excuse}"));
                self.tally.bump("open-refused");
                self.tally.bump(&format!("open-refused-{cause}"));
                self.faults.damage(id);
                let node = self.nodes.get_mut(&id).expect("node");
                node.status = Status::Refused(refusal.text);
            }
        }
        Ok(())
    }

    /// A restarted node lost what it claimed durable. Only a fault that
    /// damaged durable bytes on its disk (a bit flipped at rest, a
    /// misdirected write) can excuse that: durlog truncates damage confined
    /// to the last record (FORMAT.md, "What stays ambiguous"). Raft's model
    /// assumes stable storage, so from then on the node's amnesia excuses
    /// every violation, and the excuse names the fault.
    fn amnesia(&mut self, id: u64, violation: Violation) -> Result<(), Violation> {
        let node = &self.nodes[&id];
        let damage = node.vfs.damage();
        let fault = match (damage.first(), node.injected.first()) {
            (Some(fault), _) => format!("{fault}"),
            (None, Some(injected)) => injected.to_string(),
            (None, None) => return Err(violation),
        };
        let excuse = format!(
            "node {id}'s disk lost acknowledged data to {fault} (outside Raft's model: stable \
             storage): {violation}"
        );
        self.trace.note(id, format_args!("excused: {excuse}"));
        self.tally.bump("excused-amnesia");
        self.faults.excuse(excuse);
        Ok(())
    }

    /// The first voter up initializes the cluster with every voter.
    pub(super) fn initialize(&mut self) -> Result<(), Violation> {
        // The operator retries on whichever voter is up until one takes it
        // (a voter's store may fail at its first write).
        let Some(raft) = self
            .membership
            .voters()
            .iter()
            .find_map(|id| self.nodes[id].raft().cloned())
        else {
            return Ok(());
        };
        self.membership.initialize(&self.exec, raft);
        Ok(())
    }

    /// Every per-instant check (see `check.rs`); once a node's amnesia is
    /// excused, only the liveness phase still counts.
    pub(super) fn check(&mut self) -> Result<(), Violation> {
        self.track_repairs();
        if self.faults.is_excused() {
            return Ok(());
        }
        let mut stopped = Vec::new();
        for (&id, node) in &self.nodes {
            let Some(raft) = node.raft() else { continue };
            let mut probe = node.probe.lock();
            self.checker.appended(id, &mut probe)?;
            self.checker.applied(id, &mut probe)?;
            // Read in place: a clone of the metrics at every instant of
            // every node was a tenth of the cluster simulation's time.
            let (term, leading) = {
                let metrics = raft.metrics();
                let metrics = metrics.borrow();
                if let Err(error) = &metrics.running_state {
                    stopped.push((id, format!("{error:?}")));
                }
                let configs = (metrics.state == ServerState::Leader).then(|| {
                    metrics
                        .membership_config
                        .membership()
                        .get_joint_config()
                        .clone()
                });
                (metrics.current_term, configs)
            };
            let Some(configs) = leading else { continue };
            let grants = self.net.grants(term, id);
            if self.checker.leader(id, term, &configs, &grants, &probe)? {
                // Entries of earlier terms past everything known committed:
                // the new leader must commit or replace them.
                let committed = self.checker.model.committed.keys().next_back().copied();
                let uncommitted_tail = probe
                    .log
                    .range(committed.map_or(0, |index| index + 1)..)
                    .any(|(_, key)| key.log_id.leader_id.term < term);
                self.tally.bump("elections");
                if self.checker.leaders.len() > 1 {
                    self.tally.bump("leader-changes");
                    if uncommitted_tail {
                        self.tally.bump("leader-change-with-uncommitted-tail");
                    }
                }
                if self.trace.keeps_lines() {
                    self.trace.note(id, format_args!("leads in term {term}"));
                }
            }
        }
        for (id, error) in stopped {
            // openraft stopped the node (a store or state-machine error it
            // cannot go on from): the process exits, a supervisor restarts
            // it.
            self.error_explained(id, Some(error))?;
            self.tally.bump("storage-errors");
            self.trace
                .note(id, "openraft stopped: process exits, restarts in 20 ms");
            let node = self.nodes.get_mut(&id).expect("node");
            node.kill(&self.exec, &self.net);
            self.schedule(20, Later::Restart(id));
        }
        Ok(())
    }

    /// Node `id`'s store failed, or openraft stopped it (`stopped`, what
    /// openraft says): a fault since its process started must explain it
    /// (`excuse::error_excuse`); counted by that cause.
    pub(super) fn error_explained(
        &mut self,
        id: u64,
        stopped: Option<String>,
    ) -> Result<(), Violation> {
        let node = &self.nodes[&id];
        // Taken, so that an error is explained once, by the process that
        // saw it.
        let error = node.probe.lock().last_error.take().or(stopped);
        let cause = match error {
            // The power went during the call: every later call fails too.
            _ if node.vfs.is_halted() => "power-loss",
            Some(error) => {
                let since = node.vfs.fault_log_since(node.started_mark);
                excuse::error_excuse(&error, &node.vfs.damage(), &node.injected, &since)
                    .map_err(|violation| format!("n{id}: {violation}"))?
            }
            None => return Err("openraft stopped a node, and no error says why".to_owned()),
        };
        self.tally.bump(&format!("storage-errors-{cause}"));
        Ok(())
    }

    /// Every read error that fired on node `id`'s disk since the last
    /// account must have failed the call that drew it (`failed`: a store
    /// call returned an error since); a read error that nothing saw was
    /// swallowed, and the store went on with a read it never made.
    ///
    /// `seen` names how the process saw them (a tally); `None` says that
    /// nothing failed (`what`), which makes a fired read error a violation.
    pub(super) fn read_errors_accounted(
        &mut self,
        id: u64,
        seen: Option<&str>,
        what: &str,
    ) -> Result<(), Violation> {
        let node = self.nodes.get_mut(&id).expect("node");
        // After every poll: most polls inject nothing.
        if node.vfs.fault_log_len() == node.accounted_mark {
            return Ok(());
        }
        let since = node.vfs.fault_log_since(node.accounted_mark);
        node.accounted_mark += since.len();
        let fired: Vec<_> = since
            .iter()
            .filter(|event| event.kind == FaultKind::ReadError)
            .collect();
        if fired.is_empty() {
            return Ok(());
        }
        let Some(seen) = seen else {
            return Err(format!(
                "n{id}: {} read error(s) fired ({}) but {what}: an error was swallowed",
                fired.len(),
                fired
                    .iter()
                    .map(|event| format!("{} at {}", event.path.display(), event.offset))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        self.tally
            .add(&format!("read-errors-{seen}"), fired.len() as u64);
        Ok(())
    }

    /// The node the harness believes leads (the highest term's).
    pub(super) fn leader(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter_map(|(&id, node)| {
                let metrics = node.raft()?.metrics();
                let metrics = metrics.borrow();
                (metrics.state == ServerState::Leader).then_some((metrics.current_term, id))
            })
            .max()
            .map(|(_, id)| id)
    }

    pub(super) fn act(&mut self, action: &Action) -> Result<(), Violation> {
        if let Some(node) = action.node()
            && !self.nodes.contains_key(&node)
        {
            return Ok(());
        }
        if self.trace.keeps_lines() {
            self.trace.note(0, format_args!("action {action:?}"));
        }
        match action {
            Action::Write {
                client,
                stream,
                expect,
                via,
            } => {
                self.write(*client, *stream, *expect, *via);
            }
            Action::Read { client, stream } => self.read(*client, *stream),
            // The operator never forces a repairing node into an election.
            Action::Elect { node } if self.nodes[node].is_repairing() => {}
            Action::Elect { node } => self.trigger(*node, |raft| async move {
                let _ = raft.trigger().elect().await;
            }),
            Action::Snapshot { node } => self.trigger(*node, |raft| async move {
                let _ = raft.trigger().snapshot().await;
            }),
            Action::Purge { node } => {
                let upto = self.nodes[node]
                    .raft()
                    .and_then(|raft| raft.metrics().borrow().snapshot)
                    .map(|id| id.index);
                if let Some(upto) = upto {
                    self.trigger(*node, move |raft| async move {
                        let _ = raft.trigger().purge_log(upto).await;
                    });
                }
            }
            Action::Partition { cut, heal_ms } => self.partition(cut, *heal_ms),
            Action::Kill { node, down_ms } => {
                if self.nodes[node].is_up() {
                    self.tally.bump("kills");
                    self.trace
                        .note(*node, format_args!("killed; restarts in {down_ms} ms"));
                    let target = self.nodes.get_mut(node).expect("node");
                    target.kill(&self.exec, &self.net);
                    self.schedule(*down_ms, Later::Restart(*node));
                }
            }
            Action::PowerLoss {
                node,
                after_ops,
                down_ms,
            } => {
                if self.nodes[node].is_up() && self.faults.arm_power_loss(*node, *down_ms) {
                    self.nodes[node].vfs.crash_after_ops(*after_ops);
                }
            }
            Action::BitRot { node, aim } => self.bit_rot(*node, *aim),
            Action::AddLearner { node } => self.add_learner(*node)?,
            Action::Promote { node } => self.promote(*node),
            Action::RemoveVoter { node } => self.remove_voter(*node),
        }
        Ok(())
    }

    /// A client's write, through the node the harness believes leads
    /// (`via` if none).
    pub(super) fn write(&mut self, client: u64, stream: u8, expect: bool, via: u64) {
        let target = self.leader().unwrap_or(via);
        let Some(raft) = self.nodes[&target].raft().cloned() else {
            return;
        };
        self.clients
            .write(&self.exec, target, raft, client, stream, expect);
    }

    /// A client's linearizable read, through the node the harness
    /// believes leads.
    fn read(&mut self, client: u64, stream: u8) {
        let Some(target) = self.leader() else { return };
        let node = &self.nodes[&target];
        let (Some(raft), Some(machine)) = (node.raft().cloned(), node.machine.clone()) else {
            return;
        };
        self.clients
            .read(&self.exec, target, raft, machine, client, stream);
    }

    fn trigger<F, Fut>(&mut self, node: u64, call: F)
    where
        F: FnOnce(openraft::Raft<crate::config::SimConfig>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if let Some(raft) = self.nodes[&node].raft() {
            self.exec.spawn_as(HARNESS, call(raft.clone()));
        }
    }

    fn partition(&mut self, cut: &Cut, heal_ms: u64) {
        let all: Vec<u64> = self.plan.node_ids().collect();
        let links: Vec<(u64, u64)> = match cut {
            Cut::Split(set) => {
                let inside: BTreeSet<u64> = set.iter().copied().collect();
                let mut links = Vec::new();
                for &a in &all {
                    for &b in &all {
                        if inside.contains(&a) != inside.contains(&b) {
                            links.push((a, b));
                        }
                    }
                }
                links
            }
            Cut::OneWay { from, to } if from != to => vec![(*from, *to)],
            Cut::OneWay { .. } => Vec::new(),
            Cut::IsolateLeader => match self.leader() {
                Some(leader) => all
                    .iter()
                    .filter(|&&other| other != leader)
                    .flat_map(|&other| [(leader, other), (other, leader)])
                    .collect(),
                None => Vec::new(),
            },
        };
        if links.is_empty() {
            return;
        }
        self.tally.bump("partitions");
        self.trace
            .note(0, format_args!("cut {links:?} for {heal_ms} ms"));
        for &(from, to) in &links {
            self.net.cut(from, to);
        }
        self.schedule(heal_ms, Later::Heal(links));
    }

    fn bit_rot(&mut self, id: u64, aim: u64) {
        let node = self.nodes.get_mut(&id).expect("node");
        if !node.is_up() {
            return;
        }
        node.kill(&self.exec, &self.net);
        let damage = self.damage_at_rest(id, aim);
        let kind = ["any-file", "sealed", "last", "misdirected"][(aim % 4) as usize];
        self.tally.bump("bit-rot");
        self.tally.bump(&format!("damage-at-rest-{kind}"));
        self.trace.note(
            id,
            format_args!("damage at rest ({kind}): {damage:?}; restarts in 50 ms"),
        );
        self.schedule(50, Later::Restart(id));
    }

    fn add_learner(&mut self, id: u64) -> Result<(), Violation> {
        let Some(leader) = self.leader() else {
            return Ok(());
        };
        if self.membership.knows(id) {
            return Ok(());
        }
        if self.nodes[&id].boots == 0 {
            self.start(id)?;
        }
        self.membership.add_learner(id);
        self.tally.bump("learners-added");
        let raft = self.nodes[&leader].raft().expect("leader up").clone();
        self.exec.spawn_as(HARNESS, async move {
            let _ = raft.add_learner(id, BasicNode::default(), false).await;
        });
        Ok(())
    }

    fn promote(&mut self, id: u64) {
        let Some(leader) = self.leader() else { return };
        if !self.membership.promote(id) {
            return;
        }
        self.tally.bump("learners-promoted");
        let raft = self.nodes[&leader].raft().expect("leader up").clone();
        self.exec.spawn_as(HARNESS, async move {
            let change = ChangeMembers::AddVoterIds([id].into_iter().collect());
            let _ = raft.change_membership(change, false).await;
        });
    }

    fn remove_voter(&mut self, id: u64) {
        let Some(leader) = self.leader() else { return };
        if !self.membership.remove_voter(id) {
            return;
        }
        self.tally.bump("voters-removed");
        let raft = self.nodes[&leader].raft().expect("leader up").clone();
        self.exec.spawn_as(HARNESS, async move {
            let change = ChangeMembers::RemoveVoters([id].into_iter().collect());
            let _ = raft.change_membership(change, false).await;
        });
    }
}
