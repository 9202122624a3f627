//! Power loss at every disk operation of the store's writes, on the
//! simulated disk, with every outcome the disk's fault model allows there,
//! through the testbed's exhaustive explorer (`durlog_testbed::explore`):
//! `append` (one entry, and a batch that rolls a segment), `truncate`,
//! `purge` (of whole segments, and past the last entry) and `save_vote`.
//! Each case is a seeded history (appends, votes, truncations, purges,
//! built once on a disk of its own and copied, durable, onto each run's
//! disk) and one operation. The explorer cuts the power during each disk
//! operation of the store's open and of that operation, and once after it
//! returned; at each cut it walks every subset of the unsynced pages,
//! every unsynced directory entry and size change kept or undone, the
//! interrupted write torn at each sector, and then cuts the recovery too,
//! at each of its operations. After each state the store is reopened and
//! must show:
//!
//! - the vote: the last one saved, or the one being saved;
//! - every entry whose flush was reported, exactly; of an append under way,
//!   a prefix of its entries (never a hole, never half an entry);
//! - nothing a returned truncation removed, nothing a returned purge
//!   removed; a truncation or purge under way whole or not at all;
//! - a store that goes on: the next append lands after what it shows.
//!
//! Seeds: `DURLOG_RAFT_CRASH_SEEDS=A..B` (default 0..3).

use std::collections::BTreeSet;
use std::sync::Arc;

use durlog::vfs::SimVfs;
use durlog::{NextSegment, Options, Tuning};
use durlog_raft::LogStore;
use durlog_raft::events::{EventRequest, TypeConfig};
use durlog_testbed::Violation;
use durlog_testbed::explore::{
    Exhaustible, ExploreOptions, LossFacts, PAGES_MAX, PowerLossHook, StateId, explore, replay,
};
use durlog_testbed::options::NoOptions;
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
fn allowed_states(before: &State, op: &Op) -> Vec<State> {
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
    let tuning = Tuning::default().with(|tuning| {
        tuning.next_segment = NextSegment::OnCall;
    });
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

/// One case: a seeded history, and the operation whose every crash state
/// is explored. Named `SEED-OPERATION` in state ids (`3-truncate`).
#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    name: &'static str,
    op: Op,
    /// The history's end, what the store showed then.
    before: State,
    /// The history's files, durable, copied onto each run's disk.
    image: Arc<Vec<(std::path::PathBuf, Vec<u8>)>>,
}

const NAMES: [&str; 6] = [
    "append one",
    "append a batch that rolls",
    "truncate",
    "purge",
    "purge past the end",
    "save_vote",
];

impl Case {
    /// The case, if the history of `seed` allows operation `name`.
    fn new(seed: u64, name: &str) -> Option<Case> {
        let rt = runtime();
        let scratch = SimVfs::new(seed);
        let (store, before) = build(&scratch, &rt, seed);
        drop(store);
        let (name, op) = operations(seed, &before)
            .into_iter()
            .find(|(op_name, _)| *op_name == name)?;
        let image = scratch
            .files()
            .into_iter()
            .filter_map(|path| scratch.durable_contents(&path).map(|bytes| (path, bytes)))
            .collect();
        Some(Case {
            seed,
            name,
            op,
            before,
            image: Arc::new(image),
        })
    }
}

impl PartialEq for Case {
    fn eq(&self, other: &Case) -> bool {
        (self.seed, self.name) == (other.seed, other.name)
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.seed, self.name.replace(' ', "-"))
    }
}

