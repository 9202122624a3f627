//! Everything a seed does, drawn up front from one ChaCha8 generator: the
//! cluster's size, each disk's sub-seed and faults (swarm), the network,
//! openraft's settings, and the list of actions with their instants. A run
//! of a plan with some actions left out (a keep mask) or some fault classes
//! off is still a plan: that is what shrinking works on.

use std::collections::BTreeSet;
use std::fmt;

use durlog::vfs::{FaultConfig, FaultKind};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::net::NetConfig;

/// A class of fault that a plan may hold, each switchable off on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FaultClass {
    /// Messages lost.
    Loss,
    /// Messages duplicated.
    Duplicate,
    /// Messages detoured far past the usual delay (reordering).
    Detour,
    /// Links cut (symmetric, one-way, the leader isolated) and healed.
    Partition,
    /// A node's process killed and restarted.
    Kill,
    /// A node's power lost at one of its disk operations, then restarted.
    PowerLoss,
    /// The swarm's SimVfs faults on each disk (torn writes, lost pages,
    /// failed fsyncs, short writes, ENOSPC, bit flips on read, ...).
    Disk,
    /// Reads and opens failing with EIO (`read-error`).
    ReadError,
    /// A bit of durable data flipped while a node is down.
    BitRot,
}

impl FaultClass {
    pub const ALL: &'static [FaultClass] = &[
        FaultClass::Loss,
        FaultClass::Duplicate,
        FaultClass::Detour,
        FaultClass::Partition,
        FaultClass::Kill,
        FaultClass::PowerLoss,
        FaultClass::Disk,
        FaultClass::ReadError,
        FaultClass::BitRot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultClass::Loss => "loss",
            FaultClass::Duplicate => "duplicate",
            FaultClass::Detour => "detour",
            FaultClass::Partition => "partition",
            FaultClass::Kill => "kill",
            FaultClass::PowerLoss => "power-loss",
            FaultClass::Disk => "disk",
            FaultClass::ReadError => "read-error",
            FaultClass::BitRot => "bit-rot",
        }
    }

    pub fn parse(text: &str) -> Option<FaultClass> {
        FaultClass::ALL
            .iter()
            .copied()
            .find(|class| class.name() == text)
    }
}

impl fmt::Display for FaultClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How links are cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cut {
    /// The nodes of the set cannot talk with the others, either way.
    Split(Vec<u64>),
    /// `from` cannot reach `to`; the other way works.
    OneWay { from: u64, to: u64 },
    /// Whoever leads when it fires is cut from every other node.
    IsolateLeader,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// A client writes one event through the leader (or `via` if none is
    /// known); `expect` sets the expected version to the one it last saw.
    Write {
        client: u64,
        stream: u8,
        expect: bool,
        via: u64,
    },
    /// A linearizable read of a stream's version through the leader.
    Read { client: u64, stream: u8 },
    /// `node` starts an election now.
    Elect { node: u64 },
    /// `node` builds a snapshot now.
    Snapshot { node: u64 },
    /// `node` purges its log up to its last snapshot.
    Purge { node: u64 },
    /// Links cut for `heal_ms`.
    Partition { cut: Cut, heal_ms: u64 },
    /// `node`'s process killed, restarted after `down_ms`.
    Kill { node: u64, down_ms: u64 },
    /// `node`'s power lost during its `after_ops`-th disk operation from
    /// now, restarted `down_ms` after it goes.
    PowerLoss {
        node: u64,
        after_ops: u64,
        down_ms: u64,
    },
    /// One durable bit of `node`'s disk flipped (at its next restart).
    ///
    /// `aim` picks what (see `run/repair.rs`): any durable file, a sealed
    /// segment, the last segment, or a misdirected write over a segment.
    BitRot { node: u64, aim: u64 },
    /// The spare `node` joins as a learner.
    AddLearner { node: u64 },
    /// The learner `node` becomes a voter.
    Promote { node: u64 },
    /// The voter `node` leaves the membership.
    RemoveVoter { node: u64 },
}

