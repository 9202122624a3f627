//! Power loss at every disk operation of the store's writes, on the
//! simulated disk: `append` (one entry, and a batch that rolls a segment),
//! `truncate`, `purge` (of whole segments, and past the last entry) and
//! `save_vote`. Each seed builds a history (appends, votes, truncations,
//! purges), then runs one operation with the power cut at its first disk
//! operation, then at its second, and so on until it completes; the power
//! is cut once more right after it returns. After each cut the store is
//! reopened (its recovery itself cut at its first few operations too) and
//! must show:
//!
//! - the vote: the last one saved, or the one being saved;
//! - every entry whose flush was reported, exactly; of an append under way,
//!   a prefix of its entries (never a hole, never half an entry);
//! - nothing a returned truncation removed, nothing a returned purge
//!   removed; a truncation or purge under way whole or not at all;
//! - a store that goes on: the next append lands after what it shows.
//!
//! Odd seeds also turn on the disk's crash-time faults (unsynced pages
//! kept or lost, torn writes, directory entries and size changes kept or
//! undone). Seeds: `DURLOG_RAFT_CRASH_SEEDS=A..B` (default 0..40).

use std::collections::BTreeSet;
use std::sync::Arc;

use durlog::vfs::{FaultConfig, FaultKind, SimVfs};
use durlog::{NextSegment, Options, Tuning};
use durlog_raft::LogStore;
use durlog_raft::events::{EventRequest, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership, Vote};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIR: &str = "/store";
type Store = LogStore<TypeConfig>;

/// What a store shows after a reopen.
#[derive(Clone, Debug, PartialEq)]
struct State {
    vote: Option<Vote<u64>>,
    last_purged: Option<LogId<u64>>,
    /// The entries not purged, as (log id, payload) pairs.
    entries: Vec<(LogId<u64>, String)>,
}

impl State {
    fn next_index(&self) -> u64 {
        let last = self.entries.last().map(|(id, _)| *id).or(self.last_purged);
        last.map_or(0, |id| id.index + 1)
    }

    fn term(&self) -> u64 {
        let entries = self.entries.iter().map(|(id, _)| id.leader_id.term);
        let vote = self.vote.map_or(0, |vote| vote.leader_id.term);
        entries.chain([vote, 1]).max().expect("not empty")
    }
}

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<Entry<TypeConfig>>),
    Truncate(u64),
    Purge(LogId<u64>),
    SaveVote(Vote<u64>),
}

/// An entry as compared: its log id and every byte of its payload.
fn key(entry: &Entry<TypeConfig>) -> (LogId<u64>, String) {
    let payload = match &entry.payload {
        EntryPayload::Blank => "blank".to_owned(),
        EntryPayload::Normal(request) => format!("{request:?}"),
        EntryPayload::Membership(membership) => format!("{membership:?}"),
    };
    (entry.log_id, payload)
}

/// The state `op` leads to from `state`, as the store's contract says.
fn apply(state: &State, op: &Op) -> State {
    let mut after = state.clone();
    match op {
        Op::Append(entries) => {
            let from = state.last_purged.map_or(0, |id| id.index + 1);
            let kept = entries.iter().filter(|entry| entry.log_id.index >= from);
            after.entries.extend(kept.map(key));
        }
        Op::Truncate(index) => after.entries.retain(|(id, _)| id.index < *index),
        Op::Purge(log_id) => {
            after.last_purged = Some(*log_id);
            after.entries.retain(|(id, _)| id.index > log_id.index);
        }
        Op::SaveVote(vote) => after.vote = Some(*vote),
    }
    after
}

/// The states a power loss during `op` may leave.
fn allowed(before: &State, op: &Op) -> Vec<State> {
    match op {
        Op::Append(entries) => (0..=entries.len())
            .map(|count| apply(before, &Op::Append(entries[..count].to_vec())))
            .collect(),
        _ => vec![before.clone(), apply(before, op)],
    }
}

async fn run(store: &mut Store, op: &Op) -> Result<(), openraft::StorageError<u64>> {
    match op.clone() {
        // Returns Ok only once openraft's flush callback reported success.
        Op::Append(entries) => store.blocking_append(entries).await,
        Op::Truncate(index) => store.truncate(log_id(0, index)).await,
        Op::Purge(log_id) => store.purge(log_id).await,
        Op::SaveVote(vote) => store.save_vote(&vote).await,
    }
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(rng: &mut ChaCha8Rng, term: u64, index: u64, data_max: usize) -> Entry<TypeConfig> {
    let payload = match (index, rng.random_range(0..10u32)) {
        (0, _) => EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1, 2, 3])], ())),
        (_, 0) => EntryPayload::Blank,
        _ => EntryPayload::Normal(EventRequest {
            stream: format!("s{}", rng.random_range(0..3u32)),
            event_type: "t".to_owned(),
            data: vec![rng.random_range(0..=255u8); rng.random_range(0..=data_max)],
            expected_version: None,
        }),
    };
    Entry {
        log_id: log_id(term, index),
        payload,
    }
}

