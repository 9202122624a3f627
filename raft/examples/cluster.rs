//! Three Raft nodes in one process, each with its own durlog store in a
//! temporary directory, talking over in-process channels: a client writes
//! events through the leader, the leader is stopped, the two survivors
//! elect a new one, writes go on, and at the end every node's log is
//! reopened from disk and every entry the client saw committed is checked
//! to be on a majority (same log id, same event).
//!
//! Run: `cargo run --release -p durlog-raft --example cluster [-- WRITES]`
//! (WRITES per phase, 200 by default).

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durlog_raft::LogStore;
use durlog_raft::events::{EventRequest, NodeId, StateMachine, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, EntryPayload, LogId, Raft, RaftNetwork, RaftNetworkFactory};
use tokio::sync::oneshot;

type Node = Raft<TypeConfig>;
type RpcResult<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

/// The in-process network: the running nodes by id. A stopped node is
/// removed, and every message to it fails as unreachable.
#[derive(Clone, Default)]
struct Router {
    nodes: Arc<Mutex<BTreeMap<NodeId, Node>>>,
}

impl Router {
    fn node(&self, id: NodeId) -> Option<Node> {
        self.nodes.lock().expect("router").get(&id).cloned()
    }

    /// Delivers a message to `target` on a task of its own (as a network
    /// would: the sender never runs the receiver's code) and waits for the
    /// answer.
    async fn call<T, E, F, Answer>(
        &self,
        target: NodeId,
        deliver: F,
    ) -> RpcResult<T, RaftError<NodeId, E>>
    where
        T: Send + 'static,
        E: Error + Send + Sync + 'static,
        F: FnOnce(Node) -> Answer + Send + 'static,
        Answer: Future<Output = Result<T, RaftError<NodeId, E>>> + Send + 'static,
    {
        let unreachable = |why: &str| {
            let error = std::io::Error::new(std::io::ErrorKind::NotConnected, why.to_owned());
            RPCError::Unreachable(Unreachable::new(&error))
        };
        let node = self
            .node(target)
            .ok_or_else(|| unreachable("node stopped"))?;
        let (reply, answer) = oneshot::channel();
        tokio::spawn(async move {
            let _ = reply.send(deliver(node).await);
        });
        let answer = answer.await.map_err(|_| unreachable("node went down"))?;
        answer.map_err(|error| RPCError::RemoteError(RemoteError::new(target, error)))
    }
}

struct Connection {
    router: Router,
    target: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: self.clone(),
            target,
        }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let deliver = move |node: Node| async move { node.append_entries(request).await };
        self.router.call(self.target, deliver).await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let deliver = move |node: Node| async move { node.install_snapshot(request).await };
        self.router.call(self.target, deliver).await
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        let deliver = move |node: Node| async move { node.vote(request).await };
        self.router.call(self.target, deliver).await
    }
}