impl std::str::FromStr for Case {
    type Err = String;
    fn from_str(text: &str) -> Result<Case, String> {
        let bad = || format!("{text:?} is no case: SEED-OPERATION, as in 3-truncate");
        let (seed, name) = text.split_once('-').ok_or_else(bad)?;
        let name = NAMES
            .into_iter()
            .find(|known| known.replace(' ', "-") == name)
            .ok_or_else(bad)?;
        Case::new(seed.parse().map_err(|_| bad())?, name).ok_or_else(bad)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The store's writes, for the explorer.
struct StoreWrites;

impl Exhaustible for StoreWrites {
    type Workload = Case;
    type Options = NoOptions;

    fn command(&self) -> &str {
        "cargo test -p durlog-raft --test crash"
    }

    fn options(&self) -> &NoOptions {
        &NoOptions {}
    }

    fn workloads(&self, seeds: u32) -> Vec<Case> {
        (0..u64::from(seeds))
            .flat_map(|seed| NAMES.iter().filter_map(move |name| Case::new(seed, name)))
            .collect()
    }

    fn run_workload(
        &self,
        case: &Case,
        disk: SimVfs,
        _trace: bool,
        on_power_loss: Option<PowerLossHook<'_>>,
    ) -> (Option<Violation>, Vec<String>) {
        let verdict = run_case(case, &disk, on_power_loss)
            .err()
            .map(|message| Violation { step: 0, message });
        (verdict, Vec::new())
    }

    fn describe(&self, seeds: u32) -> String {
        format!("the store's writes over {seeds} seeded histories")
    }
}

/// One state of `case` on `disk`: open, the operation, a power loss at its
/// end (or where the script cut it), and the checks after each reopen.
fn run_case(case: &Case, disk: &SimVfs, mut hook: Option<PowerLossHook<'_>>) -> Result<(), String> {
    for (path, bytes) in case.image.iter() {
        disk.put_durable_file(path, bytes);
    }
    let rt = runtime();
    let mut power_lost = |in_recovery| {
        hook.as_mut()
            .is_none_or(|hook| hook(disk, LossFacts::new(in_recovery)))
    };
    let mut allowed = vec![case.before.clone()];
    if let Ok(mut store) = open(disk) {
        let outcome = rt.block_on(run(&mut store, &case.op));
        // A failure with no fault to explain it is the store's own.
        let injected = disk.is_halted() || !disk.fault_log().is_empty();
        allowed = match outcome {
            Err(error) if !injected => return Err(format!("{case}: no fault, yet {error}")),
            Err(_) => allowed_states(&case.before, &case.op),
            // Ok though the power went during its tail (a purge is decided
            // once its state file is durable): then it must be whole.
            Ok(()) => vec![apply(&case.before, &case.op)],
        };
        drop(store);
    }
    if !disk.is_halted() {
        disk.halt();
    }
    if !power_lost(false) {
        return Ok(());
    }
    disk.reboot();
    let context = case.to_string();
    // A recovery the script cuts: the next one must find what it left.
    let store = loop {
        match open(disk) {
            Ok(store) if !disk.is_halted() => break store,
            Err(error) if !disk.is_halted() => return Err(format!("{context}: refused: {error}")),
            _ => {
                if !power_lost(true) {
                    return Ok(());
                }
                disk.reboot();
            }
        }
    };
    let seen = observe(&store, &context);
    if !allowed.contains(&seen) {
        return Err(format!(
            "{context}: a state no history allows:\n{seen:#?}\nallowed:\n{allowed:#?}"
        ));
    }
    let mut store = store;
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let next = entries(&mut rng, &seen, 1, 10);
    let appended = rt.block_on(store.blocking_append(next.clone()));
    if disk.is_halted() {
        // The script's second power loss came after the recovery: the
        // explorer counts no such state.
        power_lost(false);
        return Ok(());
    }
    appended.map_err(|error| format!("{context}: the next append: {error}"))?;
    let after = apply(&seen, &Op::Append(next));
    if observe(&store, &context) != after {
        return Err(format!(
            "{context}: the next append is not what the store shows"
        ));
    }
    Ok(())
}

fn seeds() -> std::ops::Range<u64> {
    let Ok(range) = std::env::var("DURLOG_RAFT_CRASH_SEEDS") else {
        return 0..3;
    };
    let (start, end) = range
        .split_once("..")
        .expect("DURLOG_RAFT_CRASH_SEEDS=A..B");
    start.parse().expect("A")..end.parse().expect("B")
}

#[test]
fn power_loss_at_every_disk_operation_keeps_what_was_reported() {
    // The operations in two halves, one thread each: each case is its own
    // disk and seed, so the order they run in changes nothing but the time.
    let (first, second) = NAMES.split_at(NAMES.len() / 2);
    let totals: Vec<u64> = std::thread::scope(|scope| {
        let halves = [first, second].map(|names| scope.spawn(move || explore_all(names)));
        halves
            .into_iter()
            .map(|half| {
                half.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    println!(
        "{} crash states checked over seeds {:?}",
        totals.iter().sum::<u64>(),
        seeds()
    );
}

/// Every crash state of the operations `names` over the seeds; their
/// count.
fn explore_all(names: &[&str]) -> u64 {
    let options = ExploreOptions {
        pages_max: PAGES_MAX,
        recovery_crashes: true,
        fail_fast: false,
        share: Default::default(),
    };
    let mut total = 0;
    for &name in names {
        let (mut points, mut states) = (0, 0);
        for seed in seeds() {
            let Some(case) = Case::new(seed, name) else {
                continue;
            };
            let report = explore(&StoreWrites, &case, options);
            if let Some((id, violation, _)) = &report.first_violation {
                let parsed: StateId<Case> = id.to_string().parse().unwrap();
                let (again, _, _) = replay(&StoreWrites, &parsed, PAGES_MAX);
                panic!(
                    "{id}: {}\n(replays: {:?})",
                    violation.message,
                    again.map(|violation| violation.message)
                );
            }
            points += report.crash_points + report.failure_points;
            states += report.states;
        }
        println!("{name}: {points} fault points, {states} distinct crash states");
        assert!(states > 0, "{name}: no crash state");
        total += states;
    }
    total
}
