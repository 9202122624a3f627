//! One round of durlog-raft's benchmark on openraft-memstore: a fresh
//! one-node cluster, `--clients` tasks writing `--writes` requests in all;
//! prints `RESULT store=openraft-memstore clients=.. writes=.. seconds=..`
//! (`--dir` is accepted and unused: the store keeps its log in memory).

use std::collections::BTreeSet;
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{Config, Raft, RaftNetwork, RaftNetworkFactory, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};

type RpcResult<T, E = RaftError<MemNodeId>> = Result<T, RPCError<MemNodeId, (), E>>;

/// The network of a one-node cluster: never used.
struct NoNetwork;

fn unreachable<E: Error>() -> RPCError<MemNodeId, (), E> {
    let error = std::io::Error::other("a one-node cluster has no network");
    RPCError::Unreachable(Unreachable::new(&error))
}

impl RaftNetworkFactory<TypeConfig> for NoNetwork {
    type Network = NoNetwork;
    async fn new_client(&mut self, _target: MemNodeId, _node: &()) -> NoNetwork {
        NoNetwork
    }
}

impl RaftNetwork<TypeConfig> for NoNetwork {
    async fn append_entries(
        &mut self,
        _request: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<MemNodeId>> {
        Err(unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _request: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<MemNodeId>, RaftError<MemNodeId, InstallSnapshotError>>
    {
        Err(unreachable())
    }

    async fn vote(
        &mut self,
        _request: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<MemNodeId>> {
        Err(unreachable())
    }
}

async fn round(clients: usize, writes: usize) -> Result<f64, Box<dyn Error>> {
    let config = Arc::new(
        Config {
            heartbeat_interval: 500,
            election_timeout_min: 1500,
            election_timeout_max: 3000,
            ..Config::default()
        }
        .validate()?,
    );
    let (log_store, state_machine) = Adaptor::new(MemStore::new_async().await);
    let raft = Raft::new(1, config, NoNetwork, log_store, state_machine).await?;
    raft.initialize(BTreeSet::from([1])).await?;
    raft.wait(Some(Duration::from_secs(10)))
        .state(ServerState::Leader, "one node leads")
        .await?;
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let raft = raft.clone();
            let count = writes / clients + usize::from(client < writes % clients);
            tokio::spawn(async move {
                for n in 0..count {
                    // About the 100 bytes of durlog-raft's benchmark events.
                    let request = ClientRequest {
                        client: format!("client-{client}"),
                        serial: n as u64,
                        status: "x".repeat(100),
                    };
                    raft.client_write(request).await.expect("client write");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    raft.shutdown().await?;
    Ok(seconds)
}

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1))
        .map_or(default, |value| value.parse().expect("a number"))
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("round") {
        eprintln!("usage: raft-bench-peer round [--clients N] [--writes N] [--dir DIR]");
        std::process::exit(2);
    }
    let (clients, writes) = (flag(&args, "--clients", 1), flag(&args, "--writes", 3000));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let seconds = runtime.block_on(round(clients, writes))?;
    println!(
        "RESULT store=openraft-memstore clients={clients} writes={writes} seconds={seconds:.6}"
    );
    Ok(())
}
