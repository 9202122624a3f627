//! [`LogStore`]: openraft's `RaftLogStorage` on a durlog log.
//!
//! openraft calls the store from its core task, one call at a time (`&mut
//! self`), so every write is serialized by construction. The disk work of
//! each write runs on tokio's blocking pool (`spawn_blocking`): a sync takes
//! a tenth of a millisecond or more, which must not stall the runtime's
//! other tasks (heartbeats, replication, clients), and works on any tokio
//! runtime. (Blocking the worker instead was measured: `block_in_place`
//! sped up one client and collapsed 32, blocking inline stalled both.)
//! A deterministic simulator, which runs no threads and no tokio runtime,
//! asks for [`DiskWork::Inline`] instead: the same work, on the calling
//! task.
//!
//! What readers see is the [`View`]: the anchor, the last purged log id and
//! the last log id. It changes only after the disk work it describes is
//! durable, so a reader never sees an entry that is not on disk. A
//! truncation holds the view's write lock through its disk work, so no
//! reader reads a record that is being replaced.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use durlog::vfs::{PosixVfs, Vfs};
use durlog::{Log, Options, Tuning};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, LogId, LogState, RaftLogId, RaftTypeConfig, StorageError, StorageIOError, Vote,
};

use crate::append::append_records;
use crate::mapping::Anchor;
use crate::meta::{MetaBody, MetaFile};
use crate::purge_limit::PurgeLimit;
use crate::reader::{LogReader, read_entries};
use crate::repair::{self, RepairGate, RepairReport};
use crate::shared::{Shared, View, read};
use crate::{Error, codec};

/// The durlog log's directory inside the store's.
pub const LOG_DIR_NAME: &str = "log";

/// Where a store runs the disk work of its writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiskWork {
    /// On tokio's blocking pool (`spawn_blocking`): a sync must not stall
    /// the runtime's other tasks. Needs a tokio runtime.
    #[default]
    Blocking,
    /// On the calling task, which blocks until the work is done: for a
    /// single-threaded deterministic simulator (no threads, no tokio
    /// runtime), where the disk is memory and a thread would bring its
    /// scheduler's order into the run.
    Inline,
}

/// openraft's log store on a durlog log: see the crate doc.
pub struct LogStore<C: RaftTypeConfig> {
    shared: Arc<Shared<C::NodeId>>,
    /// Only the store writes it; behind a mutex so that a blocking task can
    /// hold it.
    meta: Arc<Mutex<MetaFile<C::NodeId>>>,
    disk_work: DiskWork,
    /// See [`LogStore::with_leader_restore`].
    leader_restore: bool,
    /// Closed while a repair is under way (see [`crate::repair`]).
    gate: Arc<RepairGate>,
    /// What the open found and did.
    repair: RepairReport,
    /// See [`LogStore::purge_limit`].
    limit: PurgeLimit<C::NodeId>,
    _config: PhantomData<C>,
}

impl<C: RaftTypeConfig> fmt::Debug for LogStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.shared.log.dir())
            .field("view", &*read(&self.shared.view))
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in a blocking task fails the call that ran it; the state it
    // guards is only ever replaced whole, after the disk work succeeded.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `work` where `disk_work` says; a panic in it resumes here.
async fn blocking<T: Send + 'static>(
    disk_work: DiskWork,
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    match disk_work {
        DiskWork::Inline => work(),
        DiskWork::Blocking => match tokio::task::spawn_blocking(work).await {
            Ok(result) => result,
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        },
    }
}