fn entries(
    rng: &mut ChaCha8Rng,
    state: &State,
    count: usize,
    data_max: usize,
) -> Vec<Entry<TypeConfig>> {
    let (term, first) = (state.term(), state.next_index());
    (0..count as u64)
        .map(|offset| entry(rng, term, first + offset, data_max))
        .collect()
}

fn options() -> (Options, Tuning) {
    // Segments of a few entries, so that appends roll them and purges
    // remove them; no thread of the log's own, so that a seed's disk
    // operations are always the same.
    let options = Options {
        segment_bytes: 400,
        now: Some(Arc::new(|| 1_700_000_000_000_000_000)),
        ..Options::default()
    };
    let tuning = Tuning {
        next_segment: NextSegment::OnCall,
        ..Tuning::default()
    };
    (options, tuning)
}

fn open(vfs: &SimVfs) -> Result<Store, durlog_raft::Error> {
    let (options, tuning) = options();
    LogStore::open_with(Arc::new(vfs.clone()), DIR, options, tuning)
}

fn observe(store: &Store, context: &str) -> State {
    let (vote, log_state) = store.state();
    let entries: Vec<_> = store
        .entries()
        .unwrap_or_else(|error| panic!("{context}: entries: {error}"))
        .iter()
        .map(key)
        .collect();
    let last = entries
        .last()
        .map(|(id, _)| *id)
        .or(log_state.last_purged_log_id);
    assert_eq!(log_state.last_log_id, last, "{context}: last log id");
    State {
        vote,
        last_purged: log_state.last_purged_log_id,
        entries,
    }
}

/// A seeded history of appends, votes, truncations and purges, run on a
/// fresh store without a crash.
fn build(vfs: &SimVfs, rt: &tokio::runtime::Runtime, seed: u64) -> (Store, State) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut store = open(vfs).expect("open a fresh store");
    let mut state = observe(&store, "fresh");
    for step in 0..14 {
        let op = match rng.random_range(0..10u32) {
            0 => Op::SaveVote(Vote::new_committed(state.term() + 1, 1)),
            1 if state.entries.len() > 3 => {
                let index = state.entries[rng.random_range(1..state.entries.len())]
                    .0
                    .index;
                Op::Truncate(index)
            }
            2 if state.entries.len() > 6 => Op::Purge(state.entries[2].0),
            _ => {
                let count = rng.random_range(1..4);
                Op::Append(entries(&mut rng, &state, count, 60))
            }
        };
        if let Op::Truncate(_) = op {
            // A new leader replaces the suffix: its entries have a newer term.
            state.vote = Some(Vote::new_committed(state.term() + 1, 2));
            rt.block_on(store.save_vote(&state.vote.expect("set")))
                .expect("vote");
        }
        rt.block_on(run(&mut store, &op))
            .unwrap_or_else(|error| panic!("seed {seed} history step {step} {op:?}: {error}"));
        state = apply(&state, &op);
    }
    assert_eq!(observe(&store, "history"), state, "seed {seed}: history");
    (store, state)
}

/// The operations to crash, drawn from the history's end state.
fn operations(seed: u64, state: &State) -> Vec<(&'static str, Op)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let live = &state.entries;
    let mut ops = vec![
        ("append one", Op::Append(entries(&mut rng, state, 1, 60))),
        (
            "append a batch that rolls",
            Op::Append(entries(&mut rng, state, 6, 250)),
        ),
        (
            "save_vote",
            Op::SaveVote(Vote::new_committed(state.term() + 1, 3)),
        ),
        (
            "purge past the end",
            Op::Purge(log_id(state.term(), state.next_index() + 2)),
        ),
    ];
    if live.len() > 1 {
        let at = rng.random_range(1..live.len());
        ops.push(("truncate", Op::Truncate(live[at].0.index)));
        ops.push(("purge", Op::Purge(live[live.len() - 2].0)));
    }
    ops
}

fn faults(seed: u64) -> FaultConfig {
    if seed.is_multiple_of(2) {
        FaultConfig::none()
    } else {
        FaultConfig::only(&[
            FaultKind::LostUnsyncedPages,
            FaultKind::TornWrite,
            FaultKind::LostDirEntry,
            FaultKind::UnsyncedSizeChange,
        ])
    }
}

