//! What the checkers see of a node: its store's and its state machine's
//! calls and their outcomes, recorded by wrappers that delegate every call
//! to durlog-raft's `LogStore` and the events `StateMachine` unchanged.
//!
//! The checkers never read a node's disk while it runs (a read would draw
//! the disk's faults and change the run): what a store holds is what its
//! calls returned, and after a restart what its recovery shows.

use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::io::Cursor;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use durlog_raft::events::{EventResponse, StateMachine};
use durlog_raft::{LogReader, LogStore};
use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, LogState, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StoredMembership, Vote,
};

use crate::config::SimConfig;
use crate::trace::Fnv;

type Id = LogId<u64>;
type StorageResult<T> = Result<T, StorageError<u64>>;

/// An entry as the checkers compare it: its log id and a hash of every
/// byte of its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryKey {
    pub log_id: Id,
    pub payload: u64,
    /// The client operation it carries (its data), if a client wrote it.
    pub op: Option<u64>,
}

impl EntryKey {
    pub fn of(entry: &Entry<SimConfig>) -> EntryKey {
        let mut hash = Fnv::default();
        let mut op = None;
        match &entry.payload {
            EntryPayload::Blank => 0u8.hash(&mut hash),
            EntryPayload::Normal(request) => {
                1u8.hash(&mut hash);
                request.stream.hash(&mut hash);
                request.event_type.hash(&mut hash);
                request.data.hash(&mut hash);
                request.expected_version.hash(&mut hash);
                op = <[u8; 8]>::try_from(request.data.as_slice())
                    .ok()
                    .map(u64::from_le_bytes);
            }
            EntryPayload::Membership(membership) => {
                2u8.hash(&mut hash);
                format!("{membership:?}").hash(&mut hash);
            }
        }
        EntryKey {
            log_id: entry.log_id,
            payload: hash.finish(),
            op,
        }
    }
}

/// What a node's state machine did.
#[derive(Clone, Debug)]
pub enum MachineEvent {
    Applied(Applied),
    /// A snapshot installed: its meta and the state it holds.
    Installed(SnapshotMeta<u64, BasicNode>, durlog_raft::events::Applied),
}

/// One application of an entry by a node's state machine.
#[derive(Clone, Debug)]
pub struct Applied {
    pub entry: Entry<SimConfig>,
    pub key: EntryKey,
    pub response: EventResponse,
}

/// What a node's store and state machine did since the checkers last
/// looked (`take_*`), and what its store holds.
#[derive(Debug, Default)]
pub struct ProbeState {
    /// The entries the store holds by index, as its calls returned.
    pub log: std::collections::BTreeMap<u64, EntryKey>,
    pub last_purged: Option<Id>,
    pub vote: Option<Vote<u64>>,
    /// Applications and snapshot installs not yet checked, in order.
    pub machine: Vec<MachineEvent>,
    /// A truncation under way from this index (a crash may leave it done).
    pub truncating: Option<u64>,
    /// Entries that returned truncations removed, not appended again since:
    /// a restart must not show them.
    pub removed: std::collections::BTreeMap<u64, Id>,
    /// Entries the node told someone are durable (its store's append
    /// returned, or it answered an AppendEntries with success), not since
    /// truncated or purged by a call that returned: a restart must show
    /// each of them, or a snapshot covering it.
    pub claims: std::collections::BTreeMap<u64, Id>,
    /// Entries appended since the checkers last looked, each with the log
    /// id before it in this node's log (`None`: none, or purged).
    pub new_entries: Vec<(EntryKey, Option<Id>)>,
    /// The store operation that last failed (a power loss fails the one it
    /// struck).
    pub last_failed_op: Option<&'static str>,
    /// Store calls that returned an error.
    pub storage_errors: u64,
    /// The last of them, as it read.
    pub last_error: Option<String>,
    pub appends: u64,
    pub truncations: u64,
    /// Truncations that removed at least one entry.
    pub truncations_removing: u64,
    pub purges: u64,
    pub votes_saved: u64,
    pub snapshots_built: u64,
    pub snapshots_installed: u64,
}

/// A node's probe; clones share it. It outlives the node's process.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    state: Arc<Mutex<ProbeState>>,
}

impl Probe {
    pub fn lock(&self) -> MutexGuard<'_, ProbeState> {
        self.state.lock().expect("probe")
    }

    /// Records `result` of the store call `op` if it failed.
    #[allow(clippy::result_large_err)]
    fn failed_in<T>(&self, op: &'static str, result: StorageResult<T>) -> StorageResult<T> {
        if let Err(error) = &result {
            let mut probe = self.lock();
            probe.storage_errors += 1;
            probe.last_failed_op = Some(op);
            probe.last_error = Some(format!("{op}: {error}"));
        }
        result
    }
}

/// `LogStore`, recorded.
pub struct ProbedStore {
    pub inner: LogStore<SimConfig>,
    pub probe: Probe,
}

// openraft's error type, passed through as its traits return it.
#[allow(clippy::result_large_err)]
impl ProbedStore {
    fn failed<T>(&self, result: StorageResult<T>) -> StorageResult<T> {
        self.failed_in("read", result)
    }

    fn failed_in<T>(&self, op: &'static str, result: StorageResult<T>) -> StorageResult<T> {
        self.probe.failed_in(op, result)
    }
}

impl RaftLogReader<SimConfig> for ProbedStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<SimConfig>>> {
        self.get_log_reader().await.try_get_log_entries(range).await
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> StorageResult<Vec<Entry<SimConfig>>> {
        let mut reader = self.get_log_reader().await;
        reader.limited_get_log_entries(start, end).await
    }
}

