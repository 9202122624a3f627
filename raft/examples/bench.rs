//! openraft-driven appends/s through durlog-raft on one node (the storage
//! cost alone: no network, an in-memory state machine), next to openraft's
//! own `openraft-memstore` (the store of openraft's examples and tests,
//! which keeps the log in memory: not durable), at 1 and 32 concurrent
//! client writes (`Raft::client_write`), 100-byte events.
//!
//! `compare` runs every round as a fresh process, alternating the stores
//! (and which goes first) round by round, so that a shared machine's noise
//! falls on both alike; at one client it also times the disk's own floor
//! (write + `fdatasync` in place, one thread). It prints the median, lowest and
//! highest appends/s of each, and the ratios taken within each round:
//!
//! ```sh
//! cargo build --release -p durlog-raft --example bench
//! cargo build --release --manifest-path raft/bench-peer/Cargo.toml
//! nice -n -20 target/release/examples/bench compare --rounds 5 \
//!     --dir /var/tmp/durlog-raft-bench \
//!     --peer raft/bench-peer/target/release/raft-bench-peer
//! ```
//!
//! The peer is a separate package outside the workspace: durlog-raft needs
//! openraft's `storage-v2` feature, under which `openraft-memstore`
//! (written for the v1 `RaftStorage`) does not compile, so the two cannot
//! share a build. Both binaries print one `RESULT store=.. clients=..
//! writes=.. seconds=..` line per `round`. Never use tmpfs for `--dir`:
//! durlog's cost is its fsyncs.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use durlog_raft::LogStore;
use durlog_raft::events::{EventRequest, NodeId, StateMachine, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, Raft, RaftNetwork, RaftNetworkFactory, ServerState};

type RpcResult<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

/// The network of a one-node cluster: never used, every call unreachable.
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

/// Bytes of each event's data.
const EVENT_BYTES: usize = 100;

/// One round: a fresh one-node cluster on a durlog store in `dir`,
/// `clients` tasks writing `writes` events in all; returns the seconds the
/// writes took (from the first to the last commit, leader elected).
async fn round(dir: &Path, clients: usize, writes: usize) -> Result<f64, Box<dyn Error>> {
    let config = Arc::new(
        Config {
            heartbeat_interval: 500,
            election_timeout_min: 1500,
            election_timeout_max: 3000,
            ..Config::default()
        }
        .validate()?,
    );
    let store = LogStore::open(dir)?;
    let raft = Raft::new(1, config, NoNetwork, store, StateMachine::new()).await?;
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
                    let request = EventRequest {
                        stream: format!("client-{client}"),
                        event_type: "bench".to_owned(),
                        data: vec![n as u8; EVENT_BYTES],
                        expected_version: None,
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

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: Option<T>) -> T {
    let value = args
        .iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1));
    match (value, default) {
        (Some(value), _) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}: cannot parse {value:?}")),
        (None, Some(default)) => default,
        (None, None) => panic!("{name} is required"),
    }
}

/// Runs one round in a child process and parses its RESULT line.
fn child(program: &Path, dir: &Path, clients: usize, writes: usize) -> f64 {
    let output = Command::new(program)
        .args(["round", "--clients", &clients.to_string()])
        .args(["--writes", &writes.to_string(), "--dir"])
        .arg(dir)
        .output()
        .unwrap_or_else(|error| panic!("run {}: {error}", program.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} round failed: {stdout}{}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find(|line| line.starts_with("RESULT "))
        .expect("a RESULT line");
    let seconds = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("seconds="))
        .expect("seconds=");
    seconds.parse().expect("seconds")
}

/// The stores of a comparison: this binary (durlog-raft) and, if given,
/// the peer's binary.
fn stores(args: &[String]) -> Result<Vec<(&'static str, PathBuf)>, Box<dyn Error>> {
    let mut stores = vec![("durlog-raft", std::env::current_exe()?)];
    if args.iter().any(|arg| arg == "--peer") {
        stores.push(("openraft-memstore", flag(args, "--peer", None)));
    }
    Ok(stores)
}