impl Action {
    /// The node the action names, if it names one.
    pub fn node(&self) -> Option<u64> {
        match self {
            Action::Write { via, .. } => Some(*via),
            Action::Elect { node }
            | Action::Snapshot { node }
            | Action::Purge { node }
            | Action::Kill { node, .. }
            | Action::PowerLoss { node, .. }
            | Action::BitRot { node, .. }
            | Action::AddLearner { node }
            | Action::Promote { node }
            | Action::RemoveVoter { node } => Some(*node),
            Action::Read { .. } | Action::Partition { .. } => None,
        }
    }

    /// True if a run of `plan` performs this action (its fault class, if
    /// it has one, is on).
    pub fn is_on(&self, plan: &Plan) -> bool {
        self.fault_class()
            .is_none_or(|class| plan.classes.contains(&class))
    }

    /// The fault class the action belongs to, if it is a fault.
    pub fn fault_class(&self) -> Option<FaultClass> {
        match self {
            Action::Partition { .. } => Some(FaultClass::Partition),
            Action::Kill { .. } => Some(FaultClass::Kill),
            Action::PowerLoss { .. } => Some(FaultClass::PowerLoss),
            Action::BitRot { .. } => Some(FaultClass::BitRot),
            _ => None,
        }
    }
}

/// An action and when it happens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub at_ms: u64,
    pub action: Action,
}

/// openraft's settings for the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaftParams {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Entries since the last snapshot that trigger one; 0: never.
    pub snapshot_logs: u64,
    pub keep_logs: u64,
    pub purge_batch: u64,
    pub max_payload_entries: u64,
    pub replication_lag: u64,
    pub snapshot_chunk_bytes: u64,
}

/// One node's disk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskPlan {
    pub seed: u64,
    pub faults: String,
    pub segment_bytes: u64,
}

impl DiskPlan {
    pub fn faults(&self) -> FaultConfig {
        self.faults.parse().expect("the plan's own fault text")
    }
}

/// Everything a seed does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub seed: u64,
    /// Voters at the start: nodes 1..=voters.
    pub voters: u64,
    /// Spare nodes (voters+1..): started as learners by `AddLearner`.
    pub spares: u64,
    pub net: NetConfig,
    pub disks: Vec<DiskPlan>,
    pub raft: RaftParams,
    pub steps: Vec<Step>,
    /// When the faults stop and the liveness phase begins.
    pub safety_ms: u64,
    /// The liveness phase's bound.
    pub liveness_ms: u64,
    /// Fault classes on in this plan (swarm), before any switched off.
    pub classes: BTreeSet<FaultClass>,
}

/// The weight of each kind of action, drawn per seed (swarm over the
/// workload too).
struct Mix {
    weights: Vec<(u32, MakeAction)>,
}

/// Draws one action of a kind.
type MakeAction = fn(&mut ChaCha8Rng, &Plan) -> Action;

fn pick<T: Copy>(rng: &mut ChaCha8Rng, choices: &[T]) -> T {
    choices[rng.random_range(0..choices.len())]
}

fn node_of(rng: &mut ChaCha8Rng, plan: &Plan) -> u64 {
    rng.random_range(1..=plan.voters + plan.spares)
}

impl Plan {
    /// The plan of `seed`.
    pub fn draw(seed: u64) -> Plan {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let voters = pick(&mut rng, &[3u64, 5]);
        let spares = rng.random_range(0..=1u64);
        let mut classes = BTreeSet::new();
        for &class in FaultClass::ALL {
            if rng.random_range(0..2u32) == 1 {
                classes.insert(class);
            }
        }
        let net = draw_net(&mut rng, &classes);
        let disks = (0..voters + spares)
            .map(|_| draw_disk(&mut rng, &classes))
            .collect();
        let raft = draw_raft(&mut rng);
        let safety_ms = rng.random_range(2_000..=6_000u64);
        let mut plan = Plan {
            seed,
            voters,
            spares,
            net,
            disks,
            raft,
            steps: Vec::new(),
            safety_ms,
            liveness_ms: 30_000,
            classes,
        };
        plan.steps = draw_steps(&mut rng, &plan);
        plan
    }

    /// Every node id.
    pub fn node_ids(&self) -> impl Iterator<Item = u64> {
        1..=self.voters + self.spares
    }