/// `LogReader`, its errors recorded: openraft's replication reads through
/// it, and an error there stops the node as a store call's does.
pub struct ProbedReader {
    inner: LogReader<SimConfig>,
    probe: Probe,
}

impl RaftLogReader<SimConfig> for ProbedReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<SimConfig>>> {
        let result = self.inner.try_get_log_entries(range).await;
        self.probe.failed_in("read", result)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> StorageResult<Vec<Entry<SimConfig>>> {
        let result = self.inner.limited_get_log_entries(start, end).await;
        self.probe.failed_in("read", result)
    }
}

impl RaftLogStorage<SimConfig> for ProbedStore {
    type LogReader = ProbedReader;

    async fn get_log_state(&mut self) -> StorageResult<LogState<SimConfig>> {
        let result = self.inner.get_log_state().await;
        self.failed(result)
    }

    async fn get_log_reader(&mut self) -> ProbedReader {
        ProbedReader {
            inner: self.inner.get_log_reader().await,
            probe: self.probe.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> StorageResult<()> {
        let result = self.inner.save_vote(vote).await;
        if result.is_ok() {
            let mut probe = self.probe.lock();
            probe.vote = Some(*vote);
            probe.votes_saved += 1;
        }
        self.failed_in("save-vote", result)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<u64>>> {
        let result = self.inner.read_vote().await;
        self.failed(result)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<SimConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<SimConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<SimConfig>> = entries.into_iter().collect();
        let keys: Vec<EntryKey> = entries.iter().map(EntryKey::of).collect();
        let result = self.inner.append(entries, callback).await;
        if result.is_ok() {
            let mut probe = self.probe.lock();
            probe.appends += 1;
            let after_purged = probe.last_purged.map_or(0, |id| id.index + 1);
            for key in keys {
                let index = key.log_id.index;
                if index >= after_purged {
                    let prev = index
                        .checked_sub(1)
                        .and_then(|prev| probe.log.get(&prev))
                        .map(|prev| prev.log_id);
                    probe.log.insert(index, key);
                    probe.claims.insert(index, key.log_id);
                    probe.removed.remove(&index);
                    probe.new_entries.push((key, prev));
                }
            }
        }
        self.failed_in("append", result)
    }

    async fn truncate(&mut self, log_id: Id) -> StorageResult<()> {
        self.probe.lock().truncating = Some(log_id.index);
        let result = self.inner.truncate(log_id).await;
        if result.is_ok() {
            let mut probe = self.probe.lock();
            probe.truncating = None;
            probe.truncations += 1;
            let removed = probe.log.split_off(&log_id.index);
            probe.claims.split_off(&log_id.index);
            for (&index, key) in &removed {
                probe.removed.insert(index, key.log_id);
            }
            probe.truncations_removing += u64::from(!removed.is_empty());
        }
        self.failed_in("truncate", result)
    }

    async fn purge(&mut self, log_id: Id) -> StorageResult<()> {
        let result = self.inner.purge(log_id).await;
        if result.is_ok() {
            let mut probe = self.probe.lock();
            probe.purges += 1;
            let kept = probe.log.split_off(&(log_id.index + 1));
            probe.log = kept;
            let kept = probe.claims.split_off(&(log_id.index + 1));
            probe.claims = kept;
            let kept = probe.removed.split_off(&(log_id.index + 1));
            probe.removed = kept;
            if probe.last_purged < Some(log_id) {
                probe.last_purged = Some(log_id);
            }
        }
        self.failed_in("purge", result)
    }
}

/// The events `StateMachine`, recorded.
#[derive(Clone)]
pub struct ProbedMachine {
    pub inner: StateMachine<SimConfig>,
    pub probe: Probe,
}

impl RaftSnapshotBuilder<SimConfig> for ProbedMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<SimConfig>> {
        let result = self.inner.build_snapshot().await;
        let mut probe = self.probe.lock();
        match &result {
            Ok(_) => probe.snapshots_built += 1,
            Err(error) => {
                probe.storage_errors += 1;
                probe.last_failed_op = Some("snapshot");
                probe.last_error = Some(format!("snapshot: {error}"));
            }
        }
        result
    }
}

impl RaftStateMachine<SimConfig> for ProbedMachine {
    type SnapshotBuilder = ProbedMachine;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<Id>, StoredMembership<u64, BasicNode>)> {
        self.inner.applied_state().await
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<EventResponse>>
    where
        I: IntoIterator<Item = Entry<SimConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<SimConfig>> = entries.into_iter().collect();
        let result = self.inner.apply(entries.clone()).await;
        let mut probe = self.probe.lock();
        match &result {
            Ok(responses) => {
                for (entry, response) in entries.into_iter().zip(responses) {
                    let key = EntryKey::of(&entry);
                    probe.machine.push(MachineEvent::Applied(Applied {
                        entry,
                        key,
                        response: response.clone(),
                    }));
                }
            }
            Err(error) => {
                probe.storage_errors += 1;
                probe.last_error = Some(format!("apply: {error}"));
            }
        }
        result
    }

    async fn get_snapshot_builder(&mut self) -> ProbedMachine {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        self.inner.begin_receiving_snapshot().await
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let result = self.inner.install_snapshot(meta, snapshot).await;
        let mut probe = self.probe.lock();
        match &result {
            Ok(()) => {
                probe.snapshots_installed += 1;
                let state = self.inner.applied();
                probe
                    .machine
                    .push(MachineEvent::Installed(meta.clone(), state));
            }
            Err(error) => {
                probe.storage_errors += 1;
                probe.last_failed_op = Some("snapshot");
                probe.last_error = Some(format!("snapshot: {error}"));
            }
        }
        result
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<SimConfig>>> {
        self.inner.get_current_snapshot().await
    }
}
