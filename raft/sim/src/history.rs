//! The clients' history: every operation with its invocation and
//! completion instants and its outcome, checked against the committed log
//! once the run ends. The Raft index orders the operations, so the check
//! is direct (no search over orders):
//!
//! - an acknowledged write is in the committed log exactly once, at the
//!   index and with the log id it was told, with the response a replay of
//!   the committed prefix gives (its version, or its rejection by expected
//!   version);
//! - real-time order: a write acknowledged before another was invoked has
//!   the lower index; a read invoked after a write was acknowledged reads
//!   at or past that write's index;
//! - a read's result is the replay of the committed prefix at its index.
//!
//! A write that timed out or failed is in doubt: it may commit or not, and
//! nothing is assumed of it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use durlog_raft::events::EventResponse;
use openraft::LogId;

use crate::check::{Model, Violation};

/// What an operation returned.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Pending,
    /// Failed or timed out: in doubt.
    Unknown,
    Written {
        log_id: LogId<u64>,
        response: EventResponse,
    },
    Read {
        /// The index the read's state was taken at.
        index: Option<u64>,
        version: u64,
    },
}

/// One client operation.
#[derive(Clone, Debug)]
pub struct Op {
    pub client: u64,
    pub stream: String,
    pub is_write: bool,
    pub invoked_ns: u64,
    pub completed_ns: u64,
    pub outcome: Outcome,
}

/// The history; clones share it.
#[derive(Clone, Debug, Default)]
pub struct History {
    ops: Arc<Mutex<BTreeMap<u64, Op>>>,
}

impl History {
    pub fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Op>> {
        self.ops.lock().expect("history")
    }

    /// Records the outcome of `id` at `now_ns`.
    pub fn complete(&self, id: u64, now_ns: u64, outcome: Outcome) {
        if let Some(op) = self.lock().get_mut(&id) {
            op.completed_ns = now_ns;
            op.outcome = outcome;
        }
    }

    /// Every check of the module doc; `complete` says the run ended with
    /// every acknowledged write applied somewhere (the liveness phase
    /// passed), so a missing one is lost.
    pub fn check(&self, model: &Model, complete: bool) -> Result<(), Violation> {
        let ops = self.lock();
        let mut acked: Vec<(u64, u64, u64)> = Vec::new();
        for (&id, op) in ops.iter() {
            if let Outcome::Written { log_id, response } = &op.outcome {
                check_write(model, id, *log_id, response, complete)?;
                acked.push((op.completed_ns, op.invoked_ns, log_id.index));
            }
        }
        for (id, op) in ops.iter() {
            match &op.outcome {
                Outcome::Written { log_id, .. } => {
                    for &(completed, _, index) in &acked {
                        if completed < op.invoked_ns && index >= log_id.index {
                            return Err(format!(
                                "real-time order: write {id} invoked after a write at index \
                                 {index} was acknowledged, but committed at {}",
                                log_id.index
                            ));
                        }
                    }
                }
                Outcome::Read { index, version } => {
                    check_read(model, *id, op, *index, *version, &acked)?
                }
                _ => {}
            }
        }
        Ok(())
    }
}

fn check_write(
    model: &Model,
    id: u64,
    log_id: LogId<u64>,
    response: &EventResponse,
    complete: bool,
) -> Result<(), Violation> {
    match model.committed.get(&log_id.index) {
        Some(key) if key.log_id == log_id && key.op == Some(id) => {}
        Some(key) => {
            return Err(format!(
                "acknowledged write {id} at {log_id}: the committed log holds op {:?} ({}) there",
                key.op, key.log_id
            ));
        }
        None if complete => {
            return Err(format!(
                "acknowledged write {id} at {log_id} is not in the committed log"
            ));
        }
        None => return Ok(()),
    }
    match model.responses.get(&log_id.index) {
        Some(expected) if expected != response => Err(format!(
            "acknowledged write {id} at {log_id} was told {response:?}, the replay gives {expected:?}"
        )),
        _ => Ok(()),
    }
}

fn check_read(
    model: &Model,
    id: u64,
    op: &Op,
    index: Option<u64>,
    version: u64,
    acked: &[(u64, u64, u64)],
) -> Result<(), Violation> {
    for &(completed, _, write_index) in acked {
        if completed < op.invoked_ns && index < Some(write_index) {
            return Err(format!(
                "linearizability: read {id} of {} invoked after the write at index {write_index} \
                 was acknowledged, read at index {index:?}",
                op.stream
            ));
        }
    }
    if let Some(versions) = model.versions_at(index) {
        let expected = versions.get(&op.stream).copied().unwrap_or(0);
        if expected != version {
            return Err(format!(
                "linearizability: read {id} of {} at index {index:?} returned version {version}, \
                 the committed prefix gives {expected}",
                op.stream
            ));
        }
    }
    Ok(())
}