/// The disk's own floor at this moment: one thread, `writes` times a write
/// of `EVENT_BYTES` and `fdatasync`, overwriting in place a zero-filled
/// (written and synced, not fallocated) file in `dir`, as durlog writes
/// into its preallocated segments; a growing file costs more here, the
/// journal committing each size change. Measured in the same rounds as
/// the stores, it tells a slow round caused by the machine (the floor
/// drops too) from one caused by a store.
fn floor(dir: &Path, writes: usize) -> Result<f64, Box<dyn Error>> {
    use std::os::unix::fs::FileExt;
    std::fs::create_dir_all(dir)?;
    let file = std::fs::File::create(dir.join("floor"))?;
    file.write_all_at(&vec![0; writes * EVENT_BYTES], 0)?;
    file.sync_all()?;
    let event = [7u8; EVENT_BYTES];
    let started = Instant::now();
    for n in 0..writes {
        file.write_all_at(&event, (n * EVENT_BYTES) as u64)?;
        file.sync_data()?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Removes `dir` and everything in it, if it exists (the peer, keeping its
/// log in memory, creates none).
fn remove_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        outcome => outcome,
    }
}

/// appends/s per (row, clients), where a row is a store's position in
/// `stores` or `stores.len()` for the floor, one value per round.
type Rates = BTreeMap<(usize, usize), Vec<f64>>;

/// One round at `clients`: every store once, the order reversed on odd
/// rounds, and the floor after them at one client.
fn compare_round(
    stores: &[(&'static str, PathBuf)],
    dir: &Path,
    (round, clients, writes): (usize, usize, usize),
    rates: &mut Rates,
) -> Result<(), Box<dyn Error>> {
    let mut order: Vec<usize> = (0..stores.len()).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    for at in order {
        let (name, program) = &stores[at];
        let round_dir = dir.join(format!("{name}-{round}-{clients}"));
        remove_dir(&round_dir)?;
        let seconds = child(program, &round_dir, clients, writes);
        remove_dir(&round_dir)?;
        let rate = writes as f64 / seconds;
        eprintln!("round {round}: {name} clients {clients}: {rate:.0} appends/s");
        rates.entry((at, clients)).or_default().push(rate);
    }
    if clients == 1 {
        let round_dir = dir.join(format!("floor-{round}"));
        let rate = writes as f64 / floor(&round_dir, writes)?;
        std::fs::remove_dir_all(&round_dir)?;
        eprintln!("round {round}: fdatasync floor: {rate:.0} writes/s");
        rates.entry((stores.len(), 1)).or_default().push(rate);
    }
    Ok(())
}

/// The median, lowest and highest of `values`, formatted with `digits`.
fn spread(values: &[f64], digits: usize) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let (low, high) = (sorted[0], sorted[sorted.len() - 1]);
    format!("{median:.digits$} | {low:.digits$} | {high:.digits$}")
}

/// Prints the rates, then each round's ratio of durlog-raft to every other
/// row at the same clients (ratios taken within a round, where the
/// machine's load fell on both alike).
fn report(stores: &[(&'static str, PathBuf)], rates: &Rates) {
    let name = |at: usize| {
        stores
            .get(at)
            .map_or("fdatasync floor, overwrite (1 thread)", |s| s.0)
    };
    println!("| store | clients | appends/s median | lowest | highest |");
    println!("|---|---:|---:|---:|---:|");
    for ((at, clients), values) in rates {
        println!("| {} | {clients} | {} |", name(*at), spread(values, 0));
    }
    println!();
    println!("| durlog-raft / | clients | ratio median | lowest | highest |");
    println!("|---|---:|---:|---:|---:|");
    for ((at, clients), values) in rates.iter().filter(|((at, _), _)| *at > 0) {
        let ours = &rates[&(0, *clients)];
        let ratios: Vec<f64> = ours.iter().zip(values).map(|(a, b)| a / b).collect();
        println!("| {} | {clients} | {} |", name(*at), spread(&ratios, 3));
    }
}

fn compare(args: &[String]) -> Result<(), Box<dyn Error>> {
    let dir: PathBuf = flag(args, "--dir", None);
    let rounds: usize = flag(args, "--rounds", Some(3));
    let writes: usize = flag(args, "--writes", Some(3000));
    let stores = stores(args)?;
    let mut rates = Rates::new();
    for round in 0..rounds {
        for clients in [1, 32] {
            compare_round(&stores, &dir, (round, clients, writes), &mut rates)?;
        }
    }
    report(&stores, &rates);
    println!(
        "\n({rounds} rounds of {writes} writes of {EVENT_BYTES}-byte events, one node, in {})",
        dir.display()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("round") => {
            let dir: PathBuf = flag(&args, "--dir", None);
            let clients: usize = flag(&args, "--clients", Some(1));
            let writes: usize = flag(&args, "--writes", Some(3000));
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let seconds = runtime.block_on(round(&dir, clients, writes))?;
            println!(
                "RESULT store=durlog-raft clients={clients} writes={writes} seconds={seconds:.6}"
            );
            Ok(())
        }
        Some("compare") => compare(&args),
        _ => {
            eprintln!(
                "usage: bench compare --dir DIR [--rounds N] [--writes N] [--peer PEER_BINARY]\n       bench round --dir DIR [--clients N] [--writes N]"
            );
            std::process::exit(2);
        }
    }
}
