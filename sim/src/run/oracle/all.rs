//! The whole log read back, as the oracle judges it: `$all` as history
//! (every acknowledged event, SPEC section 6 after every reopen), with the
//! streams' metadata applied, and through a filter; each read either
//! copying (`read_all_filtered`, what the workload's reads and the full
//! reads at a reopen use) or lending (`visit_all`, the reads at the other
//! reopens), so that both are checked by the same judge, record by record.

use std::ops::ControlFlow;

use durlog::{Commit, CommitRef, Error, Event, EventRef, Log};

use super::excuse::{self, Evidence};
use super::reads::{Kept, View, check_event};
use super::{Check, Oracle, SubFilter};

/// How a check reads the whole log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    /// `read_all_filtered`: every record kept copied out.
    Copying,
    /// `visit_all`: every record kept lent, in place.
    Lending,
}

impl Oracle {
    /// The whole log, read in seq order, is the model's records with all
    /// their events (`$all` is history); and read with the streams'
    /// metadata applied, each with the events its stream shows.
    pub(super) fn check_read_all(&mut self, log: &Log, evidence: &Evidence<'_>) -> Check {
        let first = self.model.first_seq();
        if first > 1
            && !matches!(log.read_all(first - 1, 1), Err(Error::Purged { first_seq }) if first_seq == first)
        {
            return Err(format!(
                "read_all from {} (purged) did not answer Purged",
                first - 1
            ));
        }
        self.check_history_and_applied(log, evidence, first, Reader::Lending)
    }

    /// The whole log read as history, and from `applied_from` with the
    /// streams' metadata applied (with no stream ever ruled, the two
    /// reads are one), both by `reader`.
    pub(super) fn check_history_and_applied(
        &mut self,
        log: &Log,
        evidence: &Evidence<'_>,
        applied_from: u64,
        reader: Reader,
    ) -> Check {
        let first = self.model.first_seq();
        self.check_read_all_from(log, evidence, &SubFilter::default(), first, reader)?;
        if self.model.tables.ever.is_empty() {
            return Ok(());
        }
        let applying = SubFilter {
            applying_metadata: true,
            ..SubFilter::default()
        };
        self.check_read_all_from(log, evidence, &applying, applied_from, reader)
    }

    /// `read_all_filtered` through `filter` from the first seq kept: in
    /// seq order, each record with events the filter keeps, with exactly
    /// those (history), or those the streams' rules show now (metadata
    /// applied: exact unless a maximum age decides), none left out.
    pub(crate) fn check_read_all_through(
        &mut self,
        log: &Log,
        evidence: &Evidence<'_>,
        filter: &SubFilter,
    ) -> Check {
        let first = self.model.first_seq();
        self.check_read_all_from(log, evidence, filter, first, Reader::Copying)
    }

    /// The whole log through `filter` from `first` (a seq kept, or the
    /// next), read by `reader`, as `check_read_all_through` judges it. A
    /// record handed over before a read error is judged too.
    fn check_read_all_from(
        &mut self,
        log: &Log,
        evidence: &Evidence<'_>,
        filter: &SubFilter,
        first: u64,
        reader: Reader,
    ) -> Check {
        debug_assert!(first >= self.model.first_seq(), "{first} was purged");
        let mark = evidence.vfs.fault_log_len();
        let what = || format!("read_all from {first} through {filter:?} ({reader:?})");
        let engine_filter = filter.engine_filter();
        let mut judge = Judge::new(self, filter, first);
        let mut verdict = Ok(());
        let mut take = |commit: &CommitRef<'_>| match judge.next(commit) {
            Ok(()) => ControlFlow::Continue(()),
            Err(error) => {
                verdict = Err(error);
                ControlFlow::Break(())
            }
        };
        let read = match reader {
            Reader::Lending => log.visit_all(first, usize::MAX, &engine_filter, &mut take),
            Reader::Copying => log
                .read_all_filtered(first, usize::MAX, &engine_filter)
                .map(|commits| {
                    for commit in &commits {
                        let events: Vec<_> = commit.events.iter().map(Event::as_ref).collect();
                        if take(&lend(commit, &events)).is_break() {
                            break;
                        }
                    }
                }),
        };
        verdict.map_err(|error| format!("{}: {error}", what()))?;
        let ended = judge.end().map_err(|error| format!("{}: {error}", what()));
        let faults = evidence.vfs.fault_log_since(mark);
        if let Err(error) = read {
            return self.excuse_read_error(&error, evidence, &faults);
        }
        excuse::no_read_error_swallowed(what, &faults)?;
        ended
    }
}

