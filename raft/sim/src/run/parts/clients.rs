//! Clients: each write and read a task of the harness, through the node
//! the harness chose, bounded by a client timeout (an operation that times
//! out is in doubt); their history, and the version each client last saw
//! of each stream.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durlog_raft::events::{EventRequest, StateMachine};
use openraft::Raft;

use crate::check::{Model, Violation};
use crate::config::SimConfig;
use crate::exec::{self, Executor, HARNESS};
use crate::history::{History, Op, Outcome};
use crate::runtime::{Sleep, race};
use crate::tally::Tally;
use crate::trace::Trace;

/// How long a client waits for an answer.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(3_000);

fn now_ns() -> u64 {
    exec::with(|inner| inner.now_ns())
}

pub(in crate::run) struct Clients {
    history: History,
    next_op: u64,
    /// The last version each client saw of each stream.
    seen_versions: Arc<Mutex<BTreeMap<(u64, String), u64>>>,
    trace: Trace,
}

impl Clients {
    pub(in crate::run) fn new(trace: Trace) -> Clients {
        Clients {
            history: History::default(),
            next_op: 1,
            seen_versions: Arc::default(),
            trace,
        }
    }

    fn new_op(&mut self, now_ns: u64, client: u64, stream: &str, is_write: bool) -> u64 {
        let id = self.next_op;
        self.next_op += 1;
        self.history.lock().insert(
            id,
            Op {
                client,
                stream: stream.to_owned(),
                is_write,
                invoked_ns: now_ns,
                completed_ns: 0,
                outcome: Outcome::Pending,
            },
        );
        id
    }

    /// The id the next operation gets.
    pub(in crate::run) fn next_op(&self) -> u64 {
        self.next_op
    }

    /// A write of one event through node `target`; with `expect`, at the
    /// version the client last saw of the stream.
    pub(in crate::run) fn write(
        &mut self,
        exec: &Executor,
        target: u64,
        raft: Raft<SimConfig>,
        client: u64,
        stream: u8,
        expect: bool,
    ) {
        let stream = format!("s{stream}");
        let seen = self
            .seen_versions
            .lock()
            .expect("versions")
            .get(&(client, stream.clone()))
            .copied();
        let id = self.new_op(exec.now_ns(), client, &stream, true);
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
            .note(target, format_args!("op {id}: write {request:?}"));
        let key = (client, request.stream.clone());
        exec.spawn_as(HARNESS, async move {
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
            trace.note(0, format_args!("op {id} done: {outcome:?}"));
            history.complete(id, now_ns(), outcome);
        });
    }

    /// A linearizable read of a stream's version through node `target`
    /// (`machine` its state machine): the leader confirms its leadership
    /// (`get_read_log_id`), then its state machine, once applied up to the
    /// read's log id, gives the version.
    pub(in crate::run) fn read(
        &mut self,
        exec: &Executor,
        target: u64,
        raft: Raft<SimConfig>,
        machine: StateMachine<SimConfig>,
        client: u64,
        stream: u8,
    ) {
        let stream = format!("s{stream}");
        let id = self.new_op(exec.now_ns(), client, &stream, false);
        let (history, trace) = (self.history.clone(), self.trace.clone());
        self.trace
            .note(target, format_args!("op {id}: read {stream}"));
        exec.spawn_as(HARNESS, async move {
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
            trace.note(0, format_args!("op {id} done: {outcome:?}"));
            history.complete(id, now_ns(), outcome);
        });
    }

    /// Operation `op`'s outcome so far.
    pub(in crate::run) fn outcome(&self, op: u64) -> Outcome {
        self.history.lock()[&op].outcome.clone()
    }

    /// The history against the committed log (`complete`: every
    /// acknowledged write must be in it).
    pub(in crate::run) fn check(&self, model: &Model, complete: bool) -> Result<(), Violation> {
        self.history.check(model, complete)
    }

    /// Counts the operations by outcome, at the run's end.
    pub(in crate::run) fn count(&self, tally: &mut Tally) {
        for op in self.history.lock().values() {
            match &op.outcome {
                Outcome::Written { response, .. } => {
                    tally.bump("client-writes-acked");
                    if response.rejected {
                        tally.bump("client-writes-rejected-by-version");
                    }
                }
                Outcome::Read { .. } => tally.bump("linearizable-reads"),
                Outcome::Unknown if op.is_write => tally.bump("client-writes-in-doubt"),
                _ => {}
            }
        }
    }
}