impl<C: RaftTypeConfig> LogStore<C> {
    /// Opens (creating it if missing) the store in `dir` on the host's file
    /// system, with durlog's default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<LogStore<C>, Error> {
        LogStore::open_with(
            Arc::new(PosixVfs),
            dir,
            Options::default(),
            Tuning::default(),
        )
    }

    /// Opens the store in `dir` on any file system (`SimVfs` in tests),
    /// its log with `options` and `tuning`. Finishes a purge that a crash
    /// interrupted, and checks the last record against the mapping.
    pub fn open_with(
        vfs: Arc<dyn Vfs>,
        dir: impl AsRef<Path>,
        options: Options,
        tuning: Tuning,
    ) -> Result<LogStore<C>, Error> {
        let dir = dir.as_ref();
        vfs.create_dir_all(dir)?;
        let meta = MetaFile::<C::NodeId>::load(Arc::clone(&vfs), dir)?;
        if meta.body().repair.is_some() {
            return Err(Error::Inconsistent(format!(
                "{}: a repair is under way; open it with LogStore::open_for_repair",
                dir.display()
            )));
        }
        let log = Log::open_tuned(vfs, dir.join(LOG_DIR_NAME), options, tuning)?;
        LogStore::assemble(log, meta, RepairReport::default())
    }

    /// [`LogStore::open_with`], but a log whose acknowledged entries are
    /// damaged opens for repair instead of being refused: see
    /// [`crate::repair`]. The caller must keep the node out of elections
    /// while [`LogStore::repair_gate`] says so (its network sends and
    /// answers no vote request); `raft.meta` damaged is still refused.
    pub fn open_for_repair(
        vfs: Arc<dyn Vfs>,
        dir: impl AsRef<Path>,
        options: Options,
        tuning: Tuning,
    ) -> Result<LogStore<C>, Error> {
        let dir = dir.as_ref();
        vfs.create_dir_all(dir)?;
        let mut meta = MetaFile::<C::NodeId>::load(Arc::clone(&vfs), dir)?;
        let mut report = RepairReport {
            resumed: meta.body().repair.is_some(),
            ..RepairReport::default()
        };
        let log = repair::open_log::<C>(&vfs, dir, &mut meta, &options, tuning, &mut report)?;
        let mut body = meta.body().clone();
        if body.repair.is_some() && log.last_seq() + 1 < body.anchor.seq {
            // Every record from the anchor on went aside: the next entry,
            // at the anchor's index, goes in the next record.
            body.anchor = crate::mapping::Anchor::next(log.last_seq(), body.anchor.index);
            meta.save(body)?;
        }
        report.reach = meta.body().repair;
        LogStore::assemble(log, meta, report)
    }

    fn assemble(log: Log, meta: MetaFile<C::NodeId>, repair: RepairReport) -> Result<Self, Error> {
        let body = meta.body().clone();
        let view = recover_view::<C>(&log, &body)?;
        if body.last_purged.is_some() {
            log.purge_before(purge_target(&view))?;
        }
        let store = LogStore {
            gate: Arc::new(RepairGate::new(body.repair.is_some())),
            shared: Arc::new(Shared {
                log,
                view: RwLock::new(view),
            }),
            meta: Arc::new(Mutex::new(meta)),
            disk_work: DiskWork::default(),
            leader_restore: true,
            repair,
            limit: PurgeLimit::default(),
            _config: PhantomData,
        };
        store.finish_repair_if_reached()?;
        Ok(store)
    }

    /// The limit a state machine that keeps its state only in snapshots
    /// reports its durable snapshots to ([`crate::purge_limit`] says why):
    /// from this call on, a purge waits until a snapshot reaching it is
    /// reported. A store whose limit is never asked for purges what
    /// openraft asks at once.
    pub fn purge_limit(&self) -> PurgeLimit<C::NodeId> {
        self.limit.enforce();
        self.limit.clone()
    }

    /// The gate the node's network consults: closed while a repair is
    /// under way.
    pub fn repair_gate(&self) -> Arc<RepairGate> {
        Arc::clone(&self.gate)
    }

    /// What this store's open repaired (empty if nothing was damaged).
    pub fn repair_report(&self) -> &RepairReport {
        &self.repair
    }

    /// Ends a repair whose reach the log holds again: the reach cleared in
    /// `raft.meta` durably, and only then the gate opened.
    fn finish_repair_if_reached(&self) -> Result<(), Error> {
        if self.gate.allows_elections() {
            return Ok(());
        }
        let last = read(&self.shared.view).last_log_id.clone();
        let mut meta = lock(&self.meta);
        let Some(reach) = meta.body().repair else {
            return Ok(());
        };
        if !reach.is_covered_by(last.as_ref()) {
            return Ok(());
        }
        let mut body = meta.body().clone();
        body.repair = None;
        meta.save(body)?;
        self.gate.open();
        tracing::warn!(
            "durlog-raft: {}: repaired, the log reaches {reach} again; the node takes part in \
             elections",
            self.shared.log.dir().display()
        );
        Ok(())
    }

    /// With `false`, a restarted node does not resume leadership at once:
    /// `read_vote` reports a committed vote as not committed, so the node
    /// starts as a follower and leads again only through an election.
    ///
    /// Why: openraft 0.9 restores a leader whose committed vote names it,
    /// without an election, and its linearizable reads then use the first
    /// log id of its term or the committed index it knows, which after a
    /// restart is only what its state machine had applied (this store does
    /// not keep the committed index). A read can then miss writes that the
    /// same leader acknowledged before the restart: the cluster simulation
    /// found it (durlog-raft-sim, seed 363: a read at index 1 after a write
    /// at index 2 was acknowledged). openraft's main branch has the same
    /// switch (`Config::enable_leader_restore`). The vote on disk stays as
    /// saved; the next vote openraft saves is greater than both forms.
    /// `true` (the default) reports the vote exactly as saved, which
    /// openraft's storage suite checks.
    pub fn with_leader_restore(mut self, leader_restore: bool) -> LogStore<C> {
        self.leader_restore = leader_restore;
        self
    }

    /// This store, running its disk work as `disk_work` says.
    pub fn with_disk_work(mut self, disk_work: DiskWork) -> LogStore<C> {
        self.disk_work = disk_work;
        self
    }

    /// The durlog log underneath (to inspect it; writing to it directly
    /// breaks the store).
    pub fn log(&self) -> &Log {
        &self.shared.log
    }

    /// The last vote saved, and the last purged and last log ids.
    pub fn state(&self) -> (Option<Vote<C::NodeId>>, LogState<C>) {
        let vote = lock(&self.meta).body().vote.clone();
        let view = read(&self.shared.view);
        let state = LogState {
            last_purged_log_id: view.last_purged.clone(),
            last_log_id: view.last_log_id.clone(),
        };
        (vote, state)
    }

    /// Every entry in the log, in order (for checks and tools).
    pub fn entries(&self) -> Result<Vec<C::Entry>, Error> {
        let view = read(&self.shared.view);
        let (first, end) = (view.first_index(), view.end_index());
        if first >= end {
            return Ok(Vec::new());
        }
        read_entries::<C>(&self.shared.log, view.anchor, first, end - first)
    }

    /// Appends `entries` durably; returns once every one is synced.
    async fn append_durably(&self, mut entries: Vec<C::Entry>) -> Result<(), Error> {
        // An entry at a purged index is already in a snapshot: dropping it
        // is appending it and purging it again. openraft's storage suite
        // appends such entries; openraft itself does not.
        let after_purged = read(&self.shared.view).after_purged();
        entries.retain(|entry| entry.get_log_id().index >= after_purged);
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let first_index = first.get_log_id().index;
        let mut events = Vec::with_capacity(entries.len());
        for (offset, entry) in entries.iter().enumerate() {
            let index = entry.get_log_id().index;
            if index != first_index + offset as u64 {
                return Err(Error::Contract(format!(
                    "an append with a hole: index {index} at position {offset} after {first_index}"
                )));
            }
            events.push(codec::encode::<C>(entry)?);
        }
        let anchor = self.anchor_for_append(first_index)?;
        if anchor != read(&self.shared.view).anchor {
            // The log starts anew past its end: the anchor must be durable
            // before any record that relies on it.
            self.save_meta(move |body| body.anchor = anchor).await?;
            write(&self.shared.view).anchor = anchor;
        }
        let first_seq = anchor.seq_of(first_index);
        let shared = Arc::clone(&self.shared);
        let (appended, outcome) = blocking(self.disk_work, move || {
            Ok(append_records(&shared.log, first_seq, events))
        })
        .await?;
        if appended > 0 {
            let last = entries[appended - 1].get_log_id().clone();
            write(&self.shared.view).last_log_id = Some(last);
        }
        outcome?;
        self.finish_repair_if_reached()
    }

    /// The anchor an append starting at `first_index` goes by: the view's,
    /// if the append continues the log; a new one if the log holds no entry
    /// (see `mapping`).
    fn anchor_for_append(&self, first_index: u64) -> Result<Anchor, Error> {
        let view = read(&self.shared.view);
        if view.is_empty() && first_index >= view.after_purged() {
            Ok(Anchor::next(self.shared.log.last_seq(), first_index))
        } else if first_index == view.end_index() {
            Ok(view.anchor)
        } else {
            Err(Error::Contract(format!(
                "an append starting at index {first_index}, but the log ends before {}",
                view.end_index()
            )))
        }
    }

    /// Removes every entry from `log_id.index` on.
    async fn truncate_durably(&self, log_id: LogId<C::NodeId>) -> Result<(), Error> {
        let shared = Arc::clone(&self.shared);
        blocking(self.disk_work, move || {
            let mut view = write(&shared.view);
            let index = log_id.index;
            if index < view.after_purged() {
                return Err(Error::Contract(format!(
                    "truncate from index {index}, at or before the last purged {:?}",
                    view.last_purged
                )));
            }
            if index >= view.end_index() {
                return Ok(());
            }
            // Entries before the anchor were never written (the log's first
            // entry came later): truncating from one of them empties the log.
            let kept_seq = view.anchor.seq_of(index.max(view.first_index())) - 1;
            shared.log.truncate_after(kept_seq)?;
            view.last_log_id = last_entry::<C>(&shared.log, &view)?.or(view.last_purged.clone());
            Ok(())
        })
        .await
    }

    /// Purges every entry up to `log_id` once the purge limit reaches it:
    /// durable in `raft.meta` first, then whole segments removed from the
    /// log.
    async fn purge_durably(&self, log_id: LogId<C::NodeId>) -> Result<(), Error> {
        self.limit
            .reached(log_id.index)
            .await
            .map_err(Error::SnapshotFailed)?;
        let (shared, meta) = (Arc::clone(&self.shared), Arc::clone(&self.meta));
        blocking(self.disk_work, move || {
            let mut meta = lock(&meta);
            let purged_index = meta.body().last_purged.as_ref().map(|id| id.index);
            if purged_index >= Some(log_id.index) {
                return Ok(());
            }
            let mut view = read(&shared.view).clone();
            if view.end_index() <= log_id.index + 1 {
                // Every entry goes: the next one, `log_id.index + 1`, will be
                // in the next record.
                view.anchor = Anchor::next(shared.log.last_seq(), log_id.index + 1);
                view.last_log_id = Some(log_id.clone());
            }
            view.last_purged = Some(log_id.clone());
            let body = MetaBody {
                last_purged: Some(log_id.clone()),
                anchor: view.anchor,
                ..meta.body().clone()
            };
            meta.save(body)?;
            let target = purge_target(&view);
            *write(&shared.view) = view;
            shared.log.purge_before(target)?;
            Ok(())
        })
        .await
    }

    async fn save_vote_durably(&self, vote: Vote<C::NodeId>) -> Result<(), Error> {
        self.save_meta(move |body| body.vote = Some(vote)).await
    }

    /// Saves `raft.meta` with `change` made to it, durably.
    async fn save_meta(
        &self,
        change: impl FnOnce(&mut MetaBody<C::NodeId>) + Send + 'static,
    ) -> Result<(), Error> {
        let meta = Arc::clone(&self.meta);
        blocking(self.disk_work, move || {
            let mut meta = lock(&meta);
            let mut body = meta.body().clone();
            change(&mut body);
            meta.save(body)
        })
        .await
    }
}

