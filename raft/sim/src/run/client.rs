//! Clients: each write and read a task of the harness, through the node
//! the harness believes leads, bounded by a client timeout (an operation
//! that times out is in doubt).

use std::time::Duration;

use durlog_raft::events::EventRequest;

use super::Cluster;
use crate::exec::{self, HARNESS};
use crate::history::{Op, Outcome};
use crate::runtime::{Sleep, race};

/// How long a client waits for an answer.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(3_000);

fn now_ns() -> u64 {
    exec::with(|inner| inner.now_ns())
}

impl Cluster<'_> {
    fn new_op(&mut self, client: u64, stream: &str, is_write: bool) -> u64 {
        let id = self.next_op;
        self.next_op += 1;
        self.history.lock().insert(
            id,
            Op {
                client,
                stream: stream.to_owned(),
                is_write,
                invoked_ns: self.exec.now_ns(),
                completed_ns: 0,
                outcome: Outcome::Pending,
            },
        );
        id
    }

    /// A write of one event; with `expect`, at the version the client last
    /// saw of the stream.
    pub(super) fn write(&mut self, client: u64, stream: u8, expect: bool, via: u64) {
        let target = self.leader().unwrap_or(via);
        let Some(raft) = self.nodes[&target].raft().cloned() else {
            return;
        };
        let stream = format!("s{stream}");
        let seen = self
            .seen_versions
            .lock()
            .expect("versions")
            .get(&(client, stream.clone()))
            .copied();
        let id = self.new_op(client, &stream, true);
        let request = EventRequest {
            stream,
            event_type: "w".to_owned(),
            data: id.to_le_bytes().to_vec(),
            expected_version: if expect {
                Some(seen.unwrap_or(0))
            } else {
                None
            },
        };
        let (history, versions) = (self.history.clone(), self.seen_versions.clone());
        let trace = self.trace.clone();
        self.trace
            .note(target, format!("op {id}: write {request:?}"));
        let key = (client, request.stream.clone());
        self.exec.spawn_as(HARNESS, async move {
            let answer = race(raft.client_write(request), Sleep::new(CLIENT_TIMEOUT)).await;
            let outcome = match answer {
                Some(Ok(response)) => {
                    if let Some(version) = response.data.version {
                        versions.lock().expect("versions").insert(key, version);
                    }
                    Outcome::Written {
                        log_id: response.log_id,
                        response: response.data,
                    }
                }
                _ => Outcome::Unknown,
            };
            trace.note(0, format!("op {id} done: {outcome:?}"));
            history.complete(id, now_ns(), outcome);
        });
    }

    /// A linearizable read of a stream's version: the leader confirms its
    /// leadership (`get_read_log_id`), then its state machine, once
    /// applied up to the read's log id, gives the version.
    pub(super) fn read(&mut self, client: u64, stream: u8) {
        let Some(target) = self.leader() else { return };
        let node = &self.nodes[&target];
        let (Some(raft), Some(machine)) = (node.raft().cloned(), node.machine.clone()) else {
            return;
        };
        let stream = format!("s{stream}");
        let id = self.new_op(client, &stream, false);
        let (history, trace) = (self.history.clone(), self.trace.clone());
        self.trace.note(target, format!("op {id}: read {stream}"));
        self.exec.spawn_as(HARNESS, async move {
            let read = async {
                // `get_read_log_id`, then waiting here: `ensure_linearizable`
                // waits through openraft's `Wait`, an unbiased `select!` on a
                // `watch`, whose order comes from tokio's thread RNG (the
                // one entropy this runtime cannot seed; README.md).
                let (read_log_id, _) = raft.get_read_log_id().await.ok()?;
                loop {
                    let state = machine.applied();
                    if state.last_applied >= read_log_id {
                        let version = state.versions.get(&stream).copied().unwrap_or(0);
                        return Some((state.last_applied.map(|id| id.index), version));
                    }
                    Sleep::new(Duration::from_millis(1)).await;
                }
            };
            let outcome = match race(read, Sleep::new(CLIENT_TIMEOUT)).await.flatten() {
                Some((index, version)) => Outcome::Read { index, version },
                None => Outcome::Unknown,
            };
            trace.note(0, format!("op {id} done: {outcome:?}"));
            history.complete(id, now_ns(), outcome);
        });
    }
}