    /// The plan with `class` off: its disk or network faults cleared, and
    /// its actions kept but skipped by a run (so that a keep mask still
    /// names the same actions).
    pub fn without(&self, class: FaultClass) -> Plan {
        let mut plan = self.clone();
        plan.classes.remove(&class);
        match class {
            FaultClass::Loss => plan.net.loss_ppm = 0,
            FaultClass::Duplicate => plan.net.duplicate_ppm = 0,
            FaultClass::Detour => plan.net.detour_ppm = 0,
            FaultClass::Disk | FaultClass::ReadError => {
                for disk in &mut plan.disks {
                    let mut faults = disk.faults();
                    let kinds: Vec<FaultKind> = faults.enabled();
                    for kind in kinds {
                        let is_read_error = kind == FaultKind::ReadError;
                        if is_read_error == (class == FaultClass::ReadError) {
                            faults.set(kind, 0.0);
                        }
                    }
                    disk.faults = faults.to_string();
                }
            }
            _ => {}
        }
        plan
    }
}

fn draw_net(rng: &mut ChaCha8Rng, classes: &BTreeSet<FaultClass>) -> NetConfig {
    let delay_min_us = pick(rng, &[100u64, 500, 1_000, 5_000]);
    let delay_max_us = delay_min_us * pick(rng, &[1u64, 2, 5, 10]);
    let on = |class| classes.contains(&class);
    NetConfig {
        delay_min_us,
        delay_max_us,
        loss_ppm: if on(FaultClass::Loss) {
            pick(rng, &[1_000u32, 10_000, 50_000, 200_000])
        } else {
            0
        },
        duplicate_ppm: if on(FaultClass::Duplicate) {
            pick(rng, &[1_000u32, 10_000, 50_000])
        } else {
            0
        },
        detour_ppm: if on(FaultClass::Detour) {
            pick(rng, &[1_000u32, 10_000, 50_000])
        } else {
            0
        },
    }
}

fn draw_disk(rng: &mut ChaCha8Rng, classes: &BTreeSet<FaultClass>) -> DiskPlan {
    let seed = rng.next_u64_of();
    let mut faults = if classes.contains(&FaultClass::Disk) {
        FaultConfig::swarm(rng)
    } else {
        FaultConfig::none()
    };
    // Advisory kinds: the harness's own actions do these.
    faults.set(FaultKind::Crash, 0.0);
    faults.set(FaultKind::BitFlipAtRest, 0.0);
    if classes.contains(&FaultClass::ReadError) {
        faults.set(FaultKind::ReadError, pick(rng, &[0.0005, 0.002, 0.01]));
    }
    DiskPlan {
        seed,
        faults: faults.to_string(),
        segment_bytes: pick(rng, &[1_024u64, 4_096, 65_536]),
    }
}

/// `next_u64` without naming rand's two traits at each call.
trait NextU64 {
    fn next_u64_of(&mut self) -> u64;
}

impl NextU64 for ChaCha8Rng {
    fn next_u64_of(&mut self) -> u64 {
        rand::Rng::next_u64(self)
    }
}

fn draw_raft(rng: &mut ChaCha8Rng) -> RaftParams {
    let heartbeat_ms = pick(rng, &[20u64, 50, 100]);
    let election_min_ms = heartbeat_ms * pick(rng, &[3u64, 5]);
    RaftParams {
        heartbeat_ms,
        election_min_ms,
        election_max_ms: election_min_ms * 2,
        snapshot_logs: pick(rng, &[0u64, 5, 10, 30]),
        keep_logs: pick(rng, &[0u64, 2, 10]),
        purge_batch: pick(rng, &[1u64, 4]),
        max_payload_entries: pick(rng, &[2u64, 8, 64]),
        replication_lag: pick(rng, &[5u64, 50, 5_000]),
        snapshot_chunk_bytes: pick(rng, &[64u64, 1_024, 1 << 20]),
    }
}