/// The seq `Log::purge_before` is given: that of the first entry not
/// purged (records before it hold purged entries).
fn purge_target<NID: openraft::NodeId>(view: &View<NID>) -> u64 {
    view.anchor.seq_of(view.first_index())
}

/// The id of the log's last entry, if its last record holds one that is
/// not purged.
fn last_entry<C: RaftTypeConfig>(
    log: &Log,
    view: &View<C::NodeId>,
) -> Result<Option<LogId<C::NodeId>>, Error> {
    match view.anchor.index_of(log.last_seq()) {
        Some(index) if index >= view.first_index() => {
            let last = read_entries::<C>(log, view.anchor, index, 1)?;
            Ok(last.last().map(|entry| entry.get_log_id().clone()))
        }
        _ => Ok(None),
    }
}

/// The view of a log just opened: its last record checked against the
/// anchor, and the first entry not purged against the log's first seq.
fn recover_view<C: RaftTypeConfig>(
    log: &Log,
    body: &MetaBody<C::NodeId>,
) -> Result<View<C::NodeId>, Error> {
    let mut view = View {
        anchor: body.anchor,
        last_purged: body.last_purged.clone(),
        last_log_id: body.last_purged.clone(),
    };
    let last_seq = log.last_seq();
    if last_seq + 1 < view.anchor.seq {
        return Err(Error::Inconsistent(format!(
            "the log ends at seq {last_seq}, but raft.meta says seq {} holds index {}",
            view.anchor.seq, view.anchor.index
        )));
    }
    view.last_log_id = last_entry::<C>(log, &view)?.or(view.last_purged.clone());
    if !view.is_empty() && view.anchor.seq_of(view.first_index()) < log.first_seq() {
        return Err(Error::Inconsistent(format!(
            "the log was purged up to seq {} outside the store, but index {} is not",
            log.first_seq(),
            view.first_index()
        )));
    }
    Ok(view)
}

