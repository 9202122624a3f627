//! A store's purge never outruns the state machine's snapshot on disk
//! (`durlog_raft::purge_limit`), at a power loss at any point.
//!
//! openraft 0.9 asks for the purge up to a snapshot it received right
//! after handing the snapshot to the state machine's task, and runs the
//! two concurrently. Here the purge is started first (as openraft's core
//! task does) and the install beside it, a power loss lands at a seeded
//! disk operation of the two (or after both), and after a reboot the
//! entries the log no longer holds must be in the snapshot the state
//! machine starts from. Without the limit the simulator's cluster found
//! nodes stopped at every restart (seeds 498 and 1198 of durlog-raft-sim).

use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use durlog::vfs::SimVfs;
use durlog::{NextSegment, Options, Tuning};
use durlog_raft::events::{EventRequest, StateMachine, TypeConfig};
use durlog_raft::{DiskWork, LogStore};
use openraft::RaftLogReader;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIR: &str = "/node";
const SEEDS: u64 = 300;

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn entry(index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(EventRequest {
            stream: "s".to_owned(),
            event_type: "t".to_owned(),
            data: vec![index as u8; 40],
            expected_version: None,
        }),
    }
}

fn open_store(vfs: &SimVfs) -> LogStore<TypeConfig> {
    // Segments of a few entries, so that a purge removes some.
    let options = Options {
        segment_bytes: 300,
        now: Some(Arc::new(|| 1_700_000_000_000_000_000)),
        ..Options::default()
    };
    let tuning = Tuning::default().with(|tuning| tuning.next_segment = NextSegment::OnCall);
    LogStore::open_with(Arc::new(vfs.clone()), DIR, options, tuning)
        .expect("open the store")
        .with_disk_work(DiskWork::Inline)
}

/// A store and its durable state machine, the machine reporting to the
/// store's limit, as a node opens them.
fn open(vfs: &SimVfs) -> (LogStore<TypeConfig>, StateMachine<TypeConfig>) {
    let store = open_store(vfs);
    let machine = StateMachine::durable(Arc::new(vfs.clone()), Path::new(DIR))
        .expect("open the state machine");
    machine.limit_purges(store.purge_limit());
    (store, machine)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

/// One seed: `last + 1` entries appended, a snapshot up to `upto` received
/// (purge and install side by side), power lost at disk operation
/// `crash_at` from then (0: after both). Returns whether the purge
/// returned Ok.
fn run(seed: u64, rt: &tokio::runtime::Runtime) -> bool {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let last = rng.random_range(4..20u64);
    let upto = rng.random_range(1..=last);
    let crash_at = rng.random_range(0..30u64);
    let vfs = SimVfs::new(seed);
    let (mut store, mut machine) = open(&vfs);
    rt.block_on(store.blocking_append((0..=last).map(entry)))
        .expect("append");
    // The leader's snapshot: its state machine after entries 0..=upto.
    let mut leader = StateMachine::<TypeConfig>::new();
    let snapshot = rt.block_on(async {
        leader.apply((0..=upto).map(entry)).await.expect("apply");
        leader.build_snapshot().await.expect("build")
    });
    vfs.crash_after_ops(crash_at);
    let (purged, _) = rt.block_on(async {
        // The purge first: it must wait for the install beside it.
        tokio::join!(
            store.purge(log_id(upto)),
            machine.install_snapshot(&snapshot.meta, snapshot.snapshot),
        )
    });
    if vfs.is_halted() {
        vfs.reboot();
    } else {
        vfs.crash_after_ops(0);
        vfs.crash();
    }
    drop((store, machine));
    let (store, machine) = open(&vfs);
    let (_, log_state) = store.state();
    let purged_index = log_state.last_purged_log_id.map(|id| id.index);
    let applied_index = machine.applied().last_applied.map(|id| id.index);
    assert!(
        purged_index <= applied_index,
        "seed {seed} (last {last}, snapshot up to {upto}, power lost at op {crash_at}): \
         the log is purged up to {purged_index:?}, but the snapshot on disk holds only up \
         to {applied_index:?}: entries in between are lost"
    );
    purged.is_ok()
}

#[test]
fn a_purge_never_outruns_the_snapshot_on_disk() {
    let rt = runtime();
    let completed = (0..SEEDS).filter(|&seed| run(seed, &rt)).count();
    // Power lost after both (crash_at 0) in about one seed in 30: those
    // purges must have waited for the install and then gone through.
    assert!(completed > 0, "no purge of {SEEDS} seeds completed");
}

#[test]
fn a_purge_waits_for_a_snapshot_that_reaches_it() {
    let rt = runtime();
    let vfs = SimVfs::new(1);
    let (mut store, mut machine) = open(&vfs);
    rt.block_on(store.blocking_append((0..=9).map(entry)))
        .expect("append");
    let mut leader = StateMachine::<TypeConfig>::new();
    let snapshot = rt.block_on(async {
        leader.apply((0..=5).map(entry)).await.expect("apply");
        leader.build_snapshot().await.expect("build")
    });
    let mut context = Context::from_waker(Waker::noop());
    {
        let mut purge = pin!(store.purge(log_id(5)));
        assert!(
            purge.as_mut().poll(&mut context).is_pending(),
            "the purge went ahead with no snapshot"
        );
        rt.block_on(machine.install_snapshot(&snapshot.meta, snapshot.snapshot))
            .expect("install");
        assert!(matches!(
            purge.as_mut().poll(&mut context),
            Poll::Ready(Ok(()))
        ));
    }
    assert_eq!(store.state().1.last_purged_log_id, Some(log_id(5)));
}

/// Replication sends what `limited_get_log_entries(start, end)` returns as
/// the entries right after `start - 1`: a read whose start was purged must
/// return nothing, never the entries after the purge (the simulator's seed
/// 17998: the follower took the skipped index for committed).
#[test]
fn replication_reads_from_its_start_or_nothing() {
    let rt = runtime();
    for purged in 0..8u64 {
        // A store whose limit nobody took: it purges what it is asked to.
        let vfs = SimVfs::new(purged);
        let mut store = open_store(&vfs);
        rt.block_on(store.blocking_append((0..=9).map(entry)))
            .expect("append");
        rt.block_on(store.purge(log_id(purged))).expect("purge");
        let mut reader = rt.block_on(store.get_log_reader());
        for start in 0..=9 {
            let entries = rt
                .block_on(reader.limited_get_log_entries(start, 10))
                .expect("read");
            let indexes: Vec<u64> = entries.iter().map(|entry| entry.log_id.index).collect();
            let expected: Vec<u64> = if start <= purged {
                Vec::new()
            } else {
                (start..10).collect()
            };
            assert_eq!(
                indexes, expected,
                "purged up to {purged}, a replication read from {start}"
            );
        }
    }
}