/// `commit`, lent as `visit_all` lends a record (`events`: its events).
fn lend<'c>(commit: &'c Commit, events: &'c [EventRef<'c>]) -> CommitRef<'c> {
    CommitRef {
        seq: commit.seq,
        stream: &commit.stream,
        first_version: commit.first_version,
        events,
    }
}

/// Judges a read of the whole log record by record, in the order the read
/// hands them over, against the model's records from its first seq.
struct Judge<'o> {
    oracle: &'o Oracle,
    filter: &'o SubFilter,
    view: View,
    /// The model's next record that no record handed over has covered.
    next: u64,
}

impl<'o> Judge<'o> {
    fn new(oracle: &'o Oracle, filter: &'o SubFilter, first: u64) -> Judge<'o> {
        let view = match filter.applying_metadata {
            true => View::AppliedNow,
            false => View::History,
        };
        Judge {
            oracle,
            filter,
            view,
            next: first,
        }
    }

    /// The next record handed over: past every one before it, none of
    /// whose events the reader must get was left out, and it holds
    /// exactly the events its reader keeps, as acknowledged.
    fn next(&mut self, commit: &CommitRef<'_>) -> Check {
        let model = &self.oracle.model;
        if commit.seq < self.next || commit.seq > model.last_seq() {
            return Err(format!(
                "returned seq {} out of order or unacknowledged (the last acknowledged is {})",
                commit.seq,
                model.last_seq()
            ));
        }
        self.left_out_before(commit.seq)?;
        let Some(kept) = self.kept(commit.seq) else {
            return Err(format!(
                "returned seq {}, which the model does not hold",
                commit.seq
            ));
        };
        self.next = commit.seq + 1;
        check_shown(commit, &kept)
    }

    /// The read ended: nothing left out after the last record it handed over.
    fn end(&self) -> Check {
        self.left_out_before(self.oracle.model.last_seq() + 1)
    }

    /// None of the records from `next` to before `seq` holds events the
    /// reader must get.
    fn left_out_before(&self, seq: u64) -> Check {
        for skipped in self.next..seq {
            if let Some(kept) = self.kept(skipped)
                && kept.strict
                && kept.any()
            {
                let (stream, ..) = self.oracle.model.record(skipped).expect("kept: held");
                return Err(format!("left out seq {skipped} of {stream}"));
            }
        }
        Ok(())
    }

    /// The events of the model's record `seq` that the reader keeps.
    fn kept(&self, seq: u64) -> Option<Kept<'o>> {
        let (stream, first_version, events) = self.oracle.model.record(seq)?;
        Some(
            self.oracle
                .kept_events(stream, first_version, events, self.filter, self.view),
        )
    }
}

/// A record a read of the whole log (or a subscription) handed over holds
/// exactly the events its reader keeps (`kept`), as acknowledged.
pub(super) fn check_shown(commit: &CommitRef<'_>, kept: &Kept<'_>) -> Check {
    let (stream, first_version, events) = (kept.stream, kept.first_version, kept.events);
    let delivered = || commit.events.iter().map(|event| event.version);
    if commit.stream != stream
        || commit.first_version != first_version
        || commit.events.is_empty()
        || (kept.strict && !delivered().eq(kept.versions()))
        || !delivered().all(|version| kept.keeps(version))
        || !delivered().is_sorted()
    {
        return Err(format!(
            "returned seq {} as {} from {} with versions {:?}; acknowledged: {stream} from {first_version}, kept {:?}",
            commit.seq,
            commit.stream,
            commit.first_version,
            delivered().collect::<Vec<_>>(),
            kept.versions().collect::<Vec<_>>()
        ));
    }
    for event in commit.events {
        let model = &events[(event.version - first_version) as usize];
        check_event(stream, event, model, event.version)?;
    }
    Ok(())
}