fn storage_error<NID: openraft::NodeId>(
    error: Error,
    make: fn(AnyError) -> StorageIOError<NID>,
) -> StorageError<NID> {
    make(AnyError::new(&error)).into()
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for LogStore<C> {
    type LogReader = LogReader<C>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        Ok(self.state().1)
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader::new(Arc::clone(&self.shared))
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.save_vote_durably(vote.clone())
            .await
            .map_err(|error| storage_error(error, StorageIOError::write_vote))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        let vote = self.state().0;
        // A repairing node must not resume leadership (crate::repair).
        if self.leader_restore && self.gate.allows_elections() {
            return Ok(vote);
        }
        Ok(vote.map(|vote| {
            Vote::new(
                vote.leader_id().term,
                vote.leader_id().voted_for().expect("a vote names a node"),
            )
        }))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let entries: Vec<C::Entry> = entries.into_iter().collect();
        self.append_durably(entries)
            .await
            .map_err(|error| storage_error(error, StorageIOError::write_logs))?;
        // Every entry is synced: only now may openraft count it as flushed.
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.truncate_durably(log_id)
            .await
            .map_err(|error| storage_error(error, StorageIOError::write_logs))
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.purge_durably(log_id)
            .await
            .and_then(|()| self.finish_repair_if_reached())
            .map_err(|error| storage_error(error, StorageIOError::write_logs))
    }
}
