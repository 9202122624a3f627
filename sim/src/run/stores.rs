//! What event-sourcing users expect, in a run (SPEC section 14): stream
//! metadata and deletions set and consumer positions recorded at seeded
//! points, with power losses inside them; the appends a power loss left in
//! doubt retried with `append_idempotent`, each landing exactly once; a
//! consumer resuming from its recorded position and missing nothing. How
//! the oracle judges a change to the tables is in `oracle/tables.rs`, a
//! retry and a resumed consumer in `oracle/stores.rs`; reads are
//! checked against the model's tables by its own reading of the contract
//! (`oracle/reads.rs`, `model/tables.rs`).

use durlog::{Deletion, Error, Expected, Log};

use crate::golden;
use crate::model::{Deleted, Entry, IdsSay, ModelEvent};
use crate::plan::{Action, CrashSpec};

use super::oracle::excuse::{self, Evidence};
use super::oracle::tables::{TableChange, consumer_name, metadata_of};
use super::oracle::{Check, Retry, SubFilter, Submitted};
use super::{CrashPoint, World, clock};

/// A metadata change as the plan gives it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MetadataChange {
    pub(crate) max_count: Option<u64>,
    /// Versions below this many before the stream's end hidden.
    pub(crate) truncate_back: Option<u64>,
    /// A maximum age of this many ticks of the run's clock.
    pub(crate) max_age_ticks: Option<u64>,
}