/// Waits until one of `ids` leads (as the others agree), and returns it
/// and its term.
async fn wait_for_leader(router: &Router, ids: &[NodeId]) -> (NodeId, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for &id in ids {
            let Some(node) = router.node(id) else {
                continue;
            };
            let metrics = node.metrics().borrow().clone();
            if metrics.current_leader == Some(id) && metrics.state.is_leader() {
                return (id, metrics.current_term);
            }
        }
        assert!(Instant::now() < deadline, "no leader among {ids:?} in 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `count` events through `leader`; returns each committed entry's
/// log id with the event it carries.
async fn write(
    leader: &Node,
    phase: &str,
    count: usize,
) -> Result<Vec<(LogId<NodeId>, EventRequest)>, Box<dyn Error>> {
    let mut committed = Vec::with_capacity(count);
    for n in 0..count {
        let request = EventRequest {
            stream: format!("orders-{}", n % 7),
            event_type: phase.to_owned(),
            data: format!("{phase} event {n}").into_bytes(),
            expected_version: None,
        };
        let response = leader.client_write(request.clone()).await?;
        committed.push((response.log_id, request));
    }
    Ok(committed)
}

/// Opens the store of each node (retrying while a stopped node's tasks
/// still hold its log) and returns its entries by index.
async fn reopen(root: &Path, id: NodeId) -> BTreeMap<u64, (LogId<NodeId>, EventPayload)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let store = loop {
        match LogStore::<TypeConfig>::open(root.join(format!("node-{id}"))) {
            Ok(store) => break store,
            Err(error) if Instant::now() < deadline => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("reopen node {id}: {error}"),
        }
    };
    let entries = store.entries().expect("read the reopened log");
    entries
        .into_iter()
        .map(|entry| {
            let payload = match entry.payload {
                EntryPayload::Normal(request) => Some(request),
                _ => None,
            };
            (entry.log_id.index, (entry.log_id, payload))
        })
        .collect()
}

type EventPayload = Option<EventRequest>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn Error>> {
    let writes: usize = std::env::args().nth(1).map_or(Ok(200), |arg| arg.parse())?;
    let root = tempfile::tempdir()?;
    let config = Arc::new(
        Config {
            cluster_name: "durlog-example".to_owned(),
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Config::default()
        }
        .validate()?,
    );
    let router = Router::default();
    let ids = [1, 2, 3];
    for id in ids {
        let store = LogStore::open(root.path().join(format!("node-{id}")))?;
        let node = Raft::new(
            id,
            config.clone(),
            router.clone(),
            store,
            StateMachine::new(),
        )
        .await?;
        router.nodes.lock().expect("router").insert(id, node);
    }
    println!(
        "3 nodes, one durlog store each under {}",
        root.path().display()
    );

    let members: BTreeMap<NodeId, BasicNode> =
        ids.iter().map(|&id| (id, BasicNode::default())).collect();
    router.node(1).expect("node 1").initialize(members).await?;
    let started = Instant::now();
    let (leader, term) = wait_for_leader(&router, &ids).await;
    println!(
        "election 1: node {leader} leads in term {term} ({} ms after initialize)",
        started.elapsed().as_millis()
    );

    let node = router.node(leader).expect("leader");
    let started = Instant::now();
    let mut committed = write(&node, "before", writes).await?;
    println!(
        "committed {} entries through node {leader} before the stop ({:.0} writes/s), last {}",
        committed.len(),
        committed.len() as f64 / started.elapsed().as_secs_f64(),
        committed.last().expect("writes").0
    );

    router.nodes.lock().expect("router").remove(&leader);
    node.shutdown().await?;
    drop(node);
    let stopped = Instant::now();
    println!("stopped node {leader}, the leader");

    let survivors: Vec<NodeId> = ids.iter().copied().filter(|&id| id != leader).collect();
    let (new_leader, new_term) = wait_for_leader(&router, &survivors).await;
    assert!(new_term > term, "a new leader needs a new term");
    println!(
        "election 2: node {new_leader} leads in term {new_term} ({} ms after the stop)",
        stopped.elapsed().as_millis()
    );

    let node = router.node(new_leader).expect("new leader");
    let after = write(&node, "after", writes).await?;
    println!(
        "committed {} entries through node {new_leader} after the stop, last {}",
        after.len(),
        after.last().expect("writes").0
    );
    committed.extend(after);
    drop(node);

    let running: Vec<Node> = std::mem::take(&mut *router.nodes.lock().expect("router"))
        .into_values()
        .collect();
    for node in running {
        node.shutdown().await?;
    }
    verify(root.path(), &ids, &committed).await;
    Ok(())
}

/// Reopens every node's log from disk and checks that each committed entry
/// is on a majority with its log id and event.
async fn verify(root: &Path, ids: &[NodeId], committed: &[(LogId<NodeId>, EventRequest)]) {
    let mut logs = BTreeMap::new();
    for &id in ids {
        logs.insert(id, reopen(root, id).await);
    }
    let mut holders: BTreeMap<NodeId, usize> = ids.iter().map(|&id| (id, 0)).collect();
    for (log_id, request) in committed {
        let on: BTreeSet<NodeId> = logs
            .iter()
            .filter(|(_, entries)| {
                entries.get(&log_id.index) == Some(&(*log_id, Some(request.clone())))
            })
            .map(|(&id, _)| id)
            .collect();
        assert!(
            on.len() * 2 > ids.len(),
            "entry {log_id} is on {on:?} only, not a majority"
        );
        for id in on {
            *holders.get_mut(&id).expect("node") += 1;
        }
    }
    let sizes: Vec<String> = logs
        .iter()
        .map(|(id, entries)| format!("node {id} {} entries", entries.len()))
        .collect();
    println!("reopened the 3 logs from disk: {}", sizes.join(", "));
    let held: Vec<String> = holders
        .iter()
        .map(|(id, count)| format!("node {id} holds {count}"))
        .collect();
    println!(
        "verified on reopen: all {} committed entries on a majority ({})",
        committed.len(),
        held.join(", ")
    );
}
