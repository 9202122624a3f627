//! The simulated network: openraft's `RaftNetwork` between the nodes of a
//! run, with delays, loss, duplication, reordering and partitions, all
//! drawn from the network's own generator in the order the messages are
//! sent.
//!
//! An RPC is a request and a response, each a message on its own: the
//! request waits its delay, is dropped if the link is cut or the message is
//! lost, and otherwise runs on a task of the target node (so that a kill of
//! the target drops it); the response waits its delay and crosses the
//! reverse link under the same rules. A lost message is never answered:
//! the caller's deadline (openraft's RPC timeout, or the RPC's hard TTL
//! here) ends the call with a `Network` error. The network never answers
//! `Unreachable`: that would put openraft's replication into the back-off
//! whose unbiased `select!` the runtime cannot order (see `runtime.rs`).
//! Independent delays reorder messages; a duplicate is a second delivery of
//! the same request, whose response is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use durlog_raft::events::NodeId;
use durlog_raft::repair::RepairGate;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft, RaftNetwork, RaftNetworkFactory};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::SimConfig;
use crate::runtime::Sleep;
use crate::trace::{Event, Trace};

type Node = Raft<SimConfig>;
type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, E>>;

/// How the network behaves in a run (drawn by the plan).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NetConfig {
    /// One-way delay, uniform in `[min, max]` microseconds.
    pub delay_min_us: u64,
    /// See `delay_min_us`.
    pub delay_max_us: u64,
    /// Chance in a million that a message is lost.
    pub loss_ppm: u32,
    /// Chance in a million that a request is delivered twice.
    pub duplicate_ppm: u32,
    /// Chance in a million that a message takes a long detour (up to 20
    /// times the maximum delay): reordering far beyond jitter.
    pub detour_ppm: u32,
}

impl NetConfig {
    /// A quiet network: no loss, no duplicates, small delays.
    pub fn quiet() -> NetConfig {
        NetConfig {
            delay_min_us: 500,
            delay_max_us: 3_000,
            loss_ppm: 0,
            duplicate_ppm: 0,
            detour_ppm: 0,
        }
    }
}

/// What the network counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetCounts {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub cut: u64,
    pub duplicated: u64,
    pub detoured: u64,
    pub votes_granted: u64,
    pub votes_refused: u64,
    /// Vote requests a repairing node did not send, or did not answer.
    pub votes_withheld_repairing: u64,
}

struct State {
    config: NetConfig,
    rng: ChaCha8Rng,
    nodes: BTreeMap<NodeId, Node>,
    /// Each running node's repair gate: a repairing node sends and answers
    /// no vote request (durlog_raft::repair).
    gates: BTreeMap<NodeId, Arc<RepairGate>>,
    /// Directed links that drop every message: (from, to).
    cut: BTreeSet<(NodeId, NodeId)>,
    counts: NetCounts,
    /// (term, candidate) -> the nodes that granted it their vote.
    grants: BTreeMap<(u64, NodeId), BTreeSet<NodeId>>,
    /// Faults on: after the liveness phase begins, the network is quiet.
    faulty: bool,
}

/// The network of one run; clones share it.
#[derive(Clone)]
pub struct Network {
    state: Arc<Mutex<State>>,
    trace: Trace,
}

/// A message's fate, drawn when it is sent.
enum Fate {
    Deliver(Duration),
    Lost,
}