/// Cuts the power at each disk operation of `op` in turn, and once after it
/// returned; returns the crash points checked.
fn crash_at_every_op(seed: u64, name: &str, rt: &tokio::runtime::Runtime) -> usize {
    for crash_at in 1.. {
        let vfs = SimVfs::with_faults(seed, faults(seed));
        let (mut store, before) = build(&vfs, rt, seed);
        let (_, op) = operations(seed, &before)
            .into_iter()
            .find(|(op_name, _)| *op_name == name)
            .expect("operation");
        let context = format!("seed {seed} {name} crash at op {crash_at}");
        vfs.crash_after_ops(crash_at);
        let outcome = rt.block_on(run(&mut store, &op));
        if !vfs.is_halted() {
            vfs.crash_after_ops(0);
            outcome.unwrap_or_else(|error| panic!("{context}: no crash, yet {error}"));
            // The operation returned: a power loss now keeps all of it.
            drop(store);
            vfs.crash();
            reopen_and_check(&vfs, rt, &context, &[apply(&before, &op)]);
            // The cuts at operations 1..crash_at, and this one.
            return crash_at as usize;
        }
        // An operation may return Ok though the power went during its
        // tail (a purge is decided once its state file is durable): then
        // it must be whole.
        let allowed = match outcome {
            Ok(()) => vec![apply(&before, &op)],
            Err(_) => allowed(&before, &op),
        };
        drop(store);
        vfs.reboot();
        reopen_and_check(&vfs, rt, &context, &allowed);
    }
    unreachable!("the loop ends when the operation completes")
}

/// Reopens, first with the recovery itself cut at each of `RECOVERY_CUTS`,
/// and checks that the state is one of `allowed`, the same at every reopen,
/// and that the store goes on.
fn reopen_and_check(vfs: &SimVfs, rt: &tokio::runtime::Runtime, context: &str, allowed: &[State]) {
    let mut seen_first = None;
    for recovery_crash in RECOVERY_CUTS {
        let context = format!("{context}, recovery cut at op {recovery_crash}");
        if recovery_crash > 0 {
            vfs.crash_after_ops(recovery_crash);
            let _ = open(vfs);
            vfs.crash_after_ops(0);
            vfs.reboot();
        }
        let store = open(vfs).unwrap_or_else(|error| panic!("{context}: refused: {error}"));
        let seen = observe(&store, &context);
        assert!(
            allowed.contains(&seen),
            "{context}: a state no history allows:\n{seen:#?}\nallowed:\n{allowed:#?}"
        );
        // Once a state is recovered, later recoveries find the same one.
        let first = seen_first.get_or_insert_with(|| seen.clone());
        assert_eq!(
            *first, seen,
            "{context}: a later recovery changed the state"
        );
    }
    let mut store = open(vfs).expect("reopen");
    let state = observe(&store, context);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let next = entries(&mut rng, &state, 1, 10);
    rt.block_on(store.blocking_append(next.clone()))
        .unwrap_or_else(|error| panic!("{context}: the next append: {error}"));
    let after = apply(&state, &Op::Append(next));
    assert_eq!(
        observe(&store, context),
        after,
        "{context}: the next append"
    );
}

/// The recovery after each crash is cut at these disk operations (0: not
/// cut) before the reopen that is checked.
const RECOVERY_CUTS: [u64; 4] = [0, 1, 2, 4];

fn seeds() -> std::ops::Range<u64> {
    let Ok(range) = std::env::var("DURLOG_RAFT_CRASH_SEEDS") else {
        return 0..40;
    };
    let (start, end) = range
        .split_once("..")
        .expect("DURLOG_RAFT_CRASH_SEEDS=A..B");
    start.parse().expect("A")..end.parse().expect("B")
}

#[test]
fn power_loss_at_every_disk_operation_keeps_what_was_reported() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let names = [
        "append one",
        "append a batch that rolls",
        "truncate",
        "purge",
        "purge past the end",
        "save_vote",
    ];
    let mut total = 0;
    for name in names {
        let mut points = 0;
        for seed in seeds() {
            let vfs = SimVfs::new(seed);
            let (_, state) = build(&vfs, &rt, seed);
            if operations(seed, &state).iter().any(|(op, _)| *op == name) {
                points += crash_at_every_op(seed, name, &rt);
            }
        }
        println!(
            "{name}: {points} crash points, each reopened after {} recovery cuts",
            RECOVERY_CUTS.len() - 1
        );
        assert!(points > 0, "{name}: no crash point");
        total += points;
    }
    println!("{total} crash points checked over seeds {:?}", seeds());
}
