//! A ready-made Raft type configuration for a replicated event log, and a
//! small in-memory state machine for it: requests append events to named
//! streams, the state machine keeps each stream's version. The tests, the
//! three-node example and the benchmark use them; an application brings its
//! own state machine and keeps [`LogStore`](crate::LogStore).
//!
//! The state machine's state is in memory; [`StateMachine::durable`] keeps
//! its last snapshot on disk (`snapshot_file`) and starts from it after a
//! restart: openraft then re-applies the log from there. So the log must
//! not be purged past the snapshot on disk, which openraft alone does not
//! ensure ([`crate::purge_limit`]): give the machine its store's limit
//! with [`StateMachine::limit_purges`]. (The state machine of
//! [`StateMachine::new`] keeps nothing, which only suits a log that is
//! never purged.)

use std::collections::BTreeMap;
use std::fmt;
use std::io::Cursor;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use durlog::vfs::Vfs;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, RaftTypeConfig,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::purge_limit::PurgeLimit;
use crate::snapshot_file::SnapshotFile;

openraft::declare_raft_types!(
    /// Events appended to streams, replicated with Raft.
    pub TypeConfig:
        D = EventRequest,
        R = EventResponse,
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A node's id.
pub type NodeId = u64;

/// Every type configuration the state machine serves: [`TypeConfig`], or
/// one that differs only in its runtime (a simulator's).
pub trait EventsConfig:
    RaftTypeConfig<
        D = EventRequest,
        R = EventResponse,
        NodeId = NodeId,
        Node = BasicNode,
        Entry = Entry<Self>,
        SnapshotData = Cursor<Vec<u8>>,
    >
{
}

impl<C> EventsConfig for C where
    C: RaftTypeConfig<
            D = EventRequest,
            R = EventResponse,
            NodeId = NodeId,
            Node = BasicNode,
            Entry = Entry<C>,
            SnapshotData = Cursor<Vec<u8>>,
        >
{
}

/// A client's write: one event for a stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRequest {
    /// The stream the event goes to.
    pub stream: String,
    /// The event's type.
    pub event_type: String,
    /// The event's bytes.
    pub data: Vec<u8>,
    /// If set, the event is appended only if the stream's version is this
    /// when the entry is applied (optimistic concurrency, as
    /// `durlog::Expected::Exact`); otherwise it is rejected, and the entry
    /// changes nothing.
    #[serde(default)]
    pub expected_version: Option<u64>,
}

/// What applying an entry returned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventResponse {
    /// The stream's version after the event (`None` for entries that are
    /// not events: blank and membership entries).
    pub version: Option<u64>,
    /// True if the event's expected version did not match (the stream
    /// stayed at `version`).
    #[serde(default)]
    pub rejected: bool,
}

/// What the state machine holds, and what a snapshot serializes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The last entry applied.
    pub last_applied: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<NodeId, BasicNode>,
    /// Each stream's version: its number of events applied.
    pub versions: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
struct Inner {
    applied: Applied,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
    snapshots_built: u64,
    /// Where snapshots are kept, for a durable state machine.
    file: Option<SnapshotFile>,
    /// The store's purge limit, told of every snapshot made durable.
    limit: Option<PurgeLimit<NodeId>>,
}

impl Inner {
    /// `saved` is the snapshot now, durable if the machine is: only now
    /// may the store purge up to it.
    fn keep(&mut self, saved: (SnapshotMeta<NodeId, BasicNode>, Vec<u8>)) {
        if let Some(limit) = &self.limit {
            limit.snapshot_saved(saved.0.last_log_id);
        }
        self.snapshot = Some(saved);
    }

    /// A snapshot could not be installed: a purge waiting for it must not
    /// wait for good.
    fn failed(&self, error: StorageError<NodeId>) -> StorageError<NodeId> {
        if let Some(limit) = &self.limit {
            limit.snapshot_failed(error.to_string());
        }
        error
    }
}

/// The in-memory state machine; clones share one state.
pub struct StateMachine<C = TypeConfig> {
    inner: Arc<Mutex<Inner>>,
    _config: PhantomData<C>,
}

impl<C> Clone for StateMachine<C> {
    fn clone(&self) -> Self {
        StateMachine {
            inner: Arc::clone(&self.inner),
            _config: PhantomData,
        }
    }
}

impl<C> Default for StateMachine<C> {
    fn default() -> Self {
        StateMachine {
            inner: Arc::default(),
            _config: PhantomData,
        }
    }
}