fn workload_mix(rng: &mut ChaCha8Rng, classes: &BTreeSet<FaultClass>) -> Mix {
    let mut weights: Vec<(u32, MakeAction)> = vec![
        (pick(rng, &[20, 60]), |rng, plan| Action::Write {
            client: rng.random_range(0..3),
            stream: rng.random_range(0..3),
            expect: rng.random_range(0..3u32) == 0,
            via: node_of(rng, plan),
        }),
        (pick(rng, &[0, 10]), |rng, _| Action::Read {
            client: rng.random_range(0..3),
            stream: rng.random_range(0..3),
        }),
        (pick(rng, &[0, 1, 3]), |rng, plan| Action::Elect {
            node: node_of(rng, plan),
        }),
        (pick(rng, &[0, 1, 3]), |rng, plan| Action::Snapshot {
            node: node_of(rng, plan),
        }),
        (pick(rng, &[0, 1, 3]), |rng, plan| Action::Purge {
            node: node_of(rng, plan),
        }),
        (pick(rng, &[0, 1]), |rng, plan| Action::AddLearner {
            node: plan.voters + rng.random_range(1..=plan.spares.max(1)),
        }),
        (pick(rng, &[0, 1]), |rng, plan| Action::Promote {
            node: plan.voters + rng.random_range(1..=plan.spares.max(1)),
        }),
        (pick(rng, &[0, 1]), |rng, plan| Action::RemoveVoter {
            node: node_of(rng, plan),
        }),
    ];
    let fault = |class: FaultClass, rng: &mut ChaCha8Rng| {
        if classes.contains(&class) {
            pick(rng, &[1u32, 3, 6])
        } else {
            0
        }
    };
    weights.push((fault(FaultClass::Partition, rng), |rng, plan| {
        Action::Partition {
            cut: draw_cut(rng, plan),
            heal_ms: pick(rng, &[100, 500, 2_000]),
        }
    }));
    weights.push((fault(FaultClass::Kill, rng), |rng, plan| Action::Kill {
        node: node_of(rng, plan),
        down_ms: pick(rng, &[10, 200, 1_500]),
    }));
    weights.push((fault(FaultClass::PowerLoss, rng), |rng, plan| {
        Action::PowerLoss {
            node: node_of(rng, plan),
            after_ops: rng.random_range(1..=40),
            down_ms: pick(rng, &[10, 200, 1_500]),
        }
    }));
    weights.push(
        (fault(FaultClass::BitRot, rng), |rng, plan| Action::BitRot {
            node: node_of(rng, plan),
            aim: rng.random(),
        }),
    );
    Mix { weights }
}

/// Which links a partition cuts.
fn draw_cut(rng: &mut ChaCha8Rng, plan: &Plan) -> Cut {
    match rng.random_range(0..3u32) {
        0 => {
            // A minority on one side: the majority side may go on.
            let size = rng.random_range(1..=plan.voters / 2);
            let mut set: Vec<u64> = Vec::new();
            while (set.len() as u64) < size {
                let node = node_of(rng, plan);
                if !set.contains(&node) {
                    set.push(node);
                }
            }
            set.sort_unstable();
            Cut::Split(set)
        }
        1 => {
            let from = node_of(rng, plan);
            let to = node_of(rng, plan);
            Cut::OneWay { from, to }
        }
        _ => Cut::IsolateLeader,
    }
}

fn draw_steps(rng: &mut ChaCha8Rng, plan: &Plan) -> Vec<Step> {
    let mix = workload_mix(rng, &plan.classes);
    let total: u32 = mix.weights.iter().map(|(weight, _)| weight).sum();
    let gap_mean_ms = pick(rng, &[5u64, 20, 60]);
    let mut steps = Vec::new();
    // The first election takes a few timeouts: the workload begins then.
    let mut at_ms = plan.raft.election_max_ms * 2;
    // Bit rot past a minority of the voters is outside Raft's model (and
    // excused): one seed in eight goes there, the others stay within f.
    let rot_max = if rng.random_range(0..8u32) == 0 {
        plan.voters
    } else {
        (plan.voters - 1) / 2
    };
    let mut rotted: BTreeSet<u64> = BTreeSet::new();
    while at_ms < plan.safety_ms {
        let mut roll = rng.random_range(0..total.max(1));
        for (weight, make) in &mix.weights {
            if roll < *weight {
                let action = make(rng, plan);
                if let Action::BitRot { node, .. } = action
                    && !rotted.contains(&node)
                {
                    if rotted.len() as u64 >= rot_max {
                        break;
                    }
                    rotted.insert(node);
                }
                steps.push(Step { at_ms, action });
                break;
            }
            roll -= weight;
        }
        at_ms += rng.random_range(1..=gap_mean_ms * 2);
    }
    steps
}
