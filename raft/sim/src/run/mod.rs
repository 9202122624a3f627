//! A run: a plan executed on a fresh cluster, the checkers after every
//! instant of simulated time, then the liveness phase. `run` returns the
//! first violation (or none), the digest of everything observable and the
//! run's tally.

mod act;
mod live;
mod panic_site;
mod parts;
mod repair;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use durlog_testbed::SubSeeds;
use openraft::{Config, SnapshotPolicy};
use serde::{Deserialize, Serialize};

use crate::check::{Checker, Violation};
use crate::exec::{Executor, HARNESS};
use crate::net::Network;
use crate::node::{Node, Status};
use crate::plan::Plan;
use crate::tally::Tally;
use crate::trace::Trace;
use parts::{Clients, Faults, Later, Membership, Repairs, Timers};

/// The names of a run's sub-seeds (durlog-testbed's `SubSeeds`): each part
/// draws from its own, so that drawing more from one never shifts what
/// another draws. `tests::sub_seeds_are_pinned` pins their values.
const EXECUTOR_SEED: &str = "executor";
const NETWORK_SEED: &str = "network";

/// Polls within one instant beyond which the run is a livelock.
const POLLS_PER_INSTANT_MAX: u64 = 2_000_000;
const NS_PER_MS: u64 = 1_000_000;

/// What a run gives.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub violation: Option<String>,
    /// The plan's action the run was at (the last one performed) when the
    /// violation showed.
    pub step: usize,
    pub digest: u64,
    pub tally: Tally,
    /// Simulated time the run covered.
    pub simulated_ns: u64,
    /// The trace's lines (empty unless asked for).
    #[serde(skip)]
    pub trace: Vec<String>,
}

/// The cluster under simulation: its nodes on the executor and the
/// network, the checkers, and the rest of its state in parts that own it
/// (`parts/`).
pub(crate) struct Cluster<'p> {
    plan: &'p Plan,
    exec: Executor,
    net: Network,
    trace: Trace,
    nodes: BTreeMap<u64, Node>,
    config: Arc<Config>,
    checker: Checker,
    tally: Tally,
    /// The index of the last action performed.
    step: usize,
    timers: Timers,
    faults: Faults,
    membership: Membership,
    repairs: Repairs,
    clients: Clients,
}

/// Runs `plan` (its actions where `keep` says, all if `None`); keeps the
/// trace's lines if `trace`.
pub fn run(plan: &Plan, keep: Option<&[bool]>, trace: bool) -> Outcome {
    let traced = Trace::new(trace);
    let exec = Executor::new(SubSeeds::new(plan.seed).named(EXECUTOR_SEED));
    if trace {
        exec.record_timers();
    }
    let entered = exec.enter();
    let mut cluster = Cluster::new(plan, exec, traced.clone());
    panic_site::record();
    let result = catch_unwind(AssertUnwindSafe(|| cluster.run(keep)));
    let violation = match result {
        Ok(Ok(())) => None,
        Ok(Err(violation)) => Some(violation),
        // Caught here rather than by the testbed, so that the cluster's
        // trace and counts up to the panic are kept.
        Err(panic) => {
            let text = durlog_testbed::panic_message(&*panic);
            cluster.excused_panic(&text)
        }
    };
    let simulated_ns = cluster.exec.now_ns();
    let outcome = cluster.finish(violation, simulated_ns);
    drop(entered);
    outcome
}

fn raft_config(plan: &Plan) -> Arc<Config> {
    let params = &plan.raft;
    let config = Config {
        cluster_name: "durlog-raft-sim".to_owned(),
        heartbeat_interval: params.heartbeat_ms,
        election_timeout_min: params.election_min_ms,
        election_timeout_max: params.election_max_ms,
        install_snapshot_timeout: params.election_min_ms * 2,
        max_payload_entries: params.max_payload_entries,
        replication_lag_threshold: params.replication_lag,
        snapshot_policy: match params.snapshot_logs {
            0 => SnapshotPolicy::Never,
            logs => SnapshotPolicy::LogsSinceLast(logs),
        },
        snapshot_max_chunk_size: params.snapshot_chunk_bytes,
        max_in_snapshot_log_to_keep: params.keep_logs,
        purge_batch_size: params.purge_batch,
        ..Config::default()
    };
    Arc::new(
        config
            .validate()
            .expect("the plan's openraft settings are valid"),
    )
}