impl<C> fmt::Debug for StateMachine<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMachine")
            .field("inner", &*self.lock())
            .finish()
    }
}

type Result<T> = std::result::Result<T, StorageError<NodeId>>;

impl<C> StateMachine<C> {
    /// An empty state machine.
    pub fn new() -> StateMachine<C> {
        StateMachine::default()
    }

    /// A state machine whose snapshots are kept durably in `dir` on
    /// `vfs`, starting from the last one saved there.
    pub fn durable(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
    ) -> std::result::Result<StateMachine<C>, crate::Error> {
        let file = SnapshotFile::new(vfs, dir)?;
        let saved = file.load()?;
        let machine = StateMachine::new();
        {
            let mut inner = machine.lock();
            if let Some((meta, data)) = saved {
                inner.applied = postcard::from_bytes(&data).map_err(crate::Error::Codec)?;
                inner.snapshot = Some((meta, data));
            }
            inner.file = Some(file);
        }
        Ok(machine)
    }

    /// Has this state machine tell `limit` (its store's
    /// [`LogStore::purge_limit`](crate::LogStore::purge_limit)) of each
    /// snapshot it makes durable, starting with the one it started from, so
    /// that the store never purges entries its snapshot on disk lacks. A
    /// durable state machine needs it (one that is not durable keeps
    /// nothing to protect, and reports each snapshot as it makes it).
    pub fn limit_purges(&self, limit: PurgeLimit<NodeId>) {
        let mut inner = self.lock();
        if let Some((meta, _)) = &inner.snapshot {
            limit.snapshot_saved(meta.last_log_id);
        }
        inner.limit = Some(limit);
    }

    /// A copy of what it holds.
    pub fn applied(&self) -> Applied {
        self.lock().applied.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Applied {
    /// Applies one entry; returns what the client is told.
    pub fn apply<C: EventsConfig>(&mut self, entry: Entry<C>) -> EventResponse {
        self.last_applied = Some(entry.log_id);
        match entry.payload {
            EntryPayload::Blank => EventResponse::default(),
            EntryPayload::Normal(request) => {
                let version = self.versions.entry(request.stream).or_default();
                let rejected = request
                    .expected_version
                    .is_some_and(|expected| expected != *version);
                if !rejected {
                    *version += 1;
                }
                EventResponse {
                    version: Some(*version),
                    rejected,
                }
            }
            EntryPayload::Membership(membership) => {
                self.membership = StoredMembership::new(Some(entry.log_id), membership);
                EventResponse::default()
            }
        }
    }
}

impl<C: EventsConfig> RaftSnapshotBuilder<C> for StateMachine<C> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<C>> {
        let mut inner = self.lock();
        let data = postcard::to_allocvec(&inner.applied)
            .map_err(|error| StorageIOError::write_snapshot(None, AnyError::new(&error)))?;
        inner.snapshots_built += 1;
        let last = inner.applied.last_applied;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: inner.applied.membership.clone(),
            snapshot_id: format!(
                "{}-{}-{}",
                last.map_or(0, |id| id.leader_id.term),
                last.map_or(0, |id| id.index),
                inner.snapshots_built
            ),
        };
        let saved = (meta.clone(), data.clone());
        if let Some(file) = &inner.file {
            // Durable before openraft may purge the log up to it.
            file.save(&saved)
                .map_err(|error| StorageIOError::write_snapshot(None, AnyError::new(&error)))?;
        }
        inner.keep(saved);
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl<C: EventsConfig> RaftStateMachine<C> for StateMachine<C> {
    type SnapshotBuilder = StateMachine<C>;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>)> {
        let inner = self.lock();
        Ok((inner.applied.last_applied, inner.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<EventResponse>>
    where
        I: IntoIterator<Item = Entry<C>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut inner = self.lock();
        Ok(entries
            .into_iter()
            .map(|entry| inner.applied.apply(entry))
            .collect())
    }

    async fn get_snapshot_builder(&mut self) -> StateMachine<C> {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<()> {
        let data = snapshot.into_inner();
        let mut inner = self.lock();
        let applied: Applied = postcard::from_bytes(&data).map_err(|error| {
            inner.failed(
                StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&error)).into(),
            )
        })?;
        let saved = (meta.clone(), data);
        if let Some(file) = &inner.file {
            file.save(&saved).map_err(|error| {
                inner.failed(
                    StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&error))
                        .into(),
                )
            })?;
        }
        inner.applied = applied;
        inner.keep(saved);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<C>>> {
        Ok(self.lock().snapshot.clone().map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
