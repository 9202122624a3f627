//! Does openraft 0.9.25 ever have two appends in flight? A store whose
//! `append` returns before its entries are durable (calling openraft's
//! flush callback later) only groups commits if openraft calls `append`
//! again before that callback fires. This test measures it: a one-node
//! cluster, 32 concurrent `client_write`s, on a wrapper of `LogStore` whose
//! `append` returns at once and reports the flush 2 ms later, from another
//! task, counting the appends in flight at once.
//!
//! openraft 0.9.25 never has more than one: its core task awaits the flush
//! callback right after `append` returns (`RaftCore::append_to_log`, "a
//! temp wrapper to make non-blocking `append_to_log` a blocking"), before
//! it handles the next command. Pipelining inside the store therefore
//! cannot batch openraft 0.9's writes; openraft 0.10 submits and moves on
//! (`run_append_entries`), which is when it would. If this test fails
//! after an openraft upgrade, the pipelined design is worth building.

use std::collections::BTreeSet;
use std::error::Error;
use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use durlog_raft::events::{EventRequest, NodeId, StateMachine, TypeConfig};
use durlog_raft::{LogReader, LogStore};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{LogFlushed, RaftLogStorage, RaftLogStorageExt};
use openraft::{
    BasicNode, Config, Entry, LogId, LogState, Raft, RaftLogReader, RaftNetwork,
    RaftNetworkFactory, ServerState, StorageError, Vote,
};
use tokio::sync::Mutex;

/// `LogStore`, with every flush reported late and the appends in flight
/// counted.
struct Deferred {
    inner: Arc<Mutex<LogStore<TypeConfig>>>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    appends: Arc<AtomicUsize>,
}

impl RaftLogReader<TypeConfig> for Deferred {
    async fn try_get_log_entries<RB>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>>
    where
        RB: RangeBounds<u64> + Clone + fmt::Debug + Send,
    {
        self.inner.lock().await.try_get_log_entries(range).await
    }
}

impl RaftLogStorage<TypeConfig> for Deferred {
    type LogReader = LogReader<TypeConfig>;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        self.inner.lock().await.get_log_state().await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.inner.lock().await.get_log_reader().await
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().await.save_vote(vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        self.inner.lock().await.read_vote().await
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        self.appends.fetch_add(1, Ordering::SeqCst);
        let (inner, in_flight) = (Arc::clone(&self.inner), Arc::clone(&self.in_flight));
        // Returns at once; the flush is reported from another task later,
        // as a pipelined store would. (Readers would not see these entries
        // before then: a one-node cluster reads none before the flush.)
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            let outcome = inner.lock().await.blocking_append(entries).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            callback.log_io_completed(outcome.map_err(std::io::Error::other));
        });
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().await.truncate(log_id).await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().await.purge(log_id).await
    }
}

/// The network of a one-node cluster: never used.
struct NoNetwork;

fn unreachable<E: Error>() -> RPCError<NodeId, BasicNode, E> {
    let error = std::io::Error::other("a one-node cluster has no network");
    RPCError::Unreachable(Unreachable::new(&error))
}

impl RaftNetworkFactory<TypeConfig> for NoNetwork {
    type Network = NoNetwork;
    async fn new_client(&mut self, _target: NodeId, _node: &BasicNode) -> NoNetwork {
        NoNetwork
    }
}

type RpcResult<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl RaftNetwork<TypeConfig> for NoNetwork {
    async fn append_entries(
        &mut self,
        _request: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        Err(unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _request: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        Err(unreachable())
    }

    async fn vote(
        &mut self,
        _request: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        Err(unreachable())
    }
}

const CLIENTS: usize = 32;
const WRITES: usize = 320;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_0_9_awaits_each_flush_before_the_next_append() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let inner = Arc::new(Mutex::new(LogStore::open(dir.path()).expect("open")));
    let store = Deferred {
        inner: Arc::clone(&inner),
        in_flight: Arc::default(),
        max_in_flight: Arc::default(),
        appends: Arc::default(),
    };
    let (max_in_flight, appends) = (Arc::clone(&store.max_in_flight), Arc::clone(&store.appends));
    let config = Arc::new(Config::default().validate().expect("config"));
    let raft = Raft::new(1, config, NoNetwork, store, StateMachine::new())
        .await
        .expect("raft");
    raft.initialize(BTreeSet::from([1])).await.expect("init");
    raft.wait(Some(Duration::from_secs(10)))
        .state(ServerState::Leader, "one node leads")
        .await
        .expect("leader");
    let before = appends.load(Ordering::SeqCst);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let raft = raft.clone();
            tokio::spawn(async move {
                for n in 0..WRITES / CLIENTS {
                    let request = EventRequest {
                        stream: format!("client-{client}"),
                        event_type: "t".to_owned(),
                        data: vec![n as u8; 100],
                        expected_version: None,
                    };
                    raft.client_write(request).await.expect("client write");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("client task");
    }
    raft.shutdown().await.expect("shutdown");
    let appends = appends.load(Ordering::SeqCst) - before;
    let max = max_in_flight.load(Ordering::SeqCst);
    let groups = inner.lock().await.log().stats().groups;
    println!(
        "{WRITES} writes from {CLIENTS} clients: {appends} appends, at most {max} in flight, \
         {groups} group commits in all"
    );
    assert_eq!(appends, WRITES, "openraft 0.9 appends one entry per call");
    assert_eq!(
        max, 1,
        "openraft now issues an append before the last one's flush: pipelining would pay"
    );
}