impl<'p> Cluster<'p> {
    fn new(plan: &'p Plan, exec: Executor, trace: Trace) -> Cluster<'p> {
        let net = Network::new(
            SubSeeds::new(plan.seed).named(NETWORK_SEED),
            plan.net.clone(),
            trace.clone(),
        );
        let nodes: BTreeMap<u64, Node> = plan
            .node_ids()
            .map(|id| {
                let disk = &plan.disks[(id - 1) as usize];
                (
                    id,
                    Node::new(id, disk.seed, disk.faults(), disk.segment_bytes),
                )
            })
            .collect();
        for node in nodes.values() {
            node.vfs.set_trace_recording(trace.keeps_lines());
        }
        Cluster {
            plan,
            exec,
            net,
            clients: Clients::new(trace.clone()),
            trace,
            nodes,
            config: raft_config(plan),
            checker: Checker::default(),
            tally: Tally::default(),
            step: 0,
            timers: Timers::default(),
            faults: Faults::default(),
            membership: Membership::new(plan.voters),
            repairs: Repairs::default(),
        }
    }

    fn run(&mut self, keep: Option<&[bool]>) -> Result<(), Violation> {
        for id in 1..=self.plan.voters {
            self.start(id)?;
        }
        self.initialize()?;
        for (index, step) in self.plan.steps.iter().enumerate() {
            let kept = keep.is_none_or(|keep| keep.get(index).copied().unwrap_or(true));
            if !kept || !step.action.is_on(self.plan) {
                continue;
            }
            self.run_until(step.at_ms * NS_PER_MS)?;
            self.step = index;
            self.act(&step.action)?;
        }
        self.run_until(self.plan.safety_ms * NS_PER_MS)?;
        self.liveness()
    }

    /// Runs the cluster to `until_ns`, checking after every instant and
    /// doing what is due (restarts, heals) at its instant.
    fn run_until(&mut self, until_ns: u64) -> Result<(), Violation> {
        loop {
            self.drain()?;
            self.check()?;
            let now = self.exec.now_ns();
            if self.membership.initialize_due(now) {
                self.initialize()?;
            }
            if let Some(later) = self.timers.take_due(now) {
                self.do_later(later)?;
                continue;
            }
            let limit = until_ns.min(self.timers.next_ns());
            let advanced = self.exec.advance(limit);
            for owner in self.exec.take_fired() {
                let who = if owner == HARNESS {
                    "cluster".to_owned()
                } else {
                    format!("n{owner}")
                };
                self.trace.plain_line(format!("{who}: timer fired"));
            }
            if !advanced && self.exec.now_ns() >= until_ns {
                return Ok(());
            }
        }
    }

    /// Polls every ready task of this instant; a node whose disk lost
    /// power, or whose store failed, dies at once.
    fn drain(&mut self) -> Result<(), Violation> {
        let mut polls = 0;
        while let Some(owner) = self.exec.poll_one() {
            polls += 1;
            if polls > POLLS_PER_INSTANT_MAX {
                return Err(format!(
                    "livelock: {polls} polls at {} ns without time passing",
                    self.exec.now_ns()
                ));
            }
            if owner != HARNESS {
                self.after_poll(owner)?;
            }
        }
        Ok(())
    }

    fn after_poll(&mut self, id: u64) -> Result<(), Violation> {
        let Some(node) = self.nodes.get(&id) else {
            return Ok(());
        };
        self.disk_lines(id);
        if node.vfs.is_halted() {
            self.read_errors_accounted(id, Some("then-power-loss"), "")?;
            let node = &self.nodes[&id];
            let op = node.probe.lock().last_failed_op.unwrap_or("other");
            self.tally.bump(&format!("power-loss-in-{op}"));
            self.power_lost(id);
            return Ok(());
        }
        let errors = node.probe.lock().storage_errors;
        let up = node.is_up();
        let failed = self.faults.new_errors(id, errors);
        if up {
            let seen = failed.then_some("failed-a-store-call");
            self.read_errors_accounted(id, seen, "no store call failed")?;
        }
        if failed && up {
            self.faults.errors_answered(id, errors);
            self.error_explained(id, None)?;
            // openraft stops a node whose store failed: the process exits
            // and its supervisor restarts it.
            self.tally.bump("storage-errors");
            self.trace
                .note(id, "store failed: process exits, restarts in 20 ms");
            let node = self.nodes.get_mut(&id).expect("node");
            node.kill(&self.exec, &self.net);
            self.schedule(20, Later::Restart(id));
        }
        Ok(())
    }

    /// Moves what node `id`'s disk recorded into the trace's lines.
    pub(crate) fn disk_lines(&self, id: u64) {
        if !self.trace.keeps_lines() {
            return;
        }
        let vfs = &self.nodes[&id].vfs;
        for event in vfs.trace() {
            self.trace.line(id, event);
        }
        vfs.clear_trace();
    }

    fn power_lost(&mut self, id: u64) {
        let down_ms = self.faults.power_lost(id);
        self.tally.bump("power-losses");
        self.trace
            .note(id, format_args!("power lost; restarts in {down_ms} ms"));
        let node = self.nodes.get_mut(&id).expect("node");
        node.power_off(&self.exec, &self.net);
        self.schedule(down_ms, Later::Restart(id));
    }

    fn schedule(&mut self, after_ms: u64, later: Later) {
        let at = self.exec.now_ns() + after_ms * NS_PER_MS;
        self.timers.schedule(at, later);
    }

    fn do_later(&mut self, later: Later) -> Result<(), Violation> {
        match later {
            Later::Restart(id) => {
                if !self.nodes[&id].is_up() && !matches!(self.nodes[&id].status, Status::Refused(_))
                {
                    self.tally.bump("restarts");
                    self.start(id)?;
                }
            }
            Later::Heal(links) => {
                self.trace.note(0, format_args!("heal {links:?}"));
                self.net.uncut(&links);
            }
        }
        Ok(())
    }

    /// A panic that ended the run: a violation, unless the run is excused
    /// and the panic is one of openraft's own assertions, which hold only
    /// while Raft's model does. Once a node lost acknowledged entries
    /// (the excuse), a replica may have applied an entry the cluster then
    /// replaced, and openraft asserts that the commit index never goes
    /// back (the cluster simulator's seed 17961: a node applied up to 60,
    /// then learned 58 was the commit index).
    fn excused_panic(&mut self, text: &str) -> Option<Violation> {
        let site = panic_site::last();
        let in_openraft = site.as_deref().is_some_and(panic_site::is_openraft);
        match self.faults.excused() {
            Some(excuse) if in_openraft => {
                self.tally.bump("runs-excused-ended-by-openraft-panic");
                self.trace.note(
                    0,
                    format_args!(
                        "openraft panicked at {} ({text}), after {excuse}",
                        site.unwrap_or_default()
                    ),
                );
                None
            }
            _ => Some(format!(
                "panic: {text} (at {})",
                site.as_deref().unwrap_or("an unknown place")
            )),
        }
    }

    /// Every read error the disks injected was seen by the process that
    /// drew it (see `Cluster::read_errors_accounted`), when the run got to
    /// its end.
    fn read_errors_all_accounted(&self) -> Result<(), Violation> {
        let fired: u64 = self
            .nodes
            .values()
            .map(|node| {
                node.vfs
                    .fault_counts()
                    .get(&durlog::vfs::FaultKind::ReadError)
                    .copied()
                    .unwrap_or(0)
            })
            .sum();
        let accounted: u64 = ["failed-a-store-call", "failed-open", "then-power-loss"]
            .iter()
            .map(|seen| self.tally.get(&format!("read-errors-{seen}")))
            .sum();
        if fired == accounted {
            Ok(())
        } else {
            Err(format!(
                "the disks injected {fired} read errors, but {accounted} were seen by the \
                 process that drew them"
            ))
        }
    }

    fn finish(mut self, violation: Option<Violation>, simulated_ns: u64) -> Outcome {
        let ended_early = self.tally.get("runs-excused-ended-by-openraft-panic") > 0;
        let violation = match violation {
            None if !ended_early => self.read_errors_all_accounted().err(),
            other => other,
        };
        let net = self.net.counts();
        for (name, count) in [
            ("messages-sent", net.sent),
            ("messages-lost", net.lost),
            ("messages-cut", net.cut),
            ("messages-duplicated", net.duplicated),
            ("messages-detoured", net.detoured),
            ("votes-granted", net.votes_granted),
            ("votes-refused", net.votes_refused),
            ("votes-withheld-repairing", net.votes_withheld_repairing),
        ] {
            self.tally.add(name, count);
        }
        for node in self.nodes.values() {
            self.trace.fold(node.vfs.trace_digest());
            let probe = node.probe.lock();
            self.tally.add("purges", probe.purges);
            self.tally.add("snapshots-built", probe.snapshots_built);
            self.tally
                .add("snapshots-installed", probe.snapshots_installed);
            self.tally.add("votes-saved", probe.votes_saved);
            self.tally.add(
                "truncations-of-a-conflicting-suffix",
                probe.truncations_removing,
            );
            for (kind, count) in node.vfs.fault_counts() {
                self.tally.add(&format!("disk-{kind}"), count);
            }
        }
        let (polls, timers) = self.exec.counts();
        self.trace.fold(polls);
        self.trace.fold(timers);
        self.tally.add("polls", polls);
        self.tally.add("timers-fired", timers);
        self.tally.add("simulated-ms", simulated_ns / NS_PER_MS);
        self.tally.bump("runs");
        self.clients.count(&mut self.tally);
        if violation.is_some() {
            self.tally.bump("violations");
        }
        if let Some(excuse) = self.faults.excused() {
            self.trace.note(0, format_args!("run excused: {excuse}"));
            self.tally.bump("runs-excused");
        }
        let digest = self.trace.digest();
        let trace = self.trace.lines();
        for node in self.nodes.values_mut() {
            node.kill(&self.exec, &self.net);
        }
        self.exec.clear();
        Outcome {
            violation,
            step: self.step,
            digest,
            tally: self.tally,
            simulated_ns,
            trace,
        }
    }
}

#[cfg(test)]
mod tests {
    use durlog_testbed::SubSeeds;

    use super::{EXECUTOR_SEED, NETWORK_SEED};
    use crate::exec::{HARNESS, owner_seed};

    /// Every sub-seed a run derives, pinned for seed 42 (the values from
    /// an independent Python implementation of the testbed's hashes): a
    /// change to one moves every seed's run, and the digests and seeds
    /// raft/sim/README.md quotes with it.
    #[test]
    fn sub_seeds_are_pinned() {
        let seeds = SubSeeds::new(42);
        let executor = seeds.named(EXECUTOR_SEED);
        assert_eq!(executor, 0x692f_f011_29fd_34e0);
        assert_eq!(seeds.named(NETWORK_SEED), 0x3737_a5ce_3f25_fe76);
        assert_eq!(owner_seed(executor, HARNESS), 0x8004_8484_a9c2_6daa);
        assert_eq!(owner_seed(executor, 1), 0xaaf6_aa4b_78a2_a54f);
        assert_eq!(owner_seed(executor, 5), 0xbc3c_b9d6_5685_545c);
    }
}
