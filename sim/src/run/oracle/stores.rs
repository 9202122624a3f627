//! Idempotent retries and consumers resuming, as the oracle judges them
//! (SPEC section 14): a retry lands exactly once, as the model's ids and
//! versions say it must; a consumer resuming from its recorded position
//! misses nothing after it. The runner's side is `run/stores.rs`.

use durlog::Error;

use crate::model::{IdsSay, ModelEvent};
use crate::report::{Counters, Excuse};

use super::excuse::{self, Evidence};
use super::{Check, Oracle, SubFilter};

/// An idempotent retry of `events` at version `base` of `stream`, the
/// log's clock at `at` for its events.
pub(crate) struct Retry<'a> {
    pub(crate) stream: &'a str,
    pub(crate) base: u64,
    pub(crate) events: &'a [ModelEvent],
    pub(crate) at: i64,
    pub(crate) max_bytes: u64,
    /// The log is poisoned after it.
    pub(crate) poisoned: bool,
}

/// How an idempotent retry ended, as the model says it must.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retried {
    /// The append had landed: nothing written.
    Landed,
    /// It had not: written now.
    Written,
    /// Other events stand at its versions, the stream is deleted for
    /// good, or it does not fit the quota.
    Refused,
    /// It failed on an injected fault.
    Failed,
}

impl Retried {
    /// Counts this outcome, once the oracle has accepted it.
    pub(crate) fn count(self, counters: &mut Counters) {
        match self {
            Retried::Landed => counters.retries_landed += 1,
            Retried::Written => counters.retries_written += 1,
            Retried::Refused => counters.retries_refused += 1,
            Retried::Failed => counters.io_failures += 1,
        }
    }
}

impl Oracle {
    /// A consumer at `position` read the log from `position + 1`: every
    /// record the model has after it, none skipped.
    pub(crate) fn check_resume(
        &mut self,
        name: &str,
        position: u64,
        read: Result<Vec<durlog::Commit>, Error>,
        evidence: &Evidence<'_>,
        faults: &[durlog_vfs::FaultEvent],
    ) -> Check {
        if self.model.tables.consumers.get(name) != Some(&position) {
            return Err(format!(
                "consumer {name} at {position}, the model at {:?}",
                self.model.tables.consumers.get(name)
            ));
        }
        let from = position + 1;
        match read {
            Err(Error::Purged { first_seq })
                if from < self.model.first_seq() && first_seq == self.model.first_seq() =>
            {
                Ok(())
            }
            Ok(commits) => {
                let what = || format!("consumer {name} resuming after {position}");
                excuse::no_read_error_swallowed(what, faults)?;
                let mut next = from;
                for commit in &commits {
                    self.check_delivery(&mut next, &SubFilter::default(), commit)
                        .map_err(|error| {
                            format!("consumer {name} resuming after {position}: {error}")
                        })?;
                }
                Ok(())
            }
            Err(error) => self.excuse_read_error(&error, evidence, faults),
        }
    }

    /// An idempotent retry returned `outcome`: landed before (nothing
    /// written), written now, or refused, exactly as the model says.
    pub(crate) fn check_retry(
        &mut self,
        Retry {
            stream,
            base,
            events,
            at,
            max_bytes,
            poisoned,
        }: Retry<'_>,
        outcome: &Result<u64, Error>,
        faulted: bool,
        evidence: &Evidence<'_>,
        faults: &[durlog_vfs::FaultEvent],
    ) -> Result<Retried, String> {
        let model = &self.model;
        let version = model.version(stream);
        let last = base + events.len() as u64;
        let first_kept = model.purged_events(stream) + 1;
        let kept = model.events(stream);
        let stored = (base + 1 >= first_kept && version >= last).then(|| {
            let from = (base + 1 - first_kept) as usize;
            &kept[from..from + events.len()]
        });
        // Where every event has an id, the ids decide as in any append
        // (FORMAT.md, "Extras"); the bytes only where some has none.
        let said = model.ids_say(stream, events);
        let by_ids = matches!(said, Some(IdsSay::Landed(_) | IdsSay::Partly));
        let landed = said.is_none()
            && stored.is_some_and(|stored| {
                stored.iter().zip(events).all(|(stored, event)| {
                    stored.event_type == event.event_type && stored.data == event.data
                })
            });
        let hard = model.tables.is_hard_deleted(stream);
        match outcome {
            Err(Error::StreamDeleted { .. }) if hard => Ok(Retried::Refused),
            Ok(returned) if said == Some(IdsSay::Landed(*returned)) && !hard => Ok(Retried::Landed),
            Err(Error::VersionConflict { actual, .. })
                if said == Some(IdsSay::Partly) && *actual == version && !hard =>
            {
                Ok(Retried::Refused)
            }
            Ok(returned) if *returned == last && landed && !hard => Ok(Retried::Landed),
            Ok(returned) if *returned == last && version == base && !hard && !by_ids => {
                let stamped = events
                    .iter()
                    .map(|event| crate::model::ModelEvent {
                        at,
                        ..event.clone()
                    })
                    .collect();
                self.model.acknowledge(stream, stamped);
                Ok(Retried::Written)
            }
            Err(Error::VersionConflict { actual, .. })
                if !landed && version != base && *actual == version && !hard && !by_ids =>
            {
                Ok(Retried::Refused)
            }
            Err(Error::Quota { limit, needed })
                if !landed
                    && version == base
                    && !hard
                    && !by_ids
                    && *limit == max_bytes
                    && needed > limit =>
            {
                Ok(Retried::Refused)
            }
            Err(Error::Io(_)) if faulted => {
                self.excuse(Excuse::AppendFailedOnFault, 1);
                Ok(Retried::Failed)
            }
            // Its group failed before it wrote: a purge by the retention
            // poisoned the log (as an append's outcome would say).
            Err(Error::Poisoned) if poisoned && faulted => {
                self.excuse(Excuse::AppendFailedOnFault, 1);
                Ok(Retried::Failed)
            }
            // Reading what stands at its versions met damage.
            Err(error @ Error::Corrupt { .. }) => {
                self.excuse_read_error(error, evidence, faults)?;
                Ok(Retried::Failed)
            }
            other => Err(format!(
                "retrying {stream} at version {base} (now {version}, landed {landed}): {other:?}"
            )),
        }
    }
}