impl World<'_> {
    /// Runs one of the event-store actions (`plan::insert_event_store`).
    pub(super) fn act_on_stores(&mut self, action: &Action) -> Check {
        match action {
            Action::SubscribeType { back, event_type } => {
                let filter = SubFilter {
                    prefix: String::new(),
                    event_type: Some(self.plan.type_name(*event_type).to_owned()),
                    ..SubFilter::default()
                };
                self.subscribe(*back, filter);
                Ok(())
            }
            Action::SetMetadata {
                stream,
                max_count,
                truncate_back,
                max_age_ticks,
                crash,
            } => {
                let change = MetadataChange {
                    max_count: *max_count,
                    truncate_back: *truncate_back,
                    max_age_ticks: *max_age_ticks,
                };
                self.set_metadata(&format!("s{stream}"), change, *crash)
            }
            Action::Delete {
                stream,
                hard,
                crash,
            } => self.delete(&format!("s{stream}"), *hard, *crash),
            Action::RecordPosition {
                consumer,
                back,
                crash,
            } => self.record_position(&consumer_name(*consumer), *back, *crash),
            Action::Retry { altered } => self.retry(Some(*altered)),
            other => unreachable!("{other} is not an event-store action"),
        }
    }

    pub(super) fn set_metadata(
        &mut self,
        stream: &str,
        change: MetadataChange,
        crash: CrashSpec,
    ) -> Check {
        let model = self.oracle.model();
        let before = model.tables.entry(stream);
        let version = model.version(stream);
        let after = Entry {
            max_count: change.max_count,
            truncate_before: change
                .truncate_back
                .map(|back| version.saturating_sub(back).max(1)),
            max_age: change
                .max_age_ticks
                .map(|ticks| clock::span(ticks).as_nanos() as u64),
            ..before
        };
        note!(
            self,
            "      set_stream_metadata({stream}): {before:?} -> {after:?}"
        );
        let metadata = metadata_of(&after);
        let outcome = self.with_crash(crash, |log| log.set_stream_metadata(stream, metadata));
        let change = TableChange::Stream {
            stream: stream.to_owned(),
            before,
            after,
        };
        let changed = self.judge(change, outcome)?;
        self.result.counters.metadata_changes += u64::from(changed);
        self.after_table_change()
    }

    pub(super) fn delete(&mut self, stream: &str, hard: bool, crash: CrashSpec) -> Check {
        let model = self.oracle.model();
        let before = model.tables.entry(stream);
        let deleted = match hard {
            true => Deleted::Hard,
            false => Deleted::Soft(model.version(stream)),
        };
        let after = Entry {
            deleted: Some(deleted),
            ..before
        };
        note!(self, "      delete_stream({stream}, hard {hard})");
        let deletion = if hard { Deletion::Hard } else { Deletion::Soft };
        let outcome = self.with_crash(crash, |log| log.delete_stream(stream, deletion));
        let change = TableChange::Stream {
            stream: stream.to_owned(),
            before,
            after,
        };
        let changed = self.judge(change, outcome)?;
        self.result.counters.deletions += u64::from(changed);
        self.after_table_change()
    }

    /// Consumer `name` records the seq `back` records before the last,
    /// then resumes from the position it has: reading the whole log from
    /// there must give every record after it.
    pub(super) fn record_position(&mut self, name: &str, back: u32, crash: CrashSpec) -> Check {
        let model = self.oracle.model();
        let seq = model.last_seq().saturating_sub(u64::from(back));
        let before = model.tables.consumers.get(name).copied();
        let after = before.map_or(seq, |before| before.max(seq));
        note!(
            self,
            "      record_consumer_position({name}, {seq}): {before:?} -> {after}"
        );
        let outcome = self.with_crash(crash, |log| log.record_consumer_position(name, seq));
        let change = TableChange::Consumer {
            name: name.to_owned(),
            before,
            after,
        };
        let changed = self.judge(change, outcome)?;
        self.result.counters.positions_recorded += u64::from(changed);
        self.after_table_change()?;
        self.resume(name)
    }

    /// A consumer resumes after its position: what it reads is every
    /// record the model has after it, as the oracle's read_all checks it.
    fn resume(&mut self, name: &str) -> Check {
        let Some(position) = self.log().consumer_position(name) else {
            return Ok(());
        };
        let mark = self.node.vfs.fault_log_len();
        let read = self.log().read_all(position + 1, usize::MAX);
        let faults = self.node.vfs.fault_log_since(mark);
        let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
        self.result.counters.resumptions += 1;
        self.oracle
            .check_resume(name, position, read, &evidence, &faults)
    }

    /// The appends left in doubt at the last reopen, retried by their
    /// clients at the version they expected: each must land exactly once.
    /// With none in doubt and `again`, the last acknowledged append is
    /// sent again, altered or not (`Action::Retry`).
    pub(super) fn retry(&mut self, again: Option<bool>) -> Check {
        if !self.pending.is_empty() {
            // A retry would commit them in its group, ahead of itself.
            note!(self, "      appends pending: retries wait");
            return Ok(());
        }
        let mut retryable = std::mem::take(&mut self.oracle.retryable);
        if retryable.is_empty()
            && let Some(altered) = again
        {
            retryable.extend(self.last_append_again(altered));
        }
        for submitted in retryable {
            let base = match submitted.expected {
                Expected::Exact(version) => version,
                Expected::NoStream => 0,
                Expected::Any | Expected::StreamExists => continue,
            };
            let events: Vec<durlog::Event> =
                submitted.events.iter().map(ModelEvent::to_event).collect();
            note!(
                self,
                "      retry {} at version {base} with {} events",
                submitted.stream,
                events.len()
            );
            // Its group is a group like any other: the retention may purge
            // before it, subscribers may poll between its write and sync.
            self.open_retention_window(golden::record_bytes(&submitted.stream, &submitted.events));
            let mark = self.node.vfs.fault_log_len();
            let at = clock::time_at(self.node.ticks() + 1);
            let outcome =
                self.log()
                    .append_idempotent(&submitted.stream, Expected::Exact(base), &events);
            note!(self, "      -> {outcome:?}");
            self.check_deliveries_during_commit()?;
            let faults = self.node.vfs.fault_log_since(mark);
            let faulted = self.node.vfs.is_halted() || excuse::explains_io_error(&faults);
            let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
            let poisoned = self.log().is_poisoned();
            let retry = Retry {
                stream: &submitted.stream,
                base,
                events: &submitted.events,
                at,
                max_bytes: self.node.max_bytes,
                poisoned,
            };
            let kind = self
                .oracle
                .check_retry(retry, &outcome, faulted, &evidence, &faults)?;
            kind.count(&mut self.result.counters);
            // One whose ids the stream held wrote nothing.
            let by_ids = matches!(
                self.oracle
                    .model()
                    .ids_say(&submitted.stream, &submitted.events),
                Some(IdsSay::Landed(_) | IdsSay::Partly)
            );
            if matches!(outcome, Err(Error::Io(_)))
                && (self.node.vfs.is_halted() || poisoned)
                && !by_ids
            {
                // As any append whose commit failed so: the next reopen
                // finds it whole or not at all.
                let events = submitted.events.iter();
                let events = events
                    .map(|event| ModelEvent {
                        at,
                        ..event.clone()
                    })
                    .collect();
                self.oracle.in_doubt_again(Submitted {
                    expected: Expected::Exact(base),
                    events,
                    ..submitted
                });
            }
            self.close_retention_window()?;
            self.check_told_during_commit(mark)?;
            if self.node.vfs.is_halted() || self.log().is_poisoned() {
                return self.after_table_change();
            }
        }
        Ok(())
    }

    /// The last acknowledged append as its client would send it again
    /// (at the version it expected), or with its last event's data
    /// `altered`; none if the model has no record.
    fn last_append_again(&self, altered: bool) -> Option<Submitted> {
        let model = self.oracle.model();
        let (stream, first_version, events) = model.record(model.last_seq())?;
        let mut events = events.to_vec();
        if altered {
            events
                .last_mut()
                .expect("a record holds events")
                .data
                .push(0xa5);
        }
        Some(Submitted {
            client: 0,
            stream: stream.to_owned(),
            expected: Expected::Exact(first_version - 1),
            events,
        })
    }

    /// Runs `call` on the log with the power lost during its `crash`-th
    /// disk operation, if any; returns its outcome and whether a fault was
    /// injected that may explain a failure.
    fn with_crash(
        &mut self,
        crash: CrashSpec,
        call: impl FnOnce(&Log) -> Result<(), Error>,
    ) -> (Result<(), Error>, bool) {
        let mark = self.node.vfs.fault_log_len();
        if let CrashSpec::AfterOps(n) = crash {
            self.node.vfs.crash_after_ops(n);
        }
        let outcome = call(self.log());
        self.node.vfs.crash_after_ops(0);
        note!(self, "      -> {outcome:?}");
        let faulted = self.node.vfs.is_halted()
            || excuse::explains_io_error(&self.node.vfs.fault_log_since(mark));
        (outcome, faulted)
    }

    /// Hands a change's outcome to the oracle, with what the open log shows
    /// of it now; returns whether the change took effect.
    fn judge(
        &mut self,
        change: TableChange,
        outcome: (Result<(), Error>, bool),
    ) -> Result<bool, String> {
        let memory = self.in_memory(&change);
        self.oracle.check_table_change(change, outcome, memory)
    }

    /// Whether the log shows `change` now; `None` once the power is lost.
    fn in_memory(&self, change: &TableChange) -> Option<bool> {
        if self.node.vfs.is_halted() {
            return None;
        }
        let log = self.log();
        Some(match change {
            TableChange::Stream { stream, after, .. } => self.oracle.shows(log, stream, after),
            TableChange::Consumer { name, after, .. } => {
                log.consumer_position(name) == Some(*after)
            }
        })
    }

    /// A change that lost power reopens the log; one that poisoned it
    /// restarts the process.
    fn after_table_change(&mut self) -> Check {
        if self.node.vfs.is_halted() {
            return self.power_loss(CrashPoint::Tables, CrashSpec::None, false);
        }
        if self.log().is_poisoned() {
            note!(self, "      the log is poisoned: restart the process");
            return self.restart(CrashSpec::None);
        }
        Ok(())
    }
}