impl Network {
    /// A network with no node yet.
    pub fn new(seed: u64, config: NetConfig, trace: Trace) -> Network {
        Network {
            state: Arc::new(Mutex::new(State {
                config,
                rng: ChaCha8Rng::seed_from_u64(seed),
                nodes: BTreeMap::new(),
                gates: BTreeMap::new(),
                cut: BTreeSet::new(),
                counts: NetCounts::default(),
                grants: BTreeMap::new(),
                faulty: true,
            })),
            trace,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("network state")
    }

    /// Makes `node` reachable as `id`.
    pub fn attach(&self, id: NodeId, node: Node, gate: Arc<RepairGate>) {
        let mut state = self.lock();
        state.nodes.insert(id, node);
        state.gates.insert(id, gate);
    }

    /// Makes `id` unreachable (its process is down); returns its handle.
    pub fn detach(&self, id: NodeId) -> Option<Node> {
        let mut state = self.lock();
        state.gates.remove(&id);
        state.nodes.remove(&id)
    }

    /// True if node `id` runs and repairs: it takes no part in elections.
    /// Counts a vote request withheld if so.
    fn withholds_votes(&self, id: NodeId) -> bool {
        let mut state = self.lock();
        let repairing = state
            .gates
            .get(&id)
            .is_some_and(|gate| !gate.allows_elections());
        state.counts.votes_withheld_repairing += u64::from(repairing);
        repairing
    }

    /// The running node `id`.
    pub fn node(&self, id: NodeId) -> Option<Node> {
        self.lock().nodes.get(&id).cloned()
    }

    /// Cuts the link from `from` to `to` (one way).
    pub fn cut(&self, from: NodeId, to: NodeId) {
        self.lock().cut.insert((from, to));
    }

    /// Heals `links` (each `(from, to)`).
    pub fn uncut(&self, links: &[(NodeId, NodeId)]) {
        let mut state = self.lock();
        for link in links {
            state.cut.remove(link);
        }
    }

    /// Heals every link.
    pub fn heal(&self) {
        self.lock().cut.clear();
    }

    /// True if any link is cut.
    pub fn is_partitioned(&self) -> bool {
        !self.lock().cut.is_empty()
    }

    /// Ends loss, duplicates and detours, and brings delays under a
    /// millisecond (the liveness phase): a plan's delays may exceed
    /// openraft's RPC deadlines, which slows a healthy cluster without
    /// bound, and the bound is the point of the phase.
    pub fn quiet_down(&self) {
        let mut state = self.lock();
        state.faulty = false;
        state.config.delay_min_us = state.config.delay_min_us.min(100);
        state.config.delay_max_us = state.config.delay_max_us.min(1_000);
    }

    /// What was counted so far.
    pub fn counts(&self) -> NetCounts {
        self.lock().counts.clone()
    }

    /// The fate of a message from `from` to `to`, and whether a duplicate
    /// follows it (after its own delay).
    fn fate(&self, from: NodeId, to: NodeId) -> (Fate, Option<Duration>) {
        let mut state = self.lock();
        state.counts.sent += 1;
        let config = state.config.clone();
        let faulty = state.faulty;
        let rng = &mut state.rng;
        let delay = |rng: &mut ChaCha8Rng| {
            Duration::from_micros(rng.random_range(config.delay_min_us..=config.delay_max_us))
        };
        let chance = |rng: &mut ChaCha8Rng, ppm: u32| {
            faulty && ppm > 0 && rng.random_range(0..1_000_000u32) < ppm
        };
        let lost = chance(rng, config.loss_ppm);
        let detour = chance(rng, config.detour_ppm);
        let duplicate = chance(rng, config.duplicate_ppm);
        let mut first = delay(rng);
        if detour {
            first += delay(rng) * rng.random_range(2..=20u32);
        }
        let second = duplicate.then(|| delay(rng) * 2);
        if state.cut.contains(&(from, to)) {
            state.counts.cut += 1;
            return (Fate::Lost, None);
        }
        if lost {
            state.counts.lost += 1;
            return (Fate::Lost, None);
        }
        state.counts.detoured += u64::from(detour);
        state.counts.duplicated += u64::from(second.is_some());
        (Fate::Deliver(first), second)
    }

    /// True if a message may cross from `from` to `to` now (a link cut
    /// while a message was under way drops it on arrival).
    fn open(&self, from: NodeId, to: NodeId) -> Option<Node> {
        let mut state = self.lock();
        if state.cut.contains(&(from, to)) {
            state.counts.cut += 1;
            return None;
        }
        let node = state.nodes.get(&to).cloned();
        if node.is_some() {
            state.counts.delivered += 1;
        }
        node
    }

    /// Who granted their vote to `candidate` in `term`.
    pub fn grants(&self, term: u64, candidate: NodeId) -> BTreeSet<NodeId> {
        let state = self.lock();
        state
            .grants
            .get(&(term, candidate))
            .cloned()
            .unwrap_or_default()
    }

    fn count_vote(&self, granted: bool, term: u64, candidate: NodeId, voter: NodeId) {
        let mut state = self.lock();
        if granted {
            state
                .grants
                .entry((term, candidate))
                .or_default()
                .insert(voter);
            state.counts.votes_granted += 1;
        } else {
            state.counts.votes_refused += 1;
        }
    }

    /// One RPC from `from` to `to`: `deliver` runs on the target's task.
    async fn call<Req, Resp, E, F, Fut>(
        &self,
        from: NodeId,
        to: NodeId,
        kind: &'static str,
        request: Req,
        ttl: Duration,
        deliver: F,
    ) -> RpcResult<Resp, RaftError<NodeId, E>>
    where
        Req: Clone + Send + 'static,
        Resp: Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Node, Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, RaftError<NodeId, E>>> + Send + 'static,
    {
        let deadline = Sleep::new(ttl);
        let exchange = self.exchange(from, to, kind, request, deliver);
        match crate::runtime::race(exchange, deadline).await {
            Some(Some(Ok(response))) => Ok(response),
            Some(Some(Err(error))) => Err(RPCError::RemoteError(RemoteError::new(to, error))),
            Some(None) | None => {
                let error = std::io::Error::new(std::io::ErrorKind::TimedOut, "message lost");
                Err(RPCError::Network(NetworkError::new(&error)))
            }
        }
    }

    /// The request's and the response's journeys; `None` if either is lost
    /// (the caller then waits for its deadline).
    async fn exchange<Req, Resp, E, F, Fut>(
        &self,
        from: NodeId,
        to: NodeId,
        kind: &'static str,
        request: Req,
        deliver: F,
    ) -> Option<Result<Resp, RaftError<NodeId, E>>>
    where
        Req: Clone + Send + 'static,
        Resp: Send + 'static,
        E: Send + 'static,
        F: Fn(Node, Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, RaftError<NodeId, E>>> + Send + 'static,
    {
        let (fate, duplicate) = self.fate(from, to);
        if let Some(delay) = duplicate {
            self.trace.record(Event::Duplicate { from, to, kind });
            let (network, request, deliver) = (self.clone(), request.clone(), deliver.clone());
            // The copy travels on its own; its response goes nowhere.
            crate::exec::with(|inner| {
                inner.spawn_boxed(
                    crate::exec::HARNESS,
                    Box::pin(async move {
                        Sleep::new(delay).await;
                        if let Some(node) = network.open(from, to) {
                            let _ = crate::runtime::spawn_on(to, deliver(node, request)).await;
                        }
                    }),
                );
            });
        }
        let Fate::Deliver(delay) = fate else {
            self.trace.record(Event::Lost { from, to, kind });
            return never().await;
        };
        self.trace.record(Event::Send { from, to, kind });
        Sleep::new(delay).await;
        let Some(node) = self.open(from, to) else {
            self.trace.record(Event::Dropped { from, to, kind });
            return never().await;
        };
        let Ok(response) = crate::runtime::spawn_on(to, deliver(node, request)).await else {
            // The target died while handling it.
            return never().await;
        };
        let (fate, _) = self.fate(to, from);
        let Fate::Deliver(delay) = fate else {
            self.trace.record(Event::Lost {
                from: to,
                to: from,
                kind,
            });
            return never().await;
        };
        Sleep::new(delay).await;
        if self.open_back(to, from) {
            self.trace.record(Event::Reply {
                from: to,
                to: from,
                kind,
            });
            Some(response)
        } else {
            self.trace.record(Event::Dropped {
                from: to,
                to: from,
                kind,
            });
            never().await
        }
    }

    fn open_back(&self, from: NodeId, to: NodeId) -> bool {
        let mut state = self.lock();
        if state.cut.contains(&(from, to)) {
            state.counts.cut += 1;
            return false;
        }
        state.counts.delivered += 1;
        true
    }
}

/// A future that never completes: a message that never arrives.
async fn never<T>() -> Option<T> {
    std::future::pending::<()>().await;
    None
}

/// Node `from`'s connections.
#[derive(Clone)]
pub struct NetworkFactory {
    pub network: Network,
    pub from: NodeId,
}

/// One node's connection to another.
pub struct Connection {
    network: Network,
    from: NodeId,
    to: NodeId,
}

impl RaftNetworkFactory<SimConfig> for NetworkFactory {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            network: self.network.clone(),
            from: self.from,
            to: target,
        }
    }
}

impl RaftNetwork<SimConfig> for Connection {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<SimConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        let deliver = |node: Node, request| async move { node.append_entries(request).await };
        let (from, to, ttl) = (self.from, self.to, option.hard_ttl());
        self.network
            .call(from, to, "append", request, ttl, deliver)
            .await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<SimConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let deliver = |node: Node, request| async move { node.install_snapshot(request).await };
        let (from, to, ttl) = (self.from, self.to, option.hard_ttl());
        self.network
            .call(from, to, "snapshot", request, ttl, deliver)
            .await
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, RaftError<NodeId>> {
        let (from, to, ttl) = (self.from, self.to, option.hard_ttl());
        if self.network.withholds_votes(from) {
            // Stands for no election: its vote requests never leave.
            let error = std::io::Error::other("repairing: no vote request sent");
            return Err(RPCError::Network(NetworkError::new(&error)));
        }
        let network = self.network.clone();
        // Grants no vote: a request reaching a repairing node (checked on
        // arrival, the process it reaches) is never answered.
        let deliver = move |node: Node, request| {
            let network = network.clone();
            async move {
                if network.withholds_votes(to) {
                    std::future::pending::<()>().await;
                }
                node.vote(request).await
            }
        };
        let asked = request.vote;
        let response = self
            .network
            .call(from, to, "vote", request, ttl, deliver)
            .await;
        if let Ok(response) = &response {
            let term = asked.leader_id().term;
            self.network
                .count_vote(response.vote_granted, term, from, to);
            if self.network.trace.keeps_lines() {
                let verdict = if response.vote_granted {
                    "granted"
                } else {
                    "refused"
                };
                self.network.trace.note(
                    to,
                    format_args!(
                        "{verdict} vote {asked} to n{from} (holds {})",
                        response.vote
                    ),
                );
            }
        }
        response
    }
}
